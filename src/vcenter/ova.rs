//! An OVA: downloaded once to a local file, its SHA-256 checked against the golden stream's
//! before anything reads it, then read as the tar archive it is (an OVF descriptor and disks).

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, Uri};
use hyper_util::client::legacy::Client;
use tokio::io::AsyncWriteExt;

use super::VcenterError;
use crate::golden_stream::VmwareOva;
use crate::http_client::{Connector, error_chain};

/// RHCOS OVAs are about 1.3 GiB; anything much larger is not one.
pub const MAX_OVA_BYTES: u64 = 8 << 30;

/// A downloaded OVA whose digest matched; removed when dropped.
pub struct VerifiedOva {
    pub path: PathBuf,
    pub size: u64,
}

impl Drop for VerifiedOva {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Downloads `ova` into `dir` and checks its SHA-256; a mismatch removes the file and is
/// [`VcenterError::DigestMismatch`].
pub async fn download(
    http: &Client<Connector, Full<Bytes>>,
    ova: &VmwareOva,
    dir: &Path,
    timeout: Duration,
) -> Result<VerifiedOva, VcenterError> {
    let failed = |message: String| VcenterError::Download {
        url: ova.location.clone(),
        message,
    };
    let uri: Uri = ova
        .location
        .parse()
        .map_err(|_| failed("not a URL".into()))?;
    // Named after the digest: two imports of one release share nothing but never collide with
    // another release's download.
    let path = dir.join(format!(
        "bic-{}.ova.part",
        &ova.sha256[..ova.sha256.len().min(16)]
    ));
    let file = tokio::fs::File::create(&path).await?;
    let mut guard = VerifiedOva { path, size: 0 };
    let fetch = async {
        let request = Request::get(uri)
            .header("user-agent", crate::api_client::user_agent())
            .body(Full::new(Bytes::new()))
            .map_err(|e| failed(e.to_string()))?;
        let response = http
            .request(request)
            .await
            .map_err(|e| failed(error_chain(&e)))?;
        if !response.status().is_success() {
            return Err(failed(format!("HTTP {}", response.status())));
        }
        let mut body = response.into_body();
        let mut file = file;
        let mut digest = ring::digest::Context::new(&ring::digest::SHA256);
        let mut size = 0u64;
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| failed(error_chain(&e)))?;
            if let Ok(data) = frame.into_data() {
                size += data.len() as u64;
                if size > MAX_OVA_BYTES {
                    return Err(failed(format!("larger than {} GiB", MAX_OVA_BYTES >> 30)));
                }
                digest.update(&data);
                file.write_all(&data).await?;
            }
        }
        file.flush().await?;
        Ok((size, hex(digest.finish().as_ref())))
    };
    let (size, actual) = tokio::time::timeout(timeout, fetch)
        .await
        .map_err(|_| failed(format!("not complete within {timeout:?}")))??;
    if actual != ova.sha256 {
        return Err(VcenterError::DigestMismatch {
            url: ova.location.clone(),
            expected: ova.sha256.clone(),
            actual,
        });
    }
    guard.size = size;
    Ok(guard)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// One file of a tar archive: where its content starts and how long it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub name: String,
    pub offset: u64,
    pub size: u64,
}

/// The regular files of the tar archive at `path` (ustar headers, as OVAs are written).
pub fn entries(path: &Path) -> Result<Vec<Entry>, VcenterError> {
    let mut file = std::fs::File::open(path)?;
    let total = file.metadata()?.len();
    let mut entries = Vec::new();
    let mut offset = 0u64;
    let mut header = [0u8; 512];
    while offset + 512 <= total {
        file.seek(SeekFrom::Start(offset))?;
        file.read_exact(&mut header)?;
        if header.iter().all(|b| *b == 0) {
            break;
        }
        let field = |range: std::ops::Range<usize>| {
            let raw = &header[range];
            let end = raw.iter().position(|b| *b == 0).unwrap_or(raw.len());
            String::from_utf8_lossy(&raw[..end]).trim().to_string()
        };
        let size = u64::from_str_radix(&field(124..136), 8).map_err(|_| {
            VcenterError::InvalidOva(format!("a tar header at byte {offset} has no size"))
        })?;
        let name = match field(345..500) {
            prefix if !prefix.is_empty() => format!("{prefix}/{}", field(0..100)),
            _ => field(0..100),
        };
        let kind = header[156];
        let start = offset + 512;
        if start + size > total {
            return Err(VcenterError::InvalidOva(format!("{name} is cut short")));
        }
        if kind == b'0' || kind == 0 {
            entries.push(Entry {
                name,
                offset: start,
                size,
            });
        }
        offset = start + size.div_ceil(512) * 512;
    }
    Ok(entries)
}

/// The OVF descriptor of an OVA (its one `*.ovf` file), as text.
pub fn descriptor(path: &Path, entries: &[Entry]) -> Result<String, VcenterError> {
    let ovf = entries
        .iter()
        .find(|e| e.name.ends_with(".ovf"))
        .ok_or_else(|| VcenterError::InvalidOva("no .ovf descriptor inside".into()))?;
    if ovf.size > 16 << 20 {
        return Err(VcenterError::InvalidOva(
            "the .ovf descriptor is over 16 MiB".into(),
        ));
    }
    let mut file = std::fs::File::open(path)?;
    file.seek(SeekFrom::Start(ovf.offset))?;
    let mut text = String::new();
    file.take(ovf.size).read_to_string(&mut text)?;
    Ok(text)
}

/// The names of the networks an OVF descriptor's VM connects to (`NetworkSection/Network`).
pub fn networks(descriptor: &str) -> Vec<String> {
    let Ok(doc) = roxmltree::Document::parse(descriptor) else {
        return Vec::new();
    };
    doc.descendants()
        .filter(|n| n.tag_name().name() == "Network")
        .filter(|n| {
            n.parent()
                .is_some_and(|p| p.tag_name().name() == "NetworkSection")
        })
        .filter_map(|n| {
            n.attributes()
                .find(|a| a.name() == "name")
                .map(|a| a.value().to_string())
        })
        .collect()
}
