//! `diff_buffers`: the values of two tensors compared by the forensics
//! crate (`fastst_inspect::compare_values`), without the GIL.

use fastst_core::Dtype;
use fastst_inspect::{compare_values, Side};
use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// A read-only byte view of a Python buffer, usable without the GIL.
struct Bytes {
    ptr: *const u8,
    len: usize,
}

// SAFETY: the pointer stays valid while the `PyBuffer` it came from is alive
// (the exporter is pinned for the buffer's lifetime), and every use of a
// `Bytes` is scoped inside the call holding that `PyBuffer`.
unsafe impl Send for Bytes {}
// SAFETY: as above; the bytes are only read.
unsafe impl Sync for Bytes {}

impl Bytes {
    fn of(buf: &PyBuffer<u8>) -> PyResult<Bytes> {
        if !buf.is_c_contiguous() {
            return Err(PyValueError::new_err("buffer is not C-contiguous"));
        }
        Ok(Bytes {
            ptr: buf.buf_ptr().cast::<u8>().cast_const(),
            len: buf.len_bytes(),
        })
    }

    fn slice(&self) -> &[u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: `ptr`/`len` describe a C-contiguous buffer kept alive by
        // the caller's `PyBuffer` for the whole call.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

/// `diff_buffers(a, b, dtype, threads=0, dtype_b=None, profile=False)`:
/// compares two tensors' bytes, `a` of header dtype `dtype` and `b` of
/// `dtype_b` (default: the same), holding as many elements; returns a dict
/// with `identical`, `differing`, `max_abs` and `max_rel` (None for dtypes
/// compared bit for bit), and with `profile` `rel_l2` and `cosine`.
#[pyfunction]
#[pyo3(signature = (a, b, dtype, threads = 0, dtype_b = None, profile = false))]
fn diff_buffers<'py>(
    py: Python<'py>,
    a: PyBuffer<u8>,
    b: PyBuffer<u8>,
    dtype: &str,
    threads: usize,
    dtype_b: Option<&str>,
    profile: bool,
) -> PyResult<Bound<'py, PyDict>> {
    let parse = |name: &str| {
        Dtype::from_name(name)
            .ok_or_else(|| PyValueError::new_err(format!("unknown dtype {name:?}")))
    };
    let (ta, tb) = (parse(dtype)?, parse(dtype_b.unwrap_or(dtype))?);
    let (x, y) = (Bytes::of(&a)?, Bytes::of(&b)?);
    let found = py
        .allow_threads(|| {
            let sa = Side {
                dtype: ta,
                bytes: x.slice(),
            };
            let sb = Side {
                dtype: tb,
                bytes: y.slice(),
            };
            compare_values(sa, sb, profile, threads)
        })
        .ok_or_else(|| PyValueError::new_err("the two buffers hold different numbers of values"))?;
    let d = PyDict::new(py);
    d.set_item("identical", found.identical)?;
    d.set_item("differing", found.differing)?;
    d.set_item("max_abs", found.max_abs)?;
    d.set_item("max_rel", found.max_rel)?;
    if profile {
        d.set_item("rel_l2", found.rel_l2)?;
        d.set_item("cosine", found.cosine)?;
    }
    Ok(d)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(diff_buffers, m)?)
}
