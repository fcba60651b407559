//! The few things the standard library does not offer safely: a zeroed
//! allocation that reports failure instead of aborting, clearing
//! `O_NONBLOCK` and switching `O_DIRECT` on an open file and giving an unnamed (`O_TMPFILE`) file a
//! name. One of the five modules of `io` allowed `unsafe` (see
//! [`io`](super)); each block is a plain system call on a descriptor we own.
#![allow(unsafe_code)]

use std::fs::File;
use std::io;
use std::path::Path;

/// `n` zero bytes, or `None` when the allocator cannot provide them (the
/// caller reports rule `out-of-memory`). Like `vec![0u8; n]` (calloc: large
/// sizes get untouched zero pages, no fill pass), but fallible.
pub(crate) fn try_zeroed(n: usize) -> Option<Vec<u8>> {
    if n == 0 {
        return Some(Vec::new());
    }
    let layout = std::alloc::Layout::array::<u8>(n).ok()?;
    // SAFETY: `layout` has a non-zero size (n > 0), as `alloc_zeroed`
    // requires.
    let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
    if ptr.is_null() {
        return None;
    }
    // SAFETY: `ptr` was allocated by the global allocator with the layout of
    // `[u8; n]`, which is what a `Vec<u8>` of capacity `n` uses; all `n`
    // bytes are initialised (zeroed), and the Vec takes sole ownership.
    Some(unsafe { Vec::from_raw_parts(ptr, n, n) })
}

/// The counts `cachestat` gives: pages of a range of a file.
#[repr(C)]
#[derive(Default)]
pub(crate) struct CacheCounts {
    pub(crate) cache: u64,
    pub(crate) dirty: u64,
    pub(crate) writeback: u64,
    /// Written by the kernel, read by no one.
    _evicted: [u64; 2],
}

/// The page-cache counts of `file`'s bytes `[offset, offset + len)` (`len`
/// 0: to the end of the file), from `cachestat` (Linux 6.5 and later);
/// `None` where the kernel lacks it.
#[cfg(all(
    target_os = "linux",
    any(
        target_arch = "x86_64",
        target_arch = "aarch64",
        target_arch = "riscv64",
        target_arch = "loongarch64"
    )
))]
pub(crate) fn cache_counts(file: &File, offset: u64, len: u64) -> Option<CacheCounts> {
    use std::os::unix::io::AsRawFd;
    /// The system call's number on the architectures above (the common
    /// table; the libc crate does not name it for all of them).
    const SYS_CACHESTAT: libc::c_long = 451;
    #[repr(C)]
    struct Range {
        off: u64,
        len: u64,
    }
    let range = Range { off: offset, len };
    let mut counts = CacheCounts::default();
    // SAFETY: cachestat on a descriptor owned by `file`, alive for the
    // call; it reads `range` and writes `counts`, both `repr(C)` structs of
    // the kernel's layout that live across the call.
    let r = unsafe {
        libc::syscall(
            SYS_CACHESTAT,
            file.as_raw_fd(),
            &range as *const Range,
            &mut counts as *mut CacheCounts,
            0 as libc::c_uint,
        )
    };
    (r == 0).then_some(counts)
}

/// No `cachestat` here: the caller asks `mincore`.
#[cfg(not(all(
    target_os = "linux",
    any(
        target_arch = "x86_64",
        target_arch = "aarch64",
        target_arch = "riscv64",
        target_arch = "loongarch64"
    )
)))]
pub(crate) fn cache_counts(_file: &File, _offset: u64, _len: u64) -> Option<CacheCounts> {
    None
}

/// How many of the pages of `file`'s bytes `[offset, offset + len)` are in
/// the page cache, and how many pages of `page` bytes the range spans;
/// `None` where the kernel cannot tell (see [`cache_counts`]).
pub(crate) fn cachestat(file: &File, offset: u64, len: u64, page: u64) -> Option<(usize, usize)> {
    if len == 0 {
        return Some((0, 0));
    }
    let end = offset.checked_add(len)?;
    let pages = end.div_ceil(page) - offset / page;
    let counts = cache_counts(file, offset, len)?;
    Some((
        usize::try_from(counts.cache.min(pages)).ok()?,
        usize::try_from(pages).ok()?,
    ))
}

/// Tells the kernel that `file` will be read front to back soon: larger
/// readahead, started now for the whole file. Only a hint: failures change
/// nothing but speed and are ignored.
pub(crate) fn advise_sequential(file: &File) {
    #[cfg(any(target_os = "linux", target_os = "android", target_os = "freebsd"))]
    {
        use std::os::unix::io::AsRawFd;
        let fd = file.as_raw_fd();
        // SAFETY: posix_fadvise on a descriptor owned by `file`, alive for
        // the call; it takes integers only and touches no memory of ours.
        unsafe {
            libc::posix_fadvise(fd, 0, 0, libc::POSIX_FADV_SEQUENTIAL);
            libc::posix_fadvise(fd, 0, 0, libc::POSIX_FADV_WILLNEED);
        }
    }
    #[cfg(not(any(target_os = "linux", target_os = "android", target_os = "freebsd")))]
    let _ = file;
}

/// Tells the kernel that `file` will be read front to back from `offset`
/// (a larger readahead window), without asking it to read anything yet:
/// reading a whole large file ahead at once (`WILLNEED`) stalls the reads
/// that follow. A hint: failures are ignored.
pub(crate) fn advise_sequential_from(file: &File, offset: u64) {
    #[cfg(any(target_os = "linux", target_os = "android", target_os = "freebsd"))]
    {
        use std::os::unix::io::AsRawFd;
        let Ok(offset) = libc::off_t::try_from(offset) else {
            return;
        };
        // SAFETY: posix_fadvise on a descriptor owned by `file`, alive for
        // the call; it takes integers only and touches no memory of ours.
        unsafe {
            libc::posix_fadvise(file.as_raw_fd(), offset, 0, libc::POSIX_FADV_SEQUENTIAL);
        }
    }
    #[cfg(not(any(target_os = "linux", target_os = "android", target_os = "freebsd")))]
    let _ = (file, offset);
}

/// `(length, modification time in seconds and nanoseconds, device, inode)`
/// of the open `file`, from one `fstat` (cheaper than the `statx` behind
/// `File::metadata`, and called before every tensor handed out).
#[cfg(unix)]
pub(crate) fn fstat_stamp(file: &File) -> io::Result<(u64, i64, i64, u64, u64)> {
    use std::os::unix::io::AsRawFd;
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `st` is writable memory of the size `fstat` fills, and the
    // descriptor is owned by `file`, alive for the call.
    let r = unsafe { libc::fstat(file.as_raw_fd(), st.as_mut_ptr()) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fstat` returned 0, so it initialised the whole struct.
    let st = unsafe { st.assume_init() };
    #[allow(clippy::unnecessary_cast, clippy::useless_conversion)]
    Ok((
        st.st_size as u64,
        st.st_mtime as i64,
        st.st_mtime_nsec as i64,
        st.st_dev as u64,
        st.st_ino as u64,
    ))
}

/// Clears `O_NONBLOCK` on `file` (opened non-blocking so that opening a
/// FIFO cannot hang; reads of a regular file then behave as usual).
#[cfg(unix)]
pub(crate) fn clear_nonblock(file: &File) -> io::Result<()> {
    use std::os::unix::io::AsRawFd;
    let fd = file.as_raw_fd();
    // SAFETY: F_GETFL on a descriptor owned by `file`, alive for the call;
    // no memory is passed.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    if flags & libc::O_NONBLOCK == 0 {
        return Ok(());
    }
    // SAFETY: F_SETFL with an integer argument on the same live descriptor.
    let r = unsafe { libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Turns `O_DIRECT` on or off for `file` (its open file description, which
/// every descriptor duplicated from it shares): writes then bypass the page
/// cache. An error where the file system refuses (`EINVAL`) or the system
/// has no such flag.
#[cfg(target_os = "linux")]
pub(crate) fn set_direct(file: &File, on: bool) -> io::Result<()> {
    use std::os::unix::io::AsRawFd;
    let fd = file.as_raw_fd();
    // SAFETY: F_GETFL on a descriptor owned by `file`, alive for the call;
    // no memory is passed.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    let wanted = if on {
        flags | libc::O_DIRECT
    } else {
        flags & !libc::O_DIRECT
    };
    if wanted == flags {
        return Ok(());
    }
    // SAFETY: F_SETFL with an integer argument on the same live descriptor.
    if unsafe { libc::fcntl(fd, libc::F_SETFL, wanted) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A second open file description of the file `file` is open on, for
/// writing with `O_DIRECT` (reopened through `/proc`, never by a path that
/// may name another file by now; an unnamed `O_TMPFILE` file too). `None`
/// where the system or the file system does not offer it.
#[cfg(target_os = "linux")]
pub(crate) fn reopen_direct_for_writing(file: &File) -> Option<File> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    use std::os::unix::io::AsRawFd;
    let path = format!("/proc/self/fd/{}", file.as_raw_fd());
    let direct = File::options()
        .write(true)
        .custom_flags(libc::O_DIRECT | libc::O_NOCTTY)
        .open(path)
        .ok()?;
    let (a, b) = (file.metadata().ok()?, direct.metadata().ok()?);
    ((a.dev(), a.ino()) == (b.dev(), b.ino()) && b.is_file()).then_some(direct)
}

/// A direct descriptor for writing: not offered on this system.
#[cfg(not(target_os = "linux"))]
pub(crate) fn reopen_direct_for_writing(_file: &File) -> Option<File> {
    None
}

/// Turns `O_DIRECT` on or off: not offered on this system.
#[cfg(not(target_os = "linux"))]
pub(crate) fn set_direct(_file: &File, _on: bool) -> io::Result<()> {
    Err(io::Error::from(io::ErrorKind::Unsupported))
}

/// Gives the unnamed file `file` (opened with `O_TMPFILE`) the name `to`,
/// which must not exist: `linkat` of `/proc/self/fd/N` following the magic
/// link, which needs no privilege (unlike `AT_EMPTY_PATH`).
#[cfg(target_os = "linux")]
pub(crate) fn link_unnamed(file: &File, to: &Path) -> io::Result<()> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::io::AsRawFd;
    let from = CString::new(format!("/proc/self/fd/{}", file.as_raw_fd()))
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let to = CString::new(to.as_os_str().as_bytes())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: both pointers are NUL-terminated strings owned by this frame
    // and alive for the call; `linkat` reads them and keeps nothing.
    let r = unsafe {
        libc::linkat(
            libc::AT_FDCWD,
            from.as_ptr(),
            libc::AT_FDCWD,
            to.as_ptr(),
            libc::AT_SYMLINK_FOLLOW,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Asks the kernel to start reading `len` bytes of `file` from `offset` into
/// the page cache now (`POSIX_FADV_WILLNEED`) and returns without waiting.
/// A hint: the caller ignores failures (tmpfs, FUSE, network filesystems
/// may do nothing).
pub(crate) fn advise_willneed(file: &File, offset: u64, len: u64) -> io::Result<()> {
    #[cfg(any(target_os = "linux", target_os = "android", target_os = "freebsd"))]
    {
        use std::os::unix::io::AsRawFd;
        let (Ok(off), Ok(n)) = (libc::off_t::try_from(offset), libc::off_t::try_from(len)) else {
            return Err(io::Error::from(io::ErrorKind::InvalidInput));
        };
        // SAFETY: posix_fadvise on a descriptor owned by `file`, alive for
        // the call; it takes integers only and touches no memory of ours.
        let r = unsafe { libc::posix_fadvise(file.as_raw_fd(), off, n, libc::POSIX_FADV_WILLNEED) };
        if r != 0 {
            return Err(io::Error::from_raw_os_error(r));
        }
        Ok(())
    }
    #[cfg(not(any(target_os = "linux", target_os = "android", target_os = "freebsd")))]
    {
        let _ = (file, offset, len);
        Ok(())
    }
}

/// How [`sync_range`] treats a range of a file being written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SyncRange {
    /// Start writing the range's dirty pages to the device; do not wait.
    Start,
    /// Wait for any writeback of the range already under way, write what is
    /// still dirty and wait for all of it: the range is on the device
    /// (not its metadata, nor the device's volatile cache: the final
    /// `fsync` still does that).
    Wait,
}

/// `sync_file_range` on `len` bytes of `file` from `offset` (Linux). Where
/// the system has no such call (elsewhere) it answers `ErrorKind::Unsupported`; the
/// caller then leaves all the flushing to the final `fsync`.
#[cfg(target_os = "linux")]
pub(crate) fn sync_range(file: &File, offset: u64, len: u64, how: SyncRange) -> io::Result<()> {
    use std::os::unix::io::AsRawFd;
    let (Ok(offset), Ok(len)) = (
        libc::off64_t::try_from(offset),
        libc::off64_t::try_from(len),
    ) else {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    };
    let flags = match how {
        SyncRange::Start => libc::SYNC_FILE_RANGE_WRITE,
        SyncRange::Wait => {
            libc::SYNC_FILE_RANGE_WAIT_BEFORE
                | libc::SYNC_FILE_RANGE_WRITE
                | libc::SYNC_FILE_RANGE_WAIT_AFTER
        }
    };
    // SAFETY: sync_file_range on a descriptor owned by `file`, alive for
    // the call; it takes integers only and touches no memory of ours.
    let r = unsafe { libc::sync_file_range(file.as_raw_fd(), offset, len, flags) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// No `sync_file_range` here: always `ErrorKind::Unsupported`.
#[cfg(not(target_os = "linux"))]
pub(crate) fn sync_range(_file: &File, _offset: u64, _len: u64, _how: SyncRange) -> io::Result<()> {
    Err(io::Error::from(io::ErrorKind::Unsupported))
}

/// Drops `file`'s pages from the page cache (tests of reads of files that
/// are not cached), waiting until `mincore` sees none of them: pages still
/// being written back are dropped only once clean. False on a file system
/// that keeps its files in memory (tmpfs, ramfs), where the tests that need
/// it have nothing to check; anywhere else, pages that will not go within
/// 20 s fail the test. Checked with its own mapping and `mincore` call,
/// independent of the code under test.
// Two attributes, not `cfg(all(test, ...))`: cargo-mutants leaves alone
// only items marked with a plain `#[cfg(test)]` (scripts/mutants.sh).
#[cfg(test)]
#[cfg(target_os = "linux")]
pub(crate) fn drop_cached(file: &File) -> bool {
    use std::os::unix::io::AsRawFd;
    let fd = file.as_raw_fd();
    let _ = file.sync_all();
    // SAFETY: statfs is a plain-data struct of integers: all zeroes is a
    // valid value.
    let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: fstatfs on a descriptor owned by `file`, alive for the call,
    // fills the struct it is given.
    if unsafe { libc::fstatfs(fd, &mut fs) } != 0 {
        return false;
    }
    // TMPFS_MAGIC, RAMFS_MAGIC: the page cache is the file.
    if matches!(fs.f_type as u64, 0x0102_1994 | 0x8584_58f6) {
        return false;
    }
    let len = match file.metadata() {
        Ok(m) => m.len() as usize,
        Err(_) => return false,
    };
    let advise = || {
        // SAFETY: posix_fadvise on a descriptor owned by `file`, alive for
        // the call; integers only.
        unsafe { libc::posix_fadvise(fd, 0, 0, libc::POSIX_FADV_DONTNEED) };
    };
    if len == 0 {
        advise();
        return true;
    }
    // SAFETY: a fresh read-only shared mapping of `len` bytes of the file,
    // never touched (only asked about with mincore), unmapped below.
    let addr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            fd,
            0,
        )
    };
    if addr == libc::MAP_FAILED {
        return false;
    }
    let mut vec = vec![0u8; len.div_ceil(4096)];
    let mut gone = false;
    for _ in 0..4000 {
        advise();
        // SAFETY: `addr` maps `len` bytes; `vec` has a byte for every page
        // of it (pages are 4 KiB or larger).
        if unsafe { libc::mincore(addr, len, vec.as_mut_ptr()) } != 0 {
            break;
        }
        if vec.iter().all(|b| b & 1 == 0) {
            gone = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    // SAFETY: the mapping made above, not used after this.
    unsafe { libc::munmap(addr, len) };
    assert!(gone, "the file's pages did not leave the page cache");
    true
}

/// Turns read-ahead off for `file` (`POSIX_FADV_RANDOM`): reads then bring
/// exactly the pages they read into the cache.
// Two attributes, not `cfg(all(test, ...))`: cargo-mutants leaves alone
// only items marked with a plain `#[cfg(test)]` (scripts/mutants.sh).
#[cfg(test)]
#[cfg(target_os = "linux")]
pub(crate) fn advise_random(file: &File) {
    use std::os::unix::io::AsRawFd;
    // SAFETY: posix_fadvise on a descriptor owned by `file`, alive for the
    // call; integers only.
    unsafe {
        libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_RANDOM);
    }
}

// Two attributes, not `cfg(all(test, ...))`: cargo-mutants leaves alone
// only items marked with a plain `#[cfg(test)]` (scripts/mutants.sh).
#[cfg(test)]
#[cfg(target_os = "linux")]
#[allow(clippy::unwrap_used)]
pub(crate) mod tests {
    use super::*;
    use std::io::{Seek, Write};

    /// `(cached, dirty, under writeback)` pages of the whole `file`, from
    /// `cachestat` (Linux 6.5); `None` where the kernel lacks it.
    fn cache_state(file: &File) -> Option<(u64, u64, u64)> {
        cache_state_of(file, 0, 0)
    }

    /// As `cache_state`, for the pages of `[off, off + len)` (`len` 0: to
    /// the end of the file).
    pub(crate) fn cache_state_of(file: &File, off: u64, len: u64) -> Option<(u64, u64, u64)> {
        cache_counts(file, off, len).map(|c| (c.cache, c.dirty, c.writeback))
    }

    #[test]
    fn advise_sequential_starts_reading_the_whole_file() {
        let path = crate::testfs::TempFile::with("sys-advise", &vec![7u8; 4 << 20]);
        let file = File::open(&path).unwrap();
        if !drop_cached(&file) {
            return;
        }
        let Some((0, _, _)) = cache_state(&file) else {
            panic!("cachestat: the dropped file is still cached, or the kernel lacks the call");
        };
        advise_sequential(&file);
        // Nothing of ours reads the file: only the kernel's read-ahead
        // can bring its pages in.
        let mut cached = 0;
        for _ in 0..1000 {
            cached = cache_state(&file).unwrap().0;
            if cached == 1024 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!(cached, 1024, "4 MiB is 1024 pages");
    }

    /// `advise_sequential_from` widens the kernel's read-ahead for the
    /// descriptor: the same front-to-back reads of 1 MiB of a dropped
    /// 16 MiB file bring more pages in with the hint than without it.
    #[test]
    fn advise_sequential_from_widens_read_ahead() {
        use std::os::unix::fs::FileExt;
        let path = crate::testfs::TempFile::with("sys-seq-from", &vec![3u8; 16 << 20]);
        let cached_after_reads = |hint: bool| -> Option<u64> {
            let file = File::open(&path).unwrap();
            if !drop_cached(&file) {
                return None;
            }
            assert_eq!(
                cache_state(&file)
                    .expect("cachestat (Linux 6.5 or later)")
                    .0,
                0
            );
            if hint {
                advise_sequential_from(&file, 4096);
            }
            let mut page = [0u8; 4096];
            for at in (0..1u64 << 20).step_by(4096) {
                file.read_exact_at(&mut page, at).unwrap();
            }
            Some(cache_state(&file).unwrap().0)
        };
        let Some(plain) = cached_after_reads(false) else {
            return; // a file system that keeps its files in memory
        };
        let hinted = cached_after_reads(true).unwrap();
        assert!(plain >= 256, "{plain} pages: at least those read");
        assert!(
            hinted > plain,
            "{hinted} pages with the hint, {plain} without"
        );
    }

    #[test]
    fn sync_range_waits_until_the_range_is_written() {
        let path = crate::testfs::TempFile::named("sys-sync");
        let mut file = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        // SAFETY: statfs is plain integers; fstatfs fills it.
        let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
        use std::os::unix::io::AsRawFd;
        // SAFETY: fstatfs on a descriptor owned by `file`, alive for the call.
        assert_eq!(unsafe { libc::fstatfs(file.as_raw_fd(), &mut fs) }, 0);
        if matches!(fs.f_type as u64, 0x0102_1994 | 0x8584_58f6) {
            // tmpfs, ramfs: nothing is ever written back.
            return;
        }
        // 512 dirty pages (written again while the kernel's own
        // writeback, started by other programs' writes, cleaned some).
        let page = vec![1u8; 4096];
        let mut dirty = 0;
        for _ in 0..20 {
            file.seek(std::io::SeekFrom::Start(0)).unwrap();
            for _ in 0..512 {
                file.write_all(&page).unwrap();
            }
            dirty = cache_state(&file)
                .expect("cachestat (Linux 6.5 or later)")
                .1;
            if dirty == 512 {
                break;
            }
        }
        assert_eq!(dirty, 512, "freshly written pages are dirty");
        // The second half only: at most the first stays dirty.
        sync_range(&file, 1 << 20, 1 << 20, SyncRange::Wait).unwrap();
        let (_, dirty, writeback) = cache_state(&file).unwrap();
        assert!(dirty <= 256, "{dirty} pages still dirty");
        assert_eq!(writeback, 0, "waited for the writeback it started");
        sync_range(&file, 0, 1 << 20, SyncRange::Wait).unwrap();
        let (cached, dirty, writeback) = cache_state(&file).unwrap();
        assert_eq!((dirty, writeback), (0, 0), "{cached} pages cached");
    }
}
