//! Thread policy, in one place: how many threads a piece of work gets, the
//! one fan-out of "N workers, first error wins" (loads, stats, diffs,
//! value scans), and the scoped fan-out over matching chunks used by copies
//! and conversions.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};

use crate::error::{Error, Result};

/// Work below this many elements runs on the calling thread.
const PARALLEL_MIN: usize = 1 << 20;

/// Most threads one copy or conversion uses.
const MAX_THREADS: usize = 16;

/// The machine's parallelism (1 when unknown).
fn available() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Threads for copying or converting `n` elements: one below
/// [`PARALLEL_MIN`], then one per quarter of that, up to the machine's
/// parallelism and at most 16.
pub(crate) fn threads_for(n: usize) -> usize {
    if n < PARALLEL_MIN {
        return 1;
    }
    available()
        .clamp(1, MAX_THREADS)
        .min(n / (PARALLEL_MIN / 4))
        .max(1)
}

/// Bytes of one tensor per helper thread of a per-call copy or conversion:
/// below this, a thread's start costs more than its share saves.
const PER_HELPER_BYTES: usize = 8 << 20;

/// Helper threads (besides the calling one) for one call copying or
/// converting a tensor of `bytes` bytes: one per [`PER_HELPER_BYTES`], up to
/// the machine's parallelism less the calling thread, at most 15.
pub(crate) fn helpers_for_bytes(bytes: usize) -> usize {
    (available().clamp(1, MAX_THREADS) - 1).min(bytes / PER_HELPER_BYTES)
}

/// Runs `work(start, chunk)` on every chunk of `dst` cut every `block`
/// items (`start`: the chunk's index in `dst`). The calling thread takes
/// chunks one after another, and `helpers` threads take chunks too while
/// any are left: no share is fixed in advance, so a helper that starts late
/// or runs slowly on a busy machine does less, and the call never takes
/// much longer than the calling thread alone would. Returns once every
/// chunk taken is done, with the first error (no chunk is taken after it);
/// a helper that panicked is rule `worker-failed` (`task` names the work).
pub(crate) fn steal<T: Send>(
    dst: &mut [T],
    block: usize,
    helpers: usize,
    task: &'static str,
    work: impl Fn(usize, &mut [T]) -> Result<()> + Sync,
) -> Result<()> {
    let block = block.max(1);
    let helpers = helpers.min(dst.len().div_ceil(block).saturating_sub(1));
    let chunks = Mutex::new(dst.chunks_mut(block).enumerate());
    let first: Mutex<Option<Error>> = Mutex::new(None);
    let stop = AtomicBool::new(false);
    let fail = |e: Error| {
        stop.store(true, Ordering::Relaxed);
        first
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get_or_insert(e);
    };
    let run = || loop {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        let next = chunks.lock().unwrap_or_else(PoisonError::into_inner).next();
        let Some((i, chunk)) = next else { return };
        if let Err(e) = work(i * block, chunk) {
            fail(e);
        }
    };
    std::thread::scope(|s| {
        let others: Vec<_> = (0..helpers).map(|_| s.spawn(run)).collect();
        run();
        for h in others {
            if h.join().is_err() {
                fail(Error::WorkerFailed { task });
            }
        }
    });
    first
        .into_inner()
        .unwrap_or_else(PoisonError::into_inner)
        .map_or(Ok(()), Err)
}

/// Worker threads for whole-file work (`verify --values`, `hash`):
/// `requested`, or the machine's parallelism when `requested` is 0.
pub fn thread_count(requested: usize) -> usize {
    if requested > 0 {
        requested
    } else {
        available()
    }
}

/// N workers, first error wins: runs `work` on `workers` threads of their
/// own while the calling thread runs `meanwhile` (a load's progress loop),
/// then joins every one of them. Returns what each worker returned, in the
/// order they were started, or the first error in that order; a worker
/// that panicked is rule `worker-failed` (`task` names the work).
pub(crate) fn fan_out_beside<T: Send>(
    workers: usize,
    task: &'static str,
    work: impl Fn() -> Result<T> + Sync,
    meanwhile: impl FnOnce(),
) -> Result<Vec<T>> {
    let joined: Vec<Result<T>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers).map(|_| s.spawn(&work)).collect();
        meanwhile();
        // Every worker is joined before an error is looked at: a scope
        // whose unjoined thread panicked would panic itself.
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or(Err(Error::WorkerFailed { task })))
            .collect()
    });
    joined.into_iter().collect()
}

/// N workers, first error wins, over the items `0..n`: up to `workers`
/// workers (at most one per item; one runs on the calling thread) each
/// make their own state with `init` (a read buffer, partial sums) and take
/// the next item not taken yet, `each(&mut state, item)`, until none is
/// left or a worker failed (no item is taken after an error). Returns the
/// workers' states, or the first error in the order the workers were
/// started; a worker that panicked is rule `worker-failed` (`task` names
/// the work).
pub fn fan_out<S: Send>(
    n: usize,
    workers: usize,
    task: &'static str,
    init: impl Fn() -> Result<S> + Sync,
    each: impl Fn(&mut S, usize) -> Result<()> + Sync,
) -> Result<Vec<S>> {
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let work = || {
        let failed = |e| {
            stop.store(true, Ordering::Relaxed);
            Err(e)
        };
        let mut state = match init() {
            Ok(s) => s,
            Err(e) => return failed(e),
        };
        while !stop.load(Ordering::Relaxed) {
            let item = next.fetch_add(1, Ordering::Relaxed);
            if item >= n {
                break;
            }
            if let Err(e) = each(&mut state, item) {
                return failed(e);
            }
        }
        Ok(state)
    };
    match workers.min(n) {
        0 | 1 => work().map(|s| vec![s]),
        workers => fan_out_beside(workers, task, work, || ()),
    }
}

/// Runs `f(src_chunk, dst_chunk)` over matching chunks of `src` (in units of
/// `src_size` bytes per element) and `dst` (`dst_size` bytes per element).
pub(crate) fn par_chunks(
    src: &[u8],
    src_size: usize,
    dst: &mut [u8],
    dst_size: usize,
    f: impl Fn(&[u8], &mut [u8]) + Sync,
) {
    let n = src.len() / src_size;
    let threads = threads_for(n);
    if threads <= 1 {
        f(src, dst);
        return;
    }
    let per = n.div_ceil(threads);
    std::thread::scope(|s| {
        for (sc, dc) in src
            .chunks(per * src_size)
            .zip(dst.chunks_mut(per * dst_size))
        {
            let f = &f;
            s.spawn(move || f(sc, dc));
        }
    });
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn small_work_stays_on_one_thread() {
        assert_eq!(threads_for(0), 1);
        assert_eq!(threads_for(PARALLEL_MIN - 1), 1);
        assert!(threads_for(usize::MAX) <= MAX_THREADS);
        assert_eq!(thread_count(3), 3);
        assert!(thread_count(0) >= 1);
    }

    #[test]
    fn per_call_helpers_get_8_mib_each() {
        let machine = available().clamp(1, MAX_THREADS);
        assert_eq!(helpers_for_bytes(0), 0);
        assert_eq!(helpers_for_bytes((8 << 20) - 1), 0);
        assert_eq!(helpers_for_bytes(16 << 20), (machine - 1).min(2));
        assert_eq!(helpers_for_bytes(usize::MAX), machine - 1);
    }

    /// Every chunk is worked on once, whatever the helpers; the first error
    /// is returned and stops new chunks; a panicking helper is rule
    /// `worker-failed`.
    #[test]
    fn stealing_covers_every_chunk_once_and_stops_at_an_error() {
        for helpers in [0, 1, 3] {
            let mut dst = vec![0u32; 1000];
            steal(&mut dst, 7, helpers, "a test", |start, chunk| {
                for (j, x) in chunk.iter_mut().enumerate() {
                    *x += (start + j) as u32;
                }
                Ok(())
            })
            .unwrap();
            assert!(dst.iter().enumerate().all(|(i, &x)| x == i as u32));
        }
        let mut dst = vec![0u8; 100];
        let err = steal(&mut dst, 10, 2, "a test", |start, _| match start {
            50 => Err(Error::WorkerFailed { task: "chunk 50" }),
            _ => Ok(()),
        });
        assert!(matches!(err, Err(Error::WorkerFailed { task: "chunk 50" })));
        let done = std::sync::atomic::AtomicUsize::new(0);
        let err = steal(&mut dst, 10, 0, "a test", |start, _| {
            done.fetch_add(1, Ordering::Relaxed);
            match start {
                0 => Err(Error::WorkerFailed { task: "first" }),
                _ => Ok(()),
            }
        });
        assert!(err.is_err());
        assert_eq!(done.into_inner(), 1, "no chunk is taken after an error");
        let on_caller = std::thread::current().id();
        let helper_ran = AtomicBool::new(false);
        let err = steal(&mut dst, 1, 1, "a test", |_, _| {
            if std::thread::current().id() != on_caller {
                helper_ran.store(true, Ordering::Relaxed);
                panic!("a helper fails");
            }
            // The calling thread leaves chunks for the helper.
            while !helper_ran.load(Ordering::Relaxed) {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            Ok(())
        });
        assert!(matches!(err, Err(Error::WorkerFailed { task: "a test" })));
    }

    /// Every item is taken once, each worker with its own state; the
    /// first error is returned and stops new items; a panicking worker is
    /// rule `worker-failed`; one worker (or one item) stays on the calling
    /// thread.
    #[test]
    fn fan_out_takes_every_item_once_and_stops_at_an_error() {
        for workers in [0, 1, 3, 64] {
            let seen = Mutex::new(vec![0u8; 100]);
            let states = fan_out(
                100,
                workers,
                "a test",
                || Ok(0usize),
                |count, i| {
                    *count += 1;
                    seen.lock().unwrap()[i] += 1;
                    Ok(())
                },
            )
            .unwrap();
            assert_eq!(states.len(), workers.clamp(1, 100));
            assert_eq!(states.iter().sum::<usize>(), 100);
            assert!(seen.into_inner().unwrap().iter().all(|&c| c == 1));
        }
        let on_caller = std::thread::current().id();
        fan_out(
            1,
            4,
            "a test",
            || Ok(()),
            |_, _| {
                assert_eq!(std::thread::current().id(), on_caller);
                Ok(())
            },
        )
        .unwrap();
        let taken = AtomicUsize::new(0);
        let err = fan_out(
            1000,
            1,
            "a test",
            || Ok(()),
            |_, i| {
                taken.fetch_add(1, Ordering::Relaxed);
                match i {
                    5 => Err(Error::WorkerFailed { task: "item 5" }),
                    _ => Ok(()),
                }
            },
        );
        assert!(matches!(err, Err(Error::WorkerFailed { task: "item 5" })));
        assert_eq!(taken.into_inner(), 6, "no item is taken after an error");
        let err = fan_out(
            10,
            2,
            "a test",
            || Err::<(), _>(Error::WorkerFailed { task: "init" }),
            |_, _| Ok(()),
        );
        assert!(matches!(err, Err(Error::WorkerFailed { task: "init" })));
        let err = fan_out(10, 2, "a test", || Ok(()), |_, _| panic!("a worker fails"));
        assert!(matches!(err, Err(Error::WorkerFailed { task: "a test" })));
    }

    /// The calling thread's work runs while the workers run.
    #[test]
    fn fan_out_beside_runs_the_callers_part_meanwhile() {
        let started = AtomicUsize::new(0);
        let release = AtomicBool::new(false);
        let out = fan_out_beside(
            3,
            "a test",
            || {
                started.fetch_add(1, Ordering::SeqCst);
                while !release.load(Ordering::SeqCst) {
                    std::thread::yield_now();
                }
                Ok(7)
            },
            || {
                while started.load(Ordering::SeqCst) < 3 {
                    std::thread::yield_now();
                }
                release.store(true, Ordering::SeqCst);
            },
        )
        .unwrap();
        assert_eq!(out, [7, 7, 7]);
    }

    #[test]
    fn chunks_cover_everything() {
        let src: Vec<u8> = (0..(3 * PARALLEL_MIN)).map(|i| i as u8).collect();
        let mut dst = vec![0u8; src.len()];
        par_chunks(&src, 1, &mut dst, 1, |s, d| d.copy_from_slice(s));
        assert_eq!(src, dst);
    }

    #[test]
    fn one_thread_per_quarter_of_the_threshold_up_to_the_machine() {
        let machine = available().clamp(1, MAX_THREADS);
        // From the threshold on: one thread per PARALLEL_MIN / 4 elements.
        assert_eq!(threads_for(PARALLEL_MIN), machine.min(4));
        assert_eq!(threads_for(PARALLEL_MIN + PARALLEL_MIN / 4), machine.min(5));
        assert_eq!(threads_for(2 * PARALLEL_MIN), machine.min(8));
        assert_eq!(threads_for(100 * PARALLEL_MIN), machine);
        if std::thread::available_parallelism().map_or(1, |n| n.get()) > 1 {
            assert!(
                threads_for(PARALLEL_MIN) > 1,
                "the machine's cores are used"
            );
        }
    }

    #[test]
    fn chunks_are_whole_elements_on_both_sides() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        // 2-byte elements widened to 4 bytes, as F16 -> F32.
        let n = 2 * PARALLEL_MIN + 3;
        let src: Vec<u8> = (0..2 * n).map(|i| (i % 251) as u8).collect();
        let mut dst = vec![0u8; 4 * n];
        let calls = AtomicUsize::new(0);
        par_chunks(&src, 2, &mut dst, 4, |s, d| {
            calls.fetch_add(1, Ordering::Relaxed);
            assert_eq!(s.len() % 2, 0);
            assert_eq!(s.len() / 2, d.len() / 4, "matching element counts");
            for (e, o) in s.chunks(2).zip(d.chunks_mut(4)) {
                o[..2].copy_from_slice(e);
            }
        });
        assert_eq!(calls.into_inner(), threads_for(n));
        for (e, o) in src.chunks(2).zip(dst.chunks(4)) {
            assert_eq!(e, &o[..2]);
            assert_eq!(&o[2..], &[0, 0]);
        }
    }
}
