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
//! The path is chosen per load from what the page cache holds of the data
//! the load reads (`cachestat`, else `mincore`). Mostly cached: the pieces
//! are read through the cache as above. Mostly not (and with
//! [`LoadOptions::direct`]): the disk is the limit, so pieces whose pages
//! are not cached are read with `O_DIRECT` (Linux) by more threads
//! ([`LoadOptions::COLD_THREADS`], a deeper queue) into destinations backed by
//! 4 KiB pages, or transparent huge pages for as long as they measure
//! cheaper ([`HugePages::Auto`]): copies straight into their destination
//! (only the partial blocks at a tensor's ends go through a small
//! per-thread buffer, in the same vectored read), runs of small tensors and
//! conversions through a per-thread buffer; the page cache is neither filled nor polluted. A piece with
//! cached pages, a file system refusing direct I/O (tmpfs, some FUSE and
//! network file systems), or a read it rejects, is read through the cache
//! without error.
//!
//! Progress is reported from the calling thread, never from the workers:
//! `report(done, total)` is called at most every [`LoadOptions::report_every`]
//! source bytes and once at the end. When it returns
//! [`ControlFlow::Break`], the workers stop before their next piece and the
//! load ends with [`Outcome::Stopped`]. While a reporter is given, workers
//! never run more than two report intervals ahead of the last report it
//! acknowledged (or two rounds of requests, when a source asks for more in
//! flight: [`crate::source::Source::load_hint`]), so a reporter that stops
//! the load (or a file changed by it) takes effect within a bounded amount
//! of work.
//!
//! [`load_streaming`] also tells which destinations are filled, so that a
//! caller can hand them out while the rest is read: the workers record the
//! requests they finish, and the calling thread reports once before the
//! first read, again each time the run of finished requests from the start
//! of the file grows ([`LoadProgress::filled`]), and once more after a
//! failure (what was read before the failing request). Its reporter also
//! bounds the reads: each answer says how many source bytes, in file order
//! from the start of the load, the workers may take requests from (a
//! caller handing tensors out within a memory budget admits them as the
//! budget frees); a request that starts below the bound is read whole.
//! Read around the page cache and asked to keep in order
//! ([`LoadOptions::in_order`]), its requests are handed out at most a
//! little more than one per thread past the first one not read yet: a disk's scheduler serves requests in the order of
//! their place on the disk, and one that arrived after the head had moved
//! past it (threads race to submit) would wait, until its deadline, while
//! the load keeps sending requests ahead of it; with none left ahead it is
//! served next, and the tensors in file order keep coming.
//!
//! Here: the options, the checks made before anything is read, the
//! huge-page choice and the calling thread's part (progress, stopping,
//! the outcome); `plan` cuts the destinations into read requests, `worker`
//! reads them on the pool's threads.

use std::ops::ControlFlow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::Duration;

use crate::dtype::Dtype;
use crate::error::{Error, Result};
use crate::header::TensorInfo;
use crate::io;
use crate::parallel;
use crate::read::MappedFile;

use self::plan::{plan, plan_requests, Part};
use self::worker::{Buffers, Reader, Worker};

mod plan;
mod worker;

/// One tensor to load and where it goes.
#[derive(Debug)]
pub struct Destination<'a> {
    /// The tensor (from the file's header).
    pub info: &'a TensorInfo,
    /// The dtype wanted: the tensor's own for a plain copy, another one for a
    /// conversion (see [`crate::supported`]).
    pub to: Dtype,
    /// Exactly the tensor's byte length (copy) or converted length.
    pub dst: &'a mut [u8],
}

/// How a load is carried out.
#[derive(Clone, Copy, Debug)]
pub struct LoadOptions {
    /// Reading threads; 0 picks [`LoadOptions::DEFAULT_THREADS`].
    pub threads: usize,
    /// Bytes per read request; 0 picks [`LoadOptions::DEFAULT_PIECE`].
    pub piece: usize,
    /// Source bytes between two progress reports; 0 picks
    /// [`LoadOptions::DEFAULT_REPORT_EVERY`].
    pub report_every: u64,
    /// Whether `O_DIRECT` may be used when most of the data is not cached.
    pub direct: bool,
    /// Whether destinations may be backed by transparent huge pages.
    pub huge_pages: HugePages,
    /// Whether a streaming load read around the page cache hands its
    /// requests out at most a little more than one per thread past the
    /// first one not read (the files of a sharded checkpoint, loaded one
    /// after the other): see the module's documentation.
    pub in_order: bool,
    /// The bytes of the whole job this load is one part of (a prefetch
    /// plan read in several loads; 0: the load alone): [`HugePages::Auto`]
    /// decides for that size, the job's loads sharing one probe and trial.
    pub job: u64,
}

/// Whether the destinations of a load may be backed by transparent huge
/// pages (numpy asks for them on its large arrays; torch does not).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum HugePages {
    /// Measured choice (the default): 4 KiB pages (`MADV_NOHUGEPAGE`),
    /// except in a load that reads around the page cache (most of its data
    /// not cached, direct I/O open) into at least [`PROBED`] bytes, when a
    /// probe of the first faults ([`crate::probe_faults`]) finds huge pages
    /// clearly cheaper on this host at this moment (and no trial of the
    /// last few seconds found them dear): then destinations take huge
    /// pages (`MADV_HUGEPAGE`) for as long as they stay cheaper, the faults
    /// of each request timed before its read (on a virtual machine whose
    /// free memory the host takes back, the cheap huge pages run out
    /// part-way through a large load, and the rest cost several times what
    /// 4 KiB pages cost). A copy from the page cache into huge pages waits
    /// on the kernel finding and clearing each one. The figures:
    /// `benches/README.md`.
    #[default]
    Auto,
    /// Keep whatever the allocator of the destinations asked for.
    Keep,
    /// Ask the kernel not to use huge pages for every destination.
    Avoid,
}

/// Loads reading around the page cache into fewer bytes than this take
/// 4 KiB pages without probing (the probe faults in 16 MiB).
pub const PROBED: u64 = 256 << 20;

/// Tensors smaller than this are read in runs with their neighbours.
const SMALL: u64 = 1 << 20;

/// Conversions go through the kernels this many source bytes at a time
/// (below the kernels' own threading threshold, so they stay on the
/// reading thread).
const CONVERT_CHUNK: usize = 512 << 10;

impl LoadOptions {
    /// Reading threads of a load: reads wait on the disk, not on a core, so
    /// more threads than cores keep more requests in flight.
    pub const DEFAULT_THREADS: usize = 4;

    /// Reading threads of a load that reads around the page cache (the
    /// default when most of its data is not cached): direct reads skip the
    /// kernel's read-ahead, so the depth of the disk's queue is the number of
    /// reads in flight.
    pub const COLD_THREADS: usize = 16;

    /// Bytes per read request (8 MiB).
    pub const DEFAULT_PIECE: usize = 8 << 20;

    /// Source bytes between two progress reports (64 MiB).
    pub const DEFAULT_REPORT_EVERY: u64 = 64 << 20;
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions {
            threads: 0,
            piece: 0,
            report_every: 0,
            direct: true,
            huge_pages: HugePages::Auto,
            in_order: false,
            job: 0,
        }
    }
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

/// A streaming load's reporter ([`load_streaming`]): given where the load
/// stands, it stops it (`Break`) or answers the most source bytes, in file
/// order from the start of the load, that requests may start below
/// (`Continue(u64::MAX)`: no bound of its own). Called with every request
/// below its bound read, it must raise the bound or stop the load: the
/// load calls it again only once more is read.
pub type StreamReporter<'r> = &'r mut dyn FnMut(LoadProgress) -> ControlFlow<(), u64>;

/// Where a streaming load stands (see [`load_streaming`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoadProgress {
    /// Source bytes read so far.
    pub done: u64,
    /// Source bytes the load reads in all.
    pub total: u64,
    /// Every destination whose tensor ends at or before this offset in the
    /// data section is filled (`u64::MAX` once the load is complete).
    pub filled: u64,
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

/// One tensor of `file` copied (`to` its dtype) or converted into `dst`:
/// [`MappedFile::copy_tensor_into`] / [`MappedFile::convert_tensor_into`],
/// except for a source with a request shape of its own (a remote store,
/// where one small request per block would wait on the network in turn),
/// which goes through [`load_into`], following that shape.
pub fn tensor_into(file: &MappedFile, info: &TensorInfo, to: Dtype, dst: &mut [u8]) -> Result<()> {
    if file.load_hint().is_some() {
        let dests = vec![Destination { info, to, dst }];
        return load_into(file, dests, LoadOptions::default(), None).map(drop);
    }
    if to == info.dtype {
        file.copy_tensor_into(info, dst)
    } else {
        file.convert_tensor_into(info, to, dst)
    }
}

/// Rounds of requests a whole load of a remote source makes at least:
/// every request in flight gets several, so that streams that run slower
/// than others (a real network) do not leave the load waiting on them.
const ROUNDS: u64 = 4;

/// Bytes per request of a load of `total` bytes from a source that waits
/// on a network (`hint`): the hint's piece for a load that hands tensors
/// out as they arrive (the first ones come sooner); for a whole load,
/// larger ones, up to the hint's most, as long as every request in flight
/// still gets [`ROUNDS`] of them (fewer requests: each costs the server
/// and the client, and a round trip).
fn remote_piece(hint: crate::source::LoadHint, total: u64, stream: bool) -> usize {
    if stream {
        return hint.piece;
    }
    let share = total / (hint.threads.max(1) as u64).saturating_mul(ROUNDS);
    usize::try_from(share)
        .unwrap_or(usize::MAX)
        .clamp(hint.piece, hint.max_piece.max(hint.piece))
}

/// Destinations smaller than this are left alone: a transparent huge page
/// (2 MiB on x86-64) cannot fit in them at an aligned address.
const HUGE_PAGE: usize = 2 << 20;

/// Advises the destinations of a load 4 KiB pages, unless `how` keeps
/// what their allocator asked for (before anything touches them: the advice
/// only governs pages faulted in later). A huge-page trial advises them
/// again, one by one.
fn advise_destinations(dests: &mut [Destination<'_>], how: HugePages) {
    if how == HugePages::Keep || dests.iter().all(|d| d.dst.len() < HUGE_PAGE) {
        return;
    }
    let _changing = io::enter_changes();
    for d in dests.iter_mut().filter(|d| d.dst.len() >= HUGE_PAGE) {
        io::advise_huge_pages(d.dst, false);
    }
}

/// What [`HugePages::Auto`] chooses for a load of `total` bytes, part of
/// a job of `job` bytes (0: none), `direct` when it reads around the page
/// cache: a trial of huge pages only where the probe finds them clearly
/// cheaper ([`io::Trial`]) and no trial of the last few seconds found them
/// dear, else none (4 KiB pages). The loads of a job share one probe and
/// one trial ([`io::job_trial`]).
fn huge_page_trial(total: u64, job: u64, direct: bool) -> Option<Arc<io::Trial>> {
    if !direct || total.max(job) < PROBED || io::recently_dear() {
        return None;
    }
    if job > total {
        return io::job_trial();
    }
    io::probe_faults().and_then(io::Trial::after).map(Arc::new)
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
    range_uncached(file, lo..hi)
}

/// Whether fewer than half of the pages of `range` (offsets in the data
/// section) of a local file are in the page cache; `false` when the kernel
/// cannot tell or the source is not a local file.
fn range_uncached(file: &MappedFile, range: std::ops::Range<u64>) -> bool {
    file.cached_share(range)
        .is_some_and(|share| share < crate::read::MOSTLY_CACHED)
}

/// The cold/warm choice of every read of a local file that may go around
/// the page cache (whole loads, and the slices of a prefetch plan): a
/// direct descriptor when fewer than half of the pages of `range` (offsets
/// in the data section) are cached and the file system takes direct reads;
/// `None` (read through the page cache) otherwise. Each direct read still
/// falls back to the page cache where any of its own pages are cached.
pub(crate) fn around_cache(
    file: &MappedFile,
    range: std::ops::Range<u64>,
) -> Option<io::DirectFile> {
    match file.local() {
        Some(raw) if range_uncached(file, range) => io::open_direct(raw),
        _ => None,
    }
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
    error: Option<(usize, Error)>,
    /// Workers still running.
    running: usize,
    /// Which requests (by their place in file order) are read.
    finished: Vec<bool>,
    /// Requests starting before this offset in the data section read into
    /// a destination advised huge pages.
    huge_until: u64,
    /// The first request (in file order) not read yet.
    front: usize,
    /// Requests are handed out at most this many places past `front`
    /// (`usize::MAX`: no bound).
    ahead: usize,
    /// For a source that serves one read at a time
    /// ([`Source::one_read_at_a_time`](crate::source::Source::one_read_at_a_time)):
    /// the place in file order of the request whose read goes next. The
    /// reads take turns in file order (the first tensors are not held
    /// behind later reads that reached the source's lock first), and each
    /// thread converts its request after its turn, beside the next read.
    read_turn: Option<usize>,
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
    dests: Vec<Destination<'_>>,
    options: LoadOptions,
    report: Option<Reporter<'_>>,
) -> Result<Outcome> {
    match report {
        Some(r) => run(
            file,
            dests,
            options,
            Some(&mut |p| match r(p.done, p.total) {
                ControlFlow::Break(()) => ControlFlow::Break(()),
                ControlFlow::Continue(()) => ControlFlow::Continue(u64::MAX),
            }),
            false,
        ),
        None => run(file, dests, options, None, false),
    }
}

/// [`load_into`] reporting to `report` also before the first read, each
/// time more destinations are filled (in file order:
/// [`LoadProgress::filled`]), and, when a read fails, once more (its answer
/// ignored) before the error is returned; each answer bounds the reads
/// ([`StreamReporter`]).
pub fn load_streaming(
    file: &MappedFile,
    dests: Vec<Destination<'_>>,
    options: LoadOptions,
    report: StreamReporter<'_>,
) -> Result<Outcome> {
    run(file, dests, options, Some(report), true)
}

/// [`load_into`], reporting fills too when `stream`.
fn run(
    file: &MappedFile,
    mut dests: Vec<Destination<'_>>,
    options: LoadOptions,
    mut report: Option<StreamReporter<'_>>,
    stream: bool,
) -> Result<Outcome> {
    check(&dests)?;
    file.check_unchanged()?;
    let total: u64 = dests.iter().map(|d| d.info.byte_len()).sum();
    // A source's own shape (a remote object: many requests in flight)
    // replaces the defaults, not what the caller asked for.
    // Requests read through a buffer (runs of small tensors, conversions)
    // keep the smaller size: each reading thread holds one such buffer.
    let (hint_threads, hint_piece, buffered) = match file.load_hint() {
        Some(h) => (h.threads, remote_piece(h, total, stream), h.piece),
        None => (
            LoadOptions::DEFAULT_THREADS,
            LoadOptions::DEFAULT_PIECE,
            LoadOptions::DEFAULT_PIECE,
        ),
    };
    let (piece, buffered) = match options.piece {
        0 => (hint_piece, buffered),
        n => (n, n),
    };
    let every = match options.report_every {
        0 => LoadOptions::DEFAULT_REPORT_EVERY,
        n => n,
    };
    let direct = match file.local() {
        Some(raw) if options.direct && total >= SMALL && mostly_uncached(file, &dests) => {
            io::open_direct(raw)
        }
        _ => None,
    };
    // Every destination starts on 4 KiB pages; a trial advises huge pages
    // destination by destination as their first requests are handed out.
    let trial = match options.huge_pages {
        HugePages::Auto => huge_page_trial(total, options.job, direct.is_some()),
        _ => None,
    };
    advise_destinations(&mut dests, options.huge_pages);
    let data_start = file.header().data_start();
    let parts = match file.load_hint() {
        // Requests straight into the destinations, across tensors, on the
        // source's own part boundaries.
        Some(h) => plan_requests(dests, piece, h.piece, buffered, data_start),
        _ => plan(dests, piece, buffered, data_start),
    };
    let threads = match (options.threads, &direct) {
        (0, Some(_)) => LoadOptions::COLD_THREADS,
        (0, None) => hint_threads,
        (n, _) => n,
    }
    .min(parts.len())
    .max(1);
    if let (Some(first), Some(raw)) = (parts.first(), file.local()) {
        io::advise_sequential_from(raw, file.header().data_start() + first.begin);
    }
    // The reporter's bound on the source bytes read (a streaming load's).
    let mut most = u64::MAX;
    if let (true, Some(r)) = (stream, report.as_mut()) {
        let first = LoadProgress {
            done: 0,
            total,
            filled: parts.first().map_or(u64::MAX, |p| p.begin),
        };
        match r(first) {
            ControlFlow::Break(()) => return Ok(Outcome::Stopped),
            ControlFlow::Continue(bound) => most = bound,
        }
    }
    if parts.len() <= 1 {
        // One request (a single small tensor, most often): no thread.
        let reader = Reader {
            file,
            direct: direct.as_ref(),
            trial: None,
        };
        let mut buffers = Buffers::default();
        for part in parts {
            reader.read(part, &mut buffers, || ())?;
        }
        return Ok(finish(report, total));
    }
    let gate = report.is_some();
    // Workers run at most this far ahead of the last acknowledged report:
    // two report intervals, or two rounds of requests when more are in
    // flight at once (a remote source), so that the gate never idles them.
    let window = every.saturating_mul(2).max(
        (threads as u64)
            .saturating_mul(piece as u64)
            .saturating_mul(2),
    );
    let begins: Vec<u64> = parts.iter().map(|p| p.begin).collect();
    let shared = Mutex::new(Shared {
        queue: parts.into_iter(),
        issued: 0,
        limit: if gate { window.min(most) } else { u64::MAX },
        stop: false,
        error: None,
        running: threads,
        finished: vec![false; begins.len()],
        huge_until: 0,
        front: 0,
        ahead: if stream && options.in_order && direct.is_some() {
            threads + threads.div_ceil(4)
        } else {
            usize::MAX
        },
        read_turn: file.one_read_at_a_time().then_some(0),
    });
    let wake_workers = Condvar::new();
    let done = AtomicU64::new(0);
    let caller = std::thread::current();
    let ctx = Worker {
        reader: Reader {
            file,
            direct: direct.as_ref(),
            trial: trial.as_deref(),
        },
        shared: &shared,
        wake_workers: &wake_workers,
        done: &done,
        caller: &caller,
    };
    let mut stopped = false;
    // Requests finished from the start of the file, and as last reported.
    let (mut filled, mut told) = (0usize, 0usize);
    let work = || {
        ctx.run();
        Ok(())
    };
    let joined = parallel::fan_out_beside(threads, "a parallel load", work, || {
        let mut mark = 0u64;
        loop {
            let (running, halted) = {
                let g = shared.lock().unwrap_or_else(PoisonError::into_inner);
                filled = g.filled_from(filled);
                (g.running, g.halted())
            };
            if running == 0 {
                break;
            }
            let now = done.load(Ordering::Acquire);
            if let Some(r) = report.as_mut() {
                // The whole load is `finish`'s to report, once.
                let more = stream && filled > told && filled < begins.len();
                if !halted && (more || report_due(now, mark, every, total)) {
                    mark = step_start(now, every);
                    told = filled;
                    let flow = r(LoadProgress {
                        done: now,
                        total,
                        filled: filled_offset(&begins, filled),
                    });
                    let mut g = shared.lock().unwrap_or_else(PoisonError::into_inner);
                    match flow {
                        ControlFlow::Break(()) => {
                            g.stop = true;
                            stopped = true;
                        }
                        ControlFlow::Continue(bound) => {
                            most = bound;
                            g.limit = now.saturating_add(window).min(most);
                        }
                    }
                    drop(g);
                    wake_workers.notify_all();
                    continue;
                }
            }
            std::thread::park_timeout(Duration::from_millis(50));
        }
    });
    let mut shared = shared.into_inner().unwrap_or_else(PoisonError::into_inner);
    if let Some((_, e)) = shared.error.take() {
        if let (true, Some(r)) = (stream, report) {
            let filled = shared.filled_from(filled);
            let _ = r(LoadProgress {
                done: done.load(Ordering::Acquire),
                total,
                filled: filled_offset(&begins, filled),
            });
        }
        return Err(e);
    }
    // A worker that panicked (rule `worker-failed`).
    joined?;
    if stopped {
        return Ok(Outcome::Stopped);
    }
    Ok(finish(report, total))
}

/// The last report of a complete load: the reporter may still stop it (the
/// destinations are then not handed out).
fn finish(report: Option<StreamReporter<'_>>, total: u64) -> Outcome {
    let end = LoadProgress {
        done: total,
        total,
        filled: u64::MAX,
    };
    match report.map(|r| r(end)) {
        Some(ControlFlow::Break(())) => Outcome::Stopped,
        _ => Outcome::Done,
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

/// The offset in the data section below which the first `filled`
/// requests (of those starting at `begins`) hold every byte of the load.
fn filled_offset(begins: &[u64], filled: usize) -> u64 {
    begins.get(filled).copied().unwrap_or(u64::MAX)
}

impl Shared<'_> {
    /// True once the load ends early: a read failed, or the reporter said
    /// stop. Nothing more is reported then.
    fn halted(&self) -> bool {
        self.error.is_some() || self.stop
    }

    /// How many requests from the start of the file are finished, knowing
    /// that the first `from` are.
    fn filled_from(&self, from: usize) -> usize {
        from + self.finished[from..].iter().take_while(|&&f| f).count()
    }

    /// Whether the request at place `at` in file order may be handed out:
    /// it is within [`Shared::ahead`] places of the first request not read.
    fn within_reach(&self, at: usize) -> bool {
        at < self.front.saturating_add(self.ahead)
    }

    /// Whether the request at place `at` may start its read: its turn has
    /// come, or reads take no turns.
    fn may_read(&self, at: usize) -> bool {
        self.read_turn.is_none_or(|turn| turn >= at)
    }

    /// Records that the request at place `at` is read; true when that
    /// moved the first request not read (a waiting worker may go on).
    fn read(&mut self, at: usize) -> bool {
        self.finished[at] = true;
        let front = self.filled_from(self.front);
        let moved = front != self.front;
        self.front = front;
        moved
    }
}

#[cfg(test)]
mod tests;
