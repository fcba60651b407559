//! `PySource`: a Python file object with `seek` and `readinto` (or `read`)
//! as a core [`Source`], so that a `RawFile` reads it as it reads a path:
//! the core reads and validates the header, converts and names errors.
//! Each positioned read is a seek then reads, under a lock (file objects
//! are not thread-safe), with the GIL held. A file object whose read
//! method reads the very file it is being read for (through the same
//! `safe_open`) would wait on itself for that lock: such a read is
//! refused (rule `reentrant-read`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, TryLockError};

use fastst_core::{ended_early, Error, Result, Source};
use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyByteArray;

/// Most bytes asked of the object in one call (bounds the temporary
/// buffers of a large tensor's read).
const CHUNK: usize = 8 << 20;

/// A seekable binary file object read with positioned reads.
#[derive(Debug)]
pub(crate) struct PySource {
    obj: Py<PyAny>,
    len: u64,
    readinto: bool,
    lock: Mutex<()>,
    /// The thread holding `lock` ([`this_thread`]), 0 when none.
    holder: AtomicU64,
}

/// A number naming this thread (never 0).
fn this_thread() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    thread_local!(static ID: u64 = NEXT.fetch_add(1, Ordering::Relaxed));
    ID.with(|id| *id)
}

/// The lock over seek and read, held by this thread.
struct Serialised<'a> {
    _guard: MutexGuard<'a, ()>,
    holder: &'a AtomicU64,
}

impl Drop for Serialised<'_> {
    fn drop(&mut self) {
        // Before the guard is released: no other thread sees this one as
        // the holder once it can take the lock.
        self.holder.store(0, Ordering::Release);
    }
}

impl PySource {
    /// `obj`, measured by seeking to its end.
    pub(crate) fn new(obj: &Bound<'_, PyAny>) -> PyResult<PySource> {
        let end = obj.call_method1("seek", (0, 2))?;
        let len = match end.extract::<u64>() {
            Ok(len) => len,
            Err(_) => obj.call_method0("tell")?.extract()?,
        };
        let readinto = obj.getattr("readinto").is_ok_and(|f| f.is_callable());
        Ok(PySource {
            obj: obj.clone().unbind(),
            len,
            readinto,
            lock: Mutex::new(()),
            holder: AtomicU64::new(0),
        })
    }

    /// The lock over seek and read. Never waited for with the GIL held: its
    /// holder may need the GIL to finish. Refused (rule `reentrant-read`)
    /// when this thread holds it already: the object's read method is
    /// reading this file, and would wait on itself.
    fn serialised(&self, py: Python<'_>) -> Result<Serialised<'_>> {
        let me = this_thread();
        loop {
            let guard = match self.lock.try_lock() {
                Ok(guard) => guard,
                Err(TryLockError::Poisoned(p)) => p.into_inner(),
                Err(TryLockError::WouldBlock) => {
                    if self.holder.load(Ordering::Acquire) == me {
                        return Err(Error::ReentrantRead);
                    }
                    py.allow_threads(|| drop(self.lock.lock()));
                    continue;
                }
            };
            self.holder.store(me, Ordering::Release);
            return Ok(Serialised {
                _guard: guard,
                holder: &self.holder,
            });
        }
    }

    /// Fills `buf` from `offset` until the object ends; returns the bytes
    /// read.
    fn fill(&self, py: Python<'_>, offset: u64, buf: &mut [u8]) -> PyResult<usize> {
        let obj = self.obj.bind(py);
        obj.call_method1("seek", (offset,))?;
        let mut done = 0;
        while done < buf.len() {
            let want = (buf.len() - done).min(CHUNK);
            let dst = &mut buf[done..done + want];
            let got = if self.readinto {
                read_into(obj, dst)?
            } else {
                read(obj, dst)?
            };
            if got == 0 {
                break;
            }
            done += got;
        }
        Ok(done)
    }
}

/// One `readinto` call filling the start of `dst`; the bytes read.
fn read_into(obj: &Bound<'_, PyAny>, dst: &mut [u8]) -> PyResult<usize> {
    let chunk = PyByteArray::new_with(obj.py(), dst.len(), |_| Ok(()))?;
    let got: Option<usize> = obj.call_method1("readinto", (&chunk,))?.extract()?;
    let got = got.unwrap_or(0);
    let out = dst.get_mut(..got).ok_or_else(|| too_many(got))?;
    // SAFETY: the GIL is held and no Python code runs while the bytes are
    // borrowed, so the bytearray can be neither resized nor freed.
    let bytes = unsafe { chunk.as_bytes() };
    out.copy_from_slice(bytes.get(..got).ok_or_else(|| too_many(got))?);
    Ok(got)
}

/// One `read` call filling the start of `dst`; the bytes read.
fn read(obj: &Bound<'_, PyAny>, dst: &mut [u8]) -> PyResult<usize> {
    let data = obj.call_method1("read", (dst.len(),))?;
    if data.is_none() {
        return Ok(0);
    }
    let view = PyBuffer::<u8>::get(&data)?;
    let got = view.len_bytes();
    let out = dst.get_mut(..got).ok_or_else(|| too_many(got))?;
    view.copy_to_slice(obj.py(), out)?;
    Ok(got)
}

/// The error of a file object claiming more bytes than it was given room
/// for.
#[cold]
fn too_many(got: usize) -> PyErr {
    PyValueError::new_err(format!(
        "the file object reported {got} bytes read, more than it was asked for"
    ))
}

impl Source for PySource {
    fn len(&self) -> u64 {
        self.len
    }

    fn one_read_at_a_time(&self) -> bool {
        true
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let want = buf.len();
        let got = Python::with_gil(|py| {
            let _serialised = self.serialised(py)?;
            self.fill(py, offset, buf).map_err(|e| Error::Io {
                context: format!("cannot read {want} bytes at offset {offset}"),
                source: std::io::Error::other(e),
            })
        })?;
        if got < want {
            return Err(ended_early(offset, want, offset + got as u64, self.len));
        }
        Ok(())
    }
}
