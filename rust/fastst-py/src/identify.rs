//! `identify`: what a file that is not safetensors is, from its first bytes
//! (the core's `fastst_core::identify`).

use pyo3::prelude::*;
use pyo3::types::PyDict;

/// `identify(head, file_len)`: None when `head` (the first bytes of a file of
/// `file_len` bytes) starts like a safetensors file, else a dict with `kind`,
/// `description` and `executable`.
#[pyfunction]
fn identify<'py>(
    py: Python<'py>,
    head: &[u8],
    file_len: u64,
) -> PyResult<Option<Bound<'py, PyDict>>> {
    let Some(found) = fastst_core::identify(head, file_len) else {
        return Ok(None);
    };
    let d = PyDict::new(py);
    d.set_item("kind", found.kind)?;
    d.set_item("description", found.description)?;
    d.set_item("executable", found.executable)?;
    Ok(Some(d))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("IDENTIFY_LEN", fastst_core::IDENTIFY_LEN)?;
    m.add_function(wrap_pyfunction!(identify, m)?)
}
