//! Work on the crate's runtime that writes into buffers its caller lends
//! it: the bytes of a ranged GET are copied into their destination by the
//! runtime's thread that reads the connection, instead of each chunk being
//! handed to a thread blocked on the runtime (two wake-ups of another
//! thread per chunk).
//!
//! A task of the runtime must own what it holds, so the buffers travel as
//! pointers; the borrows stay sound because the caller cannot get its
//! buffers back before the task's future is gone: [`Lent`] (the caller's
//! side) waits for it, and when it is dropped early (a deadline, a
//! cancel), aborts the task and blocks until the runtime has dropped the
//! future.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::task::{Context, Poll};

use fastst_core::{Error, Result};
use tokio::task::JoinHandle;

/// Set once the task's future is dropped (finished, aborted or unwound).
#[derive(Default)]
struct Gone {
    done: Mutex<bool>,
    changed: Condvar,
}

impl Gone {
    fn wait(&self) {
        let mut done = self.done.lock().unwrap_or_else(PoisonError::into_inner);
        while !*done {
            done = self
                .changed
                .wait(done)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }
}

/// Lives inside the task's future: marks [`Gone`] when dropped with it.
struct Marker(Arc<Gone>);

impl Drop for Marker {
    fn drop(&mut self) {
        *self.0.done.lock().unwrap_or_else(PoisonError::into_inner) = true;
        self.0.changed.notify_all();
    }
}

/// The lent buffers, as the task holds them.
struct Buffers(Vec<(*mut u8, usize)>);

// SAFETY: the buffers are `&mut [u8]`s handed over whole to the one task
// that uses them (the caller keeps no access while they are lent), and
// bytes may be written from any thread.
unsafe impl Send for Buffers {}

/// The caller's side of a task writing into its buffers: the task's
/// output, and on drop, the guarantee that the task no longer runs.
pub(crate) struct Lent<'b> {
    handle: JoinHandle<Result<()>>,
    gone: Arc<Gone>,
    /// The buffers stay borrowed for as long as the task may write to them.
    _buffers: std::marker::PhantomData<&'b mut [u8]>,
}

/// Runs `work(bufs)` as a task of the crate's runtime; the returned
/// [`Lent`] resolves to its result. Must be awaited (or dropped) on a
/// thread that blocks on the runtime (`crate::wait`), not inside one of
/// its tasks: dropping it before the task ends blocks until the runtime
/// has dropped the task's future.
pub(crate) fn on_runtime<'b, W, F>(bufs: Vec<&'b mut [u8]>, work: W) -> Result<Lent<'b>>
where
    W: FnOnce(Vec<&'static mut [u8]>) -> F + Send + 'static,
    F: Future<Output = Result<()>> + Send + 'static,
{
    let runtime = crate::runtime()?;
    let gone = Arc::new(Gone::default());
    let marker = Marker(Arc::clone(&gone));
    let lent = Buffers(
        bufs.into_iter()
            .map(|b| (b.as_mut_ptr(), b.len()))
            .collect(),
    );
    let handle = runtime.spawn(async move {
        let _marker = marker;
        let lent = lent;
        // SAFETY: each pair is one of the caller's `&'b mut [u8]`s (disjoint:
        // they were distinct mutable borrows), unused by the caller while
        // lent. `Lent` holds those borrows and does not let go of them
        // before this future is dropped (`Marker`, dropped with it, sets
        // `Gone`, which `Lent::drop` waits for), so the slices are valid and
        // exclusive for as long as this future exists; the `'static` never
        // escapes it, as `work` and its future are both dropped here.
        let bufs = lent
            .0
            .into_iter()
            .map(|(ptr, len)| unsafe { std::slice::from_raw_parts_mut(ptr, len) })
            .collect();
        work(bufs).await
    });
    Ok(Lent {
        handle,
        gone,
        _buffers: std::marker::PhantomData,
    })
}

impl Future for Lent<'_> {
    type Output = Result<()>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        match Pin::new(&mut self.handle).poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Ok(done)) => Poll::Ready(done),
            Poll::Ready(Err(_)) => Poll::Ready(Err(Error::WorkerFailed {
                task: "a remote read",
            })),
        }
    }
}

impl Drop for Lent<'_> {
    fn drop(&mut self) {
        // Finished or not, the buffer is handed back only once the task's
        // future is gone.
        self.handle.abort();
        self.gone.wait();
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_lent_buffer_is_filled_and_comes_back_only_once_the_task_is_gone() {
        let rt = crate::runtime().unwrap();
        let mut buf = vec![0u8; 8];
        let done = rt.block_on(
            on_runtime(vec![&mut buf[..]], |bufs| async move {
                bufs.into_iter().for_each(|b| b.fill(7));
                Ok(())
            })
            .unwrap(),
        );
        assert!(done.is_ok());
        assert_eq!(buf, [7u8; 8]);
        // Dropped before it ends (a deadline): the task is stopped, and the
        // buffer is not written after the drop returns.
        let written = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = Arc::clone(&written);
        let lent = on_runtime(vec![&mut buf[..]], move |bufs| async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            bufs.into_iter().for_each(|b| b.fill(9));
            flag.store(true, std::sync::atomic::Ordering::SeqCst);
            Ok(())
        })
        .unwrap();
        let timed =
            rt.block_on(async { tokio::time::timeout(Duration::from_millis(20), lent).await });
        assert!(timed.is_err());
        std::thread::sleep(Duration::from_millis(300));
        assert!(!written.load(std::sync::atomic::Ordering::SeqCst));
        assert_eq!(buf, [7u8; 8]);
        // A task that panics is an error, not a panic of the caller.
        let boom = |_: Vec<&'static mut [u8]>| async {
            if std::hint::black_box(true) {
                panic!("boom");
            }
            Ok(())
        };
        let failed = rt.block_on(on_runtime(vec![&mut buf[..]], boom).unwrap());
        assert_eq!(failed.unwrap_err().rule(), "worker-failed");
    }
}
