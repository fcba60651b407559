//! Forensics and hashes for Python: thin functions over
//! `fastst_inspect` that release the GIL while they work and return
//! plain Python data (dicts, lists, tuples, strings, ints). A path that is
//! a URL is read from its store (`fastst-remote`) by `verify_file`,
//! `hash_file`, `inspect_file` and `read_metadata`, hearing Ctrl-C while
//! they wait on it ([`crate::wait`]).

use fastst_core::{Backend, MappedFile, OpenOptions, RuleId, StderrLine, DEFAULT_HEADER_CAP};
use fastst_inspect::{self as inspect, Finding, HashOptions, VerifyOptions};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};

use crate::errors::InFile;
use crate::paths::FsPath;
use crate::text::display_path;
use crate::wait::hearing_signals;

fn finding_dict<'py>(py: Python<'py>, f: &Finding) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("rule", f.rule.id())?;
    d.set_item("severity", f.severity.name())?;
    d.set_item("verdict", f.rule.verdict().map(|v| v.name()))?;
    d.set_item("message", &f.message)?;
    d.set_item("tensor", f.tensor.as_deref())?;
    d.set_item("key", f.key.as_deref())?;
    d.set_item("offset", f.offset)?;
    d.set_item("length", f.length)?;
    d.set_item("count", f.count)?;
    Ok(d)
}

/// The object `path` names when it is a URL (`fastst-remote`), opened with
/// the environment's settings (the command has no `storage_options`).
pub(crate) fn remote(
    py: Python<'_>,
    path: &std::path::Path,
) -> PyResult<Option<fastst_remote::RemoteSource>> {
    match path.to_str().filter(|p| fastst_remote::is_url(p)) {
        Some(url) => {
            let cancel = fastst_remote::Cancel::default();
            crate::remote::open(py, url, &display_path(path), &Vec::new(), &cancel).map(Some)
        }
        None => Ok(None),
    }
}

/// Runs `work` without the GIL, with a stderr progress line labelled
/// `progress` when given (written as given: the caller escapes it); the
/// reads of an object of a store (`cancel` its canceller) hear Ctrl-C.
pub(crate) fn with_progress<T: Send>(
    py: Python<'_>,
    cancel: Option<&fastst_remote::Cancel>,
    progress: Option<&str>,
    work: impl FnOnce(inspect::Progress) -> T + Send,
) -> PyResult<T> {
    if let Some(label) = progress {
        let p = StderrLine::new(label);
        let out = hearing_signals(py, cancel, |_| {
            let report = |done: u64, total: u64| p.report(done, total);
            work(Some(&report))
        });
        p.finish();
        out
    } else {
        hearing_signals(py, cancel, |_| work(None))
    }
}

/// Verifies a file: a dict with `file_len`, `header_len`, `tensors`,
/// `accepted`, `complete`, `values_checked` and `findings` (a list of dicts
/// with `rule`, `severity`, `message`, `tensor`, `key`, `offset`, `length`,
/// `count`). Raises OSError only when the file cannot be read.
#[pyfunction]
#[pyo3(signature = (path, values = false, header_cap = DEFAULT_HEADER_CAP, threads = 0, progress = None))]
fn verify_file<'py>(
    py: Python<'py>,
    path: FsPath,
    values: bool,
    header_cap: u64,
    threads: usize,
    progress: Option<String>,
) -> PyResult<Bound<'py, PyDict>> {
    let name = display_path(&path);
    let options = VerifyOptions {
        header_cap,
        values,
        threads,
    };
    let url = remote(py, &path)?;
    let cancel = url.as_ref().map(fastst_remote::RemoteSource::canceller);
    let report = with_progress(py, cancel.as_ref(), progress.as_deref(), |p| match url {
        Some(src) => inspect::verify_source(Box::new(src), &options, p),
        None => inspect::verify_path(&path, &options, p),
    })?
    .in_file(&name)?;
    let d = PyDict::new(py);
    d.set_item("path", &name)?;
    d.set_item("file_len", report.file_len)?;
    d.set_item("header_len", report.header_len)?;
    d.set_item("tensors", report.tensors)?;
    d.set_item("accepted", report.accepted)?;
    d.set_item("complete", report.complete)?;
    d.set_item("values_checked", report.values_checked)?;
    let findings = PyList::empty(py);
    for f in &report.findings {
        findings.append(finding_dict(py, f)?)?;
    }
    d.set_item("findings", findings)?;
    Ok(d)
}

/// Hashes a file: a dict with `file_len`, `sha256`, `autov1`, `autov2`,
/// `autov3`, `header_len`, `header_sha256`, `tensors` (a dict name ->
/// SHA-256 in file order, or None) and `header_problem` (a finding dict or
/// None).
#[pyfunction]
#[pyo3(signature = (path, tensors = false, header_cap = DEFAULT_HEADER_CAP, threads = 0, progress = None))]
fn hash_file<'py>(
    py: Python<'py>,
    path: FsPath,
    tensors: bool,
    header_cap: u64,
    threads: usize,
    progress: Option<String>,
) -> PyResult<Bound<'py, PyDict>> {
    let name = display_path(&path);
    let options = HashOptions {
        tensors,
        threads,
        header_cap,
    };
    let url = remote(py, &path)?;
    let cancel = url.as_ref().map(fastst_remote::RemoteSource::canceller);
    let report = with_progress(py, cancel.as_ref(), progress.as_deref(), |p| match url {
        Some(src) => inspect::hash_source(Box::new(src), &options, p),
        None => inspect::hash_path(&path, &options, p),
    })?
    .in_file(&name)?;
    let d = PyDict::new(py);
    d.set_item("path", &name)?;
    d.set_item("file_len", report.file_len)?;
    d.set_item("sha256", &report.sha256)?;
    d.set_item("autov1", &report.autov1)?;
    d.set_item("autov2", &report.autov2)?;
    d.set_item("autov3", report.autov3.as_deref())?;
    d.set_item("header_len", report.header_len)?;
    d.set_item("header_sha256", report.header_sha256.as_deref())?;
    match &report.tensors {
        Some(list) => {
            let t = PyDict::new(py);
            for (n, h) in list {
                t.set_item(n, h)?;
            }
            d.set_item("tensors", t)?;
        }
        None => d.set_item("tensors", py.None())?,
    }
    match &report.header_problem {
        Some(f) => d.set_item("header_problem", finding_dict(py, f)?)?,
        None => d.set_item("header_problem", py.None())?,
    }
    Ok(d)
}

/// Summarises a file the strict reader accepts: a dict with `tensors`,
/// `parameters`, `by_dtype` (list of dicts), `header_len`, `data_start`,
/// `data_alignment` (the largest power of two up to 4096 dividing
/// `data_start`), `data_len`, `file_len`, `metadata` (dict or None) and, when `table` is
/// true, `table`: `(name, dtype, shape, begin, end)` tuples in file order
/// (offsets relative to the data buffer).
#[pyfunction]
#[pyo3(signature = (path, table = false, header_cap = DEFAULT_HEADER_CAP))]
fn inspect_file<'py>(
    py: Python<'py>,
    path: FsPath,
    table: bool,
    header_cap: u64,
) -> PyResult<Bound<'py, PyDict>> {
    let name = display_path(&path);
    let options = OpenOptions {
        header_cap,
        backend: Backend::Pread,
    };
    let url = remote(py, &path)?;
    let cancel = url.as_ref().map(fastst_remote::RemoteSource::canceller);
    let file = hearing_signals(py, cancel.as_ref(), |_| match url {
        Some(src) => MappedFile::from_source(src, options),
        None => MappedFile::open(&path, options),
    })?
    .in_file(&name)?;
    let header = file.header();
    let s = py.allow_threads(|| inspect::summarize(header));
    let d = PyDict::new(py);
    d.set_item("path", &name)?;
    d.set_item("file_len", file.file_len())?;
    d.set_item("tensors", s.tensors)?;
    d.set_item("parameters", s.parameters)?;
    d.set_item("header_len", s.header_len)?;
    d.set_item("data_start", s.data_start)?;
    d.set_item("data_alignment", fastst_core::data_alignment(s.data_start))?;
    d.set_item("data_len", s.data_len)?;
    let by_dtype = PyList::empty(py);
    for t in &s.by_dtype {
        let e = PyDict::new(py);
        e.set_item("dtype", t.dtype.name())?;
        e.set_item("tensors", t.tensors)?;
        e.set_item("parameters", t.parameters)?;
        e.set_item("bytes", t.bytes)?;
        by_dtype.append(e)?;
    }
    d.set_item("by_dtype", by_dtype)?;
    match header.metadata() {
        Some(pairs) => {
            let m = PyDict::new(py);
            for (k, v) in pairs {
                m.set_item(k, v)?;
            }
            d.set_item("metadata", m)?;
        }
        None => d.set_item("metadata", py.None())?,
    }
    if table {
        let rows = PyList::empty(py);
        for t in header.tensors() {
            let shape = PyTuple::new(py, t.shape.iter().copied())?;
            rows.append((t.name.as_str(), t.dtype.name(), shape, t.begin, t.end))?;
        }
        d.set_item("table", rows)?;
    }
    Ok(d)
}

/// The `__metadata__` pairs of a file, read without validating its tensor
/// table: a list of `(key, value)` in header order (non-string values as
/// JSON text), or None when there is no metadata.
#[pyfunction]
#[pyo3(signature = (path, header_cap = DEFAULT_HEADER_CAP))]
fn read_metadata(
    py: Python<'_>,
    path: FsPath,
    header_cap: u64,
) -> PyResult<Option<Vec<(String, String)>>> {
    let name = display_path(&path);
    let url = remote(py, &path)?;
    let cancel = url.as_ref().map(fastst_remote::RemoteSource::canceller);
    hearing_signals(py, cancel.as_ref(), |_| match url {
        Some(src) => inspect::read_metadata_source(Box::new(src), header_cap),
        None => inspect::read_metadata(&path, header_cap),
    })?
    .in_file(&name)
}

/// The rules `verify` can report (the reader's format rules and the
/// forensic findings), in catalogue order: a list of dicts with `id`,
/// `severity`, `verdict` ("malformed" or "red-flag") and `summary`.
#[pyfunction]
fn verify_rules(py: Python<'_>) -> PyResult<Bound<'_, PyList>> {
    let out = PyList::empty(py);
    for r in RuleId::ALL.iter().filter(|r| r.is_verify_rule()) {
        let d = PyDict::new(py);
        d.set_item("id", r.id())?;
        d.set_item("severity", r.severity().name())?;
        d.set_item("verdict", r.verdict().map(|v| v.name()))?;
        d.set_item("summary", r.summary())?;
        out.append(d)?;
    }
    Ok(out)
}

/// Adds this file's functions to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(verify_file, m)?)?;
    m.add_function(wrap_pyfunction!(hash_file, m)?)?;
    m.add_function(wrap_pyfunction!(inspect_file, m)?)?;
    m.add_function(wrap_pyfunction!(read_metadata, m)?)?;
    m.add_function(wrap_pyfunction!(verify_rules, m)?)?;
    Ok(())
}
