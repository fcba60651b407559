//! `parse_header`: validates the header of a file that is not a path (a
//! Python file-like object read with positioned reads), given its first
//! bytes and its length. Used by `fastst/_handle.py`.

use fastst_core::header::check_prefix;
use fastst_core::Header;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};

use crate::errors::InFile;

/// `(data_start, [(name, dtype, shape, begin, end)] in file order,
/// metadata pairs or None)` of a file of `file_len` bytes whose first bytes
/// are `head` (the 8-byte prefix followed by at least the header it
/// announces; fewer bytes when the file is shorter).
#[pyfunction]
#[pyo3(signature = (head, file_len, display_name, header_cap = fastst_core::DEFAULT_HEADER_CAP))]
pub fn parse_header<'py>(
    py: Python<'py>,
    head: &[u8],
    file_len: u64,
    display_name: &str,
    header_cap: u64,
) -> PyResult<Bound<'py, PyTuple>> {
    let n = check_prefix(head, file_len, header_cap).in_file(display_name)?;
    // check_prefix guarantees 8 + n <= file_len; `head` must hold them.
    let end = usize::try_from(n)
        .ok()
        .and_then(|n| n.checked_add(8))
        .filter(|&end| end <= head.len())
        .ok_or(fastst_core::Error::HeaderPastEnd {
            len: n,
            available: head.len().saturating_sub(8) as u64,
        })
        .in_file(display_name)?;
    let json = head.get(8..end).unwrap_or_default();
    let header = Header::parse(json, file_len - 8 - n).in_file(display_name)?;
    let rows = header
        .tensors()
        .iter()
        .map(|t| {
            (
                t.name.as_str(),
                t.dtype.name(),
                PyTuple::new(py, t.shape.iter().copied())?,
                t.begin,
                t.end,
            )
                .into_pyobject(py)
        })
        .collect::<PyResult<Vec<_>>>()?;
    let metadata = header.metadata().map(|m| m.to_vec());
    (header.data_start(), PyList::new(py, rows)?, metadata).into_pyobject(py)
}
