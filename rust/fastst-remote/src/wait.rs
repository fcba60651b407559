//! Every wait on a store has a deadline and can be stopped: a caller
//! blocks on the crate's runtime through [`wait`], which ends at the
//! first of the work's end, its deadline (rule `remote-deadline`), or a
//! [`Cancel`] of the waits in flight (the file was closed, a load of it
//! was left, Ctrl-C was heard). Ending a wait drops its requests: their
//! connections are closed, nothing more is received. The many waits of
//! one upload (for room, for its last parts) share one deadline, a
//! [`Budget`].

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use fastst_core::{Error, Result};
use futures::future::Either;
use tokio::sync::watch;

/// Stops the waits in flight on the objects it is given to: each wait
/// started before [`Cancel::cancel`] ends at once with an error, later
/// ones are not affected. Clones share one signal.
#[derive(Clone, Debug)]
pub struct Cancel(Arc<watch::Sender<u64>>);

impl Default for Cancel {
    fn default() -> Self {
        Cancel(Arc::new(watch::Sender::new(0)))
    }
}

impl Cancel {
    /// Ends every wait in flight now.
    pub fn cancel(&self) {
        self.0.send_modify(|n| *n = n.wrapping_add(1));
    }
}

/// The error of a wait ended by [`Cancel::cancel`], doing `what`.
#[cold]
pub(crate) fn stopped(what: String) -> Error {
    Error::Io {
        context: what,
        source: std::io::Error::new(
            std::io::ErrorKind::Interrupted,
            "the read was stopped (the file was closed, a load of it was left, or the wait was interrupted)",
        ),
    }
}

/// Runs `work` on the crate's runtime, blocking this thread, for at most
/// `deadline` and until `cancel` is given; `what` says what was being
/// done, for the error of either.
pub(crate) fn wait<T>(
    work: impl Future<Output = Result<T>>,
    deadline: Duration,
    cancel: &Cancel,
    what: impl FnOnce() -> String,
) -> Result<T> {
    let mut stop = cancel.0.subscribe();
    let ended = crate::runtime()?.block_on(async move {
        let timed = std::pin::pin!(tokio::time::timeout(deadline, work));
        let cancelled = std::pin::pin!(stop.changed());
        match futures::future::select(timed, cancelled).await {
            Either::Left((Ok(done), _)) => Ok(done),
            Either::Left((Err(_), _)) => Err(false),
            Either::Right(_) => Err(true),
        }
    });
    match ended {
        Ok(done) => done,
        Err(false) => Err(Error::RemoteDeadline {
            context: what(),
            seconds: deadline.as_secs_f64(),
        }),
        Err(true) => Err(stopped(what())),
    }
}

/// The time the waits of one upload may take, all together: an upload's
/// overall deadline. Only time spent waiting on the store counts (the
/// caller's own time between its waits, producing the bytes, does not);
/// waits of several threads at once count once.
#[derive(Debug)]
pub(crate) struct Budget {
    limit: Duration,
    state: std::sync::Mutex<Spent>,
}

#[derive(Debug, Default)]
struct Spent {
    /// Waiting time of the waits that ended.
    done: Duration,
    /// Threads waiting now, and since when one has been.
    waiting: usize,
    since: Option<std::time::Instant>,
}

impl Spent {
    fn now(&self) -> Duration {
        self.done + self.since.map_or(Duration::ZERO, |s| s.elapsed())
    }
}

impl Budget {
    /// A budget of `limit`.
    pub(crate) fn new(limit: Duration) -> Budget {
        Budget {
            limit,
            state: std::sync::Mutex::new(Spent::default()),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, Spent> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Runs `wait` (a wait on the store of at most the duration it is
    /// given: `at_most`, or what is left of the budget if less; `None`:
    /// what is left) and counts its time. Rule `remote-deadline` (doing
    /// `what`) instead, once the budget is spent.
    pub(crate) fn wait<T>(
        &self,
        at_most: Option<Duration>,
        what: impl FnOnce() -> String,
        wait: impl FnOnce(Duration) -> Result<T>,
    ) -> Result<T> {
        let left = {
            let mut s = self.state();
            let left = self.limit.saturating_sub(s.now());
            if left.is_zero() {
                return Err(Error::RemoteDeadline {
                    context: what(),
                    seconds: self.limit.as_secs_f64(),
                });
            }
            if s.waiting == 0 {
                s.since = Some(std::time::Instant::now());
            }
            s.waiting += 1;
            left
        };
        let result = wait(at_most.map_or(left, |t| t.min(left)));
        let mut s = self.state();
        s.waiting -= 1;
        if s.waiting == 0 {
            s.done = s.now();
            s.since = None;
        }
        result
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_budget_counts_only_the_time_spent_waiting() {
        let budget = Budget::new(Duration::from_millis(60));
        let what = || "uploading".to_owned();
        // Time outside waits is not counted.
        std::thread::sleep(Duration::from_millis(80));
        let given = budget.wait(None, what, Ok).unwrap();
        assert!(given <= Duration::from_millis(60) && given > Duration::from_millis(30));
        let slice = budget
            .wait(Some(Duration::from_millis(1)), what, Ok)
            .unwrap();
        assert_eq!(slice, Duration::from_millis(1));
        // Waits that take the rest spend it; the next one is refused.
        for _ in 0..2 {
            let _ = budget.wait(None, what, |t| {
                std::thread::sleep(t);
                Ok(())
            });
        }
        let err = budget.wait(None, what, |_| Ok(())).unwrap_err();
        assert_eq!(err.rule(), "remote-deadline");
        assert!(err.to_string().starts_with("uploading: "), "{err}");
    }

    #[test]
    fn a_wait_ends_with_its_work_its_deadline_or_a_cancel() {
        let cancel = Cancel::default();
        let what = || "doing it".to_owned();
        let done = wait(async { Ok(7) }, Duration::from_secs(5), &cancel, what);
        assert_eq!(done.unwrap(), 7);
        let never = futures::future::pending::<Result<()>>();
        let late = wait(never, Duration::from_millis(20), &cancel, what).unwrap_err();
        assert_eq!(late.rule(), "remote-deadline");
        assert!(late.to_string().starts_with("doing it: "), "{late}");
        // A cancel given while the wait runs ends it; one given before does not.
        cancel.cancel();
        let other = cancel.clone();
        let stopper = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            other.cancel();
        });
        let never = futures::future::pending::<Result<()>>();
        let err = wait(never, Duration::from_secs(60), &cancel, what).unwrap_err();
        stopper.join().unwrap();
        match err {
            Error::Io { source, .. } => {
                assert_eq!(source.kind(), std::io::ErrorKind::Interrupted)
            }
            other => panic!("{other}"),
        }
    }
}
