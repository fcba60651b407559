//! Reads that bypass the page cache (`O_DIRECT`, Linux) for whole loads of
//! files that are not cached (whatever their size): straight into
//! destinations wherever they sit, else into aligned per-thread buffers.
//! Everything here falls back rather than fails: a file system that
//! refuses direct I/O (tmpfs, some FUSE and network file systems), a read it
//! rejects, or pages already in the cache make the caller read through the
//! page cache instead.

use std::fs::File;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};

use memmap2::{Mmap, MmapMut};

use crate::error::{Error, Result};

/// File offsets and lengths of direct reads are multiples of this, and the
/// buffers they land in are aligned to it (the largest logical block size
/// in use; page-aligned buffers satisfy every device's memory alignment).
pub(crate) const DIRECT_ALIGN: u64 = 4096;

/// A second descriptor on an open file, opened with `O_DIRECT`, and a
/// mapping of the file used only to ask which pages are cached.
#[derive(Debug)]
pub(crate) struct DirectFile {
    file: File,
    map: Mmap,
    /// Set when the file system rejected a direct read: buffered reads
    /// from then on.
    refused: AtomicBool,
}

/// A direct descriptor on the file `file` is open on, when the file system
/// allows it and the file is not already cached (`None` otherwise: the
/// caller reads through the page cache).
#[cfg(target_os = "linux")]
pub(crate) fn open_direct(file: &File) -> Option<DirectFile> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    use std::os::unix::io::AsRawFd;
    // The same open file, reopened through /proc (never by its path, which
    // may name another file by now).
    let path = format!("/proc/self/fd/{}", file.as_raw_fd());
    let direct = File::options()
        .read(true)
        .custom_flags(libc::O_DIRECT | libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .ok()?;
    let (a, b) = (file.metadata().ok()?, direct.metadata().ok()?);
    if (a.dev(), a.ino()) != (b.dev(), b.ino()) || !b.is_file() {
        return None;
    }
    let map = super::mmap::map_read_only(file).ok()?;
    Some(DirectFile {
        file: direct,
        map,
        refused: AtomicBool::new(false),
    })
}

/// Direct I/O is Linux-only here.
#[cfg(not(target_os = "linux"))]
pub(crate) fn open_direct(_file: &File) -> Option<DirectFile> {
    None
}

impl DirectFile {
    /// Reads the file's bytes `[start, start + len)` into `buf` (aligned to
    /// [`DIRECT_ALIGN`], at least `len + 2 * DIRECT_ALIGN` long) with direct
    /// reads of whole aligned blocks, and returns where in `buf` they are.
    ///
    /// `None` when the caller should read through the page cache instead:
    /// some of those pages are cached (they are fresher there and cost
    /// nothing to copy), the file system rejected direct I/O, or a read
    /// ended short in the middle of a block. `Some(Err(..))` for a failed
    /// read (a read past the end of a file that shrank underneath).
    #[cfg(unix)]
    pub(crate) fn read(
        &self,
        start: u64,
        len: usize,
        buf: &mut [u8],
    ) -> Option<std::io::Result<Range<usize>>> {
        if len == 0 {
            return None;
        }
        let end = start.checked_add(len as u64)?;
        let lo = start - start % DIRECT_ALIGN;
        let hi = end.checked_next_multiple_of(DIRECT_ALIGN)?;
        let want = usize::try_from(hi - lo).ok()?;
        let lead = (start - lo) as usize;
        let need = lead + len;
        match self.read_blocks(lo, buf.get_mut(..want)?, need)? {
            Ok(()) => Some(Ok(lead..need)),
            Err(e) => Some(Err(e)),
        }
    }

    /// Reads the file's bytes `[start, start + dst.len())` into `dst`: the
    /// whole blocks inside the range with direct reads into `dst` itself,
    /// the partial blocks at either end through `scratch` (aligned, at
    /// least `2 * DIRECT_ALIGN` long), all in one vectored read where `dst`
    /// sits at `start`'s place modulo [`DIRECT_ALIGN`]
    /// ([`DirectFile::read_in_one`]). Where `dst` does not sit at `start`'s
    /// place modulo [`DIRECT_ALIGN`], the blocks are read that many bytes
    /// (`shift`) below their place, onto aligned memory, then moved up into
    /// it; the first block joins the head when there is no room below it.
    /// Everything stays inside `dst`. `None` and `Some(Err(..))` as for
    /// [`DirectFile::read`] (part of `dst` may be written then).
    #[cfg(unix)]
    pub(crate) fn read_into(
        &self,
        start: u64,
        dst: &mut [u8],
        scratch: &mut [u8],
    ) -> Option<std::io::Result<()>> {
        if dst.is_empty() {
            return None;
        }
        let end = start.checked_add(dst.len() as u64)?;
        let mut mid_lo = start.checked_next_multiple_of(DIRECT_ALIGN)?;
        let shift = (dst.as_ptr() as u64).wrapping_add(mid_lo - start) % DIRECT_ALIGN;
        if shift > mid_lo - start {
            mid_lo = mid_lo.checked_add(DIRECT_ALIGN)?;
        }
        let mid_hi = (end - end % DIRECT_ALIGN).max(mid_lo);
        let head = usize::try_from(mid_lo.min(end) - start).ok()?;
        let mid = usize::try_from(mid_hi - mid_lo).ok()?;
        if shift == 0 && mid > 0 && self.read_in_one(start, dst, head, mid, scratch) {
            return Some(Ok(()));
        }
        if mid > 0 {
            // `head >= shift` here: the blocks start at or past `shift`.
            let below = head - shift as usize;
            let blocks = dst.get_mut(below..below + mid)?;
            if let Err(e) = self.read_blocks(mid_lo, blocks, mid)? {
                return Some(Err(e));
            }
            if below != head {
                dst.copy_within(below..below + mid, head);
            }
        }
        let (head_dst, rest) = dst.split_at_mut(head);
        let tail_dst = &mut rest[mid..];
        for (at, part) in [(start, head_dst), (mid_hi, tail_dst)] {
            if part.is_empty() {
                continue;
            }
            match self.read(at, part.len(), scratch)? {
                Ok(range) => part.copy_from_slice(&scratch[range]),
                Err(e) => return Some(Err(e)),
            }
        }
        Some(Ok(()))
    }

    /// [`DirectFile::read_into`] in one vectored read, where `dst` sits at
    /// `start`'s place modulo [`DIRECT_ALIGN`] (its `mid` bytes of whole
    /// blocks after its first `head` bytes are aligned): the partial
    /// blocks at either end land in `scratch` (two blocks), the whole ones
    /// in `dst`, so that a request costs the disk one read, not up to three
    /// after one another. False when the caller should take the longer
    /// way, which reads it all again and tells the errors apart: pages
    /// cached, direct reads refused, the read failed or ended short.
    #[cfg(unix)]
    #[allow(unsafe_code)]
    fn read_in_one(
        &self,
        start: u64,
        dst: &mut [u8],
        head: usize,
        mid: usize,
        scratch: &mut [u8],
    ) -> bool {
        use std::os::unix::io::AsRawFd;
        let block = DIRECT_ALIGN as usize;
        let tail = dst.len() - head - mid;
        let lo = start - start % DIRECT_ALIGN;
        let lead = (start - lo) as usize;
        let need = lead + dst.len();
        let whole = |n: usize| if n > 0 { block } else { 0 };
        let total = whole(head) + mid + whole(tail);
        let Ok(offset) = libc::off_t::try_from(lo) else {
            return false;
        };
        if scratch.len() < 2 * block
            || scratch.as_ptr() as usize % block != 0
            || self.refused.load(Ordering::Relaxed)
            || self.any_cached(lo, total)
        {
            return false;
        }
        let (first, last) = scratch.split_at_mut(block);
        let (head_dst, rest) = dst.split_at_mut(head);
        let (mid_dst, tail_dst) = rest.split_at_mut(mid);
        let mut iov: Vec<libc::iovec> = Vec::with_capacity(3);
        for (part, used) in [
            (&mut *first, head),
            (&mut *mid_dst, mid),
            (&mut last[..block], tail),
        ] {
            if used > 0 {
                iov.push(libc::iovec {
                    iov_base: part.as_mut_ptr().cast(),
                    iov_len: part.len(),
                });
            }
        }
        // SAFETY: every iovec points into memory borrowed mutably for this
        // call (`scratch`'s two blocks, the whole blocks of `dst`), their
        // lengths those of the slices; the kernel writes at most that much
        // into each, and nothing else holds them meanwhile.
        let got = unsafe {
            libc::preadv(
                self.file.as_raw_fd(),
                iov.as_ptr(),
                iov.len() as libc::c_int,
                offset,
            )
        };
        if usize::try_from(got).map_or(true, |n| n < need) {
            return false;
        }
        head_dst.copy_from_slice(&first[lead..lead + head]);
        tail_dst.copy_from_slice(&last[..tail]);
        true
    }

    /// Reads whole blocks of the file from `lo` (a multiple of
    /// [`DIRECT_ALIGN`]) into `buf` (aligned, a whole number of blocks)
    /// until at least `need` bytes are in; a read may stop short at the end
    /// of the file past them. `None` and `Some(Err(..))` as for
    /// [`DirectFile::read`].
    #[cfg(unix)]
    fn read_blocks(&self, lo: u64, buf: &mut [u8], need: usize) -> Option<std::io::Result<()>> {
        use std::os::unix::fs::FileExt;
        if self.refused.load(Ordering::Relaxed)
            || buf.as_ptr() as usize % DIRECT_ALIGN as usize != 0
            || self.any_cached(lo, buf.len())
        {
            return None;
        }
        let mut got = 0usize;
        while got < need {
            match self.file.read_at(&mut buf[got..], lo + got as u64) {
                Ok(0) => {
                    return Some(Err(std::io::ErrorKind::UnexpectedEof.into()));
                }
                Ok(n) => {
                    got += n;
                    if got < need && got as u64 % DIRECT_ALIGN != 0 {
                        return None;
                    }
                }
                Err(e) => match after_error(&e) {
                    AfterError::Retry => {}
                    AfterError::Buffered => {
                        self.refused.store(true, Ordering::Relaxed);
                        return None;
                    }
                    AfterError::Fail => return Some(Err(e)),
                },
            }
        }
        Some(Ok(()))
    }

    /// Direct reads need Unix.
    #[cfg(not(unix))]
    pub(crate) fn read(
        &self,
        _start: u64,
        _len: usize,
        _buf: &mut [u8],
    ) -> Option<std::io::Result<Range<usize>>> {
        None
    }

    /// Direct reads need Unix.
    #[cfg(not(unix))]
    pub(crate) fn read_into(
        &self,
        _start: u64,
        _dst: &mut [u8],
        _scratch: &mut [u8],
    ) -> Option<std::io::Result<()>> {
        None
    }

    /// True when any page of `[offset, offset + len)` is in the page cache
    /// (or when that cannot be told).
    fn any_cached(&self, offset: u64, len: usize) -> bool {
        let Ok(offset) = usize::try_from(offset) else {
            return true;
        };
        let end = offset.saturating_add(len).min(self.map.len());
        if end <= offset {
            return false;
        }
        super::mmap::any_resident(&self.map, offset, end - offset).unwrap_or(true)
    }
}

/// What a direct read does after the system failed one of its reads.
#[cfg(unix)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum AfterError {
    /// Interrupted by a signal before reading anything: read again.
    Retry,
    /// `EINVAL`: the file system does not do direct reads of these (its
    /// blocks are larger, or it has no direct I/O at all): read this and
    /// every later piece through the page cache.
    Buffered,
    /// Anything else is a failed read, reported as it is.
    Fail,
}

/// How a direct read treats the error `e` of one of its reads.
#[cfg(unix)]
fn after_error(e: &std::io::Error) -> AfterError {
    if e.kind() == std::io::ErrorKind::Interrupted {
        AfterError::Retry
    } else if e.raw_os_error() == Some(libc::EINVAL) {
        AfterError::Buffered
    } else {
        AfterError::Fail
    }
}

/// A page-aligned buffer of one reading thread (anonymous memory).
#[derive(Debug)]
pub(crate) struct ReadBuffer(MmapMut);

impl ReadBuffer {
    /// `len` bytes, or rule `out-of-memory` naming `tensor`.
    pub(crate) fn new(len: usize, tensor: &str) -> Result<ReadBuffer> {
        MmapMut::map_anon(len.max(1))
            .map(ReadBuffer)
            .map_err(|_| Error::OutOfMemory {
                bytes: len as u64,
                tensor: tensor.to_owned(),
            })
    }

    /// The bytes.
    pub(crate) fn as_slice(&self) -> &[u8] {
        &self.0
    }

    /// The bytes, writable.
    pub(crate) fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.0
    }
}

// Two attributes, not `cfg(all(test, ...))`: cargo-mutants leaves alone
// only items marked with a plain `#[cfg(test)]` (scripts/mutants.sh).
#[cfg(test)]
#[cfg(target_os = "linux")]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::testfs::TempFile;

    #[test]
    fn direct_reads_of_unaligned_ranges_are_exact_or_decline() {
        let data: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 253) as u8).collect();
        let path = TempFile::with("direct", &data);
        let file = File::open(&path).unwrap();
        super::super::drop_cached(&file);
        let mut buf = ReadBuffer::new(200_000 + 2 * DIRECT_ALIGN as usize, "t").unwrap();
        if let Some(direct) = open_direct(&file) {
            for (start, len) in [
                (0u64, 4096usize),
                (1, 5),
                (4095, 2),
                (12_345, 150_000),
                (299_000, 1000),
            ] {
                // `None`: declined (cached, or refused by the file system).
                if let Some(got) = direct.read(start, len, buf.as_mut_slice()) {
                    let range = got.unwrap();
                    assert_eq!(range.len(), len);
                    assert_eq!(
                        &buf.as_slice()[range],
                        &data[start as usize..start as usize + len],
                        "{start} {len}"
                    );
                }
            }
            // Past the end of the file: an error, never a short success.
            super::super::drop_cached(&file);
            let past = direct.read(299_000, 2000, buf.as_mut_slice());
            assert!(!matches!(past, Some(Ok(_))));
            // A buffer too small is declined.
            assert!(direct.read(0, 10_000, &mut [0u8; 100]).is_none());
        }
    }

    /// A file of `len` patterned bytes under the temp dir, its pages
    /// dropped from the cache, and a direct descriptor on it. `None` where
    /// the temp dir's file system keeps files in memory or refuses
    /// `O_DIRECT` (nothing to check there).
    fn uncached(name: &str, len: usize) -> Option<(TempFile, Vec<u8>, File, DirectFile)> {
        let data: Vec<u8> = (0..len as u32).map(|i| (i * 13 % 251) as u8).collect();
        let path = TempFile::with(name, &data);
        let file = File::open(&path).unwrap();
        let direct = open_direct(&file);
        if !super::super::drop_cached(&file) || direct.is_none() {
            return None;
        }
        Some((path, data, file, direct.unwrap()))
    }

    #[test]
    fn errors_of_direct_reads_retry_fall_back_or_fail() {
        use std::io::{Error as IoError, ErrorKind};
        assert_eq!(
            after_error(&IoError::from(ErrorKind::Interrupted)),
            AfterError::Retry
        );
        assert_eq!(
            after_error(&IoError::from_raw_os_error(libc::EINTR)),
            AfterError::Retry
        );
        assert_eq!(
            after_error(&IoError::from_raw_os_error(libc::EINVAL)),
            AfterError::Buffered
        );
        for errno in [libc::EIO, libc::EBADF, libc::ENOMEM, libc::EAGAIN] {
            assert_eq!(
                after_error(&IoError::from_raw_os_error(errno)),
                AfterError::Fail,
                "{errno}"
            );
        }
        // An error without an errno is no refusal of direct I/O.
        assert_eq!(
            after_error(&IoError::from(ErrorKind::InvalidInput)),
            AfterError::Fail
        );
    }

    #[test]
    fn direct_reads_check_the_buffer_before_reading() {
        let Some((_path, data, _file, direct)) = uncached("direct-buffer", 64 << 10) else {
            return;
        };
        let mut buf = ReadBuffer::new(32 << 10, "t").unwrap();
        // Exactly the aligned span the read needs: read.
        let got = direct.read(0, 4096, &mut buf.as_mut_slice()[..4096]);
        assert_eq!(got.unwrap().unwrap(), 0..4096);
        assert_eq!(&buf.as_slice()[..4096], &data[..4096]);
        // One block short: declined, nothing read.
        assert!(direct
            .read(4096, 8192, &mut buf.as_mut_slice()[..4096])
            .is_none());
        // Long enough but not aligned: declined before the system sees it,
        // so direct reads stay on for the pieces that follow.
        assert!(direct
            .read(8192, 4096, &mut buf.as_mut_slice()[1..])
            .is_none());
        assert!(!direct.refused.load(Ordering::Relaxed));
        let got = direct.read(8192, 100, buf.as_mut_slice()).unwrap().unwrap();
        assert_eq!(&buf.as_slice()[got], &data[8192..8292]);
        // Once refused, every later read is declined.
        direct.refused.store(true, Ordering::Relaxed);
        assert!(direct.read(0, 4096, buf.as_mut_slice()).is_none());
    }

    /// Reads straight into destinations, placed at their file offset modulo
    /// [`DIRECT_ALIGN`] or anywhere else (the blocks shifted, then moved into
    /// place): exact for every mix of file offset, destination address and
    /// length (inside one block, one whole block, across blocks, to the end
    /// of the file), nothing written around them; an empty one is declined.
    #[test]
    fn direct_reads_into_any_destination_are_exact() {
        let len = 300_001;
        let Some((_path, data, _file, direct)) = uncached("direct-into", len) else {
            return;
        };
        let block = DIRECT_ALIGN as usize;
        let mut mem = ReadBuffer::new(96 << 10, "t").unwrap();
        let mut scratch = ReadBuffer::new(2 * block, "t").unwrap();
        let starts = [0usize, 1, 10, 56, 4000, 4095, 4096, 12_345, len - 70_001];
        let lengths = [1usize, 5, 90, 4095, 4096, 4097, 8191, 8192, 8193, 70_001];
        for start in starts {
            let placed = start % block;
            for at in [placed, 0, 1, 8, 64, 2048, 4032, 4095, (placed + 1) % block] {
                for n in lengths.into_iter().chain([len - start]) {
                    if start + n > len || n > 80 << 10 {
                        continue;
                    }
                    mem.as_mut_slice().fill(0xA5);
                    let dst = &mut mem.as_mut_slice()[block + at..block + at + n];
                    let got = direct.read_into(start as u64, dst, scratch.as_mut_slice());
                    got.unwrap().unwrap();
                    let (mem, what) = (mem.as_slice(), (start, at, n));
                    assert!(mem[block + at..][..n] == data[start..start + n], "{what:?}");
                    assert!(mem[..block + at].iter().all(|&b| b == 0xA5), "{what:?}");
                    assert!(mem[block + at + n..].iter().all(|&b| b == 0xA5), "{what:?}");
                }
            }
        }
        assert!(direct
            .read_into(0, &mut [], scratch.as_mut_slice())
            .is_none());
    }

    /// A placed destination with partial blocks at both ends is read with
    /// one vectored read (the ends through the scratch blocks), exact and
    /// nothing written around it; declined once its pages are cached.
    #[test]
    fn placed_reads_take_one_vectored_read() {
        let Some((_path, data, file, direct)) = uncached("direct-one", 100_000) else {
            return;
        };
        let block = DIRECT_ALIGN as usize;
        let mut mem = ReadBuffer::new(64 << 10, "t").unwrap();
        let mut scratch = ReadBuffer::new(2 * block, "t").unwrap();
        for (start, n) in [
            (4106usize, 40_000usize),
            (8192, 20_000),
            (100, 8092),
            (70_000, 30_000),
        ] {
            mem.as_mut_slice().fill(0xA5);
            let at = block + start % block;
            let (head, mid) = {
                let mid_lo = start.next_multiple_of(block);
                let mid_hi = (start + n) / block * block;
                (mid_lo - start, mid_hi - mid_lo)
            };
            let dst = &mut mem.as_mut_slice()[at..at + n];
            assert!(direct.read_in_one(start as u64, dst, head, mid, scratch.as_mut_slice()));
            let mem = mem.as_slice();
            assert!(mem[at..at + n] == data[start..start + n], "{start} {n}");
            assert!(mem[..at].iter().all(|&b| b == 0xA5));
            assert!(mem[at + n..].iter().all(|&b| b == 0xA5));
        }
        // Cached pages: declined (read through the cache instead).
        use std::os::unix::fs::FileExt;
        file.read_exact_at(&mut [0u8; 4096], 8192).unwrap();
        let dst = &mut mem.as_mut_slice()[block + 10..block + 10 + 20_000];
        assert!(!direct.read_in_one(4106, dst, 4086, 12_288, scratch.as_mut_slice()));
    }

    /// A read into a destination off its file offset's place, of a file
    /// that shrank underneath: an error or declined (the caller's buffered
    /// read then reports it), never a success with stale bytes.
    #[test]
    fn shifted_direct_reads_of_a_file_that_shrank_fail() {
        let Some((path, _data, _file, direct)) = uncached("direct-into-shrunk", 64 << 10) else {
            return;
        };
        let mut mem = ReadBuffer::new(64 << 10, "t").unwrap();
        let mut scratch = ReadBuffer::new(2 * DIRECT_ALIGN as usize, "t").unwrap();
        let writer = File::options().write(true).open(&path).unwrap();
        for cut in [3 * 4096, 3 * 4096 + 100, 5000] {
            writer.set_len(cut).unwrap();
            // 10: placed (one vectored read), the others shifted.
            for at in [10, 64, 4095] {
                let dst = &mut mem.as_mut_slice()[at..at + 6 * 4096];
                let got = direct.read_into(4096 + 10, dst, scratch.as_mut_slice());
                assert!(!matches!(got, Some(Ok(()))), "{cut} {at}");
            }
        }
    }

    #[test]
    fn direct_reads_of_a_file_that_shrank() {
        let Some((path, _data, _file, direct)) = uncached("direct-shrunk", 64 << 10) else {
            return;
        };
        let mut buf = ReadBuffer::new(64 << 10, "t").unwrap();
        let writer = File::options().write(true).open(&path).unwrap();
        // Ends on a block boundary inside the range: a short whole-block
        // read, then nothing: the bytes are missing.
        writer.set_len(3 * 4096).unwrap();
        let got = direct.read(2 * 4096 + 10, 4 * 4096, buf.as_mut_slice());
        assert_eq!(
            got.unwrap().unwrap_err().kind(),
            std::io::ErrorKind::UnexpectedEof
        );
        // Ends inside a block: the direct read stops short mid-block and
        // hands the piece to the buffered path.
        writer.set_len(100).unwrap();
        assert!(direct.read(0, 8192, buf.as_mut_slice()).is_none());
        assert!(!direct.refused.load(Ordering::Relaxed));
    }
}
