//! `ReadAhead`: the core's background reader of a file's pages
//! (`fastst_core::Prefetcher`), driven by `fastst/_read/read_ahead.py` (which
//! plans the byte ranges from tensor names and slices).
//!
//! The byte ranges of a slice come from the core's reader of slices
//! (`slice_ranges`): the read-ahead plans the very bytes a slice reads.

use std::time::Duration;

use fastst_core::{Dim, Dtype, PrefetchMethod, PrefetchOptions, PrefetchStatus, Prefetcher};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::errors::InFile;
use crate::file::RawFile;

/// Reads planned byte ranges of an open file in the background, never more
/// than `budget` bytes ahead of what the consumer reported as taken.
#[pyclass(frozen, module = "fastst._fastst.read", name = "ReadAhead")]
pub struct PyReadAhead {
    inner: Prefetcher,
}

fn status_dict<'py>(
    py: Python<'py>,
    s: &PrefetchStatus,
    method: PrefetchMethod,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("planned", s.planned)?;
    d.set_item("issued", s.issued)?;
    d.set_item("done", s.done)?;
    d.set_item("resident", s.resident)?;
    d.set_item("consumed", s.consumed)?;
    d.set_item("budget", s.budget)?;
    d.set_item("workers", s.workers)?;
    d.set_item("waiting", s.waiting)?;
    d.set_item("stopped", s.stopped)?;
    d.set_item("failed", s.failed)?;
    d.set_item("method", method.name())?;
    Ok(d)
}

#[pymethods]
impl PyReadAhead {
    /// Starts reading `ranges` (absolute `(offset, length)` pairs, in that
    /// order) of the open file `file` in the background, at most `budget`
    /// bytes ahead of the consumer (default: half the available memory).
    /// Ranges already in the page cache are skipped.
    #[new]
    #[pyo3(signature = (file, ranges, budget = None))]
    fn new(
        py: Python<'_>,
        file: &RawFile,
        ranges: Vec<(u64, u64)>,
        budget: Option<u64>,
    ) -> PyResult<PyReadAhead> {
        let file = file.file()?;
        let options = PrefetchOptions {
            budget: budget.unwrap_or_else(PrefetchOptions::default_budget),
            ..PrefetchOptions::default()
        };
        let inner = py.allow_threads(|| Prefetcher::start(file, &ranges, options));
        Ok(PyReadAhead { inner })
    }

    /// The consumer took `nbytes` more of the planned bytes.
    fn consumed(&self, nbytes: u64) {
        self.inner.consumed(nbytes);
    }

    /// Stops reading (does not wait for a read in progress).
    fn stop(&self) {
        self.inner.stop();
    }

    /// Ends the threads once the budget is used instead of waiting for the
    /// consumer (for a handle about to close while its views are in use).
    fn detach(&self) {
        self.inner.detach();
    }

    /// `"populate"`, `"read"` or `"advise"`.
    #[getter]
    fn method(&self) -> &'static str {
        self.inner.method().name()
    }

    /// Where the read-ahead stands, as a dict.
    fn status<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        status_dict(py, &self.inner.status(), self.inner.method())
    }

    /// Waits (GIL released) until no thread reads or can, at most
    /// `timeout` seconds; returns the status then.
    fn wait_idle<'py>(&self, py: Python<'py>, timeout: f64) -> PyResult<Bound<'py, PyDict>> {
        let timeout = Duration::try_from_secs_f64(timeout.max(0.0))
            .map_err(|_| PyValueError::new_err("timeout must be a finite number of seconds"))?;
        let status = py.allow_threads(|| self.inner.wait_idle(timeout));
        status_dict(py, &status, self.inner.method())
    }
}

/// Half of the memory the kernel reports as available: the read-ahead's
/// budget when none is given.
#[pyfunction]
fn default_read_ahead_budget() -> u64 {
    PrefetchOptions::default_budget()
}

/// The byte ranges `(offset, length)` that reading `dims` (one `(start,
/// count, step)` per dimension, as `RawFile.read_slice_into` takes them) of
/// a tensor of `dtype` (a header name) and `shape` takes, offsets from the
/// tensor's first byte, in increasing order: the runs the reader of slices
/// reads, those that touch joined; more than `max_ranges` ranges are the
/// one range spanning them.
#[pyfunction]
fn slice_ranges(
    py: Python<'_>,
    dtype: &str,
    shape: Vec<u64>,
    dims: Vec<(u64, u64, u64)>,
    max_ranges: usize,
) -> PyResult<Vec<(u64, u64)>> {
    let dtype = Dtype::from_name(dtype)
        .ok_or_else(|| PyValueError::new_err(format!("unknown dtype {dtype:?}")))?;
    let dims: Vec<Dim> = dims
        .into_iter()
        .map(|(start, count, step)| Dim { start, count, step })
        .collect();
    let ranges = py
        .allow_threads(|| fastst_core::slice_ranges(dtype, &shape, &dims, max_ranges))
        .in_file("")?;
    Ok(ranges
        .into_iter()
        .map(|r| (r.start, r.end.saturating_sub(r.start)))
        .collect())
}

/// Adds the read-ahead to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyReadAhead>()?;
    m.add_function(wrap_pyfunction!(default_read_ahead_budget, m)?)?;
    m.add_function(wrap_pyfunction!(slice_ranges, m)?)?;
    Ok(())
}
