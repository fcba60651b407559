//! Files as fastst opens and reads them: the one file opener every entry
//! point uses, positioned reads, the read of the 8-byte length prefix and
//! header, and (in [`mmap`], the only module allowed `unsafe`) mappings.

pub(crate) mod mmap;

use std::fs::File;
use std::path::Path;

use crate::error::{Error, Result};
use crate::header::check_prefix;

/// An open file and its length when it was opened.
#[derive(Debug)]
pub(crate) struct OpenFile {
    /// The file, opened read-only.
    pub file: File,
    /// Its length in bytes at open time.
    pub len: u64,
}

/// Opens `path` for reading. Folders are refused with the operating
/// system's "is a directory" error (`IsADirectoryError` in Python), the same
/// for the reader, `verify`, `hash`, `inspect` and `meta`.
pub(crate) fn open(path: &Path) -> Result<OpenFile> {
    let file = File::open(path).map_err(|e| Error::io("cannot open file", e))?;
    let meta = file
        .metadata()
        .map_err(|e| Error::io("cannot stat file", e))?;
    if meta.is_dir() {
        return Err(Error::io("cannot open file", is_a_directory()));
    }
    Ok(OpenFile {
        file,
        len: meta.len(),
    })
}

#[cold]
fn is_a_directory() -> std::io::Error {
    // EISDIR (21 on Linux and macOS) so that callers see the usual OS error.
    if cfg!(unix) {
        std::io::Error::from_raw_os_error(21)
    } else {
        std::io::ErrorKind::IsADirectory.into()
    }
}

impl OpenFile {
    /// Fills `buf` from absolute offset `offset` (a positioned read: the
    /// file has no cursor to share between threads).
    pub fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        read_exact_at(&self.file, buf, offset)
    }

    /// The bytes in `[offset, offset + len)`, clipped to the file; `len` is
    /// never more than the caller allows (a cap or the file's length).
    pub fn read_range(&self, offset: u64, len: u64) -> Result<Vec<u8>> {
        let end = offset.saturating_add(len).min(self.len);
        let n = end.saturating_sub(offset);
        let n = usize::try_from(n).map_err(|_| Error::OutOfMemory { bytes: n })?;
        let mut buf = vec![0u8; n];
        if n > 0 {
            self.read_exact_at(&mut buf, offset)?;
        }
        Ok(buf)
    }

    /// Reads the 8-byte length prefix, checks it against the file's length
    /// and `cap`, and reads the header bytes it announces: `(N, header)`.
    pub fn read_header(&self, cap: u64) -> Result<(u64, Vec<u8>)> {
        if self.len < 8 {
            return Err(Error::FileTooShort { len: self.len });
        }
        let mut prefix = [0u8; 8];
        self.read_exact_at(&mut prefix, 0)?;
        let n = check_prefix(&prefix, self.len, cap)?;
        let n_usize = usize::try_from(n).map_err(|_| Error::HeaderTooLarge { len: n, cap })?;
        // `n` is bounded by both the cap and the file's real length.
        let mut json = vec![0u8; n_usize];
        self.read_exact_at(&mut json, 8)?;
        Ok((n, json))
    }
}

/// Fills `buf` from absolute offset `offset` of `file`.
#[cfg(unix)]
pub(crate) fn read_exact_at(file: &File, buf: &mut [u8], offset: u64) -> Result<()> {
    use std::os::unix::fs::FileExt;
    file.read_exact_at(buf, offset).map_err(|e| {
        Error::io(
            format!("cannot read {} bytes at offset {offset}", buf.len()),
            e,
        )
    })
}

/// Fills `buf` from absolute offset `offset` of `file`.
#[cfg(windows)]
pub(crate) fn read_exact_at(file: &File, mut buf: &mut [u8], mut offset: u64) -> Result<()> {
    use std::os::windows::fs::FileExt;
    while !buf.is_empty() {
        let n = file
            .seek_read(buf, offset)
            .map_err(|e| Error::io(format!("cannot read at offset {offset}"), e))?;
        if n == 0 {
            return Err(Error::io(
                format!("cannot read at offset {offset}"),
                std::io::ErrorKind::UnexpectedEof.into(),
            ));
        }
        buf = &mut buf[n..];
        offset += n as u64;
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn directories_are_refused_as_is_a_directory() {
        let err = open(&std::env::temp_dir()).unwrap_err();
        match err {
            Error::Io { source, .. } => {
                assert_eq!(source.kind(), std::io::ErrorKind::IsADirectory)
            }
            other => panic!("{other}"),
        }
    }

    #[test]
    fn header_read_checks_the_prefix() {
        let path = std::env::temp_dir().join(format!("fastst-io-{}.bin", std::process::id()));
        std::fs::write(&path, [2u8, 0, 0, 0, 0, 0, 0, 0, b'{', b'}']).unwrap();
        let f = open(&path).unwrap();
        assert_eq!(f.read_header(100).unwrap(), (2, b"{}".to_vec()));
        assert_eq!(f.read_header(1).unwrap_err().rule(), "header-too-large");
        assert_eq!(f.read_range(8, 100).unwrap(), b"{}".to_vec());
        std::fs::write(&path, [1u8; 4]).unwrap();
        let f = open(&path).unwrap();
        assert_eq!(f.read_header(100).unwrap_err().rule(), "file-too-short");
        let _ = std::fs::remove_file(&path);
    }
}
