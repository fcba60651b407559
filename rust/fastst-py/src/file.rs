//! `RawFile`: an open file as seen from Python, whatever it is read from
//! (a path, a file object through [`PySource`], an object of a store). The
//! Python `safe_open` wraps it and turns its buffers into framework
//! tensors. The reads of an object of a store hear Ctrl-C while they wait
//! ([`crate::wait`]), and stop when the file is closed or
//! `cancel_reads()` is called.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use fastst_core::{
    tensor_into, Backend, Dim, Dtype, MappedFile, OpenOptions, RuleId, Source, TensorInfo,
    PRIVATE_MAP_THRESHOLD,
};
use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::sync::GILOnceCell;
use pyo3::types::{PyDict, PyList, PyString, PyTuple};

use crate::buffer::TensorBuffer;
use crate::errors::{closed, rule_error, InFile};
use crate::paths::FsPath;
use crate::source::PySource;
use crate::wait::hearing_signals;
use crate::write::{tensor_rows, Chunk};

/// An open `.safetensors` file (the header is parsed and validated).
#[pyclass(frozen, module = "fastst._fastst.read")]
pub struct RawFile {
    name: String,
    /// Reads wait on a network: even small ones release the GIL (the
    /// server may be Python code in this process).
    remote: bool,
    /// Stops the reads in flight of an object of a store.
    cancel: Option<fastst_remote::Cancel>,
    inner: Mutex<Option<Arc<MappedFile>>>,
    /// How many `RawFile`s hold this file open ([`RawFile::share`]): the
    /// reads in flight stop when the last of them is closed.
    open: Arc<AtomicUsize>,
    sorted_keys: GILOnceCell<Py<PyList>>,
}

impl Drop for RawFile {
    /// A handle collected open no longer holds the file open for its shares.
    fn drop(&mut self) {
        let open = self.inner.get_mut().map_or(true, |inner| inner.is_some());
        if open {
            self.open.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

impl RawFile {
    /// Opens a source read only through positioned reads (no local file).
    fn from_source<S: Source + 'static>(
        py: Python<'_>,
        source: S,
        display_name: String,
        header_cap: u64,
    ) -> PyResult<RawFile> {
        let options = OpenOptions {
            header_cap,
            backend: Backend::Pread,
        };
        let file = py
            .allow_threads(|| MappedFile::from_source(source, options))
            .in_file(&display_name)?;
        Ok(RawFile::holding(file, display_name))
    }

    /// The file of an opened object of a store: its header read (a second
    /// GET when it is longer than the first one brought), hearing Ctrl-C.
    pub(crate) fn of_object(
        py: Python<'_>,
        source: fastst_remote::RemoteSource,
        display_name: String,
        header_cap: u64,
    ) -> PyResult<RawFile> {
        let options = OpenOptions {
            header_cap,
            backend: Backend::Pread,
        };
        let cancel = source.canceller();
        let file = hearing_signals(py, Some(&cancel), |_| {
            MappedFile::from_source(source, options)
        })?
        .in_file(&display_name)?;
        Ok(RawFile::of_opened(file, display_name, cancel))
    }

    /// The file of an object of a store whose header was read, its reads
    /// stopped by `cancel`.
    pub(crate) fn of_opened(
        file: MappedFile,
        display_name: String,
        cancel: fastst_remote::Cancel,
    ) -> RawFile {
        let mut raw = RawFile::holding(file, display_name);
        raw.remote = true;
        raw.cancel = Some(cancel);
        raw
    }

    fn holding(file: MappedFile, name: String) -> RawFile {
        RawFile {
            name,
            remote: false,
            cancel: None,
            inner: Mutex::new(Some(Arc::new(file))),
            open: Arc::new(AtomicUsize::new(1)),
            sorted_keys: GILOnceCell::new(),
        }
    }

    /// The open file, or the `closed-file` error.
    pub(crate) fn file(&self) -> PyResult<Arc<MappedFile>> {
        let guard = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        guard.clone().ok_or_else(|| closed(&self.name))
    }

    /// The name used in error messages.
    pub(crate) fn display_name(&self) -> &str {
        &self.name
    }

    pub(crate) fn lookup<'a>(&self, file: &'a MappedFile, name: &str) -> PyResult<&'a TensorInfo> {
        file.header().require(name).in_file(&self.name)
    }

    /// What stops this file's reads in flight: an object of a store's;
    /// `None` for a local file or a file object.
    pub(crate) fn canceller(&self) -> Option<&fastst_remote::Cancel> {
        self.cancel.as_ref()
    }

    /// Runs the reads `work` without the GIL: those of an object of a
    /// store hearing Ctrl-C ([`hearing_signals`]). A read that failed
    /// because the file was closed meanwhile (its waits cancelled) is
    /// rule `closed-file`.
    fn reading<T: Send>(
        &self,
        py: Python<'_>,
        work: impl FnOnce() -> fastst_core::Result<T> + Send,
    ) -> PyResult<T> {
        match hearing_signals(py, self.canceller(), |_| work())? {
            Err(_) if self.closed() => Err(closed(&self.name)),
            done => done.in_file(&self.name),
        }
    }
}

/// A writable byte view of a Python buffer, usable without the GIL.
pub(crate) struct WritableBytes {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the pointer stays valid while the `PyBuffer` it came from is alive
// (the exporter is pinned for the buffer's lifetime), and every use of a
// `WritableBytes` is scoped inside the call holding that `PyBuffer`.
unsafe impl Send for WritableBytes {}

impl WritableBytes {
    /// The start of the bytes.
    pub(crate) fn addr(&self) -> usize {
        self.ptr as usize
    }

    /// The number of bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn into_slice<'a>(self) -> &'a mut [u8] {
        if self.len == 0 {
            return &mut [];
        }
        // SAFETY: `ptr`/`len` describe a writable, C-contiguous buffer kept
        // alive by the caller's `PyBuffer` while the slice is used (a
        // streaming `load_into` lets go of it only once the load reports
        // its tensor filled: every request into it read, its slices
        // dropped); fastst holds no other reference into it during the call.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

pub(crate) fn writable(buf: &PyBuffer<u8>) -> PyResult<WritableBytes> {
    if buf.readonly() {
        return Err(PyValueError::new_err("destination buffer is read-only"));
    }
    if !buf.is_c_contiguous() {
        return Err(PyValueError::new_err(
            "destination buffer is not C-contiguous",
        ));
    }
    Ok(WritableBytes {
        ptr: buf.buf_ptr().cast::<u8>(),
        len: buf.len_bytes(),
    })
}

fn shape_tuple<'py>(py: Python<'py>, shape: &[u64]) -> PyResult<Bound<'py, PyTuple>> {
    PyTuple::new(py, shape.iter().copied())
}

#[pymethods]
impl RawFile {
    /// Opens and validates `path`. `header_cap` bounds the header length.
    #[new]
    #[pyo3(signature = (path, display_name, backend = "mmap", header_cap = fastst_core::DEFAULT_HEADER_CAP))]
    fn new(
        py: Python<'_>,
        path: FsPath,
        display_name: String,
        backend: &str,
        header_cap: u64,
    ) -> PyResult<RawFile> {
        let backend = Backend::from_name(backend).ok_or_else(|| {
            rule_error(
                RuleId::UnknownBackend,
                &display_name,
                None,
                &format!("backend {backend:?} is invalid (expected one of: \"mmap\", \"pread\")"),
            )
        })?;
        let options = OpenOptions {
            header_cap,
            backend,
        };
        let file = py
            .allow_threads(|| MappedFile::open(&path, options))
            .in_file(&display_name)?;
        Ok(RawFile::holding(file, display_name))
    }

    /// Opens and validates a binary file object with `seek` and `readinto`
    /// (or `read`), read with positioned reads (the "pread" back end). The
    /// object must not be read or moved by anyone else while open.
    #[staticmethod]
    #[pyo3(signature = (stream, display_name, header_cap = fastst_core::DEFAULT_HEADER_CAP))]
    fn from_stream(
        py: Python<'_>,
        stream: &Bound<'_, PyAny>,
        display_name: String,
        header_cap: u64,
    ) -> PyResult<RawFile> {
        let source = PySource::new(stream)?;
        RawFile::from_source(py, source, display_name, header_cap)
    }

    /// Stops the reads of this file in flight (an object of a store's; a
    /// local file's are never waited on): each ends at once with an
    /// error. Later reads are not affected. For a load left early.
    fn cancel_reads(&self) {
        if let Some(cancel) = &self.cancel {
            cancel.cancel();
        }
    }

    /// The name used in error messages.
    #[getter]
    fn name(&self) -> &str {
        &self.name
    }

    /// True once `close()` was called.
    #[getter]
    fn closed(&self) -> bool {
        self.inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_none()
    }

    /// Releases the file; buffers obtained before stay valid. The reads
    /// of an object of a store still in flight stop, unless a share of the
    /// file ([`RawFile::share`]) still holds it open.
    fn close(&self) {
        let held = self
            .inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if held.is_some() && self.open.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.cancel_reads();
        }
    }

    /// A second handle on the same open file (the same descriptor,
    /// mapping or object, the same header), closed on its own: the file
    /// is released once every handle on it is closed (or collected).
    /// For a reader that outlives its opener (a prefetch loader).
    fn share(&self) -> PyResult<RawFile> {
        let file = self.file()?;
        self.open.fetch_add(1, Ordering::AcqRel);
        Ok(RawFile {
            name: self.name.clone(),
            remote: self.remote,
            cancel: self.cancel.clone(),
            inner: Mutex::new(Some(file)),
            open: Arc::clone(&self.open),
            sorted_keys: GILOnceCell::new(),
        })
    }

    /// Tensor names, sorted.
    fn keys<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let file = self.file()?;
        let cached = self
            .sorted_keys
            .get_or_try_init(py, || -> PyResult<Py<PyList>> {
                let header = file.header();
                let list = PyList::new(
                    py,
                    header.tensors_by_name().map(|t| PyString::new(py, &t.name)),
                )?;
                Ok(list.unbind())
            })?;
        // A fresh list each call: callers may mutate what they get.
        Ok(cached.bind(py).get_slice(0, usize::MAX))
    }

    /// Tensor names in file (data offset) order.
    fn offset_keys<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let file = self.file()?;
        PyList::new(py, file.header().tensors().iter().map(|t| t.name.as_str()))
    }

    /// The `__metadata__` map, or None when the header has none.
    fn metadata<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let file = self.file()?;
        match file.header().metadata() {
            None => Ok(None),
            Some(pairs) => {
                let dict = PyDict::new(py);
                for (k, v) in pairs {
                    dict.set_item(k, v)?;
                }
                Ok(Some(dict))
            }
        }
    }

    /// Number of tensors.
    fn __len__(&self) -> PyResult<usize> {
        Ok(self.file()?.header().len())
    }

    fn __contains__(&self, name: &str) -> PyResult<bool> {
        Ok(self.file()?.header().get(name).is_some())
    }

    /// `(dtype_name, shape, begin, end)` of a tensor; offsets are relative
    /// to the byte buffer.
    fn info<'py>(&self, py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyTuple>> {
        let file = self.file()?;
        let t = self.lookup(&file, name)?;
        (t.dtype.name(), shape_tuple(py, &t.shape)?, t.begin, t.end).into_pyobject(py)
    }

    /// `(buffer, dtype_name, shape)` for a tensor: the buffer owns writable
    /// bytes, independent of every other call's.
    fn tensor<'py>(&self, py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyTuple>> {
        let file = self.file()?;
        let t = self.lookup(&file, name)?;
        let data = if self.remote || t.byte_len() >= PRIVATE_MAP_THRESHOLD {
            self.reading(py, || file.tensor_data(t))?
        } else {
            file.tensor_data(t).in_file(&self.name)?
        };
        let buffer = Bound::new(py, TensorBuffer::new(data))?;
        (buffer, t.dtype.name(), shape_tuple(py, &t.shape)?).into_pyobject(py)
    }

    /// Copies tensor `name` into `out`, a writable C-contiguous byte buffer
    /// of exactly the tensor's length (several threads, GIL released).
    fn read_into(&self, py: Python<'_>, name: &str, out: PyBuffer<u8>) -> PyResult<()> {
        let file = self.file()?;
        let t = self.lookup(&file, name)?;
        let dst = writable(&out)?;
        let file = &*file;
        self.reading(py, move || tensor_into(file, t, t.dtype, dst.into_slice()))
    }

    /// Copies `len(out)` bytes of tensor `name`, starting `offset` bytes
    /// into it, into `out` (a writable C-contiguous byte buffer).
    fn read_range_into(
        &self,
        py: Python<'_>,
        name: &str,
        offset: u64,
        out: PyBuffer<u8>,
    ) -> PyResult<()> {
        let file = self.file()?;
        let t = self.lookup(&file, name)?;
        let dst = writable(&out)?;
        let file = &*file;
        self.reading(py, move || {
            file.read_tensor_into(t, offset, dst.into_slice())
        })
    }

    /// Copies the elements of tensor `name` that `dims` select, one
    /// `(start, count, step)` per dimension, into `out` (a writable
    /// C-contiguous byte buffer of exactly their length), in C order: only
    /// the byte ranges they need are read, nearby ones as one.
    /// `around_cache`: a local file mostly not cached is read around the
    /// page cache, so that no byte beyond those ranges is read (a prefetch
    /// plan's slices; `MappedFile::read_slice_around_cache`).
    #[pyo3(signature = (name, dims, out, around_cache = false))]
    fn read_slice_into(
        &self,
        py: Python<'_>,
        name: &str,
        dims: Vec<(u64, u64, u64)>,
        out: PyBuffer<u8>,
        around_cache: bool,
    ) -> PyResult<()> {
        let file = self.file()?;
        let t = self.lookup(&file, name)?;
        let dims: Vec<Dim> = dims
            .into_iter()
            .map(|(start, count, step)| Dim { start, count, step })
            .collect();
        let dst = writable(&out)?;
        let file = &*file;
        self.reading(py, move || {
            let dst = dst.into_slice();
            if around_cache {
                file.read_slice_around_cache(t, &dims, dst)
            } else {
                file.read_slice_into(t, &dims, dst)
            }
        })
    }

    /// Converts tensor `name` to dtype `to` (a header name) into `out`, a
    /// writable C-contiguous byte buffer of the converted length.
    fn convert_into(
        &self,
        py: Python<'_>,
        name: &str,
        out: PyBuffer<u8>,
        to: &str,
    ) -> PyResult<()> {
        let file = self.file()?;
        let t = self.lookup(&file, name)?;
        let target = Dtype::from_name(to)
            .ok_or_else(|| PyValueError::new_err(format!("unknown dtype {to:?}")))?;
        let dst = writable(&out)?;
        let file = &*file;
        self.reading(py, move || tensor_into(file, t, target, dst.into_slice()))
    }

    /// Hints the kernel that the whole file is about to be read in order.
    fn advise_sequential(&self, py: Python<'_>) -> PyResult<()> {
        let file = self.file()?;
        py.allow_threads(|| file.advise_sequential());
        Ok(())
    }

    /// Data offset of the byte buffer in the file (8 + header length).
    #[getter]
    fn data_start(&self) -> PyResult<u64> {
        Ok(self.file()?.header().data_start())
    }

    /// Header length in bytes.
    #[getter]
    fn header_len(&self) -> PyResult<u64> {
        Ok(self.file()?.header().header_len())
    }

    /// True for an object read from a store or an HTTP(S) server: it has
    /// no pages to hand out as views, and whole loads go through the
    /// batched load (many requests in flight across tensors).
    #[getter]
    fn remote(&self) -> bool {
        self.remote
    }

    /// The backend in use, "mmap" or "pread".
    #[getter]
    fn backend(&self) -> PyResult<&'static str> {
        Ok(match self.file()?.backend() {
            Backend::Mmap => "mmap",
            Backend::Pread => "pread",
        })
    }
}

/// Parses a whole file held in a bytes-like object: returns the offset of
/// the byte buffer, `(name, dtype, shape, begin, end)` per tensor in file
/// order (offsets relative to the byte buffer), and the metadata pairs or
/// None.
#[pyfunction]
#[pyo3(signature = (data, display_name, header_cap = fastst_core::DEFAULT_HEADER_CAP))]
pub fn parse_bytes<'py>(
    py: Python<'py>,
    data: &Bound<'py, PyAny>,
    display_name: &str,
    header_cap: u64,
) -> PyResult<Bound<'py, PyTuple>> {
    let chunk = Chunk::get(data, "")?;
    let header = fastst_core::parse_file_bytes(chunk.bytes(), header_cap).in_file(display_name)?;
    let tensors = tensor_rows(
        py,
        header
            .tensors()
            .iter()
            .map(|t| (t.name.as_str(), t.dtype, t.shape.as_slice(), t.begin, t.end)),
    )?;
    let metadata = header.metadata().map(|m| m.to_vec());
    (header.data_start(), PyList::new(py, tensors)?, metadata).into_pyobject(py)
}
