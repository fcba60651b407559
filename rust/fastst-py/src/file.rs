//! `RawFile`: an open file as seen from Python. The Python `safe_open`
//! wraps it and turns its buffers into framework tensors.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use fastst_core::storage::PRIVATE_MAP_THRESHOLD;
use fastst_core::{Backend, MappedFile, OpenOptions, TensorInfo};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::sync::GILOnceCell;
use pyo3::types::{PyDict, PyList, PyString, PyTuple};

use crate::buffer::TensorBuffer;
use crate::errors::{closed, to_pyerr};

/// An open `.safetensors` file (the header is parsed and validated).
#[pyclass(frozen, module = "fastst._fastst")]
pub struct RawFile {
    name: String,
    inner: Mutex<Option<Arc<MappedFile>>>,
    sorted_keys: GILOnceCell<Py<PyList>>,
}

impl RawFile {
    fn file(&self) -> PyResult<Arc<MappedFile>> {
        let guard = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        guard.clone().ok_or_else(|| closed(&self.name))
    }

    fn lookup<'a>(
        &self,
        py: Python<'_>,
        file: &'a MappedFile,
        name: &str,
    ) -> PyResult<&'a TensorInfo> {
        file.header()
            .require(name)
            .map_err(|e| to_pyerr(py, &self.name, e))
    }
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
        path: PathBuf,
        display_name: String,
        backend: &str,
        header_cap: u64,
    ) -> PyResult<RawFile> {
        let backend = Backend::from_name(backend).ok_or_else(|| {
            PyValueError::new_err(format!(
                "backend must be \"mmap\" or \"pread\", got {backend:?}"
            ))
        })?;
        let options = OpenOptions {
            header_cap,
            backend,
        };
        let file = py
            .allow_threads(|| MappedFile::open(&path, options))
            .map_err(|e| to_pyerr(py, &display_name, e))?;
        Ok(RawFile {
            name: display_name,
            inner: Mutex::new(Some(Arc::new(file))),
            sorted_keys: GILOnceCell::new(),
        })
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

    /// Releases the file; buffers obtained before stay valid.
    fn close(&self) {
        self.inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
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
        let t = self.lookup(py, &file, name)?;
        (t.dtype.name(), shape_tuple(py, &t.shape)?, t.begin, t.end).into_pyobject(py)
    }

    /// `(buffer, dtype_name, shape)` for a tensor: the buffer owns writable
    /// bytes, independent of every other call's.
    fn tensor<'py>(&self, py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyTuple>> {
        let file = self.file()?;
        let t = self.lookup(py, &file, name)?;
        let data = if t.byte_len() >= PRIVATE_MAP_THRESHOLD {
            py.allow_threads(|| file.tensor_data(t))
        } else {
            file.tensor_data(t)
        }
        .map_err(|e| to_pyerr(py, &self.name, e))?;
        let buffer = Bound::new(py, TensorBuffer::new(data))?;
        (buffer, t.dtype.name(), shape_tuple(py, &t.shape)?).into_pyobject(py)
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

    /// The backend in use, "mmap" or "pread".
    #[getter]
    fn backend(&self) -> PyResult<&'static str> {
        Ok(match self.file()?.backend() {
            Backend::Mmap => "mmap",
            Backend::Pread => "pread",
        })
    }
}
