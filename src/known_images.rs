//! Image references known to be CoreOS images we (or an earlier release) published.
//!
//! A boot image outside this set and outside the current golden stream is a custom image that an
//! administrator chose, and must never be replaced.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::OnceLock;

use crate::api::ConfigMap;

/// A set of image references.
pub type KnownImages = BTreeSet<String>;

/// The RHCOS AMIs published for OpenShift 4.x (see the file's header for its source).
const PUBLISHED_AWS_AMIS: &str = include_str!("../data/rhcos-aws-amis.txt");

#[derive(Debug, thiserror::Error)]
#[error("cannot read known images from {path}: {source}")]
pub struct KnownImagesError {
    pub path: String,
    #[source]
    pub source: std::io::Error,
}

/// Parses one reference per line; blank lines and `#` comments (whole-line or trailing) are
/// ignored so the file can document where its entries come from.
pub fn parse(text: &str) -> KnownImages {
    text.lines()
        .map(|line| line.split('#').next().unwrap_or_default().trim())
        .filter(|line| !line.is_empty())
        .map(str::to_string)
        .collect()
}

/// The images this project ships as published: every RHCOS AMI of OpenShift 4.12 and later.
pub fn published() -> KnownImages {
    static PUBLISHED: OnceLock<KnownImages> = OnceLock::new();
    PUBLISHED.get_or_init(|| parse(PUBLISHED_AWS_AMIS)).clone()
}

/// The references a known-images ConfigMap holds (one per line under any key, `#` comments
/// allowed): ours, which the controller remembers golden images in, or one given to `plan`.
pub fn in_config_map(cm: &ConfigMap) -> KnownImages {
    let texts = cm.data.iter().flat_map(|data| data.values());
    texts.flat_map(|text| parse(text)).collect()
}

pub fn read(path: &Path) -> Result<KnownImages, KnownImagesError> {
    crate::bounded_read::read_regular_file(path, crate::bounded_read::MAX_INPUT_BYTES)
        .map(|text| parse(&text))
        .map_err(|source| KnownImagesError {
            path: path.display().to_string(),
            source,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_lines_and_comments() {
        let k = parse("# published AMIs\nami-1\n\n  ami-2  # us-east-1\n");
        assert!(k.contains("ami-1") && k.contains("ami-2"));
        assert_eq!(k.len(), 2);
    }

    #[test]
    fn the_published_list_knows_rhcos_amis_of_several_releases_and_no_custom_one() {
        let published = published();
        // The golden us-east-1 x86_64 AMIs of 4.20 and 4.21.
        for ami in ["ami-09d23adad19cdb25c", "ami-01095d1967818437c"] {
            assert!(published.contains(ami), "{ami}");
        }
        assert!(!published.contains("ami-0123456789abcdef0"));
        assert!(published.len() > 9000, "{}", published.len());
        assert!(published.iter().all(|a| a.starts_with("ami-")));
        let mut copy = published.clone();
        copy.extend(["ami-1".to_string()]);
        assert!(copy.contains("ami-1") && !published.contains("ami-1"));
    }
}
