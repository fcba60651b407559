//! Files and folders on disk for the crate's own tests.
//!
//! Each is named for its test's tag, this process and a counter, so that
//! tests running side by side (and several test processes) never share one,
//! and each is removed when dropped: also when the test panics part-way, so
//! a failing test, or a mutant under mutation testing, leaves nothing behind
//! in the temporary folder.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

/// A unique path under the temporary folder, tagged `tag`.
fn unique(tag: &str, suffix: &str) -> PathBuf {
    static COUNTER: AtomicUsize = AtomicUsize::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    std::env::temp_dir().join(format!("fastst-{tag}-{}-{n}{suffix}", std::process::id()))
}

/// A file removed when dropped (whether or not it was ever created).
pub struct TempFile(pub PathBuf);

impl TempFile {
    /// A fresh path tagged `tag`; nothing is created.
    pub fn named(tag: &str) -> TempFile {
        TempFile(unique(tag, ".bin"))
    }

    /// A file tagged `tag` holding `bytes`.
    pub fn with(tag: &str, bytes: &[u8]) -> TempFile {
        let file = TempFile::named(tag);
        std::fs::write(&file.0, bytes)
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", file.0.display()));
        file
    }
}

impl std::ops::Deref for TempFile {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for TempFile {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A new, empty folder removed with everything in it when dropped.
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// Creates a folder tagged `tag`.
    pub fn new(tag: &str) -> TempDir {
        let dir = TempDir(unique(tag, ""));
        std::fs::create_dir_all(&dir.0)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.0.display()));
        dir
    }
}

impl std::ops::Deref for TempDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for TempDir {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Writes `raw` bytes to a fresh `.safetensors` file.
pub fn raw(raw: &[u8]) -> TempFile {
    let file = TempFile(unique("st", ".safetensors"));
    std::fs::write(&file.0, raw)
        .unwrap_or_else(|e| panic!("cannot write {}: {e}", file.0.display()));
    file
}

/// Writes a file made of the length prefix, `header` and `data`.
pub fn build(header: &str, data: &[u8]) -> TempFile {
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(header.as_bytes());
    bytes.extend_from_slice(data);
    raw(&bytes)
}

/// The names of the entries of the folder `dir`, sorted.
#[cfg(test)]
pub fn entries(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .expect("read_dir")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scratch_files_and_folders_go_when_dropped_even_in_a_panic() {
        let (file, dir) = (TempFile::with("testfs", b"x"), TempDir::new("testfs"));
        std::fs::write(dir.join("inner"), b"y").expect("write");
        let (f, d) = (file.0.clone(), dir.0.clone());
        assert_ne!(TempFile::named("testfs").0, f, "names are unique");
        let unwound = std::panic::catch_unwind(move || {
            let _keep = (file, dir);
            panic!("a failing test");
        });
        assert!(unwound.is_err());
        assert!(!f.exists() && !d.exists());
    }
}
