//! Image references known to be CoreOS images we (or an earlier release) published.
//!
//! A boot image outside this set and outside the current golden stream is a custom image that an
//! administrator chose, and must never be replaced.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::OnceLock;

/// A set of image references.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KnownImages(BTreeSet<String>);

/// The RHCOS AMIs published for OpenShift 4.x (see the file's header for its source).
const PUBLISHED_AWS_AMIS: &str = include_str!("../data/rhcos-aws-amis.txt");

#[derive(Debug, thiserror::Error)]
#[error("cannot read known images from {path}: {source}")]
pub struct KnownImagesError {
    pub path: String,
    #[source]
    pub source: std::io::Error,
}

impl KnownImages {
    /// Parses one reference per line; blank lines and `#` comments (whole-line or trailing) are
    /// ignored so the file can document where its entries come from.
    pub fn parse(text: &str) -> Self {
        text.lines()
            .map(|line| line.split('#').next().unwrap_or_default().trim())
            .filter(|line| !line.is_empty())
            .map(str::to_string)
            .collect()
    }

    /// The images this project ships as published: every RHCOS AMI of OpenShift 4.12 and
    /// later.
    pub fn published() -> Self {
        static PUBLISHED: OnceLock<KnownImages> = OnceLock::new();
        PUBLISHED
            .get_or_init(|| Self::parse(PUBLISHED_AWS_AMIS))
            .clone()
    }

    pub fn read(path: &Path) -> Result<Self, KnownImagesError> {
        crate::bounded_read::read_regular_file(path, crate::bounded_read::MAX_INPUT_BYTES)
            .map(|text| Self::parse(&text))
            .map_err(|source| KnownImagesError {
                path: path.display().to_string(),
                source,
            })
    }

    pub fn contains(&self, reference: &str) -> bool {
        self.0.contains(reference)
    }

    pub fn extend<I: IntoIterator<Item = String>>(&mut self, refs: I) {
        self.0.extend(refs);
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = &String> {
        self.0.iter()
    }
}

impl FromIterator<String> for KnownImages {
    fn from_iter<I: IntoIterator<Item = String>>(iter: I) -> Self {
        KnownImages(iter.into_iter().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_lines_and_comments() {
        let k = KnownImages::parse("# published AMIs\nami-1\n\n  ami-2  # us-east-1\n");
        assert!(k.contains("ami-1") && k.contains("ami-2"));
        assert_eq!(k.len(), 2);
    }

    #[test]
    fn the_published_list_knows_rhcos_amis_of_several_releases_and_no_custom_one() {
        let published = KnownImages::published();
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
