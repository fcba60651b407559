//! An object written from its layout: the streaming writer's tensors, in
//! any order and from any thread, uploaded part by part as the parts fill,
//! the object appearing only when every tensor was written.
//!
//! The [`WritePlan`] fixes the object's length and every tensor's byte
//! range before any data, so the multipart upload's parts are planned
//! ahead: part `k` holds bytes `k * part_size ..` of the object
//! ([`crate::upload::part_size`] sizes them, as for [`crate::Upload`]).
//! Each byte written is copied into its part's buffer; the write that
//! completes a part (every byte of it written, whichever tensors and
//! threads they came from) sends it under its own part number
//! (`MultipartStore::put_part`: the numbers are ours, not the order of
//! sending), so tensors may come in any order.
//!
//! Memory: a part's buffer exists from its first written byte until its
//! upload is answered. At most [`crate::upload::max_in_flight`] parts are
//! on their way; a part completed while that many are is queued and sent
//! as soon as one is answered, and writers wait ([`LayoutUpload::backlogged`],
//! [`LayoutUpload::wait_for_room`]) while parts are queued. Waits are only ever for
//! answers of the store, never for a partly written part, so one thread
//! writing out of order cannot stall itself. Tensors written in layout
//! order hold about one partial part plus the parts in flight; tensors
//! written out of order also hold every part started and not yet complete.
//!
//! Whole or nothing: [`LayoutUpload::close`] checks every tensor was
//! written ([`Ledger`], the local writer's rules), then
//! [`LayoutUpload::complete`] waits for the last parts and completes the
//! upload, the last request: only then does the object (new, or replacing
//! the old one) appear. A tensor missing, a part the store refuses after
//! its retries, [`LayoutUpload::abort`], and dropping an unfinished writer
//! abort the upload; an old object under the key stays as it was.
//!
//! Deadlines, as for [`crate::Upload`]: the waits for the store's answers
//! to the parts share one deadline ([`crate::Tuning::deadline`] for every
//! [`crate::Tuning::concurrency`] parts of the object); the start, the
//! completion and the abort have one each (rule `remote-deadline`).
//!
//! A write that stops part-way gives its tensor back: its bytes are taken
//! out of the parts not yet complete, and it may be written again, in full
//! ([`Ledger::release`]). If a part holding some of them was complete
//! already (sent, or queued), the tensor cannot be written again and the
//! upload cannot complete (rule `tensor-written-twice` says so).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use fastst_core::{Dtype, Error, Ledger, Result, WritePlan};
use object_store::multipart::{MultipartStore, PartId};
use object_store::path::Path;
use object_store::{MultipartId, PutPayload};
use tokio::task::AbortHandle;

use crate::error::from_store;
use crate::options::{ConfigError, Tuning};
use crate::redact::display;
use crate::runtime::runtime;
use crate::upload::{max_in_flight, object_to_write, part_size};
use crate::wait::{wait, Budget, Cancel};
use crate::OpenError;

/// How long [`LayoutUpload::complete`] waits between looks at the parts
/// in flight (the caller, which hears Ctrl-C, waits first).
const SETTLE_SLICE: Duration = Duration::from_millis(100);

/// Where one part of the upload stands.
enum Part {
    /// No byte of it written yet: no buffer.
    Empty,
    /// Some bytes written: its buffer (the part's length of capacity, its
    /// bytes set up to the furthest written, see [`put`]) and how many of
    /// its bytes were written.
    Filling {
        buf: Arc<Mutex<Vec<u8>>>,
        filled: u64,
    },
    /// Every byte written; queued until a part in flight is answered.
    Full(Vec<u8>),
    /// On its way to the store.
    Sending,
    /// Stored.
    Sent(PartId),
}

/// The parts, and what is in flight.
struct Table {
    parts: Vec<Part>,
    /// Complete parts waiting for room, oldest first.
    queued: VecDeque<usize>,
    /// Parts sent whose answer has not come yet.
    in_flight: usize,
    /// The tasks of the parts in flight, by part.
    sending: HashMap<usize, AbortHandle>,
    /// The first part the store refused (after its retries).
    failure: Option<Error>,
    /// Completed or aborted: nothing more is sent.
    ended: bool,
}

/// What the writers and the tasks of the parts share.
struct Inner {
    ledger: Ledger,
    store: Arc<dyn MultipartStore>,
    path: Path,
    id: MultipartId,
    part_size: u64,
    max_in_flight: usize,
    table: Mutex<Table>,
    /// Notified whenever a part is answered (and when the upload ends).
    answered: Condvar,
    /// The deadline of the waits for answers, all together.
    budget: Budget,
    /// The deadline of one request (the completion, the abort).
    deadline: Duration,
}

/// An object being written from its layout with a multipart upload (see
/// the module's documentation). Every method takes `&self`: one writer is
/// shared by the threads that write its tensors.
pub struct LayoutUpload {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for LayoutUpload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let t = self.inner.table();
        f.debug_struct("LayoutUpload")
            .field("path", &self.inner.path)
            .field("part_size", &self.inner.part_size)
            .field("parts", &t.parts.len())
            .field("in_flight", &t.in_flight)
            .field("queued", &t.queued.len())
            .finish_non_exhaustive()
    }
}

/// `e` again (a stored failure is reported to every caller that meets it).
fn again(e: &Error) -> Error {
    match e {
        Error::Io { context, source } => Error::Io {
            context: context.clone(),
            source: match source.raw_os_error() {
                Some(no) => std::io::Error::from_raw_os_error(no),
                None => std::io::Error::new(source.kind(), source.to_string()),
            },
        },
        Error::RemoteAnswerOverCap { context, cap } => Error::RemoteAnswerOverCap {
            context: context.clone(),
            cap: *cap,
        },
        other => Error::Io {
            context: "the upload failed".into(),
            source: std::io::Error::other(other.to_string()),
        },
    }
}

impl Inner {
    fn table(&self) -> MutexGuard<'_, Table> {
        // Every update of the table is complete when the lock is let go; a
        // panic elsewhere leaves it consistent.
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn object_len(&self) -> u64 {
        self.ledger.plan().total_len()
    }

    /// Bytes `start..end` of the object that part `k` holds.
    fn bounds(&self, k: usize) -> (u64, u64) {
        let start = (k as u64).saturating_mul(self.part_size);
        (
            start,
            start.saturating_add(self.part_size).min(self.object_len()),
        )
    }

    /// What part `k` holds, for messages: ` (the header and tensors "a" to "b")`.
    fn label(&self, k: usize) -> String {
        let plan = self.ledger.plan();
        let ds = plan.data_start();
        let (a, b) = self.bounds(k);
        let tensors = plan.tensors();
        let from = tensors.partition_point(|t| ds.saturating_add(t.end) <= a);
        let mut inside = tensors[from..]
            .iter()
            .take_while(|t| ds.saturating_add(t.begin) < b)
            .filter(|t| t.byte_len() > 0);
        let named = match (inside.next(), inside.last()) {
            (None, _) => None,
            (Some(f), None) => Some(format!("tensor {:?}", f.name)),
            (Some(f), Some(l)) => Some(format!("tensors {:?} to {:?}", f.name, l.name)),
        };
        match (a < ds, named) {
            (true, None) => " (the header)".into(),
            (true, Some(t)) => format!(" (the header and {t})"),
            (false, Some(t)) => format!(" ({t})"),
            (false, None) => String::new(),
        }
    }

    /// The stored failure, or rule `closed-file` once ended.
    fn check(&self, t: &Table) -> Result<()> {
        match (&t.failure, t.ended) {
            (Some(e), _) => Err(again(e)),
            (None, true) => Err(Error::WriterClosed),
            (None, false) => Ok(()),
        }
    }

    /// Copies `bytes`, the object's bytes from `at`, into their parts,
    /// sending (or queueing) each part they complete. Returns how many of
    /// them were counted in their parts, and the error that stopped it.
    fn place(self: &Arc<Self>, mut at: u64, mut bytes: &[u8]) -> (u64, Result<()>) {
        let mut placed = 0u64;
        while !bytes.is_empty() {
            let k = usize::try_from(at / self.part_size).unwrap_or(usize::MAX);
            let (start, end) = self.bounds(k);
            let Some(n) = usize::try_from(end.saturating_sub(at))
                .ok()
                .map(|n| n.min(bytes.len()))
                .filter(|&n| n > 0)
            else {
                let reason = format!("byte {at} lies past the object's end");
                return (placed, Err(Error::StreamOrder { reason }));
            };
            let buf = match self.buffer(k, start, end) {
                Ok(buf) => buf,
                Err(e) => return (placed, Err(e)),
            };
            put(
                &mut buf.lock().unwrap_or_else(|e| e.into_inner()),
                (at - start) as usize,
                &bytes[..n],
            );
            // Let go of the buffer before counting: the count that
            // completes the part finds no other holder.
            drop(buf);
            let mut t = self.table();
            let len = end - start;
            match t.parts.get_mut(k) {
                Some(Part::Filling { filled, .. }) => {
                    *filled += n as u64;
                    if *filled >= len {
                        self.full(&mut t, k);
                    }
                }
                // Ended meanwhile (aborted, or failed and cleared).
                _ => {
                    let e = self.check(&t).err().unwrap_or_else(|| Error::StreamOrder {
                        reason: format!("bytes {start}..{end} of the object were sent already"),
                    });
                    return (placed, Err(e));
                }
            }
            drop(t);
            placed += n as u64;
            at += n as u64;
            bytes = &bytes[n..];
        }
        (placed, Ok(()))
    }

    /// The buffer of part `k` (bytes `start..end`), made at its first
    /// byte (rule `out-of-memory` when it cannot be).
    fn buffer(&self, k: usize, start: u64, end: u64) -> Result<Arc<Mutex<Vec<u8>>>> {
        let existing = |t: &Table| match t.parts.get(k) {
            Some(Part::Filling { buf, .. }) => Ok(Some(buf.clone())),
            Some(Part::Empty) => Ok(None),
            _ => Err(Error::StreamOrder {
                reason: format!(
                    "bytes {start}..{end} of the object were complete and sent already"
                ),
            }),
        };
        {
            let t = self.table();
            self.check(&t)?;
            if let Some(buf) = existing(&t)? {
                return Ok(buf);
            }
        }
        // Made without the lock; its bytes are set as they are written.
        let len = usize::try_from(end - start).unwrap_or(usize::MAX);
        let mut bytes = Vec::new();
        bytes
            .try_reserve_exact(len)
            .map_err(|_| Error::OutOfMemory {
                bytes: end - start,
                tensor: String::new(),
            })?;
        let made = Arc::new(Mutex::new(bytes));
        let mut t = self.table();
        self.check(&t)?;
        if let Some(buf) = existing(&t)? {
            return Ok(buf);
        }
        if let Some(slot) = t.parts.get_mut(k) {
            *slot = Part::Filling {
                buf: made.clone(),
                filled: 0,
            };
        }
        Ok(made)
    }

    /// Part `k` is complete: sent now when there is room, else queued.
    fn full(self: &Arc<Self>, t: &mut Table, k: usize) {
        let Some(Part::Filling { buf, .. }) = t.parts.get(k) else {
            return;
        };
        let bytes = std::mem::take(&mut *buf.lock().unwrap_or_else(|e| e.into_inner()));
        if t.in_flight < self.max_in_flight {
            self.send(t, k, bytes);
        } else if let Some(slot) = t.parts.get_mut(k) {
            *slot = Part::Full(bytes);
            t.queued.push_back(k);
        }
    }

    /// Sends part `k` as a task on the crate's runtime.
    fn send(self: &Arc<Self>, t: &mut Table, k: usize, bytes: Vec<u8>) {
        let rt = match runtime() {
            Ok(rt) => rt,
            Err(e) => {
                t.failure.get_or_insert(e);
                return;
            }
        };
        if let Some(slot) = t.parts.get_mut(k) {
            *slot = Part::Sending;
        }
        t.in_flight += 1;
        let answer = Answer {
            inner: Arc::clone(self),
            part: k,
            given: false,
        };
        let task = rt.spawn(async move {
            let mut answer = answer;
            let inner = Arc::clone(&answer.inner);
            let got = inner
                .store
                .put_part(&inner.path, &inner.id, k, PutPayload::from(bytes))
                .await;
            answer.give(got.map_err(|e| {
                let (a, b) = inner.bounds(k);
                let what = format!(
                    "cannot upload bytes {a}..{b} of the object{}",
                    inner.label(k)
                );
                from_store(&what, e)
            }));
        });
        t.sending.insert(k, task.abort_handle());
    }

    /// The store's answer for part `k`: the next queued part goes.
    fn answered(self: &Arc<Self>, k: usize, got: Result<PartId>) {
        let mut t = self.table();
        t.in_flight = t.in_flight.saturating_sub(1);
        t.sending.remove(&k);
        match got {
            Ok(id) => {
                if let Some(slot) = t.parts.get_mut(k) {
                    *slot = Part::Sent(id);
                }
            }
            Err(e) => {
                // Its bytes are gone with its task.
                if let Some(slot) = t.parts.get_mut(k) {
                    *slot = Part::Empty;
                }
                if !t.ended {
                    t.failure.get_or_insert(e);
                }
                // Nothing more will be sent: the queued parts' memory goes.
                while let Some(q) = t.queued.pop_front() {
                    if let Some(slot) = t.parts.get_mut(q) {
                        *slot = Part::Empty;
                    }
                }
            }
        }
        if t.failure.is_none() && !t.ended {
            if let Some(next) = t.queued.pop_front() {
                let slot = t
                    .parts
                    .get_mut(next)
                    .map(|p| std::mem::replace(p, Part::Empty));
                if let Some(Part::Full(bytes)) = slot {
                    self.send(&mut t, next, bytes);
                }
            }
        }
        drop(t);
        self.answered.notify_all();
    }

    /// Takes bytes `at..at + len` of the object (a write that stopped) out
    /// of their parts; false when some lie in a part that was complete
    /// already (they cannot be taken back).
    fn unplace(&self, at: u64, len: u64) -> bool {
        let mut t = self.table();
        let (mut pos, end) = (at, at.saturating_add(len));
        let mut back = true;
        while pos < end {
            let k = usize::try_from(pos / self.part_size).unwrap_or(usize::MAX);
            let (_, part_end) = self.bounds(k);
            let n = part_end.min(end).saturating_sub(pos);
            if n == 0 {
                break;
            }
            match t.parts.get_mut(k) {
                Some(Part::Filling { filled, .. }) => *filled = filled.saturating_sub(n),
                _ => back = false,
            }
            pos += n;
        }
        back
    }

    /// Ends the upload here (nothing more is sent, the parts in flight are
    /// cancelled, the buffers let go); true when it was not ended yet.
    fn end(&self) -> bool {
        let handles: Vec<AbortHandle> = {
            let mut t = self.table();
            if std::mem::replace(&mut t.ended, true) {
                return false;
            }
            t.queued.clear();
            for part in t.parts.iter_mut() {
                if matches!(part, Part::Filling { .. } | Part::Full(_)) {
                    *part = Part::Empty;
                }
            }
            t.sending.drain().map(|(_, h)| h).collect()
        };
        for h in handles {
            h.abort();
        }
        self.answered.notify_all();
        true
    }
}

/// Copies `bytes` to offset `from` of the part buffer `buf`, whose
/// capacity is the part's length: bytes written in order are appended (no
/// byte is set twice), a gap left by bytes written ahead is zero-filled
/// until its own bytes come.
fn put(buf: &mut Vec<u8>, from: usize, bytes: &[u8]) {
    if buf.len() < from {
        buf.resize(from, 0);
    }
    let inside = buf.len().min(from + bytes.len()) - from;
    if let Some(dest) = buf.get_mut(from..from + inside) {
        dest.copy_from_slice(&bytes[..inside]);
    }
    buf.extend_from_slice(&bytes[inside..]);
}

/// The answer for one part, given once: by its task, or, when the task is
/// cancelled or panics, when it is dropped (so no part stays counted in
/// flight forever).
struct Answer {
    inner: Arc<Inner>,
    part: usize,
    given: bool,
}

impl Answer {
    fn give(&mut self, got: Result<PartId>) {
        self.given = true;
        self.inner.answered(self.part, got);
    }
}

impl Drop for Answer {
    fn drop(&mut self) {
        if !self.given {
            self.given = true;
            let stopped = Err(Error::WorkerFailed {
                task: "the upload of a part",
            });
            self.inner.answered(self.part, stopped);
        }
    }
}

impl LayoutUpload {
    /// Starts the multipart upload of the object `url` (of a cloud store),
    /// configured by `options` as reads are, to hold the file `plan` lays
    /// out; the header goes into the first parts at once. Nothing appears
    /// under the key until [`LayoutUpload::complete`].
    pub fn start(
        url: &str,
        options: &[(String, String)],
        plan: WritePlan,
    ) -> Result<LayoutUpload, OpenError> {
        let (store, path, tuning) = object_to_write(url, options)?;
        let Some(parts) = store.parts else {
            return Err(OpenError::Config(ConfigError(format!(
                "{}: this store takes no multipart uploads",
                display(url)
            ))));
        };
        let size = part_size(tuning.part, plan.total_len());
        Ok(LayoutUpload::in_store(parts, path, plan, size, tuning)?)
    }

    /// [`LayoutUpload::start`] in `store` at `path`, in parts of
    /// `part_size` bytes, at most `tuning.concurrency` of them in flight
    /// (and [`crate::upload::IN_FLIGHT_BYTES`]), within the deadlines of
    /// `tuning` (see the module's documentation).
    pub fn in_store(
        store: Arc<dyn MultipartStore>,
        path: Path,
        plan: WritePlan,
        part_size: usize,
        tuning: Tuning,
    ) -> Result<LayoutUpload> {
        let what = "cannot start the upload";
        let id = wait(
            async { (store.create_multipart(&path).await).map_err(|e| from_store(what, e)) },
            tuning.deadline,
            &Cancel::default(),
            || what.into(),
        )?;
        let part_size = part_size.max(1);
        let count =
            usize::try_from(plan.total_len().div_ceil(part_size as u64).max(1)).map_err(|_| {
                Error::FileTooLarge {
                    reason: "the object has more parts than this system can count".into(),
                }
            })?;
        let mut parts = Vec::new();
        parts
            .try_reserve_exact(count)
            .map_err(|_| Error::OutOfMemory {
                bytes: count as u64,
                tensor: String::new(),
            })?;
        parts.extend((0..count).map(|_| Part::Empty));
        let upload = LayoutUpload {
            inner: Arc::new(Inner {
                ledger: Ledger::new(plan),
                store,
                path,
                id,
                part_size: part_size as u64,
                max_in_flight: max_in_flight(part_size, tuning.concurrency),
                table: Mutex::new(Table {
                    parts,
                    queued: VecDeque::new(),
                    in_flight: 0,
                    sending: HashMap::new(),
                    failure: None,
                    ended: false,
                }),
                answered: Condvar::new(),
                budget: Budget::new(tuning.deadline_for(count)),
                deadline: tuning.deadline,
            }),
        };
        let inner = &upload.inner;
        let (_, placed) = inner.place(0, inner.ledger.plan().header());
        if let Err(e) = placed {
            let _ = upload.abort();
            return Err(e);
        }
        Ok(upload)
    }

    /// The layout being written.
    pub fn plan(&self) -> &WritePlan {
        self.inner.ledger.plan()
    }

    /// Bytes per part (the last one may be shorter).
    pub fn part_size(&self) -> usize {
        usize::try_from(self.inner.part_size).unwrap_or(usize::MAX)
    }

    /// The most parts in flight at once.
    pub fn max_in_flight(&self) -> usize {
        self.inner.max_in_flight
    }

    /// Parts whose buffers are held now: started and not complete,
    /// complete and queued, or on their way.
    pub fn buffers_held(&self) -> usize {
        let t = self.inner.table();
        t.parts
            .iter()
            .filter(|p| matches!(p, Part::Filling { .. } | Part::Full(_) | Part::Sending))
            .count()
    }

    /// Names of the tensors not written completely yet, in the layout's
    /// order.
    pub fn missing(&self) -> Vec<&str> {
        self.inner.ledger.missing()
    }

    /// True once closed ([`LayoutUpload::close`]) or aborted.
    pub fn is_closed(&self) -> bool {
        self.inner.ledger.is_closed()
    }

    /// Starts writing tensor `name`, which must be in the layout with
    /// exactly `dtype` and `shape`, and be neither written nor being
    /// written (the rules of [`Ledger::begin`]); a part the store refused
    /// is reported here first. Its bytes are then given to the
    /// [`TensorUpload`], in order.
    pub fn begin(&self, name: &str, dtype: Dtype, shape: &[u64]) -> Result<TensorUpload<'_>> {
        if let Some(e) = &self.inner.table().failure {
            return Err(again(e));
        }
        let index = self.inner.ledger.begin(name, dtype, shape)?;
        let start = self
            .inner
            .ledger
            .planned(index)
            .map(|t| self.plan().data_start().saturating_add(t.begin));
        let start = match start {
            Ok(start) => start,
            Err(e) => {
                self.inner.ledger.release(index, true);
                return Err(e);
            }
        };
        Ok(TensorUpload {
            upload: self,
            index,
            start,
            filled: 0,
            finished: false,
        })
    }

    /// Whether complete parts wait for room: then writers wait
    /// ([`LayoutUpload::wait_for_room`]) before giving more bytes. The error of a
    /// part the store refused.
    pub fn backlogged(&self) -> Result<bool> {
        let t = self.inner.table();
        self.inner.check(&t).or_else(|e| match e {
            Error::WriterClosed => Ok(()),
            e => Err(e),
        })?;
        Ok(!t.queued.is_empty())
    }

    /// Whether parts are queued or in flight (the commit waits for them).
    /// The error of a part the store refused.
    pub fn unsettled(&self) -> Result<bool> {
        let t = self.inner.table();
        if let Some(e) = &t.failure {
            return Err(again(e));
        }
        Ok(!t.queued.is_empty() || t.in_flight > 0)
    }

    /// Waits until no complete part waits for room, or a part in flight
    /// is answered, or `at_most` passed (a writer's wait, see
    /// [`LayoutUpload::backlogged`]). The error of a part the store
    /// refused.
    pub fn wait_for_room(&self, at_most: Duration) -> Result<()> {
        self.wait_while(at_most, |t| !t.queued.is_empty())
    }

    /// Waits until no part is queued or in flight, or a part in flight is
    /// answered, or `at_most` passed (the commit's wait, see
    /// [`LayoutUpload::unsettled`]). The error of a part the store
    /// refused.
    pub fn wait(&self, at_most: Duration) -> Result<()> {
        self.wait_while(at_most, |t| !t.queued.is_empty() || t.in_flight > 0)
    }

    /// Waits for the next answer of the store (at most `at_most`) unless
    /// `waiting` no longer holds, looked at under the lock the answers
    /// take (so that no answer comes unseen between the look and the wait).
    fn wait_while(&self, at_most: Duration, waiting: impl Fn(&Table) -> bool) -> Result<()> {
        let t = self.inner.table();
        if let Some(e) = &t.failure {
            return Err(again(e));
        }
        if t.in_flight == 0 || t.ended || !waiting(&t) {
            return Ok(());
        }
        let in_flight = t.in_flight;
        let inner = &self.inner;
        inner.budget.wait(
            Some(at_most),
            || format!("cannot upload the object ({in_flight} parts waiting for the store)"),
            |slice| {
                let (t, _) = inner
                    .answered
                    .wait_timeout(t, slice)
                    .unwrap_or_else(|e| e.into_inner());
                match &t.failure {
                    Some(e) => Err(again(e)),
                    None => Ok(()),
                }
            },
        )
    }

    /// Closes the writer for its commit: when every tensor was written
    /// completely, [`LayoutUpload::complete`] follows; otherwise (rule
    /// `tensors-missing`) the upload is aborted and nothing appears. Rule
    /// `closed-file` when closed already.
    pub fn close(&self) -> Result<()> {
        match self.inner.ledger.close() {
            Ok(()) => Ok(()),
            Err(Error::WriterClosed) => Err(Error::WriterClosed),
            Err(e) => {
                let _ = self.abort_upload();
                Err(e)
            }
        }
    }

    /// Waits for the last parts and completes the upload (after
    /// [`LayoutUpload::close`]): the object appears under its key now,
    /// whole. On any failure the upload is aborted (the key keeps what it
    /// had) and the error returned.
    pub fn complete(&self) -> Result<()> {
        let done = self.finish();
        if done.is_err() {
            let _ = self.abort_upload();
        }
        done
    }

    fn finish(&self) -> Result<()> {
        if !self.inner.ledger.is_closed() {
            return Err(Error::StreamOrder {
                reason: "the upload is completed only once the writer is closed".into(),
            });
        }
        while self.unsettled()? {
            self.wait(SETTLE_SLICE)?;
        }
        let ids = {
            let t = self.inner.table();
            self.inner.check(&t)?;
            let mut ids = Vec::with_capacity(t.parts.len());
            for (k, part) in t.parts.iter().enumerate() {
                match part {
                    Part::Sent(id) => ids.push(id.clone()),
                    _ => {
                        let (a, b) = self.inner.bounds(k);
                        return Err(Error::StreamOrder {
                            reason: format!("bytes {a}..{b} of the object were never written"),
                        });
                    }
                }
            }
            ids
        };
        let inner = &self.inner;
        let what = "cannot complete the upload";
        wait(
            async {
                let done = inner.store.complete_multipart(&inner.path, &inner.id, ids);
                done.await.map_err(|e| from_store(what, e))
            },
            inner.deadline,
            &Cancel::default(),
            || what.into(),
        )?;
        self.inner.table().ended = true;
        Ok(())
    }

    /// Aborts the upload: nothing appears, an old object under the key
    /// stays as it was; the parts in flight are cancelled and the parts
    /// stored discarded by the store. Does nothing once completed or
    /// aborted. The error of the store's answer to the abort, if any (the
    /// store then drops the unfinished upload by its own rules).
    pub fn abort(&self) -> Result<()> {
        self.inner.ledger.close_quietly();
        self.abort_upload()
    }

    fn abort_upload(&self) -> Result<()> {
        if !self.inner.end() {
            return Ok(());
        }
        let inner = &self.inner;
        let what = "cannot abort the upload";
        wait(
            async {
                let aborted = inner.store.abort_multipart(&inner.path, &inner.id);
                aborted.await.map_err(|e| from_store(what, e))
            },
            inner.deadline,
            &Cancel::default(),
            || what.into(),
        )
    }
}

impl Drop for LayoutUpload {
    /// An upload neither completed nor aborted is aborted in the
    /// background: nothing appears under the key.
    fn drop(&mut self) {
        if !self.inner.end() {
            return;
        }
        if let Ok(rt) = runtime() {
            let inner = Arc::clone(&self.inner);
            rt.spawn(async move {
                let _ = inner.store.abort_multipart(&inner.path, &inner.id).await;
            });
        }
    }
}

/// One tensor being uploaded: its bytes are given in order, in as many
/// pieces as convenient, and [`TensorUpload::finish`] checks it got all of
/// them. Dropped unfinished, its bytes are taken back out of the parts
/// (see the module's documentation).
#[derive(Debug)]
pub struct TensorUpload<'u> {
    upload: &'u LayoutUpload,
    /// Position in the plan's tensors (file order).
    index: usize,
    /// The tensor's first byte in the object.
    start: u64,
    /// Bytes given and counted in their parts so far.
    filled: u64,
    finished: bool,
}

impl TensorUpload<'_> {
    /// The tensor's name.
    pub fn name(&self) -> &str {
        self.upload
            .inner
            .ledger
            .planned(self.index)
            .map_or("", |t| t.name.as_str())
    }

    /// Copies the next `bytes` of the tensor into their parts, sending
    /// each part they complete (or queueing it while
    /// [`LayoutUpload::max_in_flight`] parts are on their way: the caller
    /// waits then, see [`LayoutUpload::backlogged`]). Never waits.
    pub fn write(&mut self, bytes: &[u8]) -> Result<()> {
        if bytes.is_empty() {
            return Ok(());
        }
        let got = self.filled.saturating_add(bytes.len() as u64);
        self.upload.inner.ledger.check_len(self.index, got)?;
        let at = self.start.saturating_add(self.filled);
        let (placed, done) = self.upload.inner.place(at, bytes);
        self.filled += placed;
        done
    }

    /// Checks the tensor got exactly its bytes and marks it written.
    pub fn finish(mut self) -> Result<()> {
        self.upload.inner.ledger.finish(self.index, self.filled)?;
        self.finished = true;
        Ok(())
    }
}

impl Drop for TensorUpload<'_> {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        let back = self.upload.inner.unplace(self.start, self.filled);
        self.upload.inner.ledger.release(self.index, back);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    /// The default tuning with `concurrency` parts in flight.
    fn tuning(concurrency: usize) -> crate::Tuning {
        crate::Tuning {
            concurrency,
            ..crate::Tuning::default()
        }
    }

    use object_store::memory::InMemory;
    use object_store::ObjectStoreExt;

    use fastst_core::{serialize, NewTensor, DEFAULT_HEADER_CAP};

    use super::*;

    /// Tensors of `sizes` bytes (U8), named `t00`, `t01`...: a plan and
    /// their bytes.
    fn layout(sizes: &[usize]) -> (WritePlan, Vec<Vec<u8>>) {
        let tensors = sizes
            .iter()
            .enumerate()
            .map(|(i, n)| NewTensor::new(format!("t{i:02}"), Dtype::U8, vec![*n as u64]))
            .collect();
        let data = sizes
            .iter()
            .enumerate()
            .map(|(i, n)| (0..*n).map(|j| (j * 7 + i * 13 + j / 251) as u8).collect())
            .collect();
        let plan = WritePlan::new(
            tensors,
            Some(vec![("k".into(), "v".into())]),
            DEFAULT_HEADER_CAP,
        )
        .unwrap();
        (plan, data)
    }

    fn object(store: &Arc<InMemory>, key: &str) -> Option<Vec<u8>> {
        runtime().unwrap().block_on(async {
            match store.get(&Path::from(key)).await {
                Ok(got) => Some(got.bytes().await.unwrap().to_vec()),
                Err(_) => None,
            }
        })
    }

    fn expected(plan: &WritePlan, data: &[Vec<u8>]) -> Vec<u8> {
        let refs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
        serialize(plan, &refs).unwrap()
    }

    fn write_one(up: &LayoutUpload, i: usize, bytes: &[u8], piece: usize) {
        let mut t = up
            .begin(&format!("t{i:02}"), Dtype::U8, &[bytes.len() as u64])
            .unwrap();
        for p in bytes.chunks(piece.max(1)) {
            t.write(p).unwrap();
            while up.backlogged().unwrap() {
                up.wait_for_room(Duration::from_millis(5)).unwrap();
            }
        }
        t.finish().unwrap();
    }

    fn commit(up: &LayoutUpload) {
        up.close().unwrap();
        up.complete().unwrap();
    }

    #[test]
    fn any_order_from_threads_gives_the_serialized_bytes() {
        let store = Arc::new(InMemory::new());
        let sizes = [5000, 3, 0, 12_345, 4096, 70_001, 1, 9999];
        let (plan, data) = layout(&sizes);
        let want = expected(&plan, &data);
        let up =
            LayoutUpload::in_store(store.clone(), Path::from("k"), plan, 1000, tuning(3)).unwrap();
        assert_eq!(up.max_in_flight(), 3);
        std::thread::scope(|s| {
            for (i, bytes) in data.iter().enumerate().rev() {
                let up = &up;
                s.spawn(move || write_one(up, i, bytes, 777 + i));
            }
        });
        assert_eq!(object(&store, "k"), None, "nothing before the commit");
        commit(&up);
        assert_eq!(object(&store, "k").unwrap(), want);
        assert_eq!(up.buffers_held(), 0);
    }

    #[test]
    fn in_order_writes_hold_the_parts_in_flight_and_one_more() {
        let store = Arc::new(InMemory::new());
        let (plan, data) = layout(&[200_000, 150_000]);
        let up =
            LayoutUpload::in_store(store.clone(), Path::from("k"), plan, 4096, tuning(4)).unwrap();
        let mut most = 0;
        for (i, bytes) in data.iter().enumerate() {
            let mut t = up
                .begin(&format!("t{i:02}"), Dtype::U8, &[bytes.len() as u64])
                .unwrap();
            for p in bytes.chunks(4096) {
                t.write(p).unwrap();
                while up.backlogged().unwrap() {
                    up.wait_for_room(Duration::from_millis(5)).unwrap();
                }
                most = most.max(up.buffers_held());
            }
            t.finish().unwrap();
        }
        // In flight, one queued part at most, and the one being filled.
        assert!(most <= up.max_in_flight() + 2, "{most}");
        commit(&up);
        assert_eq!(object(&store, "k").unwrap(), expected(up.plan(), &data));
    }

    #[test]
    fn hostile_writes_are_refused_and_a_stopped_write_can_be_done_again() {
        let store = Arc::new(InMemory::new());
        let (plan, data) = layout(&[3000, 100]);
        let up =
            LayoutUpload::in_store(store.clone(), Path::from("k"), plan, 1000, tuning(2)).unwrap();
        let e = up.begin("zz", Dtype::U8, &[1]).unwrap_err();
        assert_eq!(e.rule(), "tensor-not-in-layout");
        let e = up.begin("t01", Dtype::I8, &[100]).unwrap_err();
        assert_eq!(e.rule(), "layout-mismatch");
        // A write that stops inside parts not yet complete: written again.
        {
            let mut t = up.begin("t01", Dtype::U8, &[100]).unwrap();
            t.write(&[9; 60]).unwrap();
            assert_eq!(t.write(&[9; 41]).unwrap_err().rule(), "data-length");
        }
        write_one(&up, 1, &data[1], 100);
        assert_eq!(
            up.begin("t01", Dtype::U8, &[100]).unwrap_err().rule(),
            "tensor-written-twice"
        );
        // A write that stops after completing a part: spoiled.
        {
            let mut t = up.begin("t00", Dtype::U8, &[3000]).unwrap();
            t.write(&data[0][..2500]).unwrap();
        }
        let e = up.begin("t00", Dtype::U8, &[3000]).unwrap_err();
        assert_eq!(e.rule(), "tensor-written-twice");
        assert!(e.to_string().contains("uploaded already"), "{e}");
        let e = up.close().unwrap_err();
        assert_eq!(
            (e.rule().id(), e.tensor()),
            ("tensors-missing", Some("t00"))
        );
        assert_eq!(object(&store, "k"), None);
    }

    #[test]
    fn a_stopped_write_is_taken_back_and_the_bytes_are_right() {
        let store = Arc::new(InMemory::new());
        let (plan, data) = layout(&[2500, 10]);
        let up = LayoutUpload::in_store(store.clone(), Path::from("k"), plan, 100_000, tuning(2))
            .unwrap();
        {
            let mut t = up.begin("t00", Dtype::U8, &[2500]).unwrap();
            t.write(&[0xEE; 1000]).unwrap();
        }
        write_one(&up, 1, &data[1], 3);
        write_one(&up, 0, &data[0], 999);
        commit(&up);
        assert_eq!(object(&store, "k").unwrap(), expected(up.plan(), &data));
    }

    #[test]
    fn abort_and_drop_leave_the_old_object() {
        let store = Arc::new(InMemory::new());
        let rt = runtime().unwrap();
        rt.block_on(store.put(&Path::from("k"), vec![1u8, 2, 3].into()))
            .unwrap();
        let (plan, data) = layout(&[5000]);
        let up = LayoutUpload::in_store(
            store.clone(),
            Path::from("k"),
            plan.clone(),
            1000,
            tuning(2),
        )
        .unwrap();
        {
            let mut t = up.begin("t00", Dtype::U8, &[5000]).unwrap();
            t.write(&data[0][..4000]).unwrap();
        }
        up.abort().unwrap();
        assert!(up.is_closed());
        assert_eq!(
            up.begin("t00", Dtype::U8, &[5000]).unwrap_err().rule(),
            "closed-file"
        );
        assert_eq!(object(&store, "k").unwrap(), vec![1, 2, 3]);
        let up =
            LayoutUpload::in_store(store.clone(), Path::from("k"), plan, 1000, tuning(2)).unwrap();
        write_one(&up, 0, &data[0], 5000);
        drop(up);
        assert_eq!(object(&store, "k").unwrap(), vec![1, 2, 3]);
    }

    #[test]
    fn part_buffers_take_bytes_in_any_order() {
        let mut buf = Vec::with_capacity(10);
        put(&mut buf, 6, &[6, 7]);
        assert_eq!(buf, [0, 0, 0, 0, 0, 0, 6, 7]);
        put(&mut buf, 0, &[0, 1, 2]);
        put(&mut buf, 3, &[3, 4, 5]);
        put(&mut buf, 8, &[8, 9]);
        assert_eq!(buf, [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
        put(&mut buf, 5, &[50, 60]);
        assert_eq!(buf, [0, 1, 2, 3, 4, 50, 60, 7, 8, 9]);
        assert_eq!(buf.capacity(), 10);
    }

    #[test]
    fn parts_are_labelled_with_what_they_hold() {
        let store = Arc::new(InMemory::new());
        let (plan, _) = layout(&[10, 5000, 0, 7]);
        let ds = plan.data_start();
        let up = LayoutUpload::in_store(store, Path::from("k"), plan, 1000, tuning(2)).unwrap();
        let label = |k| up.inner.label(k);
        assert!(ds < 1000);
        assert_eq!(label(0), " (the header and tensors \"t00\" to \"t01\")");
        assert_eq!(label(2), " (tensor \"t01\")");
        let last = up.inner.table().parts.len() - 1;
        assert_eq!(label(last), " (tensors \"t01\" to \"t03\")");
        up.abort().unwrap();
    }
}
