//! Reading a file's bytes for forensics: bounded reads of the prefix and
//! header, a read-only mapping for tensor data, and scans of byte ranges no
//! tensor covers.

use std::ops::Deref;
use std::path::Path;

use memmap2::Mmap;

use super::magic::SNIFF_LEN;
use crate::error::{Error, Result};
use crate::io::{self, mmap, OpenFile};

/// An open file and its length at open time (opened by [`io::open`], as
/// every entry point opens files).
pub(crate) struct Source(OpenFile);

impl Deref for Source {
    type Target = OpenFile;

    fn deref(&self) -> &OpenFile {
        &self.0
    }
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
        io::open(path).map(Source)
    }

    /// Maps the whole file read-only (`None` for an empty file).
    pub fn map(&self) -> Result<Option<Mmap>> {
        if self.len == 0 {
            return Ok(None);
        }
        let map =
            mmap::map_read_only(&self.file).map_err(|e| Error::io("cannot memory-map file", e))?;
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
            self.read_exact_at(block, pos)?;
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
