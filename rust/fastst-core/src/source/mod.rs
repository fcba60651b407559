//! Where a file's bytes come from: one seam for every input.
//!
//! A [`Source`] is anything that can say how long it is and fill a buffer
//! from an offset: a local file ([`crate::io::OpenFile`], see `local.rs`),
//! a caller's positioned reader (the Python glue's file objects), and
//! object stores or HTTP ranges (the `fastst-remote` crate). The reader ([`crate::MappedFile`]) opens
//! every kind the same way, with [`read_header`], and reads tensor bytes
//! through [`Source::read_at`]; only a source backed by an operating-system
//! file ([`Source::local`]) gets the local fast paths (memory maps, direct
//! I/O, kernel hints).
//!
//! A source learns its length when it is opened: [`Source::len`] is a
//! fact from then on, not an I/O. Errors carry no file name: the caller
//! names the file, as for every other error of the crate.

mod local;

use std::fmt::Debug;
use std::fs::File;

use crate::error::{Error, Result};
use crate::header::check_prefix;
use crate::io::zeroed;

/// A positioned, thread-safe reader of a file's bytes.
pub trait Source: Send + Sync + Debug {
    /// The length in bytes when the source was opened.
    fn len(&self) -> u64;

    /// Whether the source is empty (zero bytes).
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Fills all of `buf` with the bytes at `offset`. A source that ends
    /// before (it shrank since it was opened) fails with rule
    /// `file-changed` ([`ended_early`]); other failures are I/O errors.
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<()>;

    /// Fails with rule `file-changed` when the source is known to have
    /// changed since it was opened; sources that cannot tell say nothing.
    fn check_unchanged(&self) -> Result<()> {
        Ok(())
    }

    /// The operating-system file behind the source, for the local fast
    /// paths (mappings, direct I/O, page-cache hints); `None` for sources
    /// read only through [`Source::read_at`].
    fn local(&self) -> Option<&File> {
        None
    }

    /// The gap between two wanted byte ranges below which reading them as
    /// one range (and dropping the bytes between) costs less than a second
    /// read. The default, a page, suits positioned reads of a local file:
    /// the kernel reads whole pages anyway, and a system call costs about
    /// what copying a few pages does.
    fn coalesce_gap(&self) -> u64 {
        4096
    }

    /// Fills each buffer of `reads` with the bytes at its offset, as
    /// [`Source::read_at`] does; the default reads them one after another,
    /// a remote source runs them concurrently.
    fn read_many(&self, reads: &mut [(u64, &mut [u8])]) -> Result<()> {
        reads
            .iter_mut()
            .try_for_each(|(offset, buf)| self.read_at(*offset, buf))
    }

    /// Whether the source serves one read at a time (a single position
    /// under a lock, as a Python file object is read): a whole load then
    /// reads it with one thread, in file order. More threads would only
    /// queue at the lock in whatever order they reach it, and the first
    /// tensors could wait behind later reads.
    fn one_read_at_a_time(&self) -> bool {
        false
    }

    /// How a whole load should read this source, when the loader's
    /// defaults (made for local disks) do not fit it: a remote object wants
    /// many requests in flight, each read with [`Source::read_request`].
    fn load_hint(&self) -> Option<LoadHint> {
        None
    }

    /// Fills the buffers of `bufs`, in order, with the bytes from `offset`
    /// on (they follow each other in the source), in one request where the
    /// source makes requests: a load's piece, sized by
    /// [`Source::load_hint`], which may span the ends of several tensors.
    /// The default reads each with [`Source::read_at`].
    fn read_request(&self, offset: u64, bufs: &mut [&mut [u8]]) -> Result<()> {
        let mut at = offset;
        for buf in bufs.iter_mut() {
            self.read_at(at, buf)?;
            at += buf.len() as u64;
        }
        Ok(())
    }
}

/// The shape of the requests a whole load makes of a source that waits on
/// a network ([`Source::load_hint`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoadHint {
    /// Requests in flight (reading threads).
    pub threads: usize,
    /// Bytes per request of a load that hands tensors out as they arrive
    /// (smaller requests in file order: the first tensors come sooner),
    /// and at most of a run of small tensors read through a buffer.
    pub piece: usize,
    /// The most bytes per request of a whole load (at least `piece`): a
    /// large load makes fewer, larger requests, each one a request the
    /// server answers and the client sends.
    pub max_piece: usize,
}

/// Reads the 8-byte length prefix of `src`, checks it against the
/// source's length and `cap`, and reads the header bytes it announces:
/// `(N, header)`. Nothing is allocated beyond what the checks allow.
pub fn read_header(src: &dyn Source, cap: u64) -> Result<(u64, Vec<u8>)> {
    let len = src.len();
    if len < 8 {
        return Err(Error::FileTooShort { len });
    }
    let mut prefix = [0u8; 8];
    src.read_at(0, &mut prefix)?;
    let n = check_prefix(&prefix, len, cap)?;
    // `n` is bounded by both the cap and the source's length.
    let mut json = zeroed(n, "")?;
    src.read_at(8, &mut json)?;
    Ok((n, json))
}

/// The error of a read of `want` bytes at `offset` that found the source
/// ending at byte `end`, short of the `len` bytes it had when opened.
#[cold]
pub fn ended_early(offset: u64, want: usize, end: u64, len: u64) -> Error {
    Error::FileChanged {
        what: format!(
            "it shrank: a read of {want} bytes at offset {offset} ended at byte {end} of the {len} it had"
        ),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
pub(crate) mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    /// A source held in memory, read only through `read_at` (like a
    /// caller's reader), that can be made to end early.
    #[derive(Debug)]
    pub(crate) struct Memory {
        pub bytes: Vec<u8>,
        /// Reads past this offset find the end (a source that shrank).
        pub end: Arc<AtomicU64>,
    }

    impl Memory {
        pub(crate) fn new(bytes: Vec<u8>) -> Memory {
            let end = Arc::new((bytes.len() as u64).into());
            Memory { bytes, end }
        }
    }

    impl Source for Memory {
        fn len(&self) -> u64 {
            self.bytes.len() as u64
        }

        fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
            let end = self.end.load(Ordering::Relaxed);
            let stop = offset.saturating_add(buf.len() as u64);
            if stop > end {
                return Err(ended_early(offset, buf.len(), end, self.len()));
            }
            let start = offset as usize;
            buf.copy_from_slice(&self.bytes[start..start + buf.len()]);
            Ok(())
        }
    }

    #[test]
    fn headers_are_read_through_any_source() {
        let mut bytes = 2u64.to_le_bytes().to_vec();
        bytes.extend_from_slice(b"{}");
        let src = Memory::new(bytes);
        assert_eq!(read_header(&src, 100).unwrap(), (2, b"{}".to_vec()));
        assert_eq!(read_header(&src, 1).unwrap_err().rule(), "header-too-large");
        let short = Memory::new(vec![1; 7]);
        assert!(matches!(
            read_header(&short, 100).unwrap_err(),
            Error::FileTooShort { len: 7 }
        ));
        let past = Memory::new([3u64.to_le_bytes().as_slice(), b"{}"].concat());
        assert_eq!(
            read_header(&past, 100).unwrap_err().rule(),
            "header-past-end"
        );
        src.end.store(9, Ordering::Relaxed);
        let err = read_header(&src, 100).unwrap_err();
        assert_eq!(err.rule(), "file-changed");
        assert!(
            err.to_string().contains(
                "it shrank: a read of 2 bytes at offset 8 ended at byte 9 of the 10 it had"
            ),
            "{err}"
        );
        assert!(src.local().is_none() && src.check_unchanged().is_ok() && !src.is_empty());
        assert!(src.load_hint().is_none());
    }
}
