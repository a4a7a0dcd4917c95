//! Image references known to be CoreOS images we (or an earlier release) published.
//!
//! A boot image outside this set and outside the current golden stream is a custom image that an
//! administrator chose, and must never be replaced.

use std::collections::BTreeSet;
use std::path::Path;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KnownImages(BTreeSet<String>);

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
        Self(
            text.lines()
                .map(|line| line.split('#').next().unwrap_or_default().trim())
                .filter(|line| !line.is_empty())
                .map(str::to_string)
                .collect(),
        )
    }

    pub fn read(path: &Path) -> Result<Self, KnownImagesError> {
        std::fs::read_to_string(path)
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
        Self(iter.into_iter().collect())
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
}
