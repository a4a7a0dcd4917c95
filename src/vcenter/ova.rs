//! An OVA: downloaded once to a local file (from the stream's location or the administrator's
//! mirror), its SHA-256 checked against the golden stream's before anything reads it, then read
//! as the tar archive it is (an OVF descriptor and disks) with the `tar` crate.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, Uri};
use hyper_util::client::legacy::Client;
use tokio::io::AsyncWriteExt;

use super::VcenterError;
use crate::bounded_read::read_bounded;
use crate::golden_stream::VmwareOva;
use crate::http_client::{Connector, error_chain};

/// RHCOS OVAs are about 1.3 GiB; anything much larger is not one.
pub const MAX_OVA_BYTES: u64 = 8 << 30;

/// A downloaded OVA whose digest matched; removed when dropped.
pub struct VerifiedOva {
    pub path: PathBuf,
}

impl Drop for VerifiedOva {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Where OVAs are downloaded from instead of the golden stream's location, for clusters that
/// cannot reach it (`--vsphere-ova-mirror`, `--vsphere-ova-url`). The installer's disconnected
/// install names its mirrored OVA by URL (`platform.vsphere.clusterOSImage`, a web server of
/// the administrator's holding the stream's file); the MCO has no mirror and always downloads
/// the stream's location (`cache.DownloadOva` in `createNewVMTemplate`, vsphere_helpers.go on
/// release-4.20 to 4.22). Whichever URL serves it, the OVA must have the stream's sha256.
#[derive(Clone, Debug, Default)]
pub struct OvaMirror {
    /// A folder URL: the file name of the stream's location is appended (every release).
    pub base: Option<String>,
    /// Exact URLs, by the stream location each replaces; they win over `base`.
    pub urls: BTreeMap<String, String>,
}

impl OvaMirror {
    /// The URL to download the OVA the stream publishes at `location` from.
    pub fn source(&self, location: &str) -> String {
        if let Some(url) = self.urls.get(location) {
            return url.clone();
        }
        let Some(base) = &self.base else {
            return location.to_string();
        };
        let path = location.split(['?', '#']).next().unwrap_or(location);
        let file = path.rsplit('/').next().unwrap_or(path);
        format!("{}/{file}", base.trim_end_matches('/'))
    }
}

/// An `http(s)://` URL with a host, as a mirror must be (`--vsphere-ova-mirror`).
pub fn parse_mirror_url(text: &str) -> Result<String, String> {
    let uri: Uri = text.parse().map_err(|e| format!("{text}: {e}"))?;
    match (uri.scheme_str(), uri.host()) {
        (Some("http" | "https"), Some(_)) => Ok(text.to_string()),
        _ => Err(format!("{text} is not an http:// or https:// URL")),
    }
}

/// `STREAM_URL=MIRROR_URL` (`--vsphere-ova-url`): the stream's location, as the golden
/// ConfigMap and the controller's messages show it, and where the same OVA is served.
pub fn parse_mirror_entry(text: &str) -> Result<(String, String), String> {
    let (stream, mirror) = text
        .split_once('=')
        .ok_or_else(|| format!("{text}: expected STREAM_URL=MIRROR_URL"))?;
    Ok((parse_mirror_url(stream)?, parse_mirror_url(mirror)?))
}

/// Downloads `ova` from `source` (its location or a mirror's URL) into `dir` and checks its
/// SHA-256; a mismatch removes the file and is [`VcenterError::DigestMismatch`]. A host that
/// cannot be connected to is [`VcenterError::OvaUnreachable`].
pub async fn download(
    http: &Client<Connector, Full<Bytes>>,
    ova: &VmwareOva,
    source: &str,
    dir: &Path,
    timeout: Duration,
) -> Result<VerifiedOva, VcenterError> {
    let failed = |message: String| VcenterError::Download {
        url: source.to_string(),
        message,
    };
    let uri: Uri = source.parse().map_err(|_| failed("not a URL".into()))?;
    // Named after the digest: two imports of one release share nothing but never collide with
    // another release's download.
    let path = dir.join(format!(
        "bic-{}.ova.part",
        &ova.sha256[..ova.sha256.len().min(16)]
    ));
    let file = tokio::fs::File::create(&path).await?;
    let guard = VerifiedOva { path };
    let fetch = async {
        let request = Request::get(uri)
            .header("user-agent", crate::api_client::user_agent())
            .body(Full::new(Bytes::new()))
            .map_err(|e| failed(e.to_string()))?;
        let response = http
            .request(request)
            .await
            .map_err(|e| match e.is_connect() {
                // No name, no route, refused, no TLS: the host is out of reach, not the file.
                true => VcenterError::OvaUnreachable {
                    url: source.to_string(),
                    mirrored: source != ova.location,
                    message: error_chain(&e),
                },
                false => failed(error_chain(&e)),
            })?;
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
        Ok(hex::encode(digest.finish()))
    };
    let actual = tokio::time::timeout(timeout, fetch)
        .await
        .map_err(|_| failed(format!("not complete within {timeout:?}")))??;
    if actual != ova.sha256 {
        return Err(VcenterError::DigestMismatch {
            url: source.to_string(),
            expected: ova.sha256.clone(),
            actual,
        });
    }
    Ok(guard)
}

/// One file of an OVA: where its content starts and how long it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub name: String,
    pub offset: u64,
    pub size: u64,
}

/// The regular files of the OVA (a tar archive) at `path`, and its OVF descriptor (its one
/// `*.ovf` file) as text. A file that ends past the archive's end is refused rather than read
/// short.
pub fn contents(path: &Path) -> Result<(Vec<Entry>, String), VcenterError> {
    let file = std::fs::File::open(path)?;
    let total = file.metadata()?.len();
    let invalid = |e: std::io::Error| VcenterError::InvalidOva(e.to_string());
    let mut archive = tar::Archive::new(file);
    let mut entries = Vec::new();
    let mut descriptor = None;
    for entry in archive.entries_with_seek().map_err(invalid)? {
        let mut entry = entry.map_err(invalid)?;
        let name = entry
            .path()
            .map_err(invalid)?
            .to_string_lossy()
            .into_owned();
        let (offset, size) = (entry.raw_file_position(), entry.size());
        if offset.saturating_add(size) > total {
            return Err(VcenterError::InvalidOva(format!("{name} is cut short")));
        }
        if !entry.header().entry_type().is_file() {
            continue;
        }
        if descriptor.is_none() && name.ends_with(".ovf") {
            // Read whole: no RHCOS descriptor comes near 16 MiB.
            let text = read_bounded(&mut entry, 16 << 20)
                .map_err(|e| VcenterError::InvalidOva(format!("the .ovf descriptor: {e}")))?;
            descriptor = Some(text);
        }
        entries.push(Entry { name, offset, size });
    }
    let descriptor =
        descriptor.ok_or_else(|| VcenterError::InvalidOva("no .ovf descriptor inside".into()))?;
    Ok((entries, descriptor))
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

#[cfg(test)]
mod tests {
    use super::*;

    const STREAM: &str = "https://rhcos.mirror.openshift.com/art/storage/prod/streams/rhel-9.6/builds/9.6.20251023-0/x86_64/rhcos-9.6.20251023-0-vmware.x86_64.ova";
    const FILE: &str = "rhcos-9.6.20251023-0-vmware.x86_64.ova";

    #[test]
    fn without_a_mirror_the_stream_location_is_downloaded() {
        assert_eq!(OvaMirror::default().source(STREAM), STREAM);
    }

    #[test]
    fn a_base_url_gets_the_file_name_of_the_stream_location() {
        for base in [
            "http://mirror.example.com/rhcos",
            "http://mirror.example.com/rhcos/",
        ] {
            let mirror = OvaMirror {
                base: Some(base.into()),
                ..OvaMirror::default()
            };
            let expected = format!("http://mirror.example.com/rhcos/{FILE}");
            assert_eq!(mirror.source(STREAM), expected, "{base}");
            // A query or fragment of the stream's URL is not part of the file name.
            assert_eq!(mirror.source(&format!("{STREAM}?sha256=ab#x")), expected);
        }
    }

    #[test]
    fn an_exact_url_wins_for_its_stream_location_only() {
        let exact = "https://files.example.com/ocp/4.21/rhcos-vmware.x86_64.ova";
        let mirror = OvaMirror {
            base: Some("http://mirror.example.com/rhcos".into()),
            urls: [(STREAM.to_string(), exact.to_string())].into(),
        };
        assert_eq!(mirror.source(STREAM), exact);
        let other = STREAM.replace("x86_64", "aarch64");
        assert_eq!(
            mirror.source(&other),
            "http://mirror.example.com/rhcos/rhcos-9.6.20251023-0-vmware.aarch64.ova"
        );
        let only_exact = OvaMirror {
            base: None,
            ..mirror
        };
        assert_eq!(only_exact.source(&other), other);
    }

    /// An OVA of `files`, written by the `tar` crate's builder (ustar headers).
    fn ova(files: &[(&str, &[u8])]) -> Vec<u8> {
        let mut builder = tar::Builder::new(Vec::new());
        for (name, content) in files {
            let mut header = tar::Header::new_ustar();
            header.set_size(content.len() as u64);
            header.set_cksum();
            builder.append_data(&mut header, name, *content).unwrap();
        }
        builder.into_inner().unwrap()
    }

    fn read(bytes: &[u8]) -> Result<(Vec<Entry>, String), VcenterError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.ova");
        std::fs::write(&path, bytes).unwrap();
        contents(&path)
    }

    #[test]
    fn an_ova_is_read_as_its_files_and_its_descriptor() {
        let disk = vec![7u8; 1000];
        let bytes = ova(&[("rhcos.ovf", b"<Envelope/>"), ("disk.vmdk", &disk)]);
        let (entries, descriptor) = read(&bytes).unwrap();
        assert_eq!(descriptor, "<Envelope/>");
        let names: Vec<&str> = entries.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["rhcos.ovf", "disk.vmdk"]);
        let vmdk = &entries[1];
        let start = vmdk.offset as usize;
        assert_eq!(&bytes[start..start + vmdk.size as usize], disk.as_slice());
    }

    #[test]
    fn an_ova_cut_short_without_a_descriptor_or_with_a_huge_one_is_refused() {
        let bytes = ova(&[("rhcos.ovf", b"<Envelope/>"), ("disk.vmdk", &[7u8; 1000])]);
        let cut = &bytes[..512 * 4];
        assert!(
            matches!(read(cut), Err(VcenterError::InvalidOva(why)) if why.contains("disk.vmdk is cut short"))
        );
        let no_descriptor = ova(&[("disk.vmdk", &[7u8; 10])]);
        assert!(matches!(
            read(&no_descriptor),
            Err(VcenterError::InvalidOva(_))
        ));
        let huge = vec![b' '; (16 << 20) + 1];
        let huge = read(&ova(&[("rhcos.ovf", &huge)]));
        assert!(
            matches!(huge, Err(VcenterError::InvalidOva(why)) if why.contains("larger than 16 MiB"))
        );
    }

    #[test]
    fn mirror_flags_take_http_urls_only() {
        let entry = format!("{STREAM}=http://10.0.0.5:8080/rhcos.ova");
        assert_eq!(
            parse_mirror_entry(&entry),
            Ok((STREAM.to_string(), "http://10.0.0.5:8080/rhcos.ova".into()))
        );
        for bad in [
            STREAM,
            "rhcos.ova=http://m/x.ova",
            "https://a/x.ova=ftp://m/x.ova",
        ] {
            assert!(parse_mirror_entry(bad).is_err(), "{bad}");
        }
        for bad in ["mirror.example.com/rhcos", "file:///srv/rhcos", "https://"] {
            assert!(parse_mirror_url(bad).is_err(), "{bad}");
        }
        assert!(parse_mirror_url("https://mirror.example.com/rhcos/").is_ok());
    }
}
