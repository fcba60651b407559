//! Objects in object stores and behind HTTP(S) (`fastst-remote`): opening
//! one as a `RawFile` source, reading a small one whole (index files),
//! listing a prefix. The GIL is released while requests run.

use fastst_remote::{OpenError, RemoteSource};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::errors::to_pyerr;

/// `storage_options` as pairs.
pub(crate) type Options = Vec<(String, String)>;

/// An opening failure as a Python exception naming `name`.
fn open_failed(name: &str, e: OpenError) -> PyErr {
    match e {
        OpenError::Config(c) => PyValueError::new_err(c.0),
        OpenError::Read(e) => to_pyerr(name, e),
    }
}

/// Opens the object `url` (one ranged GET), GIL released; errors name it
/// `name`.
pub(crate) fn open(
    py: Python<'_>,
    url: &str,
    name: &str,
    options: &Options,
) -> PyResult<RemoteSource> {
    py.allow_threads(|| RemoteSource::open(url, options))
        .map_err(|e| open_failed(name, e))
}

/// Whether `name` is a URL of an object store or an HTTP(S) server. A name
/// that is no UTF-8 text (a `str` holding surrogates for a file name's
/// undecodable bytes) or no `str` at all is none.
#[pyfunction]
fn is_remote_url(name: &Bound<'_, PyAny>) -> bool {
    name.extract::<&str>().is_ok_and(fastst_remote::is_url)
}

/// The bytes of the object `url` (named `name` in errors) when it holds
/// at most `cap` bytes; else `None` (nothing past its first bytes is
/// fetched).
#[pyfunction]
#[pyo3(signature = (url, name, options, cap))]
fn read_remote<'py>(
    py: Python<'py>,
    url: &str,
    name: &str,
    options: Options,
    cap: u64,
) -> PyResult<Option<Bound<'py, PyBytes>>> {
    use fastst_core::Source;
    let src = open(py, url, name, &options)?;
    if src.len() > cap {
        return Ok(None);
    }
    let mut buf = fastst_core::internal::zeroed(src.len(), "").map_err(|e| to_pyerr(name, e))?;
    py.allow_threads(|| src.read_at(0, &mut buf))
        .map_err(|e| to_pyerr(name, e))?;
    Ok(Some(PyBytes::new(py, &buf)))
}

/// The names of the objects directly under the prefix `url` (named `name`
/// in errors), sorted; `None` when more than `cap` objects lie under it.
#[pyfunction]
#[pyo3(signature = (url, name, options, cap))]
fn list_remote(
    py: Python<'_>,
    url: &str,
    name: &str,
    options: Options,
    cap: usize,
) -> PyResult<Option<Vec<String>>> {
    py.allow_threads(|| fastst_remote::list(url, &options, cap))
        .map_err(|e| open_failed(name, e))
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(is_remote_url, m)?)?;
    m.add_function(wrap_pyfunction!(read_remote, m)?)?;
    m.add_function(wrap_pyfunction!(list_remote, m)?)?;
    Ok(())
}
