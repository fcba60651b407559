//! The reading threads of a load: each takes the next request in file
//! order (within the limit the reporter allows, and within reach of the
//! first request not read yet), reads it straight into its
//! destination (direct reads too) or through a per-thread buffer (runs of
//! small tensors, conversions), and
//! records the first failure in file order.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, PoisonError};

use super::plan::{elem_size, Part};
use super::{Shared, CONVERT_CHUNK};
use crate::error::Result;
use crate::io::{self, DirectFile, DIRECT_ALIGN};
use crate::read::MappedFile;

/// One reading thread's view of the load.
pub(super) struct Worker<'s, 'a> {
    pub(super) reader: Reader<'s>,
    pub(super) shared: &'s Mutex<Shared<'a>>,
    pub(super) wake_workers: &'s Condvar,
    pub(super) done: &'s AtomicU64,
    pub(super) caller: &'s std::thread::Thread,
}

/// What reading one request needs.
pub(super) struct Reader<'s> {
    pub(super) file: &'s MappedFile,
    pub(super) direct: Option<&'s DirectFile>,
    /// Huge pages while they stay cheap (a cold load, where the probe
    /// found them cheaper).
    pub(super) trial: Option<&'s io::Trial>,
}

/// One reading thread's buffers, allocated on first use: `bounce` as large
/// as the largest request that went through it, `scratch` the partial
/// blocks at either end of a direct read straight into a destination.
#[derive(Default)]
pub(super) struct Buffers {
    bounce: Option<io::ReadBuffer>,
    scratch: Option<io::ReadBuffer>,
}

impl Buffers {
    /// Whether a request went through the bounce buffer.
    #[cfg(test)]
    pub(super) fn bounced(&self) -> bool {
        self.bounce.is_some()
    }
}

impl<'a> Worker<'_, 'a> {
    pub(super) fn run(&self) {
        let mut buffers = Buffers::default();
        while let Some((at, part)) = self.next() {
            let Some(mut turn) = self.read_turn(at) else {
                break;
            };
            let read = self.reader.read(part, &mut buffers, || turn.pass());
            drop(turn);
            match read {
                Ok(n) => {
                    self.done.fetch_add(n, Ordering::AcqRel);
                    let mut g = self.shared.lock().unwrap_or_else(PoisonError::into_inner);
                    if g.read(at) && g.ahead != usize::MAX {
                        drop(g);
                        self.wake_workers.notify_all();
                    }
                }
                Err(e) => {
                    let mut g = self.shared.lock().unwrap_or_else(PoisonError::into_inner);
                    if g.error.as_ref().is_none_or(|(first, _)| at < *first) {
                        g.error = Some((at, e));
                    }
                    g.stop = true;
                    drop(g);
                    self.wake_workers.notify_all();
                }
            }
            self.caller.unpark();
        }
        let mut g = self.shared.lock().unwrap_or_else(PoisonError::into_inner);
        g.running -= 1;
        drop(g);
        self.caller.unpark();
    }

    /// Waits until the request at place `at` may start its read
    /// ([`Shared::read_turn`]); `None` when the load stops first. A source
    /// whose reads take no turns costs no lock here.
    fn read_turn(&self, at: usize) -> Option<Turn<'_, 'a>> {
        if !self.reader.file.one_read_at_a_time() {
            return Some(Turn { worker: None, at });
        }
        let mut g = self.shared.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if g.stop {
                return None;
            }
            if g.may_read(at) {
                return Some(Turn {
                    worker: Some(self),
                    at,
                });
            }
            g = self
                .wake_workers
                .wait(g)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// The next request in file order, with its place in that order, or
    /// `None` when there is none left or the load stops.
    pub(super) fn next(&self) -> Option<(usize, Part<'a>)> {
        let mut g = self.shared.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if g.stop {
                return None;
            }
            let at = g.finished.len() - g.queue.len();
            if (g.issued < g.limit && g.within_reach(at)) || g.queue.len() == 0 {
                let mut part = g.queue.next()?;
                g.issued += part.len as u64;
                if let Some(trial) = self.reader.trial {
                    // Advised here, under the lock, before any request of
                    // the destination can be read.
                    if let (Some(span), true) = (part.span, trial.on()) {
                        trial.advise(span.addr, span.len);
                        g.huge_until = span.end;
                    }
                    part.huge = part.begin < g.huge_until;
                }
                return Some((at, part));
            }
            g = self
                .wake_workers
                .wait(g)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }
}

/// A request's read turn ([`Shared::read_turn`]), passed to the next
/// request once its bytes are read, or when it is dropped (the read
/// failed, or the request needed no conversion). `worker`: `None` once
/// passed, and for a source whose reads take no turns.
pub(super) struct Turn<'w, 'a> {
    worker: Option<&'w Worker<'w, 'a>>,
    at: usize,
}

impl Turn<'_, '_> {
    fn pass(&mut self) {
        let Some(worker) = self.worker.take() else {
            return;
        };
        let mut g = worker.shared.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(turn) = &mut g.read_turn {
            *turn = (*turn).max(self.at + 1);
            drop(g);
            worker.wake_workers.notify_all();
        }
    }
}

impl Drop for Turn<'_, '_> {
    fn drop(&mut self) {
        self.pass();
    }
}

impl Reader<'_> {
    /// Reads (and converts) one request; returns its source bytes.
    /// `read_done` is called once the request's bytes are read, before
    /// they are converted or copied out of the thread's buffer.
    pub(super) fn read(
        &self,
        mut part: Part<'_>,
        buffers: &mut Buffers,
        read_done: impl FnOnce(),
    ) -> Result<u64> {
        self.file.check_unchanged()?;
        let start = self.file.header().data_start() + part.begin;
        let len = part.len;
        if part.scatter {
            // A source that waits on a network: the destinations are
            // faulted in here, in one call each, before the request, so
            // that the threads receiving every connection's bytes never
            // stop on a page fault (and a fault per page costs more); then
            // one request fills them all, in order.
            let first = part.members[0].info;
            let mut dsts: Vec<&mut [u8]> = Vec::with_capacity(part.members.len());
            for m in &mut part.members {
                io::fault_in_writable(m.dst);
                dsts.push(&mut *m.dst);
            }
            self.file.read_request(start, &mut dsts, &first.name)?;
            return Ok(len as u64);
        }
        if part.is_direct_copy() {
            let m = &mut part.members[0];
            if let (Some(trial), true) = (self.trial, part.huge) {
                trial.fault_in(m.dst);
            }
            if let Some(direct) = self.direct {
                let scratch = buffer(&mut buffers.scratch, 0, &m.info.name)?;
                let done = direct.read_into(start, m.dst, scratch.as_mut_slice());
                if let Some(done) = done {
                    done.map_err(|e| self.file.read_failed(e))?;
                    return Ok(len as u64);
                }
            }
            // Cached (or no direct I/O): straight into the destination.
            self.file.read_at(start, m.dst, &m.info.name)?;
            return Ok(len as u64);
        }
        let buf = buffer(&mut buffers.bounce, len, &part.members[0].info.name)?;
        let src = self.fill(start, len, buf, &part.members[0].info.name)?;
        read_done();
        let mut at = 0usize;
        for m in &mut part.members {
            let bytes = &src[at..at + m.len];
            at += m.len;
            if m.to == m.info.dtype {
                m.dst.copy_from_slice(bytes);
            } else {
                let (fs, ts) = (elem_size(m.info.dtype), elem_size(m.to));
                let per = (CONVERT_CHUNK / fs).max(1);
                for (s, d) in bytes.chunks(per * fs).zip(m.dst.chunks_mut(per * ts)) {
                    crate::convert::convert(m.info.dtype, m.to, s, d)?;
                }
            }
        }
        Ok(len as u64)
    }

    /// Reads `len` bytes at absolute offset `start` into `buf`, directly
    /// when a direct descriptor is open (falling back to a buffered read
    /// where the file system refuses it), and returns them.
    fn fill<'b>(
        &self,
        start: u64,
        len: usize,
        buf: &'b mut io::ReadBuffer,
        tensor: &str,
    ) -> Result<&'b [u8]> {
        if let Some(direct) = self.direct {
            if let Some(range) = direct.read(start, len, buf.as_mut_slice()) {
                let range = range.map_err(|e| self.file.read_failed(e))?;
                return Ok(&buf.as_slice()[range]);
            }
        }
        let out = &mut buf.as_mut_slice()[..len];
        self.file.read_request(start, &mut [&mut *out], tensor)?;
        Ok(out)
    }
}

/// A thread's buffer for requests of `len` bytes (read directly, from and
/// to whole aligned blocks), allocated or grown (to a power of two, so
/// that it seldom grows again) on first need (rule
/// `out-of-memory` naming `tensor` when it cannot be had).
fn buffer<'b>(
    slot: &'b mut Option<io::ReadBuffer>,
    len: usize,
    tensor: &str,
) -> Result<&'b mut io::ReadBuffer> {
    let want = (len + 2 * DIRECT_ALIGN as usize).next_power_of_two();
    if slot.as_ref().is_some_and(|b| b.as_slice().len() >= want) {
        if let Some(b) = slot {
            return Ok(b);
        }
    }
    *slot = None;
    Ok(slot.insert(io::ReadBuffer::new(want, tensor)?))
}
