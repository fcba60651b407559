//! Reading a file's pages ahead of the code that will use them.
//!
//! Zero-copy loads hand out views of the file's pages; with a cold page
//! cache each first touch of a page then waits for the disk, one fault at a
//! time. A [`Prefetcher`] reads a planned list of byte ranges in the
//! background, in large pieces, so that the pages are in memory by the time
//! the consumer touches them.
//!
//! It is bounded: it never has more than a memory budget of bytes in flight
//! or read beyond what the consumer reported as taken
//! ([`Prefetcher::consumed`]), so it cannot evict pages it has read and the
//! consumer has not used yet. It stops when asked ([`Prefetcher::stop`], or
//! dropping it), at the end of its plan, or at the first read that fails
//! (a file truncated underneath: reads, not touches, so never SIGBUS). A
//! detached prefetcher ([`Prefetcher::detach`]) ends instead of waiting for
//! the consumer once its budget is used. Pages already in memory are
//! skipped (`mincore`), and a plan whose pages are all resident starts no
//! thread. On filesystems where the hints do nothing (tmpfs, FUSE, network
//! filesystems) it silently does nothing more than reads would.

use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::io;
use crate::read::MappedFile;

/// How the prefetcher brings pages into memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PrefetchMethod {
    /// `MADV_POPULATE_READ` on the whole-file mapping tensors are handed out
    /// of: the pages are read into the page cache without being copied
    /// anywhere and mapped where the consumer will touch them, and a page
    /// the file lost (truncated) gives an error, never SIGBUS. Needs the
    /// mmap back end; [`PrefetchMethod::Read`] serves without.
    Populate,
    /// Positioned reads into a small scratch buffer per thread (one copy,
    /// thrown away: the point is the page cache).
    Read,
}

impl PrefetchMethod {
    /// `"populate"` or `"read"`, as the prefetcher's status reports it.
    pub fn name(self) -> &'static str {
        match self {
            PrefetchMethod::Populate => "populate",
            PrefetchMethod::Read => "read",
        }
    }
}

/// Default size of one read (8 MiB: large requests, few system calls).
const DEFAULT_CHUNK: u64 = 8 << 20;

/// Default number of reading threads.
const DEFAULT_THREADS: usize = 2;

/// Settings of a [`Prefetcher`].
#[derive(Clone, Copy, Debug)]
pub struct PrefetchOptions {
    /// Most bytes read ahead of what the consumer reported as taken.
    pub budget: u64,
    /// Reading threads (at least 1).
    pub threads: usize,
    /// Bytes per read (clamped to the budget, at least one page).
    pub chunk: u64,
    /// How pages are brought in.
    pub method: PrefetchMethod,
    /// Skip pages already in memory (checked with `mincore`), and start no
    /// thread when all are (the default; off to read regardless).
    pub skip_cached: bool,
}

impl PrefetchOptions {
    /// Half of the memory the kernel reports as available (`MemAvailable` in
    /// `/proc/meminfo`), or 1 GiB where that cannot be read; at least 64 MiB.
    pub fn default_budget() -> u64 {
        budget_from(std::fs::read_to_string("/proc/meminfo").ok().as_deref())
    }
}

impl Default for PrefetchOptions {
    fn default() -> Self {
        PrefetchOptions {
            budget: PrefetchOptions::default_budget(),
            threads: DEFAULT_THREADS,
            chunk: DEFAULT_CHUNK,
            method: PrefetchMethod::Populate,
            skip_cached: true,
        }
    }
}

/// [`PrefetchOptions::default_budget`] from the text of `/proc/meminfo`
/// (`None`: unreadable).
fn budget_from(meminfo: Option<&str>) -> u64 {
    let available = meminfo
        .and_then(|text| {
            text.lines()
                .find_map(|line| line.strip_prefix("MemAvailable:"))
                .and_then(|rest| {
                    rest.trim()
                        .trim_end_matches("kB")
                        .trim()
                        .parse::<u64>()
                        .ok()
                })
        })
        .map(|kib| kib.saturating_mul(1024));
    available.map_or(1 << 30, |bytes| bytes / 2).max(64 << 20)
}

/// Where a prefetcher stands (for tests, progress and tuning).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PrefetchStatus {
    /// Bytes in the plan.
    pub planned: u64,
    /// Bytes of the plan started on (read, being read, or found resident).
    pub issued: u64,
    /// Bytes of the plan finished.
    pub done: u64,
    /// Bytes of the plan found already in memory and skipped.
    pub resident: u64,
    /// Bytes the consumer reported as taken.
    pub consumed: u64,
    /// The budget in bytes.
    pub budget: u64,
    /// Threads still working or waiting for the consumer.
    pub workers: usize,
    /// Threads waiting for the consumer to take more (budget used).
    pub waiting: usize,
    /// True once stopped (asked to, or after a failed read).
    pub stopped: bool,
    /// True when a read failed (the file shrank, an I/O error, a hint the
    /// filesystem refuses): the prefetcher then stopped.
    pub failed: bool,
}

#[derive(Debug, Default)]
struct State {
    stop: bool,
    detached: bool,
    failed: bool,
    next: usize,
    issued: u64,
    done: u64,
    resident: u64,
    consumed: u64,
    workers: usize,
    waiting: usize,
}

#[derive(Debug)]
struct Shared {
    file: Arc<MappedFile>,
    method: PrefetchMethod,
    skip_cached: bool,
    budget: u64,
    chunks: Vec<(u64, u64)>,
    planned: u64,
    state: Mutex<State>,
    wake: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A background reader of planned byte ranges of one file (see the module
/// documentation). Dropping it stops it, unless it was detached.
#[derive(Debug)]
pub struct Prefetcher {
    shared: Arc<Shared>,
}

/// `ranges` (absolute `(start, length)` pairs) cut to the file's length,
/// empty ones dropped, neighbours in the given order merged, then split
/// into pieces of at most `chunk` bytes.
fn chunks(ranges: &[(u64, u64)], file_len: u64, chunk: u64) -> Vec<(u64, u64)> {
    let mut merged: Vec<(u64, u64)> = Vec::new();
    for &(start, len) in ranges {
        let end = start.saturating_add(len).min(file_len);
        if start >= end {
            continue;
        }
        match merged.last_mut() {
            Some((s, l)) if *s + *l == start => *l += end - start,
            _ => merged.push((start, end - start)),
        }
    }
    let mut out = Vec::new();
    for (mut start, mut len) in merged {
        while len > 0 {
            let n = len.min(chunk);
            out.push((start, n));
            start += n;
            len -= n;
        }
    }
    out
}

/// True when `[start, start + len)` looks resident: five pages spread over
/// it (first, quarters, last) are in memory, known through the whole-file
/// mapping; false when unknown. A sample, because `mincore` over every page
/// of a large range costs a page-cache lookup per page, which adds up over
/// gigabytes: a range wrongly taken for resident is read by the consumer's
/// own faults.
fn resident(file: &MappedFile, start: u64, len: u64) -> bool {
    #[cfg(target_os = "linux")]
    {
        let Some(map) = file.whole_map() else {
            return false;
        };
        if len == 0 {
            return true;
        }
        let last = len - 1;
        [0, last / 4, last / 2, last / 4 * 3, last]
            .iter()
            .all(|&at| {
                usize::try_from(start + at)
                    .is_ok_and(|at| matches!(io::mmap::resident_pages(map, at, 1), Some((1, 1))))
            })
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (file, start, len);
        false
    }
}

impl Prefetcher {
    /// Starts reading `ranges` of `file` (absolute `(start, length)` pairs,
    /// read in the order given; parts past the file's end are ignored) in
    /// the background. Starts no thread when every page is already in
    /// memory or nothing is planned.
    pub fn start(file: Arc<MappedFile>, ranges: &[(u64, u64)], options: PrefetchOptions) -> Self {
        let budget = options.budget.max(4096);
        let chunk = options.chunk.clamp(4096, budget);
        // Only a local file has pages to bring in: other sources plan nothing.
        let chunks = match file.local() {
            Some(_) => chunks(ranges, file.file_len(), chunk),
            None => Vec::new(),
        };
        let planned = chunks.iter().map(|c| c.1).sum();
        let method = match options.method {
            PrefetchMethod::Populate if file.whole_map().is_none() => PrefetchMethod::Read,
            m => m,
        };
        // Off where it cannot help: when the plan is in memory, no thread
        // starts (checked on at most 64 chunks spread over it, the last
        // included; the check stops at the first chunk not resident).
        let mut state = State::default();
        let stride = chunks.len().div_ceil(64).max(1);
        let sample = chunks.iter().step_by(stride).chain(chunks.last());
        if options.skip_cached && sample.copied().all(|(s, l)| resident(&file, s, l)) {
            state.next = chunks.len();
            (state.issued, state.done, state.resident) = (planned, planned, planned);
        }
        let remaining = chunks.len() - state.next;
        let threads = options.threads.max(1).min(remaining);
        state.workers = threads;
        let shared = Arc::new(Shared {
            file,
            method,
            skip_cached: options.skip_cached,
            budget,
            chunks,
            planned,
            state: Mutex::new(state),
            wake: Condvar::new(),
        });
        for _ in 0..threads {
            let worker = Arc::clone(&shared);
            let spawned = std::thread::Builder::new()
                .name("fastst-prefetch".into())
                .spawn(move || work(&worker));
            if spawned.is_err() {
                // No thread to be had: fewer workers (maybe none), no error.
                let mut st = shared.lock();
                st.workers -= 1;
                shared.wake.notify_all();
            }
        }
        Prefetcher { shared }
    }

    /// The consumer took `bytes` more of the planned bytes (copied them
    /// out, or is done with them): the prefetcher may read that much
    /// further.
    pub fn consumed(&self, bytes: u64) {
        let mut st = self.shared.lock();
        st.consumed = st.consumed.saturating_add(bytes);
        self.shared.wake.notify_all();
    }

    /// Stops reading (a read in progress finishes first; this does not
    /// wait for it).
    pub fn stop(&self) {
        let mut st = self.shared.lock();
        st.stop = true;
        self.shared.wake.notify_all();
    }

    /// From now on the threads end instead of waiting for the consumer
    /// once the budget is used (for loads whose handle closes while the
    /// pages are still to be touched).
    pub fn detach(&self) {
        let mut st = self.shared.lock();
        st.detached = true;
        self.shared.wake.notify_all();
    }

    /// The method in use.
    pub fn method(&self) -> PrefetchMethod {
        self.shared.method
    }

    /// Where the prefetcher stands.
    pub fn status(&self) -> PrefetchStatus {
        status_of(&self.shared, &self.shared.lock())
    }

    /// Waits until no thread is reading (each ended or waits for the
    /// consumer), at most `timeout`; returns the status then.
    pub fn wait_idle(&self, timeout: Duration) -> PrefetchStatus {
        let deadline = Instant::now() + timeout;
        let mut st = self.shared.lock();
        while !settled(&self.shared, &st) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            st = self
                .shared
                .wake
                .wait_timeout(st, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        status_of(&self.shared, &st)
    }
}

impl Drop for Prefetcher {
    /// Stops the threads, unless detached: a detached prefetcher reads on
    /// to the end of its plan or budget after its handle is gone.
    fn drop(&mut self) {
        let mut st = self.shared.lock();
        if !st.detached {
            st.stop = true;
            self.shared.wake.notify_all();
        }
    }
}

/// True when no thread reads nor can: all ended, or all wait for a budget
/// the consumer has not extended.
fn settled(shared: &Shared, st: &State) -> bool {
    if st.workers == 0 {
        return true;
    }
    if st.workers != st.waiting || st.stop || st.detached {
        return false;
    }
    match shared.chunks.get(st.next) {
        Some(&(_, len)) => st.issued + len > st.consumed.saturating_add(shared.budget),
        None => false,
    }
}

fn status_of(shared: &Shared, st: &State) -> PrefetchStatus {
    PrefetchStatus {
        planned: shared.planned,
        issued: st.issued,
        done: st.done,
        resident: st.resident,
        consumed: st.consumed,
        budget: shared.budget,
        workers: st.workers,
        waiting: st.waiting,
        stopped: st.stop,
        failed: st.failed,
    }
}

/// One reading thread: takes the next chunk when the budget allows, reads
/// it, until the plan ends, a stop, or a failed read.
fn work(shared: &Shared) {
    let mut scratch: Vec<u8> = Vec::new();
    loop {
        let (start, len) = {
            let mut st = shared.lock();
            loop {
                let Some(&(start, len)) = shared.chunks.get(st.next) else {
                    return leave(shared, st);
                };
                if st.stop {
                    return leave(shared, st);
                }
                if st.issued + len <= st.consumed.saturating_add(shared.budget) {
                    st.next += 1;
                    st.issued += len;
                    break (start, len);
                }
                if st.detached {
                    return leave(shared, st);
                }
                st.waiting += 1;
                shared.wake.notify_all();
                st = shared.wake.wait(st).unwrap_or_else(PoisonError::into_inner);
                st.waiting -= 1;
            }
        };
        let skipped = shared.skip_cached && resident(&shared.file, start, len);
        let ok = skipped || fetch(shared, &mut scratch, start, len);
        let mut st = shared.lock();
        st.done += len;
        if skipped {
            st.resident += len;
        }
        if !ok {
            st.failed = true;
            st.stop = true;
        }
        shared.wake.notify_all();
    }
}

fn leave(shared: &Shared, mut st: MutexGuard<'_, State>) {
    st.workers -= 1;
    shared.wake.notify_all();
}

/// Brings `[start, start + len)` into memory; false when that failed.
fn fetch(shared: &Shared, scratch: &mut Vec<u8>, start: u64, len: u64) -> bool {
    let file = &*shared.file;
    let Some(raw) = file.local() else {
        return false;
    };
    // Exactly this range first: the reads below then find its pages in the
    // page cache (or on their way) and start no read-around of their own,
    // which would read up to the readahead window beyond what was planned.
    // A hint the filesystem refuses changes nothing.
    let _ = io::advise_willneed(raw, start, len);
    match shared.method {
        PrefetchMethod::Populate => {
            let (Ok(s), Ok(n)) = (usize::try_from(start), usize::try_from(len)) else {
                return false;
            };
            // Into the mapping tensors are handed out of: their first
            // touches then find the pages mapped (no fault at all).
            #[cfg(unix)]
            if let Some(map) = file.shared_map() {
                return map.populate_read(s, n).is_ok();
            }
            #[cfg(unix)]
            if let Some(map) = file.whole_map() {
                return io::mmap::populate_read(map, s, n).is_ok();
            }
            false
        }
        PrefetchMethod::Read => {
            let Ok(n) = usize::try_from(len) else {
                return false;
            };
            if scratch.len() < n {
                match crate::io::zeroed(len, "") {
                    Ok(buf) => *scratch = buf,
                    Err(_) => return false,
                }
            }
            io::read_exact_at(raw, &mut scratch[..n], start).is_ok()
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::read::OpenOptions;
    use crate::testfs::build;

    #[test]
    fn chunks_cut_merge_and_split() {
        let got = chunks(&[(0, 10), (10, 5), (40, 0), (50, 30), (95, 20)], 100, 8);
        assert_eq!(
            got,
            vec![(0, 8), (8, 7), (50, 8), (58, 8), (66, 8), (74, 6), (95, 5)]
        );
        assert!(chunks(&[(200, 10)], 100, 8).is_empty());
    }

    fn file_of(n: usize) -> (crate::testfs::TempFile, Vec<u8>) {
        let data: Vec<u8> = (0..n).map(|i| (i % 253) as u8).collect();
        let header = format!(r#"{{"t":{{"dtype":"U8","shape":[{n}],"data_offsets":[0,{n}]}}}}"#);
        (build(&header, &data), data)
    }

    /// `settled` says no thread reads nor can: true when none is left, or
    /// when all wait, none is told to stop or detached, and the next chunk
    /// would pass the budget; false as long as one thread may still read.
    #[test]
    fn settled_only_when_every_thread_waits_for_budget_or_none_is_left() {
        let (f, _) = file_of(1000);
        let shared = Shared {
            file: Arc::new(MappedFile::open(&f.0, OpenOptions::default()).unwrap()),
            method: PrefetchMethod::Read,
            skip_cached: false,
            budget: 150,
            chunks: vec![(0, 100), (100, 100)],
            planned: 200,
            state: Mutex::new(State::default()),
            wake: Condvar::new(),
        };
        // Both threads wait, and the second chunk would pass the budget
        // (100 issued + 100 > 0 consumed + 150).
        let waiting = State {
            workers: 2,
            waiting: 2,
            next: 1,
            issued: 100,
            ..State::default()
        };
        assert!(settled(&shared, &waiting));
        for (what, st) in [
            (
                "a thread still reads",
                State {
                    waiting: 1,
                    ..waiting
                },
            ),
            (
                "told to stop",
                State {
                    stop: true,
                    ..waiting
                },
            ),
            (
                "detached",
                State {
                    detached: true,
                    ..waiting
                },
            ),
            (
                "the chunk fits the budget now",
                State {
                    consumed: 50,
                    ..waiting
                },
            ),
            ("nothing left to read", State { next: 2, ..waiting }),
        ] {
            assert!(!settled(&shared, &st), "{what}");
        }
        // No thread left: settled, whatever else the state says.
        for st in [
            State {
                workers: 0,
                waiting: 1,
                ..waiting
            },
            State {
                workers: 0,
                stop: true,
                detached: true,
                next: 5,
                ..waiting
            },
        ] {
            assert!(settled(&shared, &st));
        }
    }

    #[test]
    fn the_budget_bounds_the_reads_until_the_consumer_takes_more() {
        for method in [PrefetchMethod::Populate, PrefetchMethod::Read] {
            let (f, _) = file_of(1 << 20);
            let file = Arc::new(MappedFile::open(&f.0, OpenOptions::default()).unwrap());
            let len = file.file_len();
            let options = PrefetchOptions {
                budget: 64 << 10,
                threads: 2,
                chunk: 16 << 10,
                method,
                skip_cached: false,
            };
            let p = Prefetcher::start(Arc::clone(&file), &[(0, len)], options);
            let s = p.wait_idle(Duration::from_secs(60));
            assert!(s.issued <= 64 << 10, "{method:?}: {s:?}");
            assert!(s.issued > 0, "{method:?}: {s:?}");
            p.consumed(256 << 10);
            let s = p.wait_idle(Duration::from_secs(60));
            assert!(s.issued <= (64 + 256) << 10, "{method:?}: {s:?}");
            assert!(s.issued >= 256 << 10, "{method:?}: {s:?}");
            p.consumed(len);
            let s = p.wait_idle(Duration::from_secs(60));
            assert_eq!((s.issued, s.done, s.workers), (len, len, 0), "{method:?}");
        }
    }

    /// `Populate` on a mapped file maps the pages where tensors are handed
    /// out (the shared mapping), so that their first touches find them
    /// mapped; `Read` only fills the page cache.
    #[test]
    #[cfg(target_os = "linux")]
    fn populate_maps_the_pages_the_tensors_are_read_from() {
        let n = 1 << 20;
        let (f, _) = file_of(n);
        for method in [PrefetchMethod::Populate, PrefetchMethod::Read] {
            let file = Arc::new(MappedFile::open(&f.0, OpenOptions::default()).unwrap());
            let map = Arc::clone(file.shared_map().unwrap());
            let region = map.take(0, map.len()).unwrap();
            let addr = region.as_slice().as_ptr() as usize;
            let rss_kib = || {
                let v = crate::io::mmap::tests::smaps_field(addr, "Rss:");
                v.trim_end_matches("kB").trim().parse::<u64>().unwrap()
            };
            assert_eq!(rss_kib(), 0, "nothing touched yet");
            let options = PrefetchOptions {
                budget: 1 << 30,
                threads: 2,
                chunk: 64 << 10,
                method,
                skip_cached: false,
            };
            let p = Prefetcher::start(Arc::clone(&file), &[(0, file.file_len())], options);
            let s = p.wait_idle(Duration::from_secs(60));
            assert_eq!(s.done, file.file_len(), "{method:?}");
            let rss = rss_kib();
            match method {
                PrefetchMethod::Populate => assert!(rss >= (n as u64) >> 10, "{rss} KiB"),
                _ => assert_eq!(rss, 0, "{method:?}"),
            }
        }
    }

    /// Chunks found in memory are skipped and counted as resident, only
    /// when skipping is asked for (and residency can be known: through the
    /// mapping); every chunk counts as done. Without a mapping (pread back
    /// end), `Populate` reads instead.
    #[test]
    #[cfg(target_os = "linux")]
    fn resident_chunks_are_skipped_only_when_asked() {
        let n = 1 << 20;
        let (f, _) = file_of(n);
        for backend in [crate::Backend::Mmap, crate::Backend::Pread] {
            for skip_cached in [true, false] {
                let file = Arc::new(
                    MappedFile::open(
                        &f.0,
                        OpenOptions {
                            backend,
                            ..OpenOptions::default()
                        },
                    )
                    .unwrap(),
                );
                if !crate::io::drop_cached(file.raw()) {
                    return; // a file system that keeps everything cached
                }
                crate::io::advise_random(file.raw());
                let half = n as u64 / 2;
                let mut buf = vec![0u8; half as usize];
                io::read_exact_at(file.raw(), &mut buf, 0).unwrap();
                let options = PrefetchOptions {
                    budget: 1 << 30,
                    threads: 2,
                    chunk: 64 << 10,
                    method: PrefetchMethod::Populate,
                    skip_cached,
                };
                let p = Prefetcher::start(Arc::clone(&file), &[(0, half * 2)], options);
                let s = p.wait_idle(Duration::from_secs(60));
                let what = format!("{backend:?} skip {skip_cached}: {s:?}");
                assert_eq!(
                    (s.planned, s.issued, s.done),
                    (half * 2, half * 2, half * 2),
                    "{what}"
                );
                // Residency is known through the mapping: none under pread.
                let skips = skip_cached && backend == crate::Backend::Mmap;
                assert_eq!(s.resident, if skips { half } else { 0 }, "{what}");
                assert!(!s.failed && !s.stopped && s.workers == 0, "{what}");
            }
        }
    }

    #[test]
    fn stop_and_detach_end_the_threads() {
        let (f, _) = file_of(1 << 20);
        let file = Arc::new(MappedFile::open(&f.0, OpenOptions::default()).unwrap());
        let options = PrefetchOptions {
            budget: 32 << 10,
            threads: 3,
            chunk: 8 << 10,
            method: PrefetchMethod::Read,
            skip_cached: false,
        };
        let p = Prefetcher::start(Arc::clone(&file), &[(0, 1 << 20)], options);
        p.stop();
        let s = p.wait_idle(Duration::from_secs(60));
        assert!(s.stopped && s.workers == 0, "{s:?}");
        let p = Prefetcher::start(Arc::clone(&file), &[(0, 1 << 20)], options);
        p.detach();
        let s = p.wait_idle(Duration::from_secs(60));
        assert_eq!(s.workers, 0, "{s:?}");
        assert!(s.issued <= 32 << 10, "{s:?}");
    }

    #[test]
    fn a_truncated_file_stops_the_reads_without_a_signal() {
        for method in [PrefetchMethod::Populate, PrefetchMethod::Read] {
            let (f, _) = file_of(4 << 20);
            let file = Arc::new(MappedFile::open(&f.0, OpenOptions::default()).unwrap());
            let len = file.file_len();
            std::fs::OpenOptions::new()
                .write(true)
                .open(&f.0)
                .unwrap()
                .set_len(4096)
                .unwrap();
            let options = PrefetchOptions {
                budget: len,
                threads: 2,
                chunk: 64 << 10,
                method,
                skip_cached: false,
            };
            let p = Prefetcher::start(Arc::clone(&file), &[(0, len)], options);
            let s = p.wait_idle(Duration::from_secs(60));
            assert!(s.failed && s.stopped && s.workers == 0, "{method:?}: {s:?}");
        }
    }

    #[test]
    fn defaults_are_the_documented_ones() {
        let o = PrefetchOptions::default();
        assert_eq!((o.chunk, o.threads), (8 << 20, 2));
        assert_eq!((o.method, o.skip_cached), (PrefetchMethod::Populate, true));
    }

    #[test]
    fn the_default_budget_is_half_the_available_memory() {
        let info =
            |kib: u64| format!("MemTotal: 99999999 kB\nMemFree: 5 kB\nMemAvailable:   {kib} kB\n");
        assert_eq!(budget_from(Some(&info(8 << 20))), 4 << 30);
        assert_eq!(budget_from(Some(&info(3 << 20))), 3 << 29);
        // Never under 64 MiB.
        assert_eq!(budget_from(Some(&info(100 << 10))), 64 << 20);
        assert_eq!(budget_from(Some(&info(0))), 64 << 20);
        // Unknown: 1 GiB.
        assert_eq!(budget_from(None), 1 << 30);
        assert_eq!(budget_from(Some("MemTotal: 1 kB\n")), 1 << 30);
        assert_eq!(budget_from(Some("MemAvailable: lots kB\n")), 1 << 30);
        // This machine's: what /proc/meminfo says, read around the call.
        #[cfg(target_os = "linux")]
        {
            let read = || budget_from(std::fs::read_to_string("/proc/meminfo").ok().as_deref());
            let (before, got, after) = (read(), PrefetchOptions::default_budget(), read());
            let slack = 256 << 20;
            assert!(
                got + slack >= before.min(after) && got <= before.max(after) + slack,
                "{before} {got} {after}"
            );
        }
    }

    /// Residency is sampled at five pages: the first, the quarters and the
    /// last; a range is resident only when all five are.
    #[test]
    #[cfg(target_os = "linux")]
    fn residency_is_sampled_at_five_pages() {
        let n = 64 << 20;
        let (f, _) = file_of(n);
        let file = MappedFile::open(&f.0, OpenOptions::default()).unwrap();
        let base = file.header().data_start();
        let last = n as u64 - 1;
        assert!(resident(&file, base + 100, 0), "an empty range");
        let page = 4096u64;
        if !crate::io::drop_cached(file.raw()) {
            return; // a file system that keeps everything cached
        }
        let warm = |offsets: &[u64]| {
            assert!(crate::io::drop_cached(file.raw()));
            // Read-ahead off: each read brings in its own page only.
            crate::io::advise_random(file.raw());
            for &o in offsets {
                let at = (base + o) / page * page;
                io::advise_willneed(file.raw(), at, page).unwrap();
                let mut buf = vec![0u8; page.min(file.file_len() - at) as usize];
                io::read_exact_at(file.raw(), &mut buf, at).unwrap();
            }
        };
        // Only the first, middle and last pages: the quarters are missing.
        warm(&[0, last / 2, last]);
        let map = file.whole_map().unwrap();
        let probe = |o: u64| {
            matches!(
                io::mmap::resident_pages(map, (base + o) as usize, 1),
                Some((1, 1))
            )
        };
        assert!(probe(0) && probe(last / 2) && probe(last));
        assert!(!probe(last / 4) && !probe(last / 4 * 3));
        assert!(!resident(&file, base, n as u64));
        // Every sampled page but one quarter: not resident.
        warm(&[0, last / 2, last / 4 * 3, last]);
        assert!(!resident(&file, base, n as u64));
        warm(&[0, last / 4, last / 2, last]);
        assert!(!resident(&file, base, n as u64));
        warm(&[0, last / 4, last / 4 * 3, last]);
        assert!(!resident(&file, base, n as u64));
        // All five sampled pages cached: taken for resident.
        warm(&[0, last / 4, last / 2, last / 4 * 3, last]);
        assert!(resident(&file, base, n as u64));
        // A range whose own sample misses a page is not.
        assert!(!resident(&file, base + 8192, n as u64 - 8192));
    }

    #[test]
    fn a_resident_plan_starts_no_thread() {
        let (f, _) = file_of(1 << 20);
        let file = Arc::new(MappedFile::open(&f.0, OpenOptions::default()).unwrap());
        // Make every page resident through the mapping itself.
        let map = file.whole_map().unwrap();
        io::mmap::populate_read(map, 0, map.len()).unwrap();
        let p = Prefetcher::start(
            Arc::clone(&file),
            &[(0, file.file_len())],
            PrefetchOptions::default(),
        );
        let s = p.status();
        let len = file.file_len();
        assert_eq!((s.workers, s.planned), (0, len));
        assert_eq!(
            (s.issued, s.done, s.resident, s.consumed),
            (len, len, len, 0)
        );
        p.consumed(5);
        assert_eq!(p.status().consumed, 5);
    }

    /// Dropping the handle stops the threads (they would otherwise wait for
    /// the consumer forever); a detached prefetcher reads on.
    #[test]
    fn dropping_the_handle_stops_the_threads_unless_detached() {
        let (f, _) = file_of(1 << 20);
        let file = Arc::new(MappedFile::open(&f.0, OpenOptions::default()).unwrap());
        let options = PrefetchOptions {
            budget: 32 << 10,
            threads: 2,
            chunk: 8 << 10,
            method: PrefetchMethod::Read,
            skip_cached: false,
        };
        for detach in [false, true] {
            let p = Prefetcher::start(Arc::clone(&file), &[(0, 1 << 20)], options);
            if detach {
                p.detach();
            }
            let shared = Arc::clone(&p.shared);
            drop(p);
            let deadline = Instant::now() + Duration::from_secs(60);
            let mut st = shared.lock();
            while !settled(&shared, &st) && Instant::now() < deadline {
                st = shared
                    .wake
                    .wait_timeout(st, Duration::from_millis(50))
                    .unwrap()
                    .0;
            }
            assert_eq!(st.stop, !detach, "detached: {detach}");
            if detach {
                // Waits for a consumer that is gone, having read its budget.
                assert!(settled(&shared, &st));
                assert_eq!(status_of(&shared, &st).issued, 32 << 10);
            } else {
                assert_eq!(st.workers, 0);
            }
        }
    }
}
