//! Thread policy, in one place: how many threads a piece of work gets, and
//! the scoped fan-out over matching chunks used by copies and conversions.

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

/// Bytes of one tensor each thread of a per-call copy or conversion gets
/// at least: a thread's start, its first touches of fresh memory and the
/// wait for the slowest one cost more than they save below this.
const PER_CALL_THREAD_BYTES: usize = 16 << 20;

/// Threads for one call copying or converting a tensor of `bytes` bytes
/// (read from the file): one per [`PER_CALL_THREAD_BYTES`], up to the
/// machine's parallelism and at most 16.
pub(crate) fn threads_for_bytes(bytes: usize) -> usize {
    available()
        .clamp(1, MAX_THREADS)
        .min(bytes / PER_CALL_THREAD_BYTES)
        .max(1)
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
    fn per_call_threads_get_16_mib_each() {
        let machine = available().clamp(1, MAX_THREADS);
        assert_eq!(threads_for_bytes(0), 1);
        assert_eq!(threads_for_bytes((32 << 20) - 1), 1);
        assert_eq!(threads_for_bytes(32 << 20), machine.min(2));
        assert_eq!(threads_for_bytes(usize::MAX), machine);
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
