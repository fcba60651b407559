//! Whether transparent huge pages are cheaper than 4 KiB pages for fresh
//! memory on this host, right now: a probe of the first faults.
//!
//! Filling fresh memory costs its page faults, and what a fault costs
//! depends on the host more than on the loader. A huge page is one fault
//! but 2 MiB to find free and to clear at once; on a virtual machine whose
//! free memory the host takes back (free page reporting, ballooning: free
//! 2 MiB blocks are exactly what is handed back first), each huge page
//! must first be faulted in again on the host, 512 pages at a time, inside
//! the guest's fault. Depending on how long the memory has been free,
//! that makes huge pages several times cheaper or several times dearer
//! than 4 KiB pages, from one load to the next (figures: benches/README.md).
//! So a load that fills much fresh memory asks first: it faults in a few
//! huge pages and as many bytes of 4 KiB pages in a scratch mapping, and
//! compares the CPU time of each (the thread's own: time the scheduler
//! gave to other work does not count, time the host spent faulting the
//! memory in does).
//!
//! A probe sees only the first free blocks: on such a host the cheap huge
//! pages (memory the host still backs) come first and run out part-way
//! through a large load, after which every huge page is the dear kind. So
//! where the probe finds huge pages cheaper, the load goes on checking
//! ([`Trial`]): each request's destination is faulted in before its read
//! and timed, and the first [`WINDOW`] of requests whose huge pages cost
//! more per byte than the probe's 4 KiB pages ends the trial: the rest of
//! the load takes 4 KiB pages. (A window, not a request: dear pages come
//! scattered among the cheap ones before they take over.) Such a verdict
//! holds for the loads that start in the [`REMEMBERED`] after it (the
//! shards of a checkpoint, the files of a model): they take 4 KiB pages
//! without a probe or a trial.
#![allow(unsafe_code)]

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use memmap2::MmapMut;

/// Bytes faulted in per side: four huge pages, 2048 small ones.
const PROBE: usize = 8 << 20;

/// A transparent huge page (x86-64, aarch64 with 4 KiB pages).
const HUGE: usize = 2 << 20;

/// What the probe measured: CPU time of faulting in [`PROBE`] bytes as
/// huge pages, and as 4 KiB pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FaultProbe {
    /// Huge pages (`None`: the kernel gives none, or the probe could not run).
    pub huge: Option<Duration>,
    /// 4 KiB pages.
    pub small: Duration,
}

impl FaultProbe {
    /// Whether huge pages measured clearly cheaper: by at least a quarter,
    /// so that noise of equal costs keeps the steadier 4 KiB pages.
    pub fn huge_pages_win(&self) -> bool {
        self.huge
            .is_some_and(|h| h.saturating_mul(4) < self.small.saturating_mul(3))
    }
}

/// Bytes of requests whose faults are compared, together, with what 4 KiB
/// pages would have cost.
pub(crate) const WINDOW: usize = 64 << 20;

/// How long a trial that ended on dear huge pages keeps later loads on
/// 4 KiB pages.
pub(crate) const REMEMBERED: Duration = Duration::from_secs(10);

/// When (nanoseconds after [`epoch`], plus one; 0: never) a trial last
/// ended on dear huge pages, in this process.
static DEAR_AT: AtomicU64 = AtomicU64::new(0);

/// The process's own zero of time for [`DEAR_AT`].
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// Now, as [`DEAR_AT`] counts (never 0).
fn now_mark() -> u64 {
    u64::try_from(epoch().elapsed().as_nanos())
        .unwrap_or(u64::MAX - 1)
        .saturating_add(1)
}

/// Whether a trial ended on dear huge pages less than [`REMEMBERED`]
/// before `now` (marks of [`now_mark`]; `at` 0: never).
fn dear_within(at: u64, now: u64) -> bool {
    at != 0 && now.saturating_sub(at) < REMEMBERED.as_nanos() as u64
}

/// Whether a trial of this process ended on dear huge pages lately.
pub(crate) fn recently_dear() -> bool {
    dear_within(DEAR_AT.load(Ordering::Relaxed), now_mark())
}

/// The verdict of the last probe made for a job of several loads (a
/// prefetch plan's), when it was made, and the trial it started:
/// the job's later loads go on with it instead of probing again.
type JobVerdict = (u64, Option<Arc<Trial>>);

static JOB_PROBE: Mutex<Option<JobVerdict>> = Mutex::new(None);

/// The trial for one load of a job of several (a prefetch plan's loads,
/// some too small to be worth a probe of their own): the verdict of a probe
/// made less than [`REMEMBERED`] before (its trial shared: one window
/// across the loads, one end), else a new probe's, kept for the next.
pub(crate) fn job_trial() -> Option<Arc<Trial>> {
    let mut last = JOB_PROBE.lock().unwrap_or_else(PoisonError::into_inner);
    let now = now_mark();
    if let Some((at, trial)) = last.as_ref() {
        if now.saturating_sub(*at) < REMEMBERED.as_nanos() as u64 {
            return trial.clone().filter(|t| t.on());
        }
    }
    let trial = probe_faults().and_then(Trial::after).map(Arc::new);
    *last = Some((now, trial.clone()));
    trial
}

/// Huge pages for a load's destinations while they stay cheaper than 4 KiB
/// pages (see the module's documentation).
#[derive(Debug)]
pub(crate) struct Trial {
    on: AtomicBool,
    /// What 4 KiB pages cost, per MiB faulted in (from the probe).
    small_per_mib: Duration,
    /// The faults of the window so far: CPU time, bytes.
    window: Mutex<(Duration, usize)>,
}

impl Trial {
    /// A trial, when `probe` found huge pages clearly cheaper.
    pub(crate) fn after(probe: FaultProbe) -> Option<Trial> {
        probe.huge_pages_win().then(|| Trial {
            on: AtomicBool::new(true),
            small_per_mib: probe.small / (PROBE >> 20) as u32,
            window: Mutex::new((Duration::ZERO, 0)),
        })
    }

    /// Whether destinations still take huge pages.
    pub(crate) fn on(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }

    /// Advises the whole pages of the `len` bytes at `addr` (a destination
    /// of the load, memory it holds until it ends) `MADV_HUGEPAGE`, before
    /// anything faults them in.
    pub(crate) fn advise(&self, addr: usize, len: usize) {
        #[cfg(any(target_os = "linux", target_os = "android"))]
        {
            let page = 4096;
            let Some(end) = addr.checked_add(len) else {
                return;
            };
            let (start, stop) = (addr.div_ceil(page) * page, end / page * page);
            if stop <= start {
                return;
            }
            // SAFETY: `[start, stop)` is a whole-page span inside a
            // destination of the running load, memory that stays allocated
            // until the load ends; the advice only changes how pages
            // faulted in later are backed, never their contents, so the
            // threads reading into other parts of it are not affected.
            unsafe {
                libc::madvise(
                    start as *mut libc::c_void,
                    stop - start,
                    libc::MADV_HUGEPAGE,
                );
            }
        }
        #[cfg(not(any(target_os = "linux", target_os = "android")))]
        let _ = (addr, len);
    }

    /// Before a read into `dst` (part of a destination advised huge):
    /// while the trial is on, faults `dst` in (`MADV_POPULATE_WRITE`) and
    /// counts what that cost ([`Trial::count`]; the trial ends at once
    /// where the kernel cannot populate); once it is off, advises `dst`
    /// back to 4 KiB pages.
    pub(crate) fn fault_in(&self, dst: &mut [u8]) {
        if !self.on() {
            super::advise_huge_pages(dst, false);
            return;
        }
        match populate(dst) {
            Some(took) => self.count(took, dst.len()),
            None => self.on.store(false, Ordering::Relaxed),
        }
    }

    /// Counts `bytes` of huge pages faulted in, in `took` CPU time, into
    /// the window, and ends the trial as soon as the window's faults cost
    /// more than 4 KiB pages would for a whole [`WINDOW`]: its cost only
    /// grows, so the verdict is the one its end would give, and the huge
    /// pages faulted in meanwhile (many at once, on a load's threads) are
    /// not taken at the dear price. A window that ends within that cost
    /// starts the next.
    fn count(&self, took: Duration, bytes: usize) {
        let mut w = self.window.lock().unwrap_or_else(PoisonError::into_inner);
        w.0 = w.0.saturating_add(took);
        w.1 = w.1.saturating_add(bytes);
        let budget = self.small_per_mib.saturating_mul((WINDOW >> 20) as u32);
        if w.0 > budget {
            self.on.store(false, Ordering::Relaxed);
            DEAR_AT.store(now_mark(), Ordering::Relaxed);
        }
        if w.1 >= WINDOW || !self.on() {
            *w = (Duration::ZERO, 0);
        }
    }
}

/// Faults in the whole pages of `mem` writable (`MADV_POPULATE_WRITE`,
/// Linux 5.14+; the contents do not change: fresh pages read as zeros
/// either way) and returns the CPU time this thread spent doing it; `None`
/// where the kernel cannot.
fn populate(mem: &mut [u8]) -> Option<Duration> {
    let before = thread_cpu()?;
    fault_in_writable(mem).then_some(())?;
    Some(thread_cpu()?.saturating_sub(before))
}

/// Faults in the whole pages of `mem` writable in one call
/// (`MADV_POPULATE_WRITE`, Linux 5.14+), without changing what they hold
/// (a page not yet in memory reads as zeros either way): the kernel
/// allocates them in one go rather than one fault at a time. False where
/// it cannot (then the pages are faulted in as they are written). `mem`
/// may be uninitialised (`MaybeUninit`): nothing is read or written.
pub(crate) fn fault_in_writable<T>(mem: &mut [T]) -> bool {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        let page = 4096;
        let addr = mem.as_mut_ptr() as usize;
        let Some(end) = addr.checked_add(std::mem::size_of_val(mem)) else {
            return false;
        };
        let (start, stop) = (addr.div_ceil(page) * page, end / page * page);
        if stop <= start {
            return true;
        }
        // SAFETY: `[start, stop)` is a whole-page span inside `mem`, memory
        // borrowed mutably for the call; populating faults pages in without
        // changing what they hold (a page not yet in memory reads as zeros
        // either way).
        let r = unsafe {
            libc::madvise(
                start as *mut libc::c_void,
                stop - start,
                libc::MADV_POPULATE_WRITE,
            )
        };
        r == 0
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    {
        let _ = mem;
        false
    }
}

/// Faults in [`PROBE`] bytes of fresh anonymous memory as huge pages and
/// as many as 4 KiB pages, and returns the CPU time of each. `None` when
/// the memory for it cannot be had.
pub fn probe_faults() -> Option<FaultProbe> {
    let mut map = MmapMut::map_anon(2 * PROBE + HUGE).ok()?;
    let base = map.as_ptr() as usize;
    let skip = (HUGE - base % HUGE) % HUGE;
    let (huge, small) = map[skip..skip + 2 * PROBE].split_at_mut(PROBE);
    let thp = thp_enabled();
    super::advise_huge_pages(small, false);
    if thp {
        super::advise_huge_pages(huge, true);
    }
    // Half of each, in turn, so that a passing disturbance falls on both.
    let (h1, h2) = huge.split_at_mut(PROBE / 2);
    let (s1, s2) = small.split_at_mut(PROBE / 2);
    let mut times = [Duration::ZERO; 2];
    for (i, part) in [h1, s1, h2, s2].into_iter().enumerate() {
        times[i % 2] += touch(part)?;
    }
    Some(FaultProbe {
        huge: thp.then_some(times[0]),
        small: times[1],
    })
}

/// Writes one byte in every 4 KiB of `mem` (faulting it in) and returns
/// the CPU time this thread spent doing it.
fn touch(mem: &mut [u8]) -> Option<Duration> {
    let start = thread_cpu()?;
    for b in mem.iter_mut().step_by(4096) {
        // SAFETY: `b` is a valid, exclusive reference into `mem`; the
        // volatile write only keeps the compiler from eliding a store whose
        // value is never read (the store is what faults the page in).
        unsafe { std::ptr::write_volatile(b, 1) };
    }
    Some(thread_cpu()?.saturating_sub(start))
}

/// This thread's CPU time so far.
#[cfg(unix)]
fn thread_cpu() -> Option<Duration> {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec at the address given, a
    // local of the right type.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    if r != 0 {
        return None;
    }
    Some(Duration::new(
        u64::try_from(t.tv_sec).ok()?,
        u32::try_from(t.tv_nsec).ok()?,
    ))
}

#[cfg(not(unix))]
fn thread_cpu() -> Option<Duration> {
    None
}

/// Whether the kernel gives transparent huge pages to memory advised
/// `MADV_HUGEPAGE` (`enabled` is `always` or `madvise`).
fn thp_enabled() -> bool {
    std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
        .is_ok_and(|s| s.contains("[always]") || s.contains("[madvise]"))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn huge_pages_win_only_when_clearly_cheaper() {
        let ms = Duration::from_millis;
        let probe = |huge, small| FaultProbe { huge, small };
        assert!(probe(Some(ms(1)), ms(4)).huge_pages_win());
        assert!(probe(Some(ms(7)), ms(10)).huge_pages_win());
        assert!(!probe(Some(ms(8)), ms(10)).huge_pages_win());
        assert!(!probe(Some(ms(10)), ms(10)).huge_pages_win());
        assert!(!probe(Some(ms(40)), ms(10)).huge_pages_win());
        assert!(!probe(None, ms(10)).huge_pages_win());
        assert!(!probe(Some(Duration::MAX), Duration::MAX).huge_pages_win());
    }

    /// A trial starts only after a probe that found huge pages clearly
    /// cheaper; it faults requests in while on, advises them back to 4 KiB
    /// pages once off, and never changes their bytes.
    #[test]
    fn a_trial_starts_after_a_cheap_probe_and_keeps_the_bytes() {
        let ms = Duration::from_millis;
        assert!(Trial::after(FaultProbe {
            huge: Some(ms(9)),
            small: ms(10)
        })
        .is_none());
        let probe = FaultProbe {
            huge: Some(ms(1)),
            small: ms(8),
        };
        let trial = Trial::after(probe).unwrap();
        assert_eq!(trial.small_per_mib, ms(1));
        let mut mem = memmap2::MmapMut::map_anon(4 << 20).unwrap();
        mem[5] = 7;
        trial.fault_in(&mut mem[..]);
        assert_eq!(mem[5], 7);
        assert!(trial.on());
        // Requests after the trial ended are advised back to 4 KiB pages,
        // not faulted in; bytes never change.
        trial.on.store(false, Ordering::Relaxed);
        let mut fresh = memmap2::MmapMut::map_anon(4 << 20).unwrap();
        trial.advise(fresh.as_ptr() as usize, fresh.len());
        trial.fault_in(&mut fresh[..]);
        assert!(fresh.iter().all(|&b| b == 0));
    }

    /// With 4 KiB pages at 1 ms per MiB, a window may cost 64 ms: windows
    /// within it keep the trial on, and the trial ends at the request that
    /// takes a window past it, not at the window's end.
    #[test]
    fn a_trial_ends_as_soon_as_a_window_costs_more_than_small_pages() {
        let ms = Duration::from_millis;
        let mib = 1usize << 20;
        let trial = Trial::after(FaultProbe {
            huge: Some(ms(1)),
            small: ms(8),
        })
        .unwrap();
        // Two whole windows at 60 ms each: cheap, the trial goes on.
        for _ in 0..2 {
            trial.count(ms(30), WINDOW / 2);
            assert!(trial.on());
            trial.count(ms(30), WINDOW / 2);
            assert!(trial.on());
        }
        assert_eq!(*trial.window.lock().unwrap(), (Duration::ZERO, 0));
        // Dear pages: 40 ms for 8 MiB, twice: 80 ms, past the 64 ms a
        // whole window may cost, with only a quarter of it faulted in.
        trial.count(ms(40), 8 * mib);
        assert!(trial.on());
        trial.count(ms(40), 8 * mib);
        assert!(!trial.on());
        assert!(recently_dear());
    }

    /// A dear verdict holds for [`REMEMBERED`], then loads ask again.
    #[test]
    fn a_dear_verdict_holds_for_a_while() {
        let s = |secs: u64| secs * 1_000_000_000 + 1;
        assert!(!dear_within(0, s(1)));
        assert!(dear_within(s(5), s(5)));
        assert!(dear_within(s(5), s(14)));
        assert!(!dear_within(s(5), s(15)));
        assert!(!dear_within(s(5), s(100)));
        assert!(now_mark() >= 1);
    }

    #[cfg(unix)]
    #[test]
    fn the_probe_measures_both_sides() {
        let p = probe_faults().unwrap();
        assert!(p.small > Duration::ZERO);
        assert_eq!(p.huge.is_some(), thp_enabled());
    }
}
