//! Reading input files without trusting them to be files.
//!
//! `plan -f dir/` walks folders that may hold anything (a must-gather, a checkout): a FIFO named
//! `*.yaml` would block the read forever, and a link to `/dev/zero` would fill memory. Only
//! regular files are read, and no more than a bound.

use std::io::Read;
use std::path::Path;

/// The most a single input is read: ten thousand MachineSets in one list are ~250 MiB.
pub const MAX_INPUT_BYTES: u64 = 512 * 1024 * 1024;

/// The text of the regular file at `path` (links followed), or an error saying why not.
pub fn read_regular_file(path: &Path, limit: u64) -> std::io::Result<String> {
    let metadata = std::fs::metadata(path)?;
    if !metadata.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a regular file (a FIFO, device or socket?); use `-f -` to read a pipe",
        ));
    }
    read_bounded(std::fs::File::open(path)?, limit)
}

/// All of `reader` as UTF-8 text, refusing more than `limit` bytes.
pub fn read_bounded(reader: impl Read, limit: u64) -> std::io::Result<String> {
    let mut bytes = Vec::new();
    reader
        .take(limit.saturating_add(1))
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("larger than {} MiB", limit / (1024 * 1024)),
        ));
    }
    String::from_utf8(bytes)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e.utf8_error()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::scratch::Scratch;

    #[test]
    fn reads_a_regular_file() {
        let scratch = Scratch::new();
        let path = scratch.write("a.yaml", "kind: List\n");
        assert_eq!(read_regular_file(&path, 100).expect("read"), "kind: List\n");
    }

    #[test]
    fn refuses_devices_without_reading_them() {
        let scratch = Scratch::new();
        let link = scratch.path("zero.yaml");
        std::os::unix::fs::symlink("/dev/zero", &link).expect("symlink");
        let error = read_regular_file(&link, MAX_INPUT_BYTES).expect_err("a device");
        assert_eq!(error.kind(), std::io::ErrorKind::InvalidInput, "{error}");
    }

    #[test]
    fn refuses_more_than_the_limit() {
        let error = read_bounded(std::io::repeat(b'a'), 1024 * 1024).expect_err("endless input");
        assert!(error.to_string().contains("larger than 1 MiB"), "{error}");
        assert_eq!(
            read_bounded(&b"exactly"[..], 7).expect("at the limit"),
            "exactly"
        );
    }
}
