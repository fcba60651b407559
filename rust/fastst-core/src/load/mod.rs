//! Whole loads into memory the caller owns: many tensors read (and, where
//! asked, converted) into destinations allocated beforehand, in one call.
//!
//! The tensors are read in file order by a small pool of threads, in large
//! requests (pieces of a few MiB that may split a tensor; runs of small
//! tensors that follow each other in the file are read with one request).
//! Copies land straight in their destination (a positioned read into fresh
//! memory also faults it in, on the reading thread); conversions read a
//! piece into a per-thread buffer and convert it there, while it is warm.
//! Every read is positioned (never through a mapping: a file truncated
//! underneath gives rule `file-changed`, never SIGBUS), and the file's
//! stamp is checked before each piece.
//!
//! With [`LoadOptions::direct`], pieces whose pages are not in the page
//! cache are read with `O_DIRECT` (Linux) into an aligned per-thread buffer
//! and copied from there: the page cache is neither filled nor polluted
//! (the glue asks for it only when [`direct_pays`]). A file system refusing direct I/O
//! (tmpfs, some FUSE and network file systems), or a read it rejects, falls
//! back to buffered reads without error.
//!
//! Progress is reported from the calling thread, never from the workers:
//! `report(done, total)` is called at most every [`LoadOptions::report_every`]
//! source bytes and once at the end. When it returns
//! [`ControlFlow::Break`], the workers stop before their next piece and the
//! load ends with [`Outcome::Stopped`]. While a reporter is given, workers
//! never run more than two report intervals ahead of the last report it
//! acknowledged, so a reporter that stops the load (or a file changed by
//! it) takes effect within a bounded amount of work.

use std::ops::ControlFlow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, PoisonError};
use std::time::Duration;

use crate::dtype::Dtype;
use crate::error::{Error, Result};
use crate::header::TensorInfo;
use crate::io::{self, DirectFile, DIRECT_ALIGN};
use crate::read::MappedFile;

/// One tensor to load and where it goes.
#[derive(Debug)]
pub struct Destination<'a> {
    /// The tensor (from the file's header).
    pub info: &'a TensorInfo,
    /// The dtype wanted: the tensor's own for a plain copy, another one for a
    /// conversion (see [`crate::convert::supported`]).
    pub to: Dtype,
    /// Exactly the tensor's byte length (copy) or converted length.
    pub dst: &'a mut [u8],
}

/// How a load is carried out.
#[derive(Clone, Copy, Debug)]
pub struct LoadOptions {
    /// Reading threads; 0 picks [`DEFAULT_THREADS`].
    pub threads: usize,
    /// Bytes per read request; 0 picks [`DEFAULT_PIECE`].
    pub piece: usize,
    /// Source bytes between two progress reports; 0 picks
    /// [`DEFAULT_REPORT_EVERY`].
    pub report_every: u64,
    /// Whether `O_DIRECT` may be used when the file is not cached.
    pub direct: bool,
    /// Whether destinations may be backed by transparent huge pages.
    pub huge_pages: HugePages,
}

/// Whether the destinations of a load may be backed by transparent huge
/// pages (numpy asks for them on its large arrays; torch does not).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum HugePages {
    /// Measured choice (the default): no huge pages when most of the file's
    /// data the load reads is not in the page cache (the load waits on the
    /// disk); the caller's advice is kept otherwise. Measured: with a cold
    /// page cache, huge-page destinations made copies and conversions
    /// slower; with a cached file, faster (the figures: `benches/README.md`,
    /// "Figures formerly in code comments", and the README, "Owned loads").
    #[default]
    Auto,
    /// Keep whatever the allocator of the destinations asked for.
    Keep,
    /// Ask the kernel not to use huge pages for every destination.
    Avoid,
}

/// Reading threads of a load: reads wait on the disk, not on a core, so
/// more threads than cores keep more requests in flight.
pub const DEFAULT_THREADS: usize = 4;

/// Bytes per read request (8 MiB).
pub const DEFAULT_PIECE: usize = 8 << 20;

/// Source bytes between two progress reports (64 MiB).
pub const DEFAULT_REPORT_EVERY: u64 = 64 << 20;

/// Tensors smaller than this are read in runs with their neighbours.
const SMALL: u64 = 1 << 20;

/// Conversions go through the kernels this many source bytes at a time
/// (below the kernels' own threading threshold, so they stay on the
/// reading thread).
const CONVERT_CHUNK: usize = 512 << 10;

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions {
            threads: 0,
            piece: 0,
            report_every: 0,
            direct: true,
            huge_pages: HugePages::Auto,
        }
    }
}

/// Whether uncached requests of a load of `file` should be read around the
/// page cache (the default of [`LoadOptions::direct`] the Python glue uses):
/// only for files larger than half the memory available, which the cache
/// could not keep anyway; smaller ones are read through it, so that the
/// next load of the same file finds it cached.
pub fn direct_pays(file: &MappedFile) -> bool {
    io::direct_pays(file.file_len())
}

/// How a load ended without error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Every destination is filled.
    Done,
    /// The reporter asked to stop; destinations are partly filled.
    Stopped,
}

/// A progress reporter: `(source bytes done, source bytes in all)`.
pub type Reporter<'r> = &'r mut dyn FnMut(u64, u64) -> ControlFlow<()>;

/// A tensor (or part of one) inside a read request.
#[derive(Debug)]
struct Member<'a> {
    info: &'a TensorInfo,
    to: Dtype,
    /// Source bytes.
    len: usize,
    dst: &'a mut [u8],
}

/// One read request: a contiguous range of the file's data section and the
/// tensors (or parts) it holds, in order.
#[derive(Debug)]
struct Part<'a> {
    /// Start in the data section.
    begin: u64,
    /// Source bytes.
    len: usize,
    members: Vec<Member<'a>>,
}

impl Part<'_> {
    /// True when the part is one plain copy that can be read straight into
    /// its destination.
    fn is_direct_copy(&self) -> bool {
        self.members.len() == 1 && self.members[0].to == self.members[0].info.dtype
    }
}

/// Checks every destination before anything is read: its length, and that
/// the conversion asked for exists.
fn check(dests: &[Destination<'_>]) -> Result<()> {
    for d in dests {
        let len = d.info.byte_len();
        if d.to == d.info.dtype {
            if d.dst.len() as u64 != len {
                return Err(Error::DestinationSize {
                    tensor: d.info.name.clone(),
                    what: "the destination",
                    expected: len,
                    got: d.dst.len() as u64,
                });
            }
        } else {
            crate::convert::check(&d.info.name, d.info.dtype, d.to, len, d.dst.len())?;
        }
    }
    Ok(())
}

/// Destinations smaller than this are left alone: a transparent huge page
/// (2 MiB on x86-64) cannot fit in them at an aligned address.
const HUGE_PAGE: usize = 2 << 20;

/// Applies the huge-page choice `how` to the destinations (before anything
/// touches them: the advice only governs pages faulted in later).
fn advise_destinations(file: &MappedFile, dests: &mut [Destination<'_>], how: HugePages) {
    let large = |d: &Destination<'_>| d.dst.len() >= HUGE_PAGE;
    let avoid = match how {
        HugePages::Keep => false,
        HugePages::Avoid => true,
        HugePages::Auto => dests.iter().any(large) && mostly_uncached(file, dests),
    };
    if avoid {
        for d in dests.iter_mut().filter(|d| large(d)) {
            io::advise_no_huge_pages(d.dst);
        }
    }
}

/// Whether fewer than half of the pages of the file's data that `dests`
/// read are in the page cache (the load will wait on the disk). `false`
/// when the kernel cannot tell.
fn mostly_uncached(file: &MappedFile, dests: &[Destination<'_>]) -> bool {
    let (Some(lo), Some(hi)) = (
        dests.iter().map(|d| d.info.begin).min(),
        dests.iter().map(|d| d.info.end).max(),
    ) else {
        return false;
    };
    let start = file.header().data_start() + lo;
    match file
        .local()
        .and_then(|raw| io::cached_pages(raw, start, hi - lo))
    {
        Some((cached, pages)) => cached.saturating_mul(2) < pages,
        None => false,
    }
}

/// Splits the destinations (in file order) into read requests of at most
/// `piece` source bytes.
fn plan(mut dests: Vec<Destination<'_>>, piece: usize) -> Vec<Part<'_>> {
    dests.sort_by_key(|d| d.info.begin);
    let mut parts: Vec<Part<'_>> = Vec::new();
    let mut run: Option<Part<'_>> = None;
    for d in dests {
        let len = d.info.byte_len();
        if len == 0 {
            continue;
        }
        if len < SMALL {
            let fits = run.as_ref().is_some_and(|r| {
                r.begin + r.len as u64 == d.info.begin && r.len + len as usize <= piece
            });
            if !fits {
                parts.extend(run.take());
            }
            let r = run.get_or_insert_with(|| Part {
                begin: d.info.begin,
                len: 0,
                members: Vec::new(),
            });
            r.len += len as usize;
            r.members.push(Member {
                info: d.info,
                to: d.to,
                len: len as usize,
                dst: d.dst,
            });
            continue;
        }
        parts.extend(run.take());
        let (fs, ts) = (elem_size(d.info.dtype), elem_size(d.to));
        // Whole source elements per piece; the destination is split to match.
        let src_piece = (piece / fs).max(1) * fs;
        let dst_piece = src_piece / fs * ts;
        let mut offset = 0u64;
        for dst in d.dst.chunks_mut(dst_piece) {
            let n = dst.len() / ts * fs;
            parts.push(Part {
                begin: d.info.begin + offset,
                len: n,
                members: vec![Member {
                    info: d.info,
                    to: d.to,
                    len: n,
                    dst,
                }],
            });
            offset += n as u64;
        }
    }
    parts.extend(run);
    parts
}

/// Bytes per element, 1 for the sub-byte kinds (only ever copied, as bytes).
fn elem_size(dtype: Dtype) -> usize {
    ((dtype.bits() / 8) as usize).max(1)
}

/// What the workers and the calling thread share.
struct Shared<'a> {
    queue: std::vec::IntoIter<Part<'a>>,
    /// Source bytes handed to workers so far.
    issued: u64,
    /// Workers take no new piece once `issued` reaches this.
    limit: u64,
    stop: bool,
    /// The first error, with the position of its piece in file order.
    error: Option<(u64, Error)>,
    /// Workers still running.
    running: usize,
}

/// Reads (and converts) every destination from `file`.
///
/// Fails before reading anything when a destination has the wrong length
/// (rule `destination-size`) or a conversion does not exist (rule
/// `conversion-not-allowed`); while reading, with rule `file-changed` when
/// the file changed since it was opened, and rule `out-of-memory` (naming
/// the tensor) when a reading buffer cannot be had.
pub fn load_into(
    file: &MappedFile,
    mut dests: Vec<Destination<'_>>,
    options: LoadOptions,
    mut report: Option<Reporter<'_>>,
) -> Result<Outcome> {
    check(&dests)?;
    file.check_unchanged()?;
    advise_destinations(file, &mut dests, options.huge_pages);
    let piece = match options.piece {
        0 => DEFAULT_PIECE,
        n => n,
    };
    let every = match options.report_every {
        0 => DEFAULT_REPORT_EVERY,
        n => n,
    };
    let parts = plan(dests, piece);
    let total: u64 = parts.iter().map(|p| p.len as u64).sum();
    let threads = match options.threads {
        0 => DEFAULT_THREADS,
        n => n,
    }
    .min(parts.len())
    .max(1);
    let largest = parts.iter().map(|p| p.len).max().unwrap_or(0);
    if let (Some(first), Some(raw)) = (parts.first(), file.local()) {
        io::advise_sequential_from(raw, file.header().data_start() + first.begin);
    }
    let direct = match file.local() {
        Some(raw) if options.direct && total >= SMALL => io::open_direct(raw),
        _ => None,
    };
    if parts.len() <= 1 {
        // One request (a single small tensor, most often): no thread.
        let reader = Reader {
            file,
            direct: direct.as_ref(),
            buffer_len: largest.max(CONVERT_CHUNK),
        };
        let mut buffer = None;
        for part in parts {
            reader.read(part, &mut buffer)?;
        }
        return Ok(finish(report, total));
    }
    let gate = report.is_some();
    let shared = Mutex::new(Shared {
        queue: parts.into_iter(),
        issued: 0,
        limit: if gate {
            every.saturating_mul(2)
        } else {
            u64::MAX
        },
        stop: false,
        error: None,
        running: threads,
    });
    let wake_workers = Condvar::new();
    let done = AtomicU64::new(0);
    let caller = std::thread::current();
    let ctx = Worker {
        reader: Reader {
            file,
            direct: direct.as_ref(),
            buffer_len: largest.max(CONVERT_CHUNK),
        },
        shared: &shared,
        wake_workers: &wake_workers,
        done: &done,
        caller: &caller,
    };
    let mut stopped = false;
    let panicked = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads).map(|_| s.spawn(|| ctx.run())).collect();
        let mut mark = 0u64;
        loop {
            let (running, halted) = {
                let g = shared.lock().unwrap_or_else(PoisonError::into_inner);
                (g.running, g.halted())
            };
            if running == 0 {
                break;
            }
            let now = done.load(Ordering::Acquire);
            if let Some(r) = report.as_mut() {
                if !halted && report_due(now, mark, every, total) {
                    mark = step_start(now, every);
                    let flow = r(now, total);
                    let mut g = shared.lock().unwrap_or_else(PoisonError::into_inner);
                    if flow.is_break() {
                        g.stop = true;
                        stopped = true;
                    } else {
                        g.limit = now.saturating_add(every.saturating_mul(2));
                    }
                    drop(g);
                    wake_workers.notify_all();
                    continue;
                }
            }
            std::thread::park_timeout(Duration::from_millis(50));
        }
        handles
            .into_iter()
            .map(|h| h.join().is_err())
            .fold(false, |a, b| a | b)
    });
    let error = shared
        .into_inner()
        .unwrap_or_else(PoisonError::into_inner)
        .error;
    if let Some((_, e)) = error {
        return Err(e);
    }
    if panicked {
        return Err(Error::WorkerFailed {
            task: "a parallel load",
        });
    }
    if stopped {
        return Ok(Outcome::Stopped);
    }
    Ok(finish(report, total))
}

/// The last report of a complete load: the reporter may still stop it (the
/// destinations are then not handed out).
fn finish(report: Option<Reporter<'_>>, total: u64) -> Outcome {
    match report.map(|r| r(total, total)) {
        Some(ControlFlow::Break(())) => Outcome::Stopped,
        _ => Outcome::Done,
    }
}

/// One reading thread's view of the load.
struct Worker<'s, 'a> {
    reader: Reader<'s>,
    shared: &'s Mutex<Shared<'a>>,
    wake_workers: &'s Condvar,
    done: &'s AtomicU64,
    caller: &'s std::thread::Thread,
}

/// What reading one request needs.
struct Reader<'s> {
    file: &'s MappedFile,
    direct: Option<&'s DirectFile>,
    /// Size of a per-thread buffer (the largest request).
    buffer_len: usize,
}

impl<'a> Worker<'_, 'a> {
    fn run(&self) {
        let mut buffer: Option<io::ReadBuffer> = None;
        while let Some((at, part)) = self.next() {
            match self.reader.read(part, &mut buffer) {
                Ok(n) => {
                    self.done.fetch_add(n, Ordering::AcqRel);
                }
                Err(e) => {
                    let mut g = self.shared.lock().unwrap_or_else(PoisonError::into_inner);
                    if g.error.as_ref().is_none_or(|(first, _)| at < *first) {
                        g.error = Some((at, e));
                    }
                    g.stop = true;
                    drop(g);
                    self.wake_workers.notify_all();
                }
            }
            self.caller.unpark();
        }
        let mut g = self.shared.lock().unwrap_or_else(PoisonError::into_inner);
        g.running -= 1;
        drop(g);
        self.caller.unpark();
    }

    /// The next request in file order, with its place in the file, or
    /// `None` when there is none left or the load stops.
    fn next(&self) -> Option<(u64, Part<'a>)> {
        let mut g = self.shared.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if g.stop {
                return None;
            }
            if g.issued < g.limit || g.queue.len() == 0 {
                let part = g.queue.next()?;
                g.issued += part.len as u64;
                return Some((part.begin, part));
            }
            g = self
                .wake_workers
                .wait(g)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }
}

impl Reader<'_> {
    /// Reads (and converts) one request; returns its source bytes.
    fn read(&self, mut part: Part<'_>, buffer: &mut Option<io::ReadBuffer>) -> Result<u64> {
        self.file.check_unchanged()?;
        let start = self.file.header().data_start() + part.begin;
        let len = part.len;
        if part.is_direct_copy() {
            let m = &mut part.members[0];
            if let Some(direct) = self.direct {
                let buf = self.buffer(buffer, &m.info.name)?;
                if let Some(range) = direct.read(start, len, buf.as_mut_slice()) {
                    let range = range.map_err(|e| self.file.read_failed(e))?;
                    m.dst.copy_from_slice(&buf.as_slice()[range]);
                    return Ok(len as u64);
                }
            }
            // Cached (or no direct I/O): straight into the destination.
            self.file.read_at(start, m.dst, &m.info.name)?;
            return Ok(len as u64);
        }
        let buf = self.buffer(buffer, &part.members[0].info.name)?;
        let src = self.fill(start, len, buf, &part.members[0].info.name)?;
        let mut at = 0usize;
        for m in &mut part.members {
            let bytes = &src[at..at + m.len];
            at += m.len;
            if m.to == m.info.dtype {
                m.dst.copy_from_slice(bytes);
            } else {
                let (fs, ts) = (elem_size(m.info.dtype), elem_size(m.to));
                let per = (CONVERT_CHUNK / fs).max(1);
                for (s, d) in bytes.chunks(per * fs).zip(m.dst.chunks_mut(per * ts)) {
                    crate::convert::convert(m.info.dtype, m.to, s, d)?;
                }
            }
        }
        Ok(len as u64)
    }

    /// This thread's reading buffer, allocated on first use (rule
    /// `out-of-memory` naming `tensor` when it cannot be had).
    fn buffer<'b>(
        &self,
        buffer: &'b mut Option<io::ReadBuffer>,
        tensor: &str,
    ) -> Result<&'b mut io::ReadBuffer> {
        match buffer {
            Some(b) => Ok(b),
            None => Ok(buffer.insert(io::ReadBuffer::new(
                self.buffer_len + 2 * DIRECT_ALIGN as usize,
                tensor,
            )?)),
        }
    }

    /// Reads `len` bytes at absolute offset `start` into `buf`, directly
    /// when a direct descriptor is open (falling back to a buffered read
    /// where the file system refuses it), and returns them.
    fn fill<'b>(
        &self,
        start: u64,
        len: usize,
        buf: &'b mut io::ReadBuffer,
        tensor: &str,
    ) -> Result<&'b [u8]> {
        if let Some(direct) = self.direct {
            if let Some(range) = direct.read(start, len, buf.as_mut_slice()) {
                let range = range.map_err(|e| self.file.read_failed(e))?;
                return Ok(&buf.as_slice()[range]);
            }
        }
        let out = &mut buf.as_mut_slice()[..len];
        self.file.read_at(start, out, tensor)?;
        Ok(out)
    }
}

/// The start of the reporting step `done` is in (`every` > 0): a load
/// reports again once a whole step past it is done, so that a report that
/// came late (the caller ran late) does not push the later ones back.
fn step_start(done: u64, every: u64) -> u64 {
    done - done % every
}

/// Whether a report is due while a load runs: `done` is a whole step past
/// `mark`, the step start of the last report, and not yet the end (the
/// end is reported once, by [`finish`], after every worker has stopped).
fn report_due(done: u64, mark: u64, every: u64, total: u64) -> bool {
    done >= mark.saturating_add(every) && done < total
}

impl Shared<'_> {
    /// True once the load ends early: a read failed, or the reporter said
    /// stop. Nothing more is reported then.
    fn halted(&self) -> bool {
        self.error.is_some() || self.stop
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::read::OpenOptions;
    use crate::testfs::build;
    use crate::Backend;

    /// Pseudo-random bytes (xorshift), every bit pattern likely.
    fn noise(n: usize, mut x: u64) -> Vec<u8> {
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 24) as u8
            })
            .collect()
    }

    /// A file with tensors of every byte-sized dtype, odd sizes, empty
    /// tensors and runs of small ones; returns it and its data section.
    fn sample() -> (crate::testfs::TempFile, Vec<u8>, Vec<(String, Dtype, u64)>) {
        let mut entries = Vec::new();
        let mut specs: Vec<(String, Dtype, u64)> = Vec::new();
        let kinds = [
            Dtype::Bf16,
            Dtype::F16,
            Dtype::F32,
            Dtype::U8,
            Dtype::I64,
            Dtype::F8E4M3,
            Dtype::F8E5M2,
            Dtype::F8E8M0,
            Dtype::C64,
            Dtype::Bool,
        ];
        let counts = [0u64, 1, 3, 7, 1000, 65_537, 300_001, 700_003];
        let mut off = 0u64;
        let mut i = 0;
        for (k, dt) in kinds.iter().enumerate() {
            for (c, &n) in counts.iter().enumerate() {
                if (k + c) % 3 == 2 && n > 1000 || n > 300_001 && k > 2 {
                    continue;
                }
                let len = n * (dt.bits() / 8);
                let name = format!("t{i:03}");
                i += 1;
                entries.push(format!(
                    r#""{name}":{{"dtype":"{}","shape":[{n}],"data_offsets":[{off},{}]}}"#,
                    dt.name(),
                    off + len
                ));
                specs.push((name, *dt, n));
                off += len;
            }
        }
        let header = format!("{{{}}}", entries.join(","));
        let data = noise(off as usize, 0x9e37_79b9_7f4a_7c15);
        (build(&header, &data), data, specs)
    }

    fn open(path: &std::path::Path, backend: Backend) -> MappedFile {
        MappedFile::open(
            path,
            OpenOptions {
                backend,
                ..OpenOptions::default()
            },
        )
        .unwrap()
    }

    /// What one tensor converted to `to` must be: the kernels over its
    /// whole bytes.
    fn expected(data: &[u8], info: &TensorInfo, to: Dtype) -> Vec<u8> {
        let src = &data[info.begin as usize..info.end as usize];
        if to == info.dtype {
            return src.to_vec();
        }
        let n = src.len() / (info.dtype.bits() / 8) as usize;
        let mut out = vec![0u8; n * (to.bits() / 8) as usize];
        crate::convert::convert(info.dtype, to, src, &mut out).unwrap();
        out
    }

    /// The dtype a tensor is loaded as: converted where a conversion
    /// exists, copied otherwise.
    fn target(dt: Dtype) -> Dtype {
        match dt {
            Dtype::F32 => Dtype::Bf16,
            d if crate::convert::supported(d, Dtype::F32) => Dtype::F32,
            d => d,
        }
    }

    #[test]
    fn batch_loads_are_exact_for_every_split_and_thread_count() {
        let (f, data, specs) = sample();
        for backend in [Backend::Mmap, Backend::Pread] {
            let file = open(&f.0, backend);
            for (threads, piece, direct, convert) in [
                (1, 4096 + 7, false, false),
                (3, 65_536, true, true),
                (8, 1 << 20, true, false),
                (0, 0, true, true),
                (2, 4099, false, true),
            ] {
                for cold in [false, true] {
                    if cold {
                        #[cfg(target_os = "linux")]
                        crate::io::drop_cached(file.raw());
                    }
                    let infos: Vec<&TensorInfo> = specs
                        .iter()
                        .map(|(n, _, _)| file.header().require(n).unwrap())
                        .collect();
                    let tos: Vec<Dtype> = infos
                        .iter()
                        .map(|t| if convert { target(t.dtype) } else { t.dtype })
                        .collect();
                    let mut outs: Vec<Vec<u8>> = infos
                        .iter()
                        .zip(&tos)
                        .map(|(t, to)| vec![0xA5u8; expected(&data, t, *to).len()])
                        .collect();
                    let dests = infos
                        .iter()
                        .zip(&tos)
                        .zip(outs.iter_mut())
                        .map(|((info, to), dst)| Destination { info, to: *to, dst })
                        .collect();
                    let options = LoadOptions {
                        threads,
                        piece,
                        report_every: 0,
                        direct,
                        huge_pages: if convert {
                            HugePages::Avoid
                        } else {
                            HugePages::Auto
                        },
                    };
                    assert_eq!(
                        load_into(&file, dests, options, None).unwrap(),
                        Outcome::Done
                    );
                    for ((info, to), out) in infos.iter().zip(&tos).zip(&outs) {
                        assert!(
                            *out == expected(&data, info, *to),
                            "{backend:?} {threads} {piece} {direct} {convert} {cold}: {}",
                            info.name
                        );
                    }
                }
            }
        }
    }

    /// Loads every tensor of `file` as its own dtype into fresh buffers.
    fn load_all(
        file: &MappedFile,
        options: LoadOptions,
        report: Option<Reporter<'_>>,
    ) -> Result<Outcome> {
        let infos = file.header().tensors();
        let mut outs: Vec<Vec<u8>> = infos
            .iter()
            .map(|t| vec![0u8; t.byte_len() as usize])
            .collect();
        let dests = infos
            .iter()
            .zip(outs.iter_mut())
            .map(|(info, dst)| Destination {
                info,
                to: info.dtype,
                dst,
            })
            .collect();
        load_into(file, dests, options, report)
    }

    /// Whether the memory mapping holding `addr` carries `MADV_NOHUGEPAGE`
    /// ("nh" among its VmFlags in /proc/self/smaps).
    #[cfg(target_os = "linux")]
    fn no_huge_pages_at(addr: usize) -> bool {
        crate::io::mmap::tests::smaps_field(addr, "VmFlags:")
            .split_whitespace()
            .any(|f| f == "nh")
    }

    /// Huge pages: `Avoid` advises every large destination, `Keep` none,
    /// `Auto` every one when the file's data is mostly not cached; small
    /// destinations are never touched.
    #[test]
    #[cfg(target_os = "linux")]
    fn huge_page_advice_follows_the_choice() {
        let n = 3 << 20; // elements: 6 MiB of BF16, 12 MiB as F32
        let small = 1024;
        let header = format!(
            r#"{{"b":{{"dtype":"BF16","shape":[{n}],"data_offsets":[0,{}]}},"s":{{"dtype":"BF16","shape":[{small}],"data_offsets":[{},{}]}}}}"#,
            2 * n,
            2 * n,
            2 * n + 2 * small
        );
        let data = noise(2 * n + 2 * small, 11);
        let f = build(&header, &data);
        let file = open(&f.0, Backend::Pread);
        let b = file.header().require("b").unwrap();
        let sm = file.header().require("s").unwrap();
        // Each case: (choice, convert, cold) -> advised?
        for (how, convert, cold, advised) in [
            (HugePages::Keep, true, true, false),
            (HugePages::Avoid, false, false, true),
            (HugePages::Auto, true, false, false),
            (HugePages::Auto, true, true, true),
            (HugePages::Auto, false, false, false),
            (HugePages::Auto, false, true, true),
        ] {
            let to = if convert { Dtype::F32 } else { Dtype::Bf16 };
            let width = if convert { 4 } else { 2 };
            // Mappings of their own, untouched (the allocator may hand out
            // memory an earlier case advised).
            let mut big = memmap2::MmapMut::map_anon(n * width).unwrap();
            let mut little = memmap2::MmapMut::map_anon(small * width).unwrap();
            let (big_at, little_at) = (big.as_ptr() as usize, little.as_ptr() as usize);
            if cold {
                if !crate::io::drop_cached(file.raw()) {
                    continue; // a file system that keeps everything cached
                }
            } else {
                let mut warm = vec![0u8; data.len()];
                file.read_at(file.header().data_start(), &mut warm, "b")
                    .unwrap();
            }
            let dests = vec![
                Destination {
                    info: b,
                    to,
                    dst: &mut big,
                },
                Destination {
                    info: sm,
                    to,
                    dst: &mut little,
                },
            ];
            let options = LoadOptions {
                huge_pages: how,
                ..LoadOptions::default()
            };
            assert_eq!(
                load_into(&file, dests, options, None).unwrap(),
                Outcome::Done
            );
            let middle = (big_at + big.len() / 2) / 4096 * 4096;
            assert_eq!(
                no_huge_pages_at(middle),
                advised,
                "{how:?} {convert} {cold}"
            );
            assert!(
                !no_huge_pages_at(little_at),
                "{how:?}: a small destination was advised"
            );
            assert!(big[..] == expected(&data, b, to)[..]);
            assert!(little[..] == expected(&data, sm, to)[..]);
        }
    }

    /// A file of tensors `(name, dtype, bytes)` laid out back to back.
    fn layout(tensors: &[(&str, Dtype, usize)]) -> (crate::testfs::TempFile, Vec<u8>) {
        let mut entries = Vec::new();
        let mut off = 0usize;
        for (name, dt, len) in tensors {
            let n = len / (dt.bits() / 8) as usize;
            entries.push(format!(
                r#""{name}":{{"dtype":"{}","shape":[{n}],"data_offsets":[{off},{}]}}"#,
                dt.name(),
                off + len
            ));
            off += len;
        }
        let data = noise(off, 5);
        (build(&format!("{{{}}}", entries.join(",")), &data), data)
    }

    /// One planned request: its start, its source bytes, and its members
    /// as `(tensor, source bytes, destination bytes)`.
    type Request = (u64, usize, Vec<(String, usize, usize)>);

    /// The requests `plan` makes for tensors `names` of `file` (converted
    /// to `to` where given): `(begin, source bytes, members)` each.
    fn requests(
        file: &MappedFile,
        names: &[&str],
        to: Option<Dtype>,
        piece: usize,
    ) -> Vec<Request> {
        let infos: Vec<&TensorInfo> = names
            .iter()
            .map(|n| file.header().require(n).unwrap())
            .collect();
        let mut outs: Vec<Vec<u8>> = infos
            .iter()
            .map(|t| {
                let to = to.unwrap_or(t.dtype);
                vec![0u8; t.byte_len() as usize / elem_size(t.dtype) * elem_size(to)]
            })
            .collect();
        let dests = infos
            .iter()
            .zip(outs.iter_mut())
            .map(|(info, dst)| Destination {
                info,
                to: to.unwrap_or(info.dtype),
                dst,
            })
            .collect();
        plan(dests, piece)
            .into_iter()
            .map(|p| {
                let members = p
                    .members
                    .iter()
                    .map(|m| (m.info.name.clone(), m.len, m.dst.len()))
                    .collect();
                (p.begin, p.len, members)
            })
            .collect()
    }

    fn m(name: &str, len: usize, dst: usize) -> (String, usize, usize) {
        (name.to_owned(), len, dst)
    }

    /// Small tensors that follow each other are one request, up to `piece`
    /// bytes exactly; a gap or a full request starts another; tensors of
    /// 1 MiB or more are requests of their own, split in whole elements.
    #[test]
    fn plan_runs_small_neighbours_and_splits_large_tensors() {
        let mib = 1 << 20;
        let (f, _) = layout(&[
            ("a", Dtype::U8, 100),
            ("b", Dtype::U8, 200),
            ("c", Dtype::U8, 700),
            ("d", Dtype::U8, mib - 1),
            ("e", Dtype::U8, mib),
            ("g", Dtype::F16, 3 * mib + 2),
        ]);
        let file = open(&f.0, Backend::Pread);
        // a + b fill a 300-byte request exactly; c does not fit in it.
        assert_eq!(
            requests(&file, &["c", "a", "b"], None, 300),
            vec![
                (0, 300, vec![m("a", 100, 100), m("b", 200, 200)]),
                (300, 700, vec![m("c", 700, 700)]),
            ]
        );
        // Without b, a and c are not neighbours.
        assert_eq!(
            requests(&file, &["a", "c"], None, 1 << 30),
            vec![
                (0, 100, vec![m("a", 100, 100)]),
                (300, 700, vec![m("c", 700, 700)])
            ]
        );
        // Just under 1 MiB joins the run; exactly 1 MiB is a request of its own.
        let d = file.header().require("d").unwrap().begin;
        assert_eq!(
            requests(&file, &["c", "d", "e"], None, 4 * mib),
            vec![
                (
                    300,
                    700 + mib - 1,
                    vec![m("c", 700, 700), m("d", mib - 1, mib - 1)]
                ),
                (d + mib as u64 - 1, mib, vec![m("e", mib, mib)]),
            ]
        );
        // A large F16 tensor converted to F32: pieces of whole elements (a
        // 7-byte piece reads 6 bytes), each destination twice as long.
        let g = file.header().require("g").unwrap().begin;
        let parts = requests(&file, &["g"], Some(Dtype::F32), mib + 1);
        assert_eq!(parts.len(), 4);
        for (i, (begin, len, members)) in parts.iter().enumerate() {
            let want = if i < 3 { mib } else { 2 };
            assert_eq!((*begin, *len), (g + (i * mib) as u64, want), "{i}");
            assert_eq!(members, &vec![m("g", want, 2 * want)], "{i}");
        }
        let odd = requests(&file, &["g"], Some(Dtype::F32), 7);
        assert_eq!(odd[0], (g, 6, vec![m("g", 6, 12)]));
        assert_eq!(odd.iter().map(|p| p.1).sum::<usize>(), 3 * mib + 2);
    }

    /// Huge-page advice for copies looks at the pages of the tensors
    /// loaded, not at the rest of the file.
    #[test]
    #[cfg(target_os = "linux")]
    fn huge_page_advice_looks_at_the_loaded_tensors_pages() {
        let big = 4 << 20;
        let (f, data) = layout(&[("a", Dtype::U8, big), ("b", Dtype::U8, big)]);
        let file = open(&f.0, Backend::Pread);
        let start = file.header().data_start();
        for (cached, load, advised) in [("a", "b", true), ("a", "a", false), ("b", "a", true)] {
            if !crate::io::drop_cached(file.raw()) {
                return; // a file system that keeps everything cached
            }
            // Read-ahead off: only the cached tensor's pages come in.
            crate::io::advise_random(file.raw());
            let info = file.header().require(cached).unwrap();
            let mut warm = vec![0u8; big];
            file.read_at(start + info.begin, &mut warm, cached).unwrap();
            let info = file.header().require(load).unwrap();
            let mut dst = memmap2::MmapMut::map_anon(big).unwrap();
            let at = dst.as_ptr() as usize + big / 2;
            let dests = vec![Destination {
                info,
                to: info.dtype,
                dst: &mut dst,
            }];
            assert_eq!(
                load_into(&file, dests, LoadOptions::default(), None).unwrap(),
                Outcome::Done
            );
            assert_eq!(
                no_huge_pages_at(at / 4096 * 4096),
                advised,
                "{cached} {load}"
            );
            assert!(dst[..] == data[info.begin as usize..info.end as usize]);
        }
    }

    /// Exactly half of the loaded range cached counts as cached: the
    /// destinations keep their huge pages.
    #[test]
    #[cfg(target_os = "linux")]
    fn half_cached_counts_as_cached() {
        let big = 4 << 20;
        let mut header = format!(
            r#"{{"a":{{"dtype":"U8","shape":[{big}],"data_offsets":[0,{big}]}},"b":{{"dtype":"U8","shape":[{big}],"data_offsets":[{big},{}]}}}}"#,
            2 * big
        );
        // Page-aligned data: the tensors cover whole pages.
        header.push_str(&" ".repeat(4096 - 8 - header.len()));
        let data = noise(2 * big, 3);
        let f = build(&header, &data);
        let file = open(&f.0, Backend::Pread);
        assert_eq!(file.header().data_start(), 4096);
        // a read with read-ahead off, after dropping everything: a cached,
        // b not.
        if !crate::io::drop_cached(file.raw()) {
            return; // a file system that keeps everything cached
        }
        crate::io::advise_random(file.raw());
        let mut first = vec![0u8; big];
        file.read_at(4096, &mut first, "a").unwrap();
        let infos = [
            file.header().require("a").unwrap(),
            file.header().require("b").unwrap(),
        ];
        let mut outs = [
            memmap2::MmapMut::map_anon(big).unwrap(),
            memmap2::MmapMut::map_anon(big).unwrap(),
        ];
        let at: Vec<usize> = outs.iter().map(|o| o.as_ptr() as usize + big / 2).collect();
        let dests = infos
            .iter()
            .zip(outs.iter_mut())
            .map(|(info, dst)| Destination {
                info,
                to: info.dtype,
                dst: &mut dst[..],
            })
            .collect();
        assert_eq!(
            load_into(&file, dests, LoadOptions::default(), None).unwrap(),
            Outcome::Done
        );
        for (i, at) in at.iter().enumerate() {
            assert!(!no_huge_pages_at(at / 4096 * 4096), "destination {i}");
        }
        assert!(outs[0][..] == data[..big] && outs[1][..] == data[big..]);
    }

    /// Direct reads (asked for, and the load at least 1 MiB) leave the
    /// page cache alone; buffered reads fill it.
    #[test]
    #[cfg(target_os = "linux")]
    fn direct_loads_bypass_the_page_cache_and_buffered_ones_fill_it() {
        let n = 8 << 20;
        // The tensor starts past the file's first pages, at no page boundary.
        let (f, data) = layout(&[("pad", Dtype::U8, (1 << 20) + 100), ("w", Dtype::U8, n)]);
        let file = open(&f.0, Backend::Pread);
        let start = file.header().data_start() + (1 << 20) + 100;
        let data = &data[(1 << 20) + 100..];
        for direct in [true, false] {
            if !crate::io::drop_cached(file.raw()) {
                return; // a file system that keeps everything cached
            }
            let info = file.header().require("w").unwrap();
            let mut dst = vec![0u8; n];
            let dests = vec![Destination {
                info,
                to: info.dtype,
                dst: &mut dst,
            }];
            let options = LoadOptions {
                direct,
                huge_pages: HugePages::Keep,
                ..LoadOptions::default()
            };
            assert_eq!(
                load_into(&file, dests, options, None).unwrap(),
                Outcome::Done
            );
            assert!(dst[..] == data[..]);
            let (cached, pages) = crate::io::cached_pages(file.raw(), start, n as u64).unwrap();
            if direct {
                assert!(
                    cached * 4 < pages,
                    "direct: {cached} of {pages} pages cached"
                );
            } else {
                assert!(
                    cached * 4 > pages * 3,
                    "buffered: {cached} of {pages} pages cached"
                );
            }
        }
    }

    /// Direct reads are asked for only for files the page cache could not
    /// keep: larger than half the memory available (a sparse file here).
    #[test]
    #[cfg(target_os = "linux")]
    fn direct_reads_pay_only_for_files_larger_than_half_the_memory() {
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap();
        let total: u64 = meminfo
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.trim().strip_suffix("kB"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap();
        let (small, _) = one_big(4096);
        assert!(!direct_pays(&open(&small.0, Backend::Pread)));
        let n = total * 1024 + 4096; // above all the memory there is
        let header = format!(r#"{{"w":{{"dtype":"U8","shape":[{n}],"data_offsets":[0,{n}]}}}}"#);
        let f = build(&header, &[]);
        let file = std::fs::OpenOptions::new().write(true).open(&f.0).unwrap();
        if file.set_len(8 + header.len() as u64 + n).is_err() {
            return; // a file system without sparse files of that size
        }
        drop(file);
        assert!(direct_pays(&open(&f.0, Backend::Pread)));
    }

    fn one_big(n: usize) -> (crate::testfs::TempFile, Vec<u8>) {
        let header = format!(r#"{{"w":{{"dtype":"U8","shape":[{n}],"data_offsets":[0,{n}]}}}}"#);
        let data = noise(n, 7);
        (build(&header, &data), data)
    }

    /// A worker leaves once every request is handed out, even when the
    /// bytes issued have reached the limit: the caller raises the limit
    /// only while reports are due, and the last bytes are never due (they
    /// were a hang when the last report set the limit to the total).
    #[test]
    fn a_worker_leaves_when_nothing_is_left_whatever_the_limit() {
        let (f, _) = one_big(1 << 10);
        let file = open(&f.0, Backend::Pread);
        for (queued, issued, limit) in [(0, 3, 3), (0, 5, 3), (0, 0, 0)] {
            let shared = Mutex::new(Shared {
                queue: Vec::with_capacity(queued).into_iter(),
                issued,
                limit,
                stop: false,
                error: None,
                running: 1,
            });
            let (wake_workers, done) = (Condvar::new(), AtomicU64::new(0));
            let caller = std::thread::current();
            let worker = Worker {
                reader: Reader {
                    file: &file,
                    direct: None,
                    buffer_len: 1,
                },
                shared: &shared,
                wake_workers: &wake_workers,
                done: &done,
                caller: &caller,
            };
            let (tx, rx) = std::sync::mpsc::channel();
            let waited = std::thread::scope(|s| {
                s.spawn(|| tx.send(worker.next().is_none()).unwrap());
                let got = rx.recv_timeout(Duration::from_secs(20));
                if got.is_err() {
                    // Let a waiting worker go, so the test fails, not hangs.
                    shared.lock().unwrap().stop = true;
                    wake_workers.notify_all();
                }
                got
            });
            assert_eq!(waited, Ok(true), "issued {issued}, limit {limit}");
        }
    }

    #[test]
    fn a_report_is_due_each_whole_step_until_the_end() {
        // Steps of 100 bytes, of 1000.
        assert!(!report_due(99, 0, 100, 1000));
        assert!(report_due(100, 0, 100, 1000));
        assert!(!report_due(199, 100, 100, 1000));
        assert!(report_due(200, 100, 100, 1000));
        assert!(report_due(999, 800, 100, 1000));
        // The end is `finish`'s to report, once.
        assert!(!report_due(1000, 900, 100, 1000));
        assert!(!report_due(1000, 0, 100, 1000));
        // No overflow near the top of the range.
        assert!(!report_due(u64::MAX - 1, u64::MAX - 10, 100, u64::MAX));
    }

    #[test]
    fn a_load_that_failed_or_was_stopped_is_halted() {
        let shared = |stop, error: Option<(u64, Error)>| Shared {
            queue: Vec::new().into_iter(),
            issued: 0,
            limit: 0,
            stop,
            error,
            running: 1,
        };
        assert!(!shared(false, None).halted());
        assert!(shared(true, None).halted());
        let failed = Error::WorkerFailed { task: "a test" };
        assert!(shared(false, Some((0, failed))).halted());
    }

    /// The `(done, total)` reports of a complete 3 MiB load in pieces of
    /// 64 KiB on two threads, reporting every `report_every` bytes.
    fn reports_of_a_3_mib_load(report_every: u64) -> Vec<(u64, u64)> {
        let (f, _) = one_big(3 << 20);
        let file = open(&f.0, Backend::Pread);
        let mut calls = Vec::new();
        let mut report = |d: u64, t: u64| {
            calls.push((d, t));
            ControlFlow::Continue(())
        };
        let options = LoadOptions {
            threads: 2,
            piece: 64 << 10,
            report_every,
            direct: false,
            huge_pages: HugePages::Keep,
        };
        let outcome = load_all(&file, options, Some(&mut report)).unwrap();
        assert_eq!(outcome, Outcome::Done);
        calls
    }

    /// A load with the default interval (64 MiB) reports a 3 MiB file once,
    /// at the end.
    #[test]
    fn the_default_interval_reports_a_small_load_at_the_end_only() {
        let calls = reports_of_a_3_mib_load(0);
        assert_eq!(calls, vec![(3 << 20, 3 << 20)]);
    }

    #[test]
    fn reports_are_due_a_step_after_the_step_the_last_one_came_in() {
        assert_eq!(step_start(0, 100), 0);
        assert_eq!(step_start(99, 100), 0);
        assert_eq!(step_start(100, 100), 100);
        assert_eq!(step_start(250, 100), 200);
        assert_eq!(step_start(7, 1), 7);
        assert_eq!(step_start(u64::MAX, 1 << 20), u64::MAX - ((1 << 20) - 1));
    }

    #[test]
    fn progress_is_reported_in_steps_and_at_the_end() {
        let calls = reports_of_a_3_mib_load(1 << 20);
        let total = 3u64 << 20;
        assert_eq!(calls.last(), Some(&(total, total)));
        // Workers wait two steps (plus one request) ahead of the last report,
        // so a report comes before the end however late this thread runs.
        assert!(calls.len() >= 2 && calls.len() <= 4, "{calls:?}");
        let mut last = 0;
        for (i, &(d, _)) in calls.iter().enumerate() {
            assert!(d > last && d - last <= (2 << 20) + (64 << 10), "{calls:?}");
            // At most one report per step crossed.
            if i + 1 < calls.len() {
                assert!(d >> 20 > last >> 20, "{calls:?}");
            }
            last = d;
        }
        assert!(calls.iter().all(|&(_, t)| t == total));
    }

    #[test]
    fn a_reporter_stops_the_load_within_two_intervals() {
        let (f, _) = one_big(8 << 20);
        let file = open(&f.0, Backend::Pread);
        let mut calls = 0;
        let mut report = |_: u64, _: u64| {
            calls += 1;
            ControlFlow::Break(())
        };
        let options = LoadOptions {
            threads: 3,
            piece: 64 << 10,
            report_every: 256 << 10,
            direct: false,
            huge_pages: HugePages::Keep,
        };
        let outcome = load_all(&file, options, Some(&mut report)).unwrap();
        assert_eq!(outcome, Outcome::Stopped);
        assert_eq!(calls, 1);
        // Requests as large as a step: the ones in flight when the reporter
        // says stop end past the next step, and still nothing is reported.
        let mut calls = 0;
        let mut report = |_: u64, _: u64| {
            calls += 1;
            ControlFlow::Break(())
        };
        let options = LoadOptions {
            piece: 256 << 10,
            ..options
        };
        // From the disk: the requests are still in flight at the report.
        #[cfg(target_os = "linux")]
        crate::io::drop_cached(file.raw());
        let outcome = load_all(&file, options, Some(&mut report)).unwrap();
        assert_eq!(outcome, Outcome::Stopped);
        assert_eq!(calls, 1);
        // Stopping at the end of a complete load also stops it.
        let (g, _) = one_big(1000);
        let small = open(&g.0, Backend::Pread);
        let mut report = |_: u64, _: u64| ControlFlow::Break(());
        let outcome = load_all(&small, LoadOptions::default(), Some(&mut report)).unwrap();
        assert_eq!(outcome, Outcome::Stopped);
    }

    #[test]
    fn a_file_truncated_during_a_load_is_reported() {
        for (backend, direct) in [(Backend::Mmap, true), (Backend::Pread, false)] {
            let (f, _) = one_big(4 << 20);
            let file = open(&f.0, backend);
            let path = f.0.clone();
            let mut report = |_: u64, _: u64| {
                std::fs::OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .unwrap()
                    .set_len(100)
                    .unwrap();
                ControlFlow::Continue(())
            };
            let options = LoadOptions {
                threads: 2,
                piece: 64 << 10,
                report_every: 256 << 10,
                direct,
                huge_pages: HugePages::Keep,
            };
            let err = load_all(&file, options, Some(&mut report)).unwrap_err();
            assert_eq!(err.rule(), "file-changed", "{err}");
        }
    }

    #[test]
    fn destinations_are_checked_before_reading() {
        let (f, _) = one_big(1000);
        let file = open(&f.0, Backend::Pread);
        let info = file.header().require("w").unwrap();
        let mut short = vec![0u8; 999];
        let err = load_into(
            &file,
            vec![Destination {
                info,
                to: info.dtype,
                dst: &mut short,
            }],
            LoadOptions::default(),
            None,
        )
        .unwrap_err();
        assert_eq!(err.rule(), "destination-size");
        let mut wide = vec![0u8; 4000];
        let err = load_into(
            &file,
            vec![Destination {
                info,
                to: Dtype::F32,
                dst: &mut wide,
            }],
            LoadOptions::default(),
            None,
        )
        .unwrap_err();
        assert_eq!(err.rule(), "conversion-not-allowed");
        assert_eq!(err.tensor(), Some("w"));
    }
}
