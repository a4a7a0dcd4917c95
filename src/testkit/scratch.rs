//! Files in a private temporary directory, removed when the test ends.

use std::path::{Path, PathBuf};

/// A temporary directory; files written into it live as long as it does.
pub struct Scratch {
    dir: tempfile::TempDir,
}

impl Scratch {
    pub fn new() -> Self {
        Scratch {
            dir: tempfile::tempdir().expect("a temporary directory"),
        }
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Where the file `name` would be (not created).
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Writes `text` to the file `name` and returns its path.
    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.path(name);
        std::fs::write(&path, text).expect("write a scratch file");
        path
    }
}

impl Default for Scratch {
    fn default() -> Self {
        Self::new()
    }
}
