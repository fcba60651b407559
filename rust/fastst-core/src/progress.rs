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

/// A progress line on stderr (or another sink), redrawn at most every 100 ms.
pub struct StderrLine {
    label: String,
    started: Instant,
    last: Mutex<Option<Instant>>,
    out: Mutex<Box<dyn Write + Send>>,
}

/// The redraw interval of a progress line.
const REDRAW: Duration = Duration::from_millis(100);

/// Cells of the bar.
const BAR: usize = 20;

/// Seconds as `m:ss`, or `h:mm:ss` from an hour on.
fn clock(secs: f64) -> String {
    let s = secs.round().min(f64::from(u32::MAX)) as u64;
    let (h, m, s) = (s / 3600, s / 60 % 60, s % 60);
    if h > 0 {
        format!("{h}:{m:02}:{s:02}")
    } else {
        format!("{m}:{s:02}")
    }
}

impl StderrLine {
    /// A line on stderr labelled `label`, written as given: a label naming
    /// a file must be escaped for the terminal first (the Python layer uses
    /// `fastst.cli.text.escape`). Nothing is drawn until the first report.
    pub fn new(label: &str) -> StderrLine {
        StderrLine::to(label, Box::new(std::io::stderr()))
    }

    /// A line written to `out` instead of stderr.
    pub fn to(label: &str, out: Box<dyn Write + Send>) -> StderrLine {
        StderrLine {
            label: label.to_owned(),
            started: Instant::now(),
            last: Mutex::new(None),
            out: Mutex::new(out),
        }
    }

    /// Redraws the line for `done` of `total` bytes, at most every 100 ms
    /// (always for the last report).
    pub fn report(&self, done: u64, total: u64) {
        let now = Instant::now();
        {
            let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
            if last.is_some_and(|t| now.duration_since(t) < REDRAW) && done < total {
                return;
            }
            *last = Some(now);
        }
        let text = self.line(done, total, now.duration_since(self.started));
        self.write(&text);
    }

    /// The text that redraws the line: back to the line's start, clear it,
    /// then `label: [bar] percent done/total MiB, rate MiB/s, ETA m:ss`
    /// (`took m:ss` once done; `ETA --:--` before any byte).
    fn line(&self, done: u64, total: u64, elapsed: Duration) -> String {
        let secs = elapsed.as_secs_f64().max(1e-6);
        let mib = |b: u64| b as f64 / f64::from(1 << 20);
        let share = if total == 0 {
            1.0
        } else {
            (done as f64 / total as f64).min(1.0)
        };
        let filled = (share * BAR as f64) as usize;
        let bar = "#".repeat(filled) + &".".repeat(BAR - filled);
        let when = if done >= total {
            format!("took {}", clock(secs))
        } else if done == 0 {
            "ETA --:--".to_owned()
        } else {
            format!("ETA {}", clock((total - done) as f64 * secs / done as f64))
        };
        format!(
            "\r\x1b[K{}: [{bar}] {:5.1}% {:.0}/{:.0} MiB, {:.0} MiB/s, {when}",
            self.label,
            100.0 * share,
            mib(done),
            mib(total),
            mib(done) / secs
        )
    }

    /// Progress is best effort: a closed stderr must not fail the work.
    fn write(&self, text: &str) {
        let mut out = self.out.lock().unwrap_or_else(|p| p.into_inner());
        let _ = out.write_all(text.as_bytes());
        let _ = out.flush();
    }

    /// Ends the line, if one was drawn: its last state stays on screen.
    pub fn finish(&self) {
        if self.last.lock().map(|l| l.is_some()).unwrap_or(true) {
            self.write("\n");
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// A sink the test can read back.
    #[derive(Clone, Default)]
    struct Sink(Arc<Mutex<Vec<u8>>>);

    impl Write for Sink {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Sink {
        fn text(&self) -> String {
            String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
        }
    }

    #[test]
    fn the_line_shows_a_bar_share_sizes_rate_and_eta() {
        let line = StderrLine::to("model", Box::new(Sink::default()));
        let mib = 1 << 20;
        assert_eq!(
            line.line(3 * mib, 4 * mib, Duration::from_secs(2)),
            "\r\x1b[Kmodel: [###############.....]  75.0% 3/4 MiB, 2 MiB/s, ETA 0:01"
        );
        // Nothing to do counts as done; no time elapsed gives a finite rate.
        assert_eq!(
            line.line(0, 0, Duration::ZERO),
            "\r\x1b[Kmodel: [####################] 100.0% 0/0 MiB, 0 MiB/s, took 0:00"
        );
        assert_eq!(
            line.line(10 * mib, 40 * mib, Duration::from_millis(500)),
            "\r\x1b[Kmodel: [#####...............]  25.0% 10/40 MiB, 20 MiB/s, ETA 0:02"
        );
        // No byte yet: no estimate.
        assert!(line
            .line(0, mib, Duration::from_secs(1))
            .ends_with("[....................]   0.0% 0/1 MiB, 0 MiB/s, ETA --:--"));
        // Long work: hours; a file that grew past its total stays a full bar.
        assert!(line
            .line(mib, 7201 * mib, Duration::from_secs(1))
            .ends_with(", ETA 2:00:00"));
        assert!(line
            .line(2 * mib, mib, Duration::from_secs(75))
            .contains("[####################] 100.0% 2/1 MiB, 0 MiB/s, took 1:15"));
    }

    #[test]
    fn redraws_are_limited_but_the_last_report_is_always_drawn() {
        let sink = Sink::default();
        let line = StderrLine::to("f", Box::new(sink.clone()));
        line.finish(); // nothing drawn yet: nothing to end
        assert_eq!(sink.text(), "");
        line.report(1, 10);
        line.report(2, 10); // within 100 ms of the first: skipped
        let text = sink.text();
        assert_eq!(text.matches("\r\x1b[K").count(), 1, "{text:?}");
        assert!(text.contains(" 10.0% "), "{text:?}");
        line.report(10, 10); // the last one is drawn at once
        let text = sink.text();
        assert_eq!(text.matches("\r\x1b[K").count(), 2, "{text:?}");
        // (The rate and times depend on the clock: only their places are checked.)
        let last = text.rsplit("\r\x1b[K").next().unwrap_or("");
        assert!(
            last.starts_with("f: [####################] 100.0% 0/0 MiB, ")
                && last.contains(" MiB/s, took "),
            "{text:?}"
        );
        std::thread::sleep(REDRAW + Duration::from_millis(20));
        line.report(5, 10); // after the interval: drawn again
        let text = sink.text();
        let last = text.rsplit("\r\x1b[K").next().unwrap_or("");
        assert!(
            last.starts_with("f: [##########..........]  50.0% 0/0 MiB, ")
                && last.contains(" MiB/s, ETA "),
            "{text:?}"
        );
        // The last state stays on screen, ended by a newline.
        line.finish();
        let text = sink.text();
        assert!(
            text.ends_with('\n') && !text.ends_with("\r\x1b[K\n"),
            "{text:?}"
        );
    }
}
