//! The writer's file sink: writes at the file's current end and, for a
//! durable save, gets the data to the device while the writer goes on
//! instead of all at once in the final `fsync`.
//!
//! Without that, a durable save of a large file is "write everything into
//! the page cache, then wait for all of it to reach the disk": the disk
//! idles while memory is filled, the writer idles while the disk works, the
//! kernel throttles a writer that piles up many dirty pages, and every page
//! of the cache it fills is fresh memory to allocate and later reclaim.
//!
//! A durable save therefore writes **directly** where the file system
//! allows it (`O_DIRECT`, Linux): the bytes are copied into page-aligned
//! buffers of [`DIRECT_CHUNK`] bytes, and a thread of the sink writes each
//! full buffer to the device while the writer fills the next
//! ([`DIRECT_BUFFERS`] buffers in all, so memory stays bounded by them). The
//! file's last partial block is written through the page cache once the
//! direct writes are done. The page cache is neither filled nor read: a
//! checkpoint written during training does not push the training data out
//! of memory.
//!
//! Where the file system refuses `O_DIRECT`, the sink writes through the
//! page cache and has the system write each window behind the writer
//! (`sync_file_range` `WRITE` every [`WINDOW`] bytes: start writeback, do not
//! wait; the window [`LAG`] windows behind is waited for), so writing and
//! writeback overlap and dirty pages stay bounded by about
//! `(LAG + 1) * WINDOW` bytes.
//!
//! Durability is the same either way: the commit calls `fsync` on the file
//! (which writes the tail, the file's metadata and flushes the device's
//! cache) before the rename, and on the folder after it.
//!
//! Where `sync_file_range` is not offered (other systems) or refused
//! (filesystems that answer `EINVAL`, `ENOSYS`, `EOPNOTSUPP`, `ESPIPE`;
//! also a passing `ENOMEM` or `EINTR`), the sink stops asking and the final `fsync` does all the work, as it
//! did before. Any other error of the call or of a write (the device failed
//! to write: `EIO`, `ENOSPC`...) is a write error: the save fails, the
//! temporary file is removed and the target is left as it was.

use std::fs::File;
use std::io::{self, Write};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::thread::JoinHandle;

use memmap2::MmapMut;

use crate::io::{set_direct, sync_range, write_all_at, SyncRange, DIRECT_ALIGN};

/// Bytes per direct write (a multiple of [`DIRECT_ALIGN`]), for every
/// durable writer: a sink's buffers, and the streaming writer's buffer per
/// tensor being written ([`super::LayoutWriter`]). 4 MiB writes measured
/// ahead of 1 MiB ones (fewer requests to a virtual disk), 8 MiB writes and
/// a third buffer no further (benches/README.md, "Sharded saves"), and each
/// buffer is memory a save holds.
pub const DIRECT_CHUNK: usize = 4 << 20;

/// Buffers of a direct sink: one being filled while the other is written.
pub const DIRECT_BUFFERS: usize = 2;

/// Bytes per writeback window: each window is handed to the device as the
/// writer leaves it.
pub const WINDOW: u64 = 8 << 20;

/// Windows in flight behind the writer before it waits for the oldest:
/// enough to keep a shared or virtual disk's queue busy (64 MiB), few
/// enough that dirty pages stay far below the kernel's throttling limits
/// and the final `fsync` waits for little.
pub const LAG: u64 = 8;

/// Where writeback of the bytes written so far stands.
#[derive(Debug)]
struct Overlap {
    /// Window size in bytes (a positive multiple of 4096).
    window: u64,
    /// Windows in flight before the writer waits.
    lag: u64,
    /// Writeback was started for `[0, started)`.
    started: u64,
    /// `[0, waited)` is on the device.
    waited: u64,
}

/// The destination of a save: a file written front to back, with optional
/// writeback behind the writer (see the module's documentation).
#[derive(Debug)]
pub struct FileSink<'f> {
    file: &'f File,
    /// Bytes written so far (the file's length once the sink is finished).
    pos: u64,
    overlap: Option<Overlap>,
    direct: Option<Direct>,
}

/// A direct sink's buffers and its writing thread.
#[derive(Debug)]
struct Direct {
    /// The buffer being filled, for the file's bytes from `pos - filled`.
    fill: MmapMut,
    filled: usize,
    /// Buffers back from the thread, ready to fill.
    free: Vec<MmapMut>,
    /// Buffers made so far (at most `buffers`).
    made: usize,
    buffers: usize,
    /// Buffers handed to the thread and not yet back.
    in_flight: usize,
    jobs: Option<SyncSender<(MmapMut, u64)>>,
    done: Receiver<io::Result<MmapMut>>,
    thread: Option<JoinHandle<()>>,
}

impl<'f> FileSink<'f> {
    /// A sink writing at the start of the empty `file`; with `overlap`, the
    /// data is written to the device behind the writer, a window of
    /// `WINDOW` bytes at a time with at most `LAG` windows in flight.
    pub fn new(file: &'f File, overlap: bool) -> FileSink<'f> {
        FileSink::with_window(file, overlap, WINDOW, LAG)
    }

    /// The sink of a durable save: direct writes of `chunk` bytes (rounded
    /// up to a multiple of [`DIRECT_ALIGN`]) through `buffers` buffers (at
    /// least 2) where the file system allows them, else
    /// [`FileSink::new`]`(file, true)`. `file` must be empty.
    pub fn durable(file: &'f File, chunk: usize, buffers: usize) -> FileSink<'f> {
        let mut sink = FileSink::new(file, true);
        sink.direct = Direct::start(file, chunk, buffers);
        if sink.direct.is_some() {
            sink.overlap = None;
        }
        sink
    }

    /// True while the sink writes around the page cache.
    pub fn direct(&self) -> bool {
        self.direct.is_some()
    }

    /// Writes what the sink still holds and waits for every write in
    /// flight; the file then holds every byte given to the sink. Call it
    /// once, after the last write.
    pub fn finish(&mut self) -> io::Result<()> {
        let Some(mut d) = self.direct.take() else {
            return Ok(());
        };
        d.drain()?;
        if d.filled > 0 {
            // The last partial block goes through the page cache (a direct
            // write must cover whole blocks); the commit's fsync writes it.
            set_direct(self.file, false)?;
            write_all_at(self.file, &d.fill[..d.filled], self.pos - d.filled as u64)?;
        }
        Ok(())
    }

    /// As [`FileSink::new`] with a chosen window size (rounded up to a
    /// multiple of 4096 bytes) and lag (at least 1).
    pub fn with_window(file: &'f File, overlap: bool, window: u64, lag: u64) -> FileSink<'f> {
        let window = window.max(1).div_ceil(4096).saturating_mul(4096);
        FileSink {
            file,
            pos: 0,
            overlap: overlap.then_some(Overlap {
                window,
                lag: lag.max(1),
                started: 0,
                waited: 0,
            }),
            direct: None,
        }
    }

    /// True while writeback behind the writer is on (it turns itself off
    /// where the system or filesystem does not offer it).
    pub fn overlapping(&self) -> bool {
        self.overlap.is_some()
    }

    /// Bytes written so far.
    pub fn position(&self) -> u64 {
        self.pos
    }

    /// Bytes known to be on the device (before the final `fsync`).
    pub fn on_device(&self) -> u64 {
        self.overlap.as_ref().map_or(0, |o| o.waited)
    }

    /// Runs one `sync_file_range`; `Ok(false)` when the system or the
    /// filesystem does not offer it (overlap then turns off).
    fn sync(&mut self, offset: u64, len: u64, how: SyncRange) -> io::Result<bool> {
        match sync_range(self.file, offset, len, how) {
            Ok(()) => Ok(true),
            Err(e) if unsupported(&e) => {
                self.overlap = None;
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    /// After a write: start writeback of the windows the writer has left,
    /// and wait for those more than `lag` windows behind.
    fn after_write(&mut self) -> io::Result<()> {
        let Some(o) = &self.overlap else {
            return Ok(());
        };
        let boundary = self.pos - self.pos % o.window;
        if boundary <= o.started {
            return Ok(());
        }
        let (start, lag_bytes, waited) = (o.started, o.lag.saturating_mul(o.window), o.waited);
        if !self.sync(start, boundary - start, SyncRange::Start)? {
            return Ok(());
        }
        let wait_to = boundary.saturating_sub(lag_bytes);
        if wait_to > waited && !self.sync(waited, wait_to - waited, SyncRange::Wait)? {
            return Ok(());
        }
        if let Some(o) = &mut self.overlap {
            o.started = boundary;
            o.waited = o.waited.max(wait_to);
        }
        Ok(())
    }
}

/// Errors that mean "not offered here", as opposed to a failed write.
fn unsupported(e: &io::Error) -> bool {
    if e.kind() == io::ErrorKind::Unsupported {
        return true;
    }
    #[cfg(unix)]
    if let Some(code) = e.raw_os_error() {
        // ENOMEM and EINTR cost nothing but the overlap either: the final
        // fsync still writes everything.
        return matches!(
            code,
            libc::EINVAL
                | libc::ENOSYS
                | libc::EOPNOTSUPP
                | libc::ESPIPE
                | libc::ENOMEM
                | libc::EINTR
        );
    }
    false
}

impl Direct {
    /// Switches `file` to direct writes and starts the writing thread;
    /// `None` (and the file as it was) where the file system refuses.
    fn start(file: &File, chunk: usize, buffers: usize) -> Option<Direct> {
        let align = usize::try_from(DIRECT_ALIGN).ok()?;
        let chunk = chunk.max(1).div_ceil(align).checked_mul(align)?;
        let fill = MmapMut::map_anon(chunk).ok()?;
        let writer = file.try_clone().ok()?;
        set_direct(file, true).ok()?;
        let buffers = buffers.max(2);
        let (jobs, todo) = sync_channel::<(MmapMut, u64)>(buffers);
        let (report, done) = sync_channel::<io::Result<MmapMut>>(buffers);
        let thread = std::thread::Builder::new()
            .name("fastst-write".to_owned())
            .spawn(move || write_jobs(&writer, &todo, &report));
        let Ok(thread) = thread else {
            let _ = set_direct(file, false);
            return None;
        };
        Some(Direct {
            fill,
            filled: 0,
            free: Vec::new(),
            made: 1,
            buffers,
            in_flight: 0,
            jobs: Some(jobs),
            done,
            thread: Some(thread),
        })
    }

    /// Waits for the next buffer the thread is done with.
    fn collect(&mut self) -> io::Result<MmapMut> {
        let back = self
            .done
            .recv()
            .map_err(|_| io::Error::other("the writing thread stopped"))?;
        self.in_flight -= 1;
        back
    }

    /// Hands the full buffer to the thread (to be written at `offset`) and
    /// takes an empty one.
    fn submit(&mut self, offset: u64) -> io::Result<()> {
        let next = match self.free.pop() {
            Some(buf) => buf,
            None if self.made < self.buffers => {
                let len = self.fill.len();
                self.made += 1;
                MmapMut::map_anon(len)?
            }
            None => self.collect()?,
        };
        let full = std::mem::replace(&mut self.fill, next);
        self.filled = 0;
        let jobs = self
            .jobs
            .as_ref()
            .ok_or_else(|| io::Error::other("the writing thread stopped"))?;
        jobs.send((full, offset))
            .map_err(|_| io::Error::other("the writing thread stopped"))?;
        self.in_flight += 1;
        Ok(())
    }

    /// Stops the thread once it has written everything handed to it; the
    /// first error of its writes, if any.
    fn drain(&mut self) -> io::Result<()> {
        self.jobs = None;
        let mut first = Ok(());
        while self.in_flight > 0 {
            match self.collect() {
                Ok(buf) => self.free.push(buf),
                Err(e) => {
                    first = Err(e);
                    break;
                }
            }
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        first
    }
}

impl Drop for Direct {
    fn drop(&mut self) {
        // A save that failed: the thread must not outlive the sink.
        let _ = self.drain();
    }
}

/// The writing thread of a direct sink: writes each buffer at its offset and
/// hands it back, or hands back the error and stops.
fn write_jobs(
    file: &File,
    todo: &Receiver<(MmapMut, u64)>,
    report: &SyncSender<io::Result<MmapMut>>,
) {
    while let Ok((buf, offset)) = todo.recv() {
        let written = write_chunk(file, &buf, offset);
        let failed = written.is_err();
        if report.send(written.map(|()| buf)).is_err() || failed {
            return;
        }
    }
}

/// Writes one full buffer at `offset` directly. A direct write that comes
/// back short (a file size limit, a full disk) leaves the rest unaligned,
/// which the next direct write refuses with `EINVAL`; so does a file system
/// that takes the flag but not the write. Either way the buffer is written
/// again through the page cache (the file leaves direct mode for good),
/// which then reports the real cause (`EFBIG`, `ENOSPC`...) or succeeds.
fn write_chunk(file: &File, buf: &[u8], offset: u64) -> io::Result<()> {
    match write_all_at(file, buf, offset) {
        Err(e) if e.kind() == io::ErrorKind::InvalidInput => {
            set_direct(file, false)?;
            write_all_at(file, buf, offset)
        }
        done => done,
    }
}

impl Write for FileSink<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if let Some(d) = &mut self.direct {
            let take = (d.fill.len() - d.filled).min(buf.len());
            d.fill[d.filled..d.filled + take].copy_from_slice(&buf[..take]);
            d.filled += take;
            self.pos += take as u64;
            if d.filled == d.fill.len() {
                let offset = self.pos - d.fill.len() as u64;
                d.submit(offset)?;
            }
            return Ok(take);
        }
        // Stop at the next window boundary, so that writeback starts as
        // soon as a window is complete even inside one large tensor.
        let take = match &self.overlap {
            Some(o) => {
                let room = o.window - self.pos % o.window;
                buf.len().min(usize::try_from(room).unwrap_or(usize::MAX))
            }
            None => buf.len(),
        };
        let n = (&*self.file).write(&buf[..take])?;
        self.pos += n as u64;
        self.after_write()?;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testfs::TempFile;

    fn temp_file(tag: &str) -> (TempFile, File) {
        let path = TempFile::named(&format!("writeback-{tag}"));
        let file = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .expect("create");
        (path, file)
    }

    fn pattern(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 7 + i / 4096) as u8).collect()
    }

    #[test]
    fn bytes_are_identical_around_the_window() {
        let w = 4096u64;
        for (k, total) in [0, 1, w - 1, w, w + 1, 3 * w, 7 * w + 5, 20 * w]
            .into_iter()
            .enumerate()
        {
            for part in [1usize, 100, 4096, 5000, 1 << 20] {
                let (path, file) = temp_file(&format!("id{k}-{part}"));
                let data = pattern(total as usize);
                let mut sink = FileSink::with_window(&file, true, w, 2);
                for chunk in data.chunks(part) {
                    sink.write_all(chunk).expect("write");
                }
                assert_eq!(sink.position(), total);
                // A regular file accepts sync_file_range on Linux (tmpfs
                // too, where it does nothing); elsewhere the sink falls back.
                assert_eq!(sink.overlapping(), cfg!(target_os = "linux"));
                if sink.overlapping() {
                    // Everything `lag` windows behind the writer is on the
                    // device already.
                    let boundary = total - total % w;
                    assert_eq!(sink.on_device(), boundary.saturating_sub(2 * w));
                }
                assert_eq!(
                    std::fs::read(&path).expect("read"),
                    data,
                    "{total} by {part}"
                );
            }
        }
    }

    /// With writeback on, the writer leaves no page more than `lag` windows
    /// behind it dirty or under writeback: it waited for them.
    #[cfg(target_os = "linux")]
    #[test]
    fn the_writer_waits_for_the_windows_lag_behind_it() {
        use crate::io::cache_state_of;
        let (path, file) = temp_file("waits");
        if !crate::io::drop_cached(&file) {
            return; // a file system that keeps its files in memory
        }
        let w = 64u64 << 10;
        let mut sink = FileSink::with_window(&file, true, w, 1);
        for (n, chunk) in pattern(4 << 20).chunks(100_000).enumerate() {
            sink.write_all(chunk).expect("write");
            let behind = sink.on_device();
            assert_eq!(
                behind,
                (sink.position() - sink.position() % w).saturating_sub(w)
            );
            if behind > 0 {
                let (_, dirty, writeback) =
                    cache_state_of(&file, 0, behind).expect("cachestat (Linux 6.5 or later)");
                assert_eq!(
                    (dirty, writeback),
                    (0, 0),
                    "after write {n}, {behind} bytes behind"
                );
            }
        }
        drop(path);
    }

    /// `FileSink::new` hands the device windows of 8 MiB and waits for
    /// those 8 windows (64 MiB) behind the writer: after 72 MiB, the first
    /// window is on the device.
    #[test]
    fn new_sinks_use_windows_of_8_mib_and_wait_64_mib_behind() {
        let (_path, file) = temp_file("defaults");
        let mut sink = FileSink::new(&file, true);
        let data = pattern(1 << 20);
        for _ in 0..71 {
            sink.write_all(&data).expect("write");
        }
        assert_eq!(sink.on_device(), 0);
        sink.write_all(&data).expect("write");
        if sink.overlapping() {
            assert_eq!(sink.on_device(), 8 << 20);
        }
    }

    #[test]
    fn window_is_rounded_to_pages_and_writes_stop_at_boundaries() {
        let (path, file) = temp_file("round");
        let mut sink = FileSink::with_window(&file, true, 1, 0);
        let data = pattern(10_000);
        // The first write stops at the first boundary (4096).
        assert_eq!(sink.write(&data).expect("write"), 4096);
        sink.write_all(&data[4096..]).expect("rest");
        assert_eq!(std::fs::read(&path).expect("read"), data);
        // Without overlap, one write takes everything.
        let (_path2, file2) = temp_file("plain");
        let mut plain = FileSink::new(&file2, false);
        assert!(!plain.overlapping());
        assert_eq!(plain.write(&data).expect("write"), data.len());
        assert_eq!(plain.on_device(), 0);
    }

    #[test]
    fn only_unsupported_errors_turn_overlap_off() {
        assert!(unsupported(&io::Error::from(io::ErrorKind::Unsupported)));
        #[cfg(unix)]
        {
            assert!(unsupported(&io::Error::from_raw_os_error(libc::EINVAL)));
            assert!(unsupported(&io::Error::from_raw_os_error(libc::ESPIPE)));
            assert!(unsupported(&io::Error::from_raw_os_error(libc::ENOMEM)));
            assert!(!unsupported(&io::Error::from_raw_os_error(libc::EIO)));
            assert!(!unsupported(&io::Error::from_raw_os_error(libc::ENOSPC)));
        }
        assert!(!unsupported(&io::Error::other("x")));
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_pipe_turns_overlap_off_and_keeps_writing() {
        // sync_file_range on a pipe answers ESPIPE: the sink falls back to
        // plain writes and loses nothing.
        let (reader, writer) = std::io::pipe().expect("pipe");
        let writer = File::from(std::os::fd::OwnedFd::from(writer));
        let data = pattern(3 * 4096 + 17);
        let mut sink = FileSink::with_window(&writer, true, 4096, 1);
        let feeder = std::thread::spawn(move || {
            let mut got = Vec::new();
            let mut reader = reader;
            std::io::Read::read_to_end(&mut reader, &mut got).expect("read");
            got
        });
        sink.write_all(&data).expect("write");
        assert!(!sink.overlapping());
        drop(writer);
        assert_eq!(feeder.join().expect("join"), data);
    }

    #[test]
    fn a_durable_sink_writes_the_same_bytes_around_its_chunks() {
        let c = 8192usize;
        for (k, total) in [0, 1, 4095, 4096, 4097, c, 3 * c, 5 * c + 17, 100_000]
            .into_iter()
            .enumerate()
        {
            for part in [1usize, 100, 5000, 1 << 20] {
                let (path, file) = temp_file(&format!("direct{k}-{part}"));
                let data = pattern(total);
                let mut sink = FileSink::durable(&file, c, 2);
                for chunk in data.chunks(part) {
                    sink.write_all(chunk).expect("write");
                }
                sink.finish().expect("finish");
                assert_eq!(sink.position(), total as u64);
                assert_eq!(
                    std::fs::read(&path).expect("read"),
                    data,
                    "{total} by {part}"
                );
            }
        }
    }

    /// Where the file system takes direct writes, the durable sink's whole
    /// chunks reach the device without passing through the page cache.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_durable_sink_leaves_the_page_cache_alone() {
        use crate::io::cache_state_of;
        let (path, file) = temp_file("direct-cache");
        let chunk = 64usize << 10;
        let mut sink = FileSink::durable(&file, chunk, 3);
        if !sink.direct() {
            return; // a file system without O_DIRECT (tmpfs before Linux 6.6)
        }
        assert!(!sink.overlapping());
        let data = pattern(16 * chunk + 100);
        sink.write_all(&data).expect("write");
        sink.finish().expect("finish");
        let Some((cached, _, _)) = cache_state_of(&file, 0, 16 * chunk as u64) else {
            return; // no cachestat/mincore answer here
        };
        assert_eq!(cached, 0, "whole chunks were written around the cache");
        assert_eq!(std::fs::read(&path).expect("read"), data);
    }

    /// A sink dropped before it finished (a save that failed) stops its
    /// thread and does not hang.
    #[test]
    fn a_durable_sink_dropped_midway_stops() {
        let (_path, file) = temp_file("direct-drop");
        let mut sink = FileSink::durable(&file, 8192, 2);
        sink.write_all(&pattern(100_000)).expect("write");
        drop(sink);
    }
}
