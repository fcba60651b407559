//! Progress of long work (hashing, verifying many GB), reported once, here:
//! work takes a [`Progress`] callback, and [`StderrLine`] is the one
//! renderer, a line on standard error redrawn in place. The Python glue
//! hands one to the core when the command asks for progress (the command
//! asks only when stderr is a terminal); it writes nothing itself.

use std::io::Write;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Called with `(bytes done, bytes in all)` while long work goes on; it may
/// be called from any thread, often (every few MiB).
pub type Progress<'a> = Option<&'a (dyn Fn(u64, u64) + Sync)>;

/// A progress line on stderr, redrawn at most every 100 ms.
pub struct StderrLine {
    label: String,
    started: Instant,
    last: Mutex<Option<Instant>>,
}

impl StderrLine {
    /// A line labelled `label` (nothing is drawn until the first report).
    pub fn new(label: &str) -> StderrLine {
        StderrLine {
            label: label.to_owned(),
            started: Instant::now(),
            last: Mutex::new(None),
        }
    }

    /// Redraws the line for `done` of `total` bytes, at most every 100 ms
    /// (always for the last report).
    pub fn report(&self, done: u64, total: u64) {
        let now = Instant::now();
        {
            let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
            if last.is_some_and(|t| now.duration_since(t) < Duration::from_millis(100))
                && done < total
            {
                return;
            }
            *last = Some(now);
        }
        let secs = now.duration_since(self.started).as_secs_f64().max(1e-6);
        let mib = |b: u64| b as f64 / f64::from(1 << 20);
        let pct = if total == 0 {
            100.0
        } else {
            100.0 * done as f64 / total as f64
        };
        // Progress is best effort: a closed stderr must not fail the work.
        let _ = write!(
            std::io::stderr(),
            "\r\x1b[K{}: {pct:5.1}% {:.0}/{:.0} MiB, {:.0} MiB/s",
            self.label,
            mib(done),
            mib(total),
            mib(done) / secs
        );
    }

    /// Clears the line, if one was drawn.
    pub fn finish(&self) {
        if self.last.lock().map(|l| l.is_some()).unwrap_or(true) {
            let _ = write!(std::io::stderr(), "\r\x1b[K");
        }
    }
}
