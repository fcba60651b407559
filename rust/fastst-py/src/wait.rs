//! Waiting on a remote store without going deaf to Ctrl-C.
//!
//! Python runs signal handlers only on its main thread, and only when that
//! thread runs Python code; a thread blocked in a read of a store (GIL
//! released) would hear Ctrl-C only once the read ends. So, on the main
//! thread, [`hearing_signals`] runs the work on a helper thread and waits
//! for it in slices of [`WAIT_SLICE`], running the signal handlers
//! between slices; an exception one raises (KeyboardInterrupt) stops the
//! reads in flight ([`fastst_remote::Cancel`]), and is raised once the
//! work has ended (at once: its waits end when cancelled). What the work
//! needs done with the GIL on the calling thread (a progress callback) it
//! asks of its [`Caller`], so that callbacks keep running on the thread
//! that called. Off the main thread (where no handler runs) the work runs
//! on the calling thread, as it would without this.

use std::sync::mpsc;
use std::time::Duration;

use fastst_remote::Cancel;
use pyo3::exceptions::{PyOSError, PyRuntimeError};
use pyo3::prelude::*;

/// How long a wait lasts before the signal handlers run: Ctrl-C is heard
/// within this.
pub(crate) const WAIT_SLICE: Duration = Duration::from_millis(100);

/// Something to run with the GIL on the waiting thread.
type Job<'env> = Box<dyn FnOnce(Python<'_>) + Send + 'env>;

/// Runs functions with the GIL on the thread that called
/// [`hearing_signals`], for the work running on the helper thread.
pub(crate) struct Caller<'env> {
    jobs: Option<mpsc::Sender<Job<'env>>>,
}

impl<'env> Caller<'env> {
    /// `f` run with the GIL on the calling thread, and its result (`None`
    /// only if the calling thread no longer takes work, which it does
    /// until the work ends).
    pub(crate) fn call<R: Send + 'env>(
        &self,
        f: impl FnOnce(Python<'_>) -> R + Send + 'env,
    ) -> Option<R> {
        let Some(jobs) = &self.jobs else {
            return Some(Python::with_gil(f));
        };
        let (tx, rx) = mpsc::sync_channel(1);
        let job: Job<'env> = Box::new(move |py| {
            let _ = tx.send(f(py));
        });
        if let Err(mpsc::SendError(job)) = jobs.send(job) {
            Python::with_gil(job);
        }
        rx.recv().ok()
    }
}

/// Whether this thread is Python's main thread (the one that runs signal
/// handlers).
fn on_main_thread(py: Python<'_>) -> bool {
    let threading = match py.import("threading") {
        Ok(m) => m,
        Err(_) => return false,
    };
    let main = threading
        .call_method0("main_thread")
        .and_then(|t| t.getattr("ident"));
    let this = threading.call_method0("get_ident");
    match (main, this) {
        (Ok(main), Ok(this)) => main.eq(this).unwrap_or(false),
        _ => false,
    }
}

/// Runs `work` without the GIL, hearing signals while it waits when this
/// is the main thread (see the module's documentation): an exception a
/// signal handler raises gives `cancel` (the reads of the work stop) and
/// is returned once the work has ended. Without `cancel` (a local file),
/// or off the main thread, `work` runs here with the GIL released.
pub(crate) fn hearing_signals<'env, T: Send>(
    py: Python<'_>,
    cancel: Option<&Cancel>,
    work: impl FnOnce(&Caller<'env>) -> T + Send + 'env,
) -> PyResult<T> {
    let Some(cancel) = cancel.filter(|_| on_main_thread(py)) else {
        return Ok(py.allow_threads(|| work(&Caller { jobs: None })));
    };
    std::thread::scope(|scope| {
        let (tx, mut rx) = mpsc::channel::<Job<'env>>();
        let helper = std::thread::Builder::new()
            .name("fastst-wait".into())
            .spawn_scoped(scope, move || work(&Caller { jobs: Some(tx) }));
        let helper = helper.map_err(|e| {
            PyOSError::new_err(format!("cannot start a thread to wait on the store: {e}"))
        })?;
        let mut raised: Option<PyErr> = None;
        loop {
            let (back, got) = py.allow_threads(move || {
                let got = rx.recv_timeout(WAIT_SLICE);
                (rx, got)
            });
            rx = back;
            match got {
                Ok(job) => job(py),
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
                Err(mpsc::RecvTimeoutError::Timeout) if raised.is_none() => {
                    if let Err(e) = py.check_signals() {
                        raised = Some(e);
                        cancel.cancel();
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
            }
        }
        let done = py.allow_threads(|| helper.join());
        match (raised, done) {
            (Some(e), _) => Err(e),
            (None, Ok(out)) => Ok(out),
            (None, Err(_)) => Err(PyRuntimeError::new_err(
                "a remote read stopped without finishing (its thread panicked)",
            )),
        }
    })
}
