//! Scratch `.safetensors` files for the crate's own tests: the part of
//! fastst-core's `testfs` these tests need (a file removed when dropped,
//! also when its test panics part-way).

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A file removed when dropped (whether or not it was ever created).
pub struct TempFile(pub PathBuf);

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Writes `raw` bytes to a fresh `.safetensors` file, named for this process
/// and a counter so that tests running side by side never share one.
pub fn raw(raw: &[u8]) -> TempFile {
    static COUNTER: AtomicUsize = AtomicUsize::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let name = format!("fastst-inspect-{}-{n}.safetensors", std::process::id());
    let file = TempFile(std::env::temp_dir().join(name));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scratch_files_go_when_dropped_even_in_a_panic() {
        let file = build("{}", b"");
        let path = file.0.clone();
        assert!(path.exists());
        assert_ne!(raw(b"").0, path, "names are unique");
        let unwound = std::panic::catch_unwind(move || {
            let _keep = file;
            panic!("a failing test");
        });
        assert!(unwound.is_err());
        assert!(!path.exists());
    }
}
