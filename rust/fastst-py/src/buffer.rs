//! `TensorBuffer`: a Python object exporting one tensor's bytes through the
//! buffer protocol, owning the memory (a private mapping or a copy) so that
//! numpy arrays built on it stay valid for as long as they live.

use std::ffi::{c_int, c_void};

use fastst_core::TensorData;
use pyo3::ffi;
use pyo3::prelude::*;

struct Memory {
    ptr: *mut u8,
    len: usize,
    _owner: TensorData,
}

// SAFETY: `ptr` points into `_owner`, which is owned exclusively by this
// struct and never moved out or resized after construction; the memory is
// plain bytes that Python consumers access under their own rules (as with a
// bytearray), so sharing the pointer between threads is sound.
unsafe impl Send for Memory {}
// SAFETY: see above; this struct never reads or writes through `ptr` itself.
unsafe impl Sync for Memory {}

/// Writable bytes of one tensor, exported through the buffer protocol.
#[pyclass(frozen, module = "fastst._fastst.read")]
pub struct TensorBuffer {
    mem: Memory,
}

impl TensorBuffer {
    pub fn new(mut data: TensorData) -> TensorBuffer {
        let slice = data.as_mut_slice();
        let (ptr, len) = (slice.as_mut_ptr(), slice.len());
        TensorBuffer {
            mem: Memory {
                ptr,
                len,
                _owner: data,
            },
        }
    }
}

#[pymethods]
impl TensorBuffer {
    /// Fills a `Py_buffer` describing the bytes (format `B`, writable).
    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        let mem = &slf.get().mem;
        let len = ffi::Py_ssize_t::try_from(mem.len)
            .map_err(|_| pyo3::exceptions::PyOverflowError::new_err("tensor too large"))?;
        // SAFETY: `view` is the valid Py_buffer CPython passes to getbuffer;
        // `ptr`/`len` describe memory owned by `slf`, which PyBuffer_FillInfo
        // keeps alive by taking a reference in `view.obj`.
        let rc = unsafe {
            ffi::PyBuffer_FillInfo(view, slf.as_ptr(), mem.ptr.cast::<c_void>(), len, 0, flags)
        };
        if rc == -1 {
            return Err(PyErr::fetch(slf.py()));
        }
        Ok(())
    }

    unsafe fn __releasebuffer__(&self, _view: *mut ffi::Py_buffer) {}

    fn __len__(&self) -> usize {
        self.mem.len
    }

    /// True when the bytes are a private copy-on-write mapping of the file
    /// (no copy was made), False when they are an owned copy.
    #[getter]
    fn mapped(&self) -> bool {
        self.mem._owner.is_mapped()
    }
}
