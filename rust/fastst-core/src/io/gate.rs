//! The process's mapping gate: fastst's own changes to the memory map and
//! the fault-ins of destination pieces before their reads take turns.
//!
//! Changes (allocating and advising destinations) hold the gate; a piece
//! faulted in before its read ([`super::in_fault_pieces`]) waits for them.
//! So a batch of changes waits once for the pieces being faulted in, rather
//! than every `mmap` or `madvise` of it waiting for them and every piece
//! queued behind it waiting in turn (the kernel's memory-map lock, which a
//! fault-in takes shared and a change exclusively). Measured:
//! benches/README.md, "Warm whole-file plans and the mapping gate".
//!
//! A piece never waits long: after [`PIECE_WAIT`] it goes on without its
//! fault-in (its read then faults the pages in), so no thread waits on the
//! gate for whatever a changer waits on (a changer may run Python code,
//! which waits for the GIL another reading thread may hold). The thread
//! holding the gate may enter it again, and its own pieces do not wait.

use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::ThreadId;
use std::time::{Duration, Instant};

/// The longest a piece waits for changes to end before it goes on
/// without faulting in.
pub(crate) const PIECE_WAIT: Duration = Duration::from_millis(5);

#[derive(Default)]
struct State {
    /// Pieces being faulted in.
    faulting: usize,
    /// The thread holding the gate for changes, and how many times it
    /// entered it.
    changing: Option<(ThreadId, usize)>,
    /// Changers waiting for it: new pieces wait behind them.
    waiting: usize,
}

struct Gate {
    state: Mutex<State>,
    turn: Condvar,
}

static GATE: Gate = Gate {
    state: Mutex::new(State {
        faulting: 0,
        changing: None,
        waiting: 0,
    }),
    turn: Condvar::new(),
};

fn state() -> MutexGuard<'static, State> {
    GATE.state.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Runs `fault` (faulting a piece in) unless mapping changes hold the
/// gate for longer than [`PIECE_WAIT`]; returns whether it ran.
pub(crate) fn faulting_in(fault: impl FnOnce()) -> bool {
    let deadline = Instant::now() + PIECE_WAIT;
    let me = std::thread::current().id();
    let mut s = state();
    if matches!(s.changing, Some((holder, _)) if holder == me) {
        drop(s);
        fault();
        return true;
    }
    while s.changing.is_some() || s.waiting > 0 {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        s = GATE
            .turn
            .wait_timeout(s, left)
            .unwrap_or_else(PoisonError::into_inner)
            .0;
    }
    s.faulting += 1;
    drop(s);
    let _done = Done;
    fault();
    true
}

/// Ends a piece's turn, also when its fault-in panicked.
struct Done;

impl Drop for Done {
    fn drop(&mut self) {
        let mut s = state();
        s.faulting -= 1;
        if s.faulting == 0 {
            GATE.turn.notify_all();
        }
    }
}

/// Holds the gate for mapping changes from [`enter_changes`] until dropped.
#[must_use = "the gate is held until this is dropped"]
pub struct Changing(());

impl Drop for Changing {
    fn drop(&mut self) {
        let mut s = state();
        s.changing = match s.changing {
            Some((holder, depth)) if depth > 1 => Some((holder, depth - 1)),
            _ => None,
        };
        if s.changing.is_none() {
            GATE.turn.notify_all();
        }
    }
}

/// Waits for the pieces being faulted in (and earlier changers), then
/// holds the gate for mapping changes until the returned value is dropped.
/// Changers wait for each other, and for no one else: hold it only around
/// the changes.
pub fn enter_changes() -> Changing {
    let me = std::thread::current().id();
    let mut s = state();
    if let Some((holder, depth)) = &mut s.changing {
        if *holder == me {
            *depth += 1;
            return Changing(());
        }
    }
    s.waiting += 1;
    while s.changing.is_some() || s.faulting > 0 {
        s = GATE.turn.wait(s).unwrap_or_else(PoisonError::into_inner);
    }
    s.waiting -= 1;
    s.changing = Some((me, 1));
    Changing(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Barrier;

    // The gate is process-wide: these tests run as one, in order.
    #[test]
    fn changes_wait_for_pieces_and_pieces_wait_for_changes_but_not_for_long() {
        // A change waits for a piece being faulted in.
        let started = Barrier::new(2);
        let release = Barrier::new(2);
        let changed = AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                assert!(faulting_in(|| {
                    started.wait();
                    release.wait();
                    assert!(!changed.load(Ordering::SeqCst));
                }));
            });
            started.wait();
            s.spawn(|| {
                let _c = enter_changes();
                changed.store(true, Ordering::SeqCst);
            });
            std::thread::sleep(Duration::from_millis(30));
            assert!(!changed.load(Ordering::SeqCst));
            release.wait();
        });
        assert!(changed.load(Ordering::SeqCst));

        // A piece waits for a change, and runs only after it (or not at
        // all, when the change outlasts its wait: a host slow enough).
        let held = enter_changes();
        let over = AtomicBool::new(false);
        std::thread::scope(|s| {
            let piece = s.spawn(|| {
                let t = Instant::now();
                let ran = faulting_in(|| assert!(over.load(Ordering::SeqCst)));
                ran || t.elapsed() >= PIECE_WAIT
            });
            std::thread::sleep(PIECE_WAIT / 5);
            over.store(true, Ordering::SeqCst);
            drop(held);
            assert!(piece.join().unwrap());
        });

        // A piece gives up on a long change, without running.
        let held = enter_changes();
        let ran = AtomicBool::new(false);
        std::thread::scope(|s| {
            let t = Instant::now();
            let piece = s.spawn(|| faulting_in(|| ran.store(true, Ordering::SeqCst)));
            assert!(!piece.join().unwrap());
            assert!(!ran.load(Ordering::SeqCst) && t.elapsed() >= PIECE_WAIT);
        });
        drop(held);
        assert!(faulting_in(|| ran.store(true, Ordering::SeqCst)) && ran.load(Ordering::SeqCst));

        // The holder enters again, and faults its own pieces in at once;
        // the gate opens when it has left as often as it entered.
        let outer = enter_changes();
        let inner = enter_changes();
        let t = Instant::now();
        assert!(faulting_in(|| ()) && t.elapsed() < PIECE_WAIT);
        drop(inner);
        std::thread::scope(|s| {
            let t = Instant::now();
            assert!(!s.spawn(|| faulting_in(|| ())).join().unwrap());
            assert!(t.elapsed() >= PIECE_WAIT);
        });
        drop(outer);
        std::thread::scope(|s| assert!(s.spawn(|| faulting_in(|| ())).join().unwrap()));
    }
}
