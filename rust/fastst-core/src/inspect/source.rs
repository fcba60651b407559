//! Reading a file's bytes for forensics: bounded reads of the prefix and
//! header, a read-only mapping for tensor data, and scans of byte ranges no
//! tensor covers.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use memmap2::{Mmap, MmapOptions};

use super::magic::SNIFF_LEN;
use crate::error::{Error, Result};

/// An open file and its length at open time.
pub(crate) struct Source {
    file: File,
    pub len: u64,
}

/// What a scan of a byte range found.
pub(crate) struct RegionScan {
    /// Its first bytes (up to [`SNIFF_LEN`]).
    pub head: Vec<u8>,
    /// How many of its bytes are not zero.
    pub nonzero: u64,
}

impl Source {
    pub fn open(path: &Path) -> Result<Source> {
        let file = File::open(path).map_err(|e| Error::io("cannot open file", e))?;
        let meta = file
            .metadata()
            .map_err(|e| Error::io("cannot stat file", e))?;
        if meta.is_dir() {
            return Err(Error::io(
                "cannot open file",
                std::io::Error::other("is a directory"),
            ));
        }
        Ok(Source {
            file,
            len: meta.len(),
        })
    }

    /// Fills `buf` from absolute offset `offset`.
    pub fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        let n = buf.len();
        let ctx = || format!("cannot read {n} bytes at offset {offset}");
        let mut f = &self.file;
        f.seek(SeekFrom::Start(offset))
            .map_err(|e| Error::io(ctx(), e))?;
        f.read_exact(buf).map_err(|e| Error::io(ctx(), e))
    }

    /// The bytes in `[offset, offset + len)`, clipped to the file; `len` is
    /// never more than the caller allows (a cap or the file's length).
    pub fn read_range(&self, offset: u64, len: u64) -> Result<Vec<u8>> {
        let end = offset.saturating_add(len).min(self.len);
        let n = end.saturating_sub(offset);
        let n = usize::try_from(n).map_err(|_| Error::OutOfMemory { bytes: n })?;
        let mut buf = vec![0u8; n];
        if n > 0 {
            self.read_at(&mut buf, offset)?;
        }
        Ok(buf)
    }

    /// Maps the whole file read-only (`None` for an empty file).
    pub fn map(&self) -> Result<Option<Mmap>> {
        if self.len == 0 {
            return Ok(None);
        }
        // SAFETY: a private read-only mapping; fastst never writes through
        // it. Another process truncating the file while it is mapped is
        // outside what any mmap-based reader can defend against (the reader
        // in `storage` makes the same choice).
        let map = unsafe { MmapOptions::new().map_copy_read_only(&self.file) }
            .map_err(|e| Error::io("cannot memory-map file", e))?;
        #[cfg(unix)]
        {
            // Only a hint: failing to give it changes nothing but speed.
            let _ = map.advise(memmap2::Advice::Sequential);
        }
        Ok(Some(map))
    }

    /// Reads `[offset, offset + len)` (clipped to the file) in blocks,
    /// keeping its first bytes and counting non-zero bytes.
    pub fn scan_region(&self, offset: u64, len: u64) -> Result<RegionScan> {
        let end = offset.saturating_add(len).min(self.len);
        let mut pos = offset.min(end);
        let mut head = Vec::new();
        let mut nonzero = 0u64;
        let mut buf = vec![0u8; 1 << 20];
        while pos < end {
            let n = usize::try_from((end - pos).min(buf.len() as u64)).unwrap_or(buf.len());
            let block = &mut buf[..n];
            self.read_at(block, pos)?;
            if head.len() < SNIFF_LEN {
                let take = (SNIFF_LEN - head.len()).min(n);
                head.extend_from_slice(&block[..take]);
            }
            nonzero += block.iter().filter(|&&b| b != 0).count() as u64;
            pos += n as u64;
        }
        Ok(RegionScan { head, nonzero })
    }
}
