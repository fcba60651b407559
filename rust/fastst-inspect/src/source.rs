//! Reading a file's bytes for forensics: bounded reads of the prefix and
//! header, and scans of byte ranges no tensor covers. Everything is read
//! with positioned reads, never through a mapping, so a file truncated by
//! another program gives an error (rule `file-changed`), never SIGBUS.

use std::path::Path;

use fastst_core::internal::{self, SNIFF_LEN};
use fastst_core::Result;

/// A file's bytes and its length at open time: a local file (opened by
/// [`internal::open`], as every entry point opens files) or any other core
/// source (an object in a store, read by the caller's crate).
pub(crate) struct Source {
    inner: Box<dyn fastst_core::Source>,
    /// The length in bytes when opened.
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
        Ok(Source::new(Box::new(internal::open(path)?)))
    }

    /// Reads through `inner`.
    pub fn new(inner: Box<dyn fastst_core::Source>) -> Source {
        let len = inner.len();
        Source { inner, len }
    }

    /// Fills `buf` from `offset` (rule `file-changed` when the file
    /// shrank).
    pub fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        self.inner.read_at(offset, buf)
    }

    /// Fills each buffer of `reads` from its offset, as the source reads
    /// several ranges (a remote object: concurrently).
    pub fn read_many(&self, reads: &mut [(u64, &mut [u8])]) -> Result<()> {
        self.inner.read_many(reads)
    }

    /// The gap between two wanted ranges below which reading them as one
    /// costs less than two reads.
    pub fn coalesce_gap(&self) -> u64 {
        self.inner.coalesce_gap()
    }

    /// The bytes `[offset, offset + len)`, clipped to the file.
    pub fn read_range(&self, offset: u64, len: u64) -> Result<Vec<u8>> {
        let end = offset.saturating_add(len).min(self.len);
        let n = end.saturating_sub(offset);
        let mut buf = internal::zeroed(n, "")?;
        if n > 0 {
            self.read_exact_at(&mut buf, offset)?;
        }
        Ok(buf)
    }

    /// Reads and checks the length prefix, then reads the header bytes it
    /// announces: `(N, header)`, as the reader does
    /// ([`fastst_core::read_header`]).
    pub fn read_header(&self, cap: u64) -> Result<(u64, Vec<u8>)> {
        fastst_core::read_header(&*self.inner, cap)
    }

    /// Reads `[offset, offset + len)` (clipped to the file) in blocks,
    /// keeping its first bytes and counting non-zero bytes.
    pub fn scan_region(&self, offset: u64, len: u64) -> Result<RegionScan> {
        let end = offset.saturating_add(len).min(self.len);
        let mut pos = offset.min(end);
        let mut head = Vec::new();
        let mut nonzero = 0u64;
        let mut buf = internal::zeroed((end - pos).min(1 << 20), "")?;
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::testfs::raw;

    #[test]
    fn scans_count_exactly_the_region_in_blocks() {
        // 3 MiB: zeros, a 1.5 MiB region of ones from offset 0, then ones
        // past it that a scan of the region must not count.
        let region = 3 << 19;
        let mut bytes = vec![1u8; 3 << 20];
        bytes[..16].copy_from_slice(b"\x80\x04\x95\0rest of head");
        bytes[region..region + 10].fill(0);
        let f = raw(&bytes);
        let src = Source::open(&f.0).unwrap();
        let scan = src.scan_region(0, region as u64).unwrap();
        assert_eq!(scan.head, &bytes[..SNIFF_LEN]);
        let zeros_in_head = bytes[..16].iter().filter(|&&b| b == 0).count() as u64;
        assert_eq!(scan.nonzero, region as u64 - zeros_in_head);
        // From inside the file, clipped at its end.
        let tail = src.scan_region(region as u64, 1 << 30).unwrap();
        assert_eq!(tail.nonzero, (bytes.len() - region - 10) as u64);
        assert_eq!(tail.head, &bytes[region..region + SNIFF_LEN]);
        // Past the end: nothing.
        let past = src.scan_region(10 << 20, 5).unwrap();
        assert_eq!((past.head.len(), past.nonzero), (0, 0));
    }
}
