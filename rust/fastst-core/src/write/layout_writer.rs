//! A file written from its layout: each tensor at its final offset, in any
//! order and from any thread, committed atomically once every tensor is
//! complete.
//!
//! The [`WritePlan`] (names, dtypes, shapes, metadata) is known before any
//! data, so every tensor's place in the file is too: the header is written
//! first, then each tensor's bytes are written where they belong with
//! positioned writes (`pwrite`), so that tensors arrive in any order, from
//! several threads at once, and no byte is held in memory longer than the
//! caller's buffer. The file is an [`AtomicFile`] (unnamed while written,
//! where the system allows): it replaces the target only when
//! [`LayoutWriter::commit`] finds every tensor written completely; dropped
//! or [`LayoutWriter::abort`]ed before that, it vanishes and the target is
//! left as it was.
//!
//! A durable writer writes around the page cache where the file system
//! allows it, as durable saves do (see [`super::writeback`]): the whole
//! aligned blocks inside a tensor go through a page-aligned buffer of
//! [`DIRECT_CHUNK`] bytes (the durable sink's write size) per tensor being written to a second, `O_DIRECT`
//! descriptor of the file; the few bytes at a tensor's edges, which share a
//! block with the header or a neighbour, go through the page cache. No block
//! is written both ways, and the commit's `fsync` flushes both.

use std::fs::File;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, RwLock};

use memmap2::MmapMut;

use super::atomic::AtomicFile;
use super::ledger::Ledger;
use super::plan::{PlannedTensor, WritePlan};
use super::writeback::DIRECT_CHUNK;
use crate::dtype::Dtype;
use crate::error::{Error, Result};
use crate::io::{reopen_direct_for_writing, sync_range, write_all_at, SyncRange, DIRECT_ALIGN};

/// A file being written from its layout (see the module's documentation).
///
/// Every method takes `&self`: one writer is shared by the threads that
/// write its tensors.
#[derive(Debug)]
pub struct LayoutWriter {
    /// The layout and where each tensor stands.
    ledger: Ledger,
    /// The file, until it is committed or aborted. Writes hold it shared
    /// while their bytes move; commit and abort take it exclusively, so
    /// they wait for writes in flight.
    file: RwLock<Option<AtomicFile>>,
    durable: bool,
    /// A durable writer's `O_DIRECT` descriptor of the same file, where
    /// the file system offers one, until the writer is closed (commit and
    /// abort close it with the file: a closed writer holds no descriptor).
    direct: RwLock<Option<File>>,
    /// Whether `direct` was opened (it decides the whole blocks' ranges).
    has_direct: bool,
    /// Set when a direct write was refused: the page cache from then on.
    direct_refused: AtomicBool,
    /// Aligned buffers of direct writes, reused from tensor to tensor.
    buffers: Mutex<Vec<MmapMut>>,
}

impl LayoutWriter {
    /// Creates the temporary file beside `path` and writes the header of
    /// `plan` into it. `durable` says whether the data is flushed to the
    /// device before the commit renames the file over `path` (`None`: when
    /// a file is replaced, as [`AtomicFile::durable_by_default`]).
    pub fn create(plan: WritePlan, path: &Path, durable: Option<bool>) -> Result<LayoutWriter> {
        let mut atomic = AtomicFile::create(path)?;
        let durable = durable.unwrap_or_else(|| atomic.durable_by_default());
        {
            let file = atomic.file()?;
            write_all_at(file, plan.header(), 0).map_err(|e| Error::io("writing the header", e))?;
            // The file has its final length from the start: tensors written
            // out of order fill it in place.
            file.set_len(plan.total_len())
                .map_err(|e| Error::io("setting the new file's length", e))?;
        }
        let direct = if durable {
            reopen_direct_for_writing(atomic.file()?)
        } else {
            None
        };
        Ok(LayoutWriter {
            ledger: Ledger::new(plan),
            file: RwLock::new(Some(atomic)),
            durable,
            has_direct: direct.is_some(),
            direct: RwLock::new(direct),
            direct_refused: AtomicBool::new(false),
            buffers: Mutex::new(Vec::new()),
        })
    }

    /// The layout being written.
    pub fn plan(&self) -> &WritePlan {
        self.ledger.plan()
    }

    /// Whether the data is flushed to the device before the commit.
    pub fn durable(&self) -> bool {
        self.durable
    }

    /// True while whole blocks are written around the page cache.
    pub fn direct(&self) -> bool {
        self.has_direct && !self.direct_refused.load(Ordering::Relaxed)
    }

    /// Writes the aligned `bytes` at the aligned `at` directly; where the
    /// file system refuses (or a short write leaves the rest unaligned,
    /// `EINVAL` either way), through the page cache instead, for good,
    /// which then reports the real cause of a failure.
    fn write_direct(&self, file: &File, bytes: &[u8], at: u64) -> io::Result<()> {
        let guard = self.direct.read().unwrap_or_else(|e| e.into_inner());
        if let (Some(direct), false) = (guard.as_ref(), self.direct_refused.load(Ordering::Relaxed))
        {
            match write_all_at(direct, bytes, at) {
                Err(e) if e.kind() == io::ErrorKind::InvalidInput => {
                    self.direct_refused.store(true, Ordering::Relaxed);
                }
                done => return done,
            }
        }
        write_all_at(file, bytes, at)
    }

    /// Starts writing tensor `name`, which must be in the layout with
    /// exactly `dtype` and `shape`, and be neither written nor being
    /// written. Its bytes are then given to the [`TensorWrite`], in order.
    pub fn begin(&self, name: &str, dtype: Dtype, shape: &[u64]) -> Result<TensorWrite<'_>> {
        let index = self.ledger.begin(name, dtype, shape)?;
        Ok(TensorWrite {
            writer: self,
            index,
            filled: 0,
            finished: false,
            buffer: None,
            buffered: 0,
        })
    }

    fn planned(&self, index: usize) -> Result<&PlannedTensor> {
        self.ledger.planned(index)
    }

    /// Names of the tensors not written completely yet, in the order they
    /// were given to the plan.
    pub fn missing(&self) -> Vec<&str> {
        self.ledger.missing()
    }

    /// True once committed or aborted.
    pub fn is_closed(&self) -> bool {
        self.ledger.is_closed()
    }

    /// Closes the writer: when every tensor was written completely, the
    /// file is renamed over the target (flushed first when durable);
    /// otherwise nothing is saved (the target is left as it was) and the
    /// error, rule `tensors-missing`, names what is missing. Either way the
    /// writer is closed afterwards, and so is it when the commit itself
    /// fails (the temporary file is removed).
    pub fn commit(&self) -> Result<()> {
        let complete = self.ledger.close();
        if let Err(Error::WriterClosed) = complete {
            return Err(Error::WriterClosed);
        }
        let atomic = self.take_file();
        // Flushing the file flushes what the direct descriptor wrote.
        drop(self.take_direct());
        // A closed writer holds no buffer either.
        self.pool().clear();
        complete?;
        atomic
            .ok_or(Error::WriterClosed)?
            .commit(Some(self.durable))
    }

    /// Closes the writer without saving: the temporary file is removed (an
    /// unnamed one simply vanishes) and the target is left as it was.
    /// Writes still in flight fail with rule `closed-file`. Does nothing on
    /// a closed writer.
    pub fn abort(&self) {
        self.ledger.close_quietly();
        drop(self.take_file());
        drop(self.take_direct());
        self.pool().clear();
    }

    /// The direct writes' spare buffers.
    fn pool(&self) -> MutexGuard<'_, Vec<MmapMut>> {
        self.buffers.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn take_file(&self) -> Option<AtomicFile> {
        self.file.write().unwrap_or_else(|e| e.into_inner()).take()
    }

    fn take_direct(&self) -> Option<File> {
        self.direct
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }

    /// Runs `f` on the file, shared with other writers, unless the writer
    /// was closed meanwhile.
    fn with_file<T>(&self, f: impl FnOnce(&File) -> Result<T>) -> Result<T> {
        let guard = self.file.read().unwrap_or_else(|e| e.into_inner());
        let file = guard
            .as_ref()
            .ok_or(Error::WriterClosed)?
            .file_ref()
            .map_err(|_| Error::WriterClosed)?;
        f(file)
    }
}

/// Where the bytes put into the aligned buffer come from.
enum Fill<'a> {
    /// Copied from the caller's bytes.
    Copy(&'a [u8]),
    /// Filled in place by the caller (see [`TensorWrite::write_with`]).
    With(&'a mut dyn FnMut(&mut [u8]) -> Result<()>),
}

/// Why the aligned buffer could not take or write its bytes.
enum Filled {
    /// Allocating or writing the buffer failed.
    Io(io::Error),
    /// The caller's `fill` failed.
    Source(Error),
}

/// One tensor being written: its bytes are given in order, in as many
/// parts as convenient, and [`TensorWrite::finish`] checks it got all of
/// them. Dropped unfinished (an error, an exception while producing the
/// bytes), the tensor is pending again: it may be written anew, in full.
#[derive(Debug)]
pub struct TensorWrite<'w> {
    writer: &'w LayoutWriter,
    /// Position in the plan's tensors (file order).
    index: usize,
    /// Bytes given so far (written, or held in `buffer`).
    filled: u64,
    finished: bool,
    /// A direct write's aligned buffer, holding the last `buffered` bytes
    /// given (they start at an aligned offset of the file).
    buffer: Option<MmapMut>,
    buffered: usize,
}

impl TensorWrite<'_> {
    fn planned(&self) -> Result<&PlannedTensor> {
        self.writer.planned(self.index)
    }

    /// The tensor's name.
    pub fn name(&self) -> &str {
        self.planned().map_or("", |t| t.name.as_str())
    }

    /// Where the next `len` bytes of the tensor go: their first byte's
    /// offset in the file and the range `a..b` of the tensor's whole blocks
    /// (empty without a direct descriptor), which go through the aligned
    /// buffer (written directly, or through the cache once direct writes
    /// were refused: the same ranges either way), after checking the
    /// tensor takes `len` more bytes.
    fn place(&self, len: u64) -> Result<(u64, u64, u64, u64)> {
        let got = self.filled.saturating_add(len);
        let t = self.writer.ledger.check_len(self.index, got)?;
        let too_large = || Error::FileTooLarge {
            reason: "the file would exceed 2^64 bytes".to_owned(),
        };
        let start = self
            .writer
            .plan()
            .data_start()
            .checked_add(t.begin)
            .ok_or_else(too_large)?;
        let end = start.checked_add(t.byte_len()).ok_or_else(too_large)?;
        let at = start.checked_add(self.filled).ok_or_else(too_large)?;
        let (a, b) = if self.writer.has_direct {
            (
                start.div_ceil(DIRECT_ALIGN) * DIRECT_ALIGN,
                end / DIRECT_ALIGN * DIRECT_ALIGN,
            )
        } else {
            (end, end)
        };
        Ok((at, end, a, b))
    }

    /// Writes the next `bytes` of the tensor at their place in the file.
    pub fn write(&mut self, bytes: &[u8]) -> Result<()> {
        if bytes.is_empty() {
            return Ok(());
        }
        let got = self.filled.saturating_add(bytes.len() as u64);
        let (at, end, a, b) = self.place(bytes.len() as u64)?;
        let name = self.name().to_owned();
        let failed = |e| Error::io(format!("writing the data of tensor {name:?}"), e);
        let mut pos = at;
        let mut rest = bytes;
        let writer = self.writer;
        writer.with_file(|file| {
            while !rest.is_empty() {
                if a < b && (a..b).contains(&pos) {
                    let took = self
                        .fill_buffer(file, Fill::Copy(rest), rest.len(), pos, b)
                        .map_err(|e| match e {
                            Filled::Io(e) => failed(e),
                            Filled::Source(e) => e,
                        })?;
                    rest = &rest[took..];
                    pos += took as u64;
                } else {
                    let edge = if pos < a { a.min(end) } else { end };
                    let take = usize::try_from(edge - pos)
                        .unwrap_or(usize::MAX)
                        .min(rest.len());
                    write_all_at(file, &rest[..take], pos).map_err(failed)?;
                    rest = &rest[take..];
                    pos += take as u64;
                }
            }
            Ok(())
        })?;
        self.filled = got;
        Ok(())
    }

    /// Writes the next `len` bytes of the tensor, which `fill` puts in
    /// place: it is given buffers to fill completely, in order, whose
    /// lengths add up to `len`. The whole blocks inside the tensor are
    /// filled straight in the aligned buffer of direct writes, so that bytes
    /// read from another file (`fill` a positioned read) are copied once,
    /// by the read; the few bytes at the tensor's edges, and every byte of
    /// a writer without direct writes, go through a buffer of at most
    /// [`DIRECT_CHUNK`] bytes and [`TensorWrite::write`]. An error of
    /// `fill` is returned as it is (the tensor is then pending again once
    /// this is dropped, as after any failed write).
    pub fn write_with(
        &mut self,
        len: u64,
        fill: &mut dyn FnMut(&mut [u8]) -> Result<()>,
    ) -> Result<()> {
        self.place(len)?;
        let mut left = len;
        let mut scratch: Vec<u8> = Vec::new();
        while left > 0 {
            let (pos, end, a, b) = self.place(left)?;
            if a < b && (a..b).contains(&pos) {
                let most = usize::try_from(left).unwrap_or(usize::MAX);
                let name = self.name().to_owned();
                let writer = self.writer;
                let took = writer.with_file(|file| {
                    self.fill_buffer(file, Fill::With(&mut *fill), most, pos, b)
                        .map_err(|e| match e {
                            Filled::Source(e) => e,
                            Filled::Io(e) => {
                                Error::io(format!("writing the data of tensor {name:?}"), e)
                            }
                        })
                })?;
                self.filled += took as u64;
                left -= took as u64;
            } else {
                let edge = if pos < a { a.min(end) } else { end };
                let take = (edge - pos).min(left).min(DIRECT_CHUNK as u64);
                let take = usize::try_from(take).unwrap_or(DIRECT_CHUNK);
                scratch.resize(take, 0);
                fill(&mut scratch)?;
                self.write(&scratch)?;
                left -= take as u64;
            }
        }
        Ok(())
    }

    /// Puts the next bytes of the tensor (the file's bytes from `pos`,
    /// inside the direct range ending at `b`; at most `most` of them) into
    /// the aligned buffer, copied from `bytes` or filled by `fill`, and
    /// writes the buffer when it is full or reaches `b`; returns how many
    /// bytes it took.
    fn fill_buffer(
        &mut self,
        file: &File,
        source: Fill<'_>,
        most: usize,
        pos: u64,
        b: u64,
    ) -> std::result::Result<usize, Filled> {
        let mut buffer = match self.buffer.take() {
            Some(buffer) => buffer,
            None => {
                let pooled = self.writer.pool().pop();
                match pooled {
                    Some(buffer) => buffer,
                    None => MmapMut::map_anon(DIRECT_CHUNK).map_err(Filled::Io)?,
                }
            }
        };
        let room = buffer.len() - self.buffered;
        let left = usize::try_from(b - pos).unwrap_or(usize::MAX);
        let take = room.min(left).min(most);
        let slot = &mut buffer[self.buffered..self.buffered + take];
        let filled = match source {
            Fill::Copy(bytes) => {
                slot.copy_from_slice(&bytes[..take]);
                Ok(())
            }
            Fill::With(fill) => fill(slot),
        };
        if let Err(e) = filled {
            // Nothing of the slot counts: the buffer goes back as it was.
            self.buffer = Some(buffer);
            return Err(Filled::Source(e));
        }
        self.buffered += take;
        let end = pos + take as u64;
        let mut written = Ok(());
        if self.buffered == buffer.len() || end == b {
            let from = end - self.buffered as u64;
            written = self
                .writer
                .write_direct(file, &buffer[..self.buffered], from);
            self.buffered = 0;
        }
        self.buffer = Some(buffer);
        written.map(|()| take).map_err(Filled::Io)
    }

    /// Checks the tensor got exactly its bytes and marks it written. For a
    /// durable writer, the system is asked to start writing the tensor's
    /// bytes to the device now, so that the flush before the commit finds
    /// less left to do.
    pub fn finish(mut self) -> Result<()> {
        let t = self.planned()?;
        if self.filled == t.byte_len() && self.writer.durable && t.byte_len() > 0 {
            let start = self.writer.plan().data_start().saturating_add(t.begin);
            // Only a hint: where it is not offered, or fails, the flush
            // before the commit writes (and reports) everything.
            let _ = self
                .writer
                .with_file(|file| Ok(sync_range(file, start, t.byte_len(), SyncRange::Start)));
        }
        self.writer.ledger.finish(self.index, self.filled)?;
        self.finished = true;
        Ok(())
    }
}

impl Drop for TensorWrite<'_> {
    fn drop(&mut self) {
        if let Some(buffer) = self.buffer.take() {
            if !self.writer.is_closed() {
                self.writer.pool().push(buffer);
            }
        }
        if !self.finished {
            self.writer.ledger.release(self.index, true);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::super::{serialize, NewTensor};
    use super::*;

    use super::super::plan_for_tests as plan;

    fn temp_dir(tag: &str) -> crate::testfs::TempDir {
        crate::testfs::TempDir::new(&format!("layout-{tag}"))
    }

    use crate::testfs::entries;

    fn sample() -> WritePlan {
        plan(
            vec![
                NewTensor::new("b", Dtype::U8, vec![3]),
                NewTensor::new("a", Dtype::F32, vec![2]),
                NewTensor::new("e", Dtype::I64, vec![0]),
                NewTensor::new("c", Dtype::U16, vec![2, 2]),
            ],
            Some(vec![("format", "pt")]),
        )
        .expect("plan")
    }

    const B: [u8; 3] = [1, 2, 3];
    const A: [u8; 8] = [9; 8];
    const C: [u8; 8] = [4, 5, 6, 7, 8, 9, 10, 11];

    fn write_one(w: &LayoutWriter, name: &str, dtype: Dtype, shape: &[u64], parts: &[&[u8]]) {
        let mut t = w.begin(name, dtype, shape).expect("begin");
        for p in parts {
            t.write(p).expect("write");
        }
        t.finish().expect("finish");
    }

    #[test]
    fn tensors_in_any_order_give_the_serialized_bytes() {
        let dir = temp_dir("order");
        let path = dir.join("m.safetensors");
        let p = sample();
        let expected = serialize(&p, &[&B, &A, &[], &C]).expect("ser");
        let w = LayoutWriter::create(p, &path, Some(false)).expect("create");
        assert!(!w.durable());
        assert_eq!(w.missing(), ["b", "a", "e", "c"]);
        write_one(&w, "c", Dtype::U16, &[2, 2], &[&C[..3], &C[3..]]);
        write_one(&w, "e", Dtype::I64, &[0], &[]);
        write_one(&w, "b", Dtype::U8, &[3], &[&B]);
        assert_eq!(w.missing(), ["a"]);
        // Nothing at the target yet.
        assert!(!path.exists());
        write_one(&w, "a", Dtype::F32, &[2], &[&A]);
        assert!(w.missing().is_empty());
        w.commit().expect("commit");
        assert!(w.is_closed());
        assert_eq!(fs::read(&path).expect("read"), expected);
        assert_eq!(entries(&dir), ["m.safetensors"]);
        let e = w.begin("a", Dtype::F32, &[2]).expect_err("closed");
        assert_eq!(e.rule(), "closed-file");
        assert_eq!(w.commit().expect_err("closed").rule(), "closed-file");
    }

    /// A durable writer with tensors spanning many blocks, none aligned,
    /// written in odd parts, in any order, from several threads: the bytes
    /// are the serializer's, and where the file system takes direct writes
    /// the tensors' whole blocks went around the page cache.
    #[test]
    fn durable_writes_of_unaligned_tensors_give_the_serialized_bytes() {
        let dir = temp_dir("direct");
        let path = dir.join("m.safetensors");
        let sizes = [3usize, 5000, 4096, 3 * (DIRECT_CHUNK + 12_345), 70_000, 1];
        let tensors: Vec<NewTensor> = sizes
            .iter()
            .enumerate()
            .map(|(i, n)| NewTensor::new(format!("t{i}"), Dtype::U8, vec![*n as u64]))
            .collect();
        let data: Vec<Vec<u8>> = sizes
            .iter()
            .enumerate()
            .map(|(i, n)| (0..*n).map(|j| (j * 31 + i * 7 + j / 4096) as u8).collect())
            .collect();
        let p = plan(tensors, Some(vec![("format", "pt")])).expect("plan");
        let refs: Vec<&[u8]> = data.iter().map(|d| d.as_slice()).collect();
        let expected = serialize(&p, &refs).expect("ser");
        let w = LayoutWriter::create(p, &path, Some(true)).expect("create");
        let direct = w.direct();
        std::thread::scope(|scope| {
            for (i, bytes) in data.iter().enumerate().rev() {
                let w = &w;
                scope.spawn(move || {
                    let name = format!("t{i}");
                    let mut t = w
                        .begin(&name, Dtype::U8, &[bytes.len() as u64])
                        .expect("begin");
                    for part in bytes.chunks(777_777 + i) {
                        t.write(part).expect("write");
                    }
                    t.finish().expect("finish");
                });
            }
        });
        w.commit().expect("commit");
        #[cfg(target_os = "linux")]
        if direct {
            use crate::io::cache_state_of;
            let file = File::open(&path).expect("open");
            // The big tensor's whole blocks, after its first edge block.
            let start = expected.len() as u64 - 70_001 - 3 * (DIRECT_CHUNK as u64 + 12_345);
            let from = start.div_ceil(4096) * 4096 + 4096;
            if let Some((cached, _, _)) = cache_state_of(&file, from, 2 * DIRECT_CHUNK as u64) {
                assert_eq!(cached, 0, "written around the page cache");
            }
        }
        let _ = direct;
        assert_eq!(fs::read(&path).expect("read"), expected);
    }

    /// Tensors whose bytes are filled in place (`write_with`), mixed with
    /// copied parts, durable or not: the serializer's bytes; a failing
    /// fill leaves the tensor pending, to be written again in full.
    #[test]
    fn bytes_filled_in_place_give_the_serialized_bytes() {
        let dir = temp_dir("fill");
        let sizes = [5000usize, 2 * DIRECT_CHUNK + 4321, 3];
        let data: Vec<Vec<u8>> = sizes
            .iter()
            .enumerate()
            .map(|(i, n)| (0..*n).map(|j| (j * 13 + i + j / 4096) as u8).collect())
            .collect();
        let tensors = || {
            sizes
                .iter()
                .enumerate()
                .map(|(i, n)| NewTensor::new(format!("t{i}"), Dtype::U8, vec![*n as u64]))
                .collect::<Vec<_>>()
        };
        let refs: Vec<&[u8]> = data.iter().map(|d| d.as_slice()).collect();
        let expected = serialize(&plan(tensors(), None).expect("plan"), &refs).expect("ser");
        for durable in [true, false] {
            let path = dir.join(format!("m{durable}.safetensors"));
            let w =
                LayoutWriter::create(plan(tensors(), None).expect("plan"), &path, Some(durable))
                    .expect("create");
            {
                let mut t = w.begin("t1", Dtype::U8, &[sizes[1] as u64]).expect("begin");
                let mut fill = |_: &mut [u8]| -> Result<()> { Err(Error::WriterClosed) };
                let e = t.write_with(10_000, &mut fill).expect_err("fill fails");
                assert_eq!(e.rule(), "closed-file");
            }
            for (i, bytes) in data.iter().enumerate() {
                let mut t = w
                    .begin(&format!("t{i}"), Dtype::U8, &[bytes.len() as u64])
                    .expect("begin");
                let head = bytes.len().min(7);
                t.write(&bytes[..head]).expect("write");
                let mut at = head;
                let mut fill = |out: &mut [u8]| -> Result<()> {
                    out.copy_from_slice(&bytes[at..at + out.len()]);
                    at += out.len();
                    Ok(())
                };
                t.write_with((bytes.len() - head) as u64, &mut fill)
                    .expect("write_with");
                t.finish().expect("finish");
            }
            w.commit().expect("commit");
            assert_eq!(
                fs::read(&path).expect("read"),
                expected,
                "durable {durable}"
            );
        }
    }

    #[test]
    fn wrong_names_dtypes_shapes_and_lengths_are_refused() {
        let dir = temp_dir("refuse");
        let w = LayoutWriter::create(sample(), &dir.join("m.safetensors"), None).expect("w");
        let e = w.begin("zz", Dtype::U8, &[3]).expect_err("not in layout");
        assert_eq!(
            (e.rule().id(), e.tensor()),
            ("tensor-not-in-layout", Some("zz"))
        );
        let e = w.begin("b", Dtype::I8, &[3]).expect_err("dtype");
        assert_eq!((e.rule().id(), e.tensor()), ("layout-mismatch", Some("b")));
        assert!(e.to_string().contains("U8 [3]"), "{e}");
        let e = w.begin("b", Dtype::U8, &[1, 3]).expect_err("shape");
        assert_eq!(e.rule(), "layout-mismatch");

        let mut t = w.begin("b", Dtype::U8, &[3]).expect("begin");
        let e = w.begin("b", Dtype::U8, &[3]).expect_err("in flight");
        assert_eq!(e.rule(), "tensor-written-twice");
        assert!(e.to_string().contains("being written"), "{e}");
        let e = t.write(&[0; 4]).expect_err("too long");
        assert_eq!(e.rule(), "data-length");
        t.write(&[0; 2]).expect("part");
        let e = t.finish().expect_err("short");
        assert_eq!((e.rule().id(), e.tensor()), ("data-length", Some("b")));
        // A failed write leaves the tensor pending: written again in full.
        assert_eq!(w.missing(), ["b", "a", "e", "c"]);
        write_one(&w, "b", Dtype::U8, &[3], &[&B]);
        let e = w.begin("b", Dtype::U8, &[3]).expect_err("twice");
        assert_eq!(e.rule(), "tensor-written-twice");
        assert!(e.to_string().contains("written already"), "{e}");
    }

    #[test]
    fn a_commit_with_tensors_missing_saves_nothing() {
        let dir = temp_dir("missing");
        let path = dir.join("m.safetensors");
        fs::write(&path, b"old").expect("old");
        let w = LayoutWriter::create(sample(), &path, None).expect("w");
        assert!(w.durable(), "replacing a file is durable by default");
        write_one(&w, "b", Dtype::U8, &[3], &[&B]);
        let e = w.commit().expect_err("missing");
        assert_eq!((e.rule().id(), e.tensor()), ("tensors-missing", Some("a")));
        assert!(e.to_string().starts_with("3 of 4 tensors"), "{e}");
        assert!(e.to_string().contains("\"a\", \"e\", \"c\""), "{e}");
        assert_eq!(fs::read(&path).expect("read"), b"old");
        assert_eq!(entries(&dir), ["m.safetensors"]);
        assert!(w.is_closed());
    }

    #[test]
    fn abort_and_drop_leave_the_target_alone() {
        let dir = temp_dir("abort");
        let path = dir.join("m.safetensors");
        fs::write(&path, b"old").expect("old");
        let w = LayoutWriter::create(sample(), &path, Some(true)).expect("w");
        let mut t = w.begin("b", Dtype::U8, &[3]).expect("begin");
        t.write(&B[..1]).expect("part");
        w.abort();
        let e = t.write(&B[1..]).expect_err("aborted");
        assert_eq!(e.rule(), "closed-file");
        drop(t);
        w.abort();
        assert_eq!(fs::read(&path).expect("read"), b"old");
        assert_eq!(entries(&dir), ["m.safetensors"]);

        let w = LayoutWriter::create(sample(), &path, None).expect("w");
        write_one(&w, "b", Dtype::U8, &[3], &[&B]);
        drop(w);
        assert_eq!(fs::read(&path).expect("read"), b"old");
        assert_eq!(entries(&dir), ["m.safetensors"]);
    }

    #[test]
    fn threads_write_tensors_side_by_side() {
        let dir = temp_dir("threads");
        let path = dir.join("m.safetensors");
        let n = 16usize;
        let tensors: Vec<NewTensor> = (0..n)
            .map(|i| NewTensor::new(format!("t{i:02}"), Dtype::U8, vec![4096 + i as u64]))
            .collect();
        let data: Vec<Vec<u8>> = (0..n)
            .map(|i| (0..4096 + i).map(|j| (i * 31 + j) as u8).collect())
            .collect();
        let p = plan(tensors, None).expect("plan");
        let refs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
        let expected = serialize(&p, &refs).expect("ser");
        let w = LayoutWriter::create(p, &path, Some(true)).expect("w");
        std::thread::scope(|s| {
            for (i, bytes) in data.iter().enumerate().rev() {
                let w = &w;
                s.spawn(move || {
                    let name = format!("t{i:02}");
                    let mut t = w.begin(&name, Dtype::U8, &[bytes.len() as u64]).expect("b");
                    for part in bytes.chunks(1000) {
                        t.write(part).expect("write");
                    }
                    t.finish().expect("finish");
                });
            }
        });
        w.commit().expect("commit");
        assert_eq!(fs::read(&path).expect("read"), expected);
    }
}
