//! Files as fastst opens and reads them: the one file opener every entry
//! point uses, positioned reads, mappings, direct reads and fresh memory.
//! The prefix and header are read through the file as a source
//! ([`crate::source::read_header`]); io itself knows no format.
//!
//! The crate's only `unsafe` code is here (the crate root denies it
//! elsewhere), in five of these modules, each allowing it for its own job:
//! `mmap` (mappings), `sys` (system calls the standard library does not
//! wrap), `thp` (huge-page advice and the fault probe's page touches),
//! `fresh` (memory filled by reads without a zero-fill pass) and `direct`
//! (one vectored read into a destination and its end blocks). Every block
//! has a `// SAFETY:` line.
//!
//! For tools that read files the way the reader does (fastst-inspect), through
//! [`crate::internal`]: the opener [`open`], the [`OpenFile`] it returns
//! (positioned reads that report a file changed underneath as rule
//! `file-changed`, never SIGBUS) and the fallible allocation [`zeroed`].

mod direct;
mod fresh;
mod gate;
pub(crate) mod mmap;
mod sys;
mod thp;

pub(crate) use direct::{open_direct, DirectFile, ReadBuffer, DIRECT_ALIGN};
pub(crate) use fresh::read_fresh;
pub use gate::{enter_changes, Changing};
pub(crate) use mmap::{advise_huge_pages, cached_pages};
#[cfg(target_os = "linux")]
pub(crate) use sys::link_unnamed;
#[cfg(all(test, target_os = "linux"))]
pub(crate) use sys::{advise_random, drop_cached, tests::cache_state_of};
pub(crate) use sys::{advise_sequential, advise_sequential_from, advise_willneed};
pub(crate) use sys::{reopen_direct_for_writing, set_direct, sync_range, SyncRange};
pub(crate) use thp::{fault_in_writable, job_trial, recently_dear, Trial};
pub use thp::{probe_faults, FaultProbe};

use std::fs::{File, Metadata};
use std::path::Path;

use crate::error::{Error, Result};

/// What identifies the state of an open file: its identity (device and
/// inode), length and modification time, from `fstat` on the descriptor.
/// Two stamps differ when another program wrote to, truncated or extended
/// the file in place (not when it replaced the file by a rename: the open
/// descriptor keeps the old file).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Stamp {
    len: u64,
    modified: (i64, i64),
    dev: u64,
    ino: u64,
}

impl Stamp {
    #[cfg(unix)]
    fn of(file: &File) -> std::io::Result<Stamp> {
        let (len, sec, nsec, dev, ino) = sys::fstat_stamp(file)?;
        Ok(Stamp {
            len,
            modified: (sec, nsec),
            dev,
            ino,
        })
    }

    #[cfg(not(unix))]
    fn of(file: &File) -> std::io::Result<Stamp> {
        let meta = file.metadata()?;
        let modified = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or((0, 0), |d| {
                (d.as_secs() as i64, i64::from(d.subsec_nanos()))
            });
        Ok(Stamp {
            len: meta.len(),
            modified,
            dev: 0,
            ino: 0,
        })
    }

    /// What changed between `self` (at open) and `now`, in words.
    fn change(&self, now: &Stamp) -> Option<String> {
        if (self.dev, self.ino) != (now.dev, now.ino) {
            Some("the open file is no longer the same file".to_owned())
        } else if self.len != now.len {
            Some(format!(
                "its length changed from {} to {} bytes",
                self.len, now.len
            ))
        } else if self.modified != now.modified {
            Some("it was modified (its modification time changed)".to_owned())
        } else {
            None
        }
    }
}

/// An open file and its length when it was opened.
#[derive(Debug)]
pub struct OpenFile {
    /// The file, opened read-only.
    pub(crate) file: File,
    /// Its length in bytes at open time.
    pub len: u64,
    /// Its state at open time.
    pub(crate) stamp: Stamp,
}

/// Opens `path` for reading: the one opener of every entry point (the
/// reader, `verify`, `hash`, `inspect`, `meta`).
///
/// Only regular files are read. The file is opened without blocking (so a
/// FIFO cannot hang the process), its type is checked on the open
/// descriptor, and only then is blocking mode restored. FIFOs, sockets and
/// character or block devices are refused with rule `not-regular-file`;
/// folders with the operating system's "is a directory" error
/// (`IsADirectoryError` in Python).
pub fn open(path: &Path) -> Result<OpenFile> {
    let file = open_nonblocking(path).map_err(|e| refused_open(path, e))?;
    let meta = file
        .metadata()
        .map_err(|e| Error::io("cannot stat file", e))?;
    if meta.is_dir() {
        return Err(Error::io("cannot open file", is_a_directory()));
    }
    if !meta.is_file() {
        return Err(Error::NotRegularFile {
            kind: file_kind(&meta),
        });
    }
    #[cfg(unix)]
    sys::clear_nonblock(&file).map_err(|e| Error::io("cannot restore blocking mode", e))?;
    let stamp = Stamp::of(&file).map_err(|e| Error::io("cannot stat file", e))?;
    Ok(OpenFile {
        file,
        len: stamp.len,
        stamp,
    })
}

#[cfg(unix)]
fn open_nonblocking(path: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    File::options()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
}

#[cfg(not(unix))]
fn open_nonblocking(path: &Path) -> std::io::Result<File> {
    File::open(path)
}

/// The error for a failed open: sockets cannot be opened at all (ENXIO), so
/// the path's type is looked at to name them as what they are.
#[cold]
fn refused_open(path: &Path, err: std::io::Error) -> Error {
    if let Ok(meta) = std::fs::metadata(path) {
        if !meta.is_file() && !meta.is_dir() {
            return Error::NotRegularFile {
                kind: file_kind(&meta),
            };
        }
    }
    Error::io("cannot open file", err)
}

/// What kind of file `meta` describes, in words.
fn file_kind(meta: &Metadata) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        let t = meta.file_type();
        if t.is_fifo() {
            return "a FIFO (named pipe)";
        }
        if t.is_socket() {
            return "a socket";
        }
        if t.is_char_device() {
            return "a character device";
        }
        if t.is_block_device() {
            return "a block device";
        }
    }
    if meta.is_dir() {
        "a folder"
    } else {
        "not a regular file"
    }
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

/// Checks, with `fstat` on the open descriptor, that `file` is still as
/// `stamp` describes it; rule `file-changed` otherwise. Costs one system
/// call.
pub(crate) fn check_unchanged(file: &File, stamp: &Stamp) -> Result<()> {
    let now = Stamp::of(file).map_err(|e| Error::io("cannot stat file", e))?;
    match stamp.change(&now) {
        None => Ok(()),
        Some(what) => Err(Error::FileChanged { what }),
    }
}

impl OpenFile {
    /// Fills `buf` from absolute offset `offset` (a positioned read: the
    /// file has no cursor to share between threads).
    /// A read that fails because another program shrank or rewrote the
    /// file reports rule `file-changed`.
    pub fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        read_exact_at(&self.file, buf, offset).map_err(|e| {
            match check_unchanged(&self.file, &self.stamp) {
                Err(changed @ Error::FileChanged { .. }) => changed,
                _ => e,
            }
        })
    }

    /// The bytes in `[offset, offset + len)`, clipped to the file; `len` is
    /// never more than the caller allows (a cap or the file's length).
    pub fn read_range(&self, offset: u64, len: u64) -> Result<Vec<u8>> {
        let end = offset.saturating_add(len).min(self.len);
        let n = end.saturating_sub(offset);
        let mut buf = zeroed(n, "")?;
        if n > 0 {
            self.read_exact_at(&mut buf, offset)?;
        }
        Ok(buf)
    }
}

/// A zero-filled buffer of `n` bytes, or rule `out-of-memory` (naming
/// `tensor`, if any) when the memory cannot be had: never an abort.
pub fn zeroed(n: u64, tensor: &str) -> Result<Vec<u8>> {
    let oom = || Error::OutOfMemory {
        bytes: n,
        tensor: tensor.to_owned(),
    };
    let n = usize::try_from(n).map_err(|_| oom())?;
    sys::try_zeroed(n).ok_or_else(oom)
}

/// Positioned reads of a buffer of at least this many bytes go in pieces
/// of up to this size (cut at multiples of it in the address space), the
/// pages of each faulted in with one call ([`fault_in_writable`]) right
/// before its read, in turn with fastst's own mapping changes (`gate`).
/// Fresh memory would otherwise be faulted in page by
/// page inside the kernel's copy, where each fault takes the process's
/// memory-map lock (a fault in the kernel never takes the lock of its
/// area alone): an exception per page, and a wait behind every mapping
/// change of the process's other threads (another loader's reader
/// allocating or advising its tensors). The figures: benches/README.md.
pub(crate) const FAULT_PIECE: usize = 256 << 10;

/// Calls `read(piece, at)` for consecutive pieces of `buf` ([`FAULT_PIECE`];
/// `at`: where the piece starts in `buf`), each faulted in writable first;
/// a buffer under one piece is read whole, as it is.
pub(crate) fn in_fault_pieces<T>(
    buf: &mut [T],
    mut read: impl FnMut(&mut [T], usize) -> Result<()>,
) -> Result<()> {
    let size = std::mem::size_of::<T>().max(1);
    if std::mem::size_of_val(buf) < FAULT_PIECE {
        return read(buf, 0);
    }
    let (mut rest, mut at) = (buf, 0usize);
    while !rest.is_empty() {
        let addr = rest.as_ptr() as usize;
        let n = ((FAULT_PIECE - addr % FAULT_PIECE) / size).clamp(1, rest.len());
        let (piece, tail) = rest.split_at_mut(n);
        gate::faulting_in(|| {
            fault_in_writable(&mut *piece);
        });
        read(piece, at)?;
        at += n;
        rest = tail;
    }
    Ok(())
}

/// Fills `buf` from absolute offset `offset` of `file` (in faulted-in
/// pieces: [`FAULT_PIECE`]).
#[cfg(unix)]
pub(crate) fn read_exact_at(file: &File, buf: &mut [u8], offset: u64) -> Result<()> {
    use std::os::unix::fs::FileExt;
    let len = buf.len();
    in_fault_pieces(buf, |piece, at| {
        file.read_exact_at(piece, offset.saturating_add(at as u64))
            .map_err(|e| Error::io(format!("cannot read {len} bytes at offset {offset}"), e))
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

/// Writes all of `buf` at absolute offset `offset` of `file` (`pwrite`:
/// the file's position is not used, so several threads may write parts of
/// one file at once).
#[cfg(unix)]
pub(crate) fn write_all_at(file: &File, buf: &[u8], offset: u64) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    file.write_all_at(buf, offset)
}

/// Writes all of `buf` at absolute offset `offset` of `file`.
#[cfg(windows)]
pub(crate) fn write_all_at(file: &File, mut buf: &[u8], mut offset: u64) -> std::io::Result<()> {
    use std::os::windows::fs::FileExt;
    while !buf.is_empty() {
        let n = file.seek_write(buf, offset)?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        buf = &buf[n..];
        offset += n as u64;
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::source::read_header;
    use crate::testfs::{TempDir, TempFile};

    /// A read into a large buffer goes in pieces cut at multiples of
    /// [`FAULT_PIECE`] in the address space, covering the buffer once, in
    /// order; a buffer under one piece is one read.
    #[test]
    fn fault_pieces_cover_the_buffer_in_order_at_piece_boundaries() {
        let mut mem = vec![0u8; 3 * FAULT_PIECE + 5000];
        for (skip, len) in [
            (0usize, 3 * FAULT_PIECE),
            (4097, 2 * FAULT_PIECE + 123),
            (1, FAULT_PIECE),
            (7, FAULT_PIECE - 1),
            (3, 0),
        ] {
            let buf = &mut mem[skip..skip + len];
            let base = buf.as_ptr() as usize;
            let mut seen = Vec::new();
            in_fault_pieces(buf, |piece, at| {
                seen.push((at, piece.len(), piece.as_ptr() as usize));
                Ok(())
            })
            .unwrap();
            if len < FAULT_PIECE {
                assert_eq!(seen, vec![(0, len, base)]);
                continue;
            }
            let mut next = 0;
            for (i, &(at, n, addr)) in seen.iter().enumerate() {
                assert_eq!((at, addr), (next, base + next));
                assert!(n > 0 && n <= FAULT_PIECE);
                if i + 1 < seen.len() {
                    assert_eq!((addr + n) % FAULT_PIECE, 0, "piece {i} of {seen:?}");
                }
                next += n;
            }
            assert_eq!(next, len);
        }
    }

    /// Positioned reads in pieces give the file's bytes, at any alignment
    /// of the buffer and any offset, and a read past the end still fails.
    #[test]
    fn reads_in_fault_pieces_give_the_files_bytes() {
        let data: Vec<u8> = (0..3 * FAULT_PIECE + 9999)
            .map(|i| (i * 31 + i / 4096) as u8)
            .collect();
        let path = TempFile::with("pieces", &data);
        let file = File::open(&path).unwrap();
        let mut mem = vec![0u8; data.len() + 64];
        for (skip, offset, len) in [
            (0usize, 0usize, data.len()),
            (13, 77, 2 * FAULT_PIECE + 5),
            (4096, 1, FAULT_PIECE + 1),
        ] {
            let buf = &mut mem[skip..skip + len];
            read_exact_at(&file, buf, offset as u64).unwrap();
            assert!(buf == &data[offset..offset + len]);
        }
        let whole = &mut mem[..data.len()];
        assert!(read_exact_at(&file, whole, 1).is_err());
    }

    /// `cachestat` counts the cached pages of a range as `mincore` does,
    /// for ranges that start and end inside pages.
    #[cfg(target_os = "linux")]
    #[test]
    fn cachestat_counts_what_mincore_counts() {
        let data = vec![7u8; 1 << 20];
        let path = TempFile::with("cachestat", &data);
        let file = File::open(&path).unwrap();
        if !drop_cached(&file) {
            return; // a file system that keeps everything cached
        }
        advise_random(&file);
        let mut some = vec![0u8; 100_000];
        read_exact_at(&file, &mut some, 200_000).unwrap();
        let map = mmap::map_read_only(&file).unwrap();
        for (offset, len) in [
            (0u64, 1u64 << 20),
            (150_000, 300_000),
            (4096 * 50, 4096),
            (5, 1),
            (204_790, 20),
            (4095, 2),
        ] {
            let by_mincore = mmap::resident_pages(&map, offset as usize, len as usize);
            if let Some(counts) = sys::cachestat(&file, offset, len, 4096) {
                assert_eq!(Some(counts), by_mincore, "{offset} {len}");
            }
        }
        assert_eq!(sys::cachestat(&file, 10, 0, 4096), Some((0, 0)));
    }

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

    /// A failed open names a FIFO, socket or device as what it is, and
    /// passes any other failure (of a regular file, a folder, a missing
    /// path) on as the operating system's error.
    #[cfg(unix)]
    #[test]
    fn failed_opens_keep_the_systems_error_for_files_and_folders() {
        let dir = TempDir::new("io-refused");
        let file = dir.join("f.safetensors");
        std::fs::write(&file, b"x").unwrap();
        let denied = || std::io::Error::from(std::io::ErrorKind::PermissionDenied);
        for path in [file.as_path(), &dir, &dir.join("missing")] {
            match refused_open(path, denied()) {
                Error::Io { source, .. } => {
                    assert_eq!(
                        source.kind(),
                        std::io::ErrorKind::PermissionDenied,
                        "{path:?}"
                    )
                }
                other => panic!("{path:?}: {other}"),
            }
        }
        let err = refused_open(Path::new("/dev/null"), denied());
        assert_eq!(err.rule(), "not-regular-file");
    }

    #[test]
    fn header_read_checks_the_prefix() {
        let path = TempFile::with("io-prefix", &[2u8, 0, 0, 0, 0, 0, 0, 0, b'{', b'}']);
        let f = open(&path).unwrap();
        assert_eq!(read_header(&f, 100).unwrap(), (2, b"{}".to_vec()));
        assert_eq!(read_header(&f, 1).unwrap_err().rule(), "header-too-large");
        assert_eq!(f.read_range(8, 100).unwrap(), b"{}".to_vec());
        std::fs::write(&path, [1u8; 4]).unwrap();
        let f = open(&path).unwrap();
        assert_eq!(read_header(&f, 100).unwrap_err().rule(), "file-too-short");
    }

    #[cfg(unix)]
    #[test]
    fn fifos_sockets_and_devices_are_refused_without_blocking() {
        let dir = TempDir::new("io-nonreg");
        let fifo = dir.join("pipe.safetensors");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        assert!(made.unwrap().success());
        let sock = dir.join("sock.safetensors");
        let _listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        for (path, kind) in [
            (fifo.as_path(), "FIFO"),
            (sock.as_path(), "socket"),
            (Path::new("/dev/null"), "character device"),
        ] {
            // Opening a FIFO with no writer would block forever without
            // O_NONBLOCK: this returns at once.
            let err = open(path).unwrap_err();
            assert_eq!(err.rule(), "not-regular-file", "{path:?}");
            assert!(err.to_string().contains(kind), "{err}");
        }
    }

    #[test]
    fn changes_after_open_are_noticed() {
        let path = TempFile::with("io-chg", &[2u8, 0, 0, 0, 0, 0, 0, 0, b'{', b'}']);
        let f = open(&path).unwrap();
        check_unchanged(&f.file, &f.stamp).unwrap();
        // Replaced by a rename: the open descriptor keeps the old file.
        let other = TempFile::with("io-chg-new", &[0u8; 3]);
        std::fs::rename(&other, &path).unwrap();
        check_unchanged(&f.file, &f.stamp).unwrap();
        let g = open(&path).unwrap();
        // Truncated in place.
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(1)
            .unwrap();
        let err = check_unchanged(&g.file, &g.stamp).unwrap_err();
        assert_eq!(err.rule(), "file-changed");
        assert!(err.to_string().contains("from 3 to 1 bytes"), "{err}");
        // A read past the new end says so too.
        let mut buf = [0u8; 2];
        assert_eq!(
            g.read_exact_at(&mut buf, 0).unwrap_err().rule(),
            "file-changed"
        );
    }

    #[test]
    fn impossible_allocations_are_errors() {
        let err = zeroed(u64::MAX, "big").unwrap_err();
        assert_eq!(err.rule(), "out-of-memory");
        assert_eq!(err.tensor(), Some("big"));
        let err = zeroed(1 << 62, "").unwrap_err();
        assert_eq!(err.rule(), "out-of-memory");
        assert_eq!(zeroed(3, "").unwrap(), vec![0u8; 3]);
    }

    /// The open flags of `file` as the kernel reports them.
    #[cfg(target_os = "linux")]
    fn open_flags(file: &File) -> u32 {
        use std::os::unix::io::AsRawFd;
        let info =
            std::fs::read_to_string(format!("/proc/self/fdinfo/{}", file.as_raw_fd())).unwrap();
        let line = info.lines().find(|l| l.starts_with("flags:")).unwrap();
        u32::from_str_radix(line["flags:".len()..].trim(), 8).unwrap()
    }

    #[cfg(unix)]
    #[test]
    fn stamps_are_the_files_own() {
        use std::os::unix::fs::MetadataExt;
        let s = TempFile::with("stamp", &[7u8; 13]);
        let f = open(&s.0).unwrap();
        let meta = std::fs::metadata(&s.0).unwrap();
        let (len, sec, nsec, dev, ino) = sys::fstat_stamp(&f.file).unwrap();
        assert_eq!((len, sec, nsec), (13, meta.mtime(), meta.mtime_nsec()));
        assert_eq!((dev, ino), (meta.dev(), meta.ino()));
        assert_eq!(f.len, 13);
        assert_eq!(
            f.stamp,
            Stamp {
                len: 13,
                modified: (sec, nsec),
                dev,
                ino
            }
        );
    }

    #[test]
    fn each_change_is_named() {
        let at_open = Stamp {
            len: 10,
            modified: (5, 6),
            dev: 1,
            ino: 2,
        };
        let with = |f: &dyn Fn(&mut Stamp)| {
            let mut s = at_open;
            f(&mut s);
            at_open.change(&s)
        };
        assert_eq!(with(&|_| {}), None);
        let other = Some("the open file is no longer the same file".to_owned());
        assert_eq!(with(&|s| s.dev = 9), other);
        assert_eq!(with(&|s| s.ino = 9), other);
        assert_eq!(
            with(&|s| {
                s.ino = 9;
                s.len = 3
            }),
            other
        );
        assert_eq!(
            with(&|s| {
                s.len = 3;
                s.modified = (0, 0)
            }),
            Some("its length changed from 10 to 3 bytes".to_owned())
        );
        let modified = Some("it was modified (its modification time changed)".to_owned());
        assert_eq!(with(&|s| s.modified = (5, 7)), modified);
        assert_eq!(with(&|s| s.modified = (4, 6)), modified);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn blocking_mode_is_restored_and_nothing_else_changes() {
        use std::os::unix::fs::OpenOptionsExt;
        let s = TempFile::with("nonblock", b"abc");
        let nonblocking = File::options()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&s.0)
            .unwrap();
        let before = open_flags(&nonblocking);
        let nonblock = libc::O_NONBLOCK as u32;
        assert_eq!(before & nonblock, nonblock);
        sys::clear_nonblock(&nonblocking).unwrap();
        assert_eq!(open_flags(&nonblocking), before & !nonblock);
        let blocking = File::open(&s.0).unwrap();
        let before = open_flags(&blocking);
        sys::clear_nonblock(&blocking).unwrap();
        assert_eq!(open_flags(&blocking), before);
        // What `open` hands out reads in blocking mode.
        let f = open(&s.0).unwrap();
        assert_eq!(open_flags(&f.file) & nonblock, 0);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn unnamed_files_get_their_name_once() {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let dir = std::env::temp_dir();
        let mut unnamed = File::options()
            .read(true)
            .write(true)
            .custom_flags(libc::O_TMPFILE)
            .open(&dir)
            .unwrap();
        unnamed.write_all(b"named at last").unwrap();
        let target = TempFile::named("io-linked");
        link_unnamed(&unnamed, &target.0).unwrap();
        assert_eq!(std::fs::read(&target.0).unwrap(), b"named at last");
        // The name exists now: a second link fails and changes nothing.
        let err = link_unnamed(&unnamed, &target.0).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::AlreadyExists);
        let err = link_unnamed(&unnamed, Path::new("a\0b")).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
        assert_eq!(std::fs::read(&target.0).unwrap(), b"named at last");
    }

    #[test]
    fn zeroed_buffers_and_their_limits() {
        assert_eq!(sys::try_zeroed(0), Some(Vec::new()));
        assert_eq!(sys::try_zeroed(5), Some(vec![0u8; 5]));
        assert_eq!(sys::try_zeroed(usize::MAX), None);
        assert_eq!(sys::try_zeroed(isize::MAX as usize), None);
        let big = sys::try_zeroed(3 << 20).unwrap();
        assert_eq!(big.len(), 3 << 20);
        assert!(big.iter().all(|&b| b == 0));
        assert_eq!(zeroed(0, "t").unwrap(), Vec::<u8>::new());
        let err = zeroed(u64::MAX, "t").unwrap_err();
        assert!(
            matches!(err, Error::OutOfMemory { bytes: u64::MAX, ref tensor } if tensor == "t"),
            "{err:?}"
        );
    }

    #[test]
    fn ranges_are_clipped_to_the_file() {
        let s = TempFile::with("range", b"0123456789");
        let f = open(&s.0).unwrap();
        assert_eq!(f.read_range(2, 3).unwrap(), b"234");
        assert_eq!(f.read_range(7, 100).unwrap(), b"789");
        assert_eq!(f.read_range(7, u64::MAX).unwrap(), b"789");
        assert_eq!(f.read_range(10, 5).unwrap(), b"");
        assert_eq!(f.read_range(u64::MAX, 5).unwrap(), b"");
        assert_eq!(f.read_range(0, 0).unwrap(), b"");
        let mut buf = [0u8; 4];
        f.read_exact_at(&mut buf, 6).unwrap();
        assert_eq!(&buf, b"6789");
        let err = f.read_exact_at(&mut buf, 7).unwrap_err();
        assert!(
            err.to_string().contains("cannot read 4 bytes at offset 7"),
            "{err}"
        );
    }

    #[test]
    fn headers_at_the_file_boundaries() {
        // A header that fills the file exactly, and one a byte longer.
        let s = TempFile::with("hdr", &[3u8, 0, 0, 0, 0, 0, 0, 0, b'{', b'}', b' ']);
        let f = open(&s.0).unwrap();
        assert_eq!(read_header(&f, 3).unwrap(), (3, b"{} ".to_vec()));
        let s = TempFile::with("hdr-long", &[4u8, 0, 0, 0, 0, 0, 0, 0, b'{', b'}', b' ']);
        let f = open(&s.0).unwrap();
        assert_eq!(read_header(&f, 100).unwrap_err().rule(), "header-past-end");
        let s = TempFile::with("hdr-8", &[0u8; 8]);
        let f = open(&s.0).unwrap();
        assert_eq!(
            read_header(&f, 100).unwrap_err().rule(),
            "header-length-zero"
        );
        let s = TempFile::with("hdr-7", &[1u8; 7]);
        let f = open(&s.0).unwrap();
        let err = read_header(&f, 100).unwrap_err();
        assert!(matches!(err, Error::FileTooShort { len: 7 }), "{err:?}");
    }

    #[cfg(unix)]
    #[test]
    fn kinds_of_files_in_words() {
        let dir = std::fs::metadata(std::env::temp_dir()).unwrap();
        assert_eq!(file_kind(&dir), "a folder");
        let null = std::fs::metadata("/dev/null").unwrap();
        assert_eq!(file_kind(&null), "a character device");
        let s = TempFile::with("kind", b"");
        let regular = std::fs::metadata(&s.0).unwrap();
        assert_eq!(file_kind(&regular), "not a regular file");
        let err = open(Path::new("/nonexistent/fastst")).unwrap_err();
        assert!(
            matches!(err, Error::Io { ref source, .. } if source.kind() == std::io::ErrorKind::NotFound),
            "{err:?}"
        );
        assert_eq!(is_a_directory().raw_os_error(), Some(21));
    }
}
