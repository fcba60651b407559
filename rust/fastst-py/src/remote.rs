//! Objects in object stores and behind HTTP(S) (`fastst-remote`): opening
//! one as a `RawFile` source (or a checkpoint's shards, several at once),
//! reading a small one whole (index files), listing a prefix, writing one
//! with a multipart upload. The GIL is released while requests run, and
//! the waits hear Ctrl-C ([`crate::wait`]). The first store made without
//! certificate checks warns, once per process
//! (`fastst.InsecureTransportWarning`).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

use fastst_core::{RuleId, TensorStream};
use fastst_remote::{Cancel, Listing, OpenError, RemoteSource, Upload};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};

use crate::errors::{rule_error, to_pyerr, InFile};
use crate::file::RawFile;
use crate::wait::{hearing_signals, WAIT_SLICE};
use crate::write::PyWritePlan;

/// `storage_options` as pairs.
pub(crate) type Options = Vec<(String, String)>;

/// An opening failure as a Python exception naming `name`.
pub(crate) fn open_failed(name: &str, e: OpenError) -> PyErr {
    match e {
        OpenError::Config(c) => PyValueError::new_err(c.0),
        OpenError::Read(e) => to_pyerr(name, e),
    }
}

/// Warns (`fastst.InsecureTransportWarning`), once per process, when a
/// store was made that does not check TLS certificates. A warning turned
/// into an error by the warning filters is raised.
pub(crate) fn warn_if_insecure(py: Python<'_>) -> PyResult<()> {
    static WARNED: AtomicBool = AtomicBool::new(false);
    if !fastst_remote::certificates_unchecked() || WARNED.load(Ordering::Relaxed) {
        return Ok(());
    }
    let category = py
        .import("fastst._errors")?
        .getattr("InsecureTransportWarning")?;
    PyErr::warn(
        py,
        &category,
        c"TLS certificate checks are off for a store (allow_invalid_certificates in \
storage_options or the environment): its answers may come from anyone on the path",
        1,
    )?;
    WARNED.store(true, Ordering::Relaxed);
    Ok(())
}

/// Opens the object `url` (one ranged GET), GIL released, hearing Ctrl-C;
/// its reads stop when `cancel` is given; errors name it `name`.
pub(crate) fn open(
    py: Python<'_>,
    url: &str,
    name: &str,
    options: &Options,
    cancel: &Cancel,
) -> PyResult<RemoteSource> {
    let opened = hearing_signals(py, Some(cancel), |_| {
        RemoteSource::open_with(url, options, cancel.clone())
    });
    warn_if_insecure(py)?;
    opened?.map_err(|e| open_failed(name, e))
}

/// How the opening of one object of [`open_urls`] ended.
enum Opened {
    /// Opened, its header read and checked.
    File(fastst_core::MappedFile),
    /// The object could not be opened.
    Failed(OpenError),
    /// Its header breaks a rule.
    Header(fastst_core::Error),
}

/// Opens the objects `urls` (named `names` in errors), a checkpoint's
/// shards, and reads their headers, at most `concurrency` at a time, with
/// one client per store; their reads share one [`Cancel`] (one logical
/// file). In order: a `RawFile`, `None` for an object that does not
/// exist, or the exception of the first other failure, which ends the
/// list (no later object is opened).
#[pyfunction]
#[pyo3(signature = (urls, names, options, header_cap, concurrency = 16))]
fn open_urls<'py>(
    py: Python<'py>,
    urls: Vec<String>,
    names: Vec<String>,
    options: Options,
    header_cap: u64,
    concurrency: usize,
) -> PyResult<Bound<'py, PyList>> {
    if urls.len() != names.len() {
        return Err(PyValueError::new_err(
            "urls and names must have the same length",
        ));
    }
    let cancel = Cancel::default();
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let opened: Vec<Mutex<Option<Opened>>> = urls.iter().map(|_| Mutex::new(None)).collect();
    let header = fastst_core::OpenOptions {
        header_cap,
        backend: fastst_core::Backend::Pread,
    };
    let open_one = |i: usize| match RemoteSource::open_with(&urls[i], &options, cancel.clone()) {
        Ok(source) => match fastst_core::MappedFile::from_source(source, header) {
            Ok(file) => Opened::File(file),
            Err(e) => Opened::Header(e),
        },
        Err(e) => Opened::Failed(e),
    };
    let work = || loop {
        let i = next.fetch_add(1, Ordering::Relaxed);
        if i >= urls.len() || failed.load(Ordering::Relaxed) {
            break;
        }
        let got = open_one(i);
        let ends = match &got {
            Opened::File(_) => false,
            Opened::Failed(e) => !is_not_found(e),
            Opened::Header(_) => true,
        };
        if ends {
            failed.store(true, Ordering::Relaxed);
        }
        *opened[i].lock().unwrap_or_else(|p| p.into_inner()) = Some(got);
    };
    let ran = hearing_signals(py, Some(&cancel), |_| {
        std::thread::scope(|s| {
            // Helpers as many as can be had, and this thread.
            for _ in 1..concurrency.clamp(1, urls.len().max(1)) {
                if std::thread::Builder::new().spawn_scoped(s, work).is_err() {
                    break;
                }
            }
            work();
        })
    });
    warn_if_insecure(py)?;
    ran?;
    let out = PyList::empty(py);
    for (slot, name) in opened.into_iter().zip(names) {
        let got = slot.into_inner().unwrap_or_else(|p| p.into_inner());
        match got {
            None => break,
            Some(Opened::File(file)) => {
                let raw = RawFile::of_opened(file, name, cancel.clone());
                out.append(Bound::new(py, raw)?)?;
            }
            Some(Opened::Failed(e)) if is_not_found(&e) => out.append(py.None())?,
            Some(Opened::Failed(e)) => {
                out.append(open_failed(&name, e).value(py))?;
                break;
            }
            Some(Opened::Header(e)) => {
                out.append(to_pyerr(&name, e).value(py))?;
                break;
            }
        }
    }
    Ok(out)
}

/// Whether an opening failed because the object does not exist.
fn is_not_found(e: &OpenError) -> bool {
    matches!(e, OpenError::Read(fastst_core::Error::Io { source, .. })
        if source.kind() == std::io::ErrorKind::NotFound)
}

/// Whether `name` is a URL of an object store or an HTTP(S) server. A name
/// that is no UTF-8 text (a `str` holding surrogates for a file name's
/// undecodable bytes) or no `str` at all is none.
#[pyfunction]
fn is_remote_url(name: &Bound<'_, PyAny>) -> bool {
    name.extract::<&str>().is_ok_and(fastst_remote::is_url)
}

/// The URL `url` of a cloud store (`s3://`, `gs://`, `az://`...) cut into
/// its root (`s3://bucket`) and its object key, taken literally (`#`, `?`,
/// `%` and `..` are characters of it); `None` for any other URL (HTTP(S)),
/// whose path follows the URL rules.
#[pyfunction]
fn object_key(url: &str) -> Option<(String, String)> {
    fastst_remote::literal_key(url).map(|(root, key)| (root.to_owned(), key.to_owned()))
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
    let cancel = Cancel::default();
    let src = open(py, url, name, &options, &cancel)?;
    if src.len() > cap {
        return Ok(None);
    }
    let mut buf = fastst_core::internal::zeroed(src.len(), "").map_err(|e| to_pyerr(name, e))?;
    hearing_signals(py, Some(&cancel), |_| src.read_at(0, &mut buf))?
        .map_err(|e| to_pyerr(name, e))?;
    Ok(Some(PyBytes::new(py, &buf)))
}

/// The names of the objects directly under the prefix `url` (named `name`
/// in errors), sorted; `None` when more than `cap` objects lie under it.
/// A listing that takes more than `fastst_remote::LIST_PAGE_CAP` pages,
/// or repeats a page, is rule `listing-pages-over-cap` (`FolderError`).
#[pyfunction]
#[pyo3(signature = (url, name, options, cap))]
fn list_remote(
    py: Python<'_>,
    url: &str,
    name: &str,
    options: Options,
    cap: usize,
) -> PyResult<Option<Vec<String>>> {
    let cancel = Cancel::default();
    let listed = hearing_signals(py, Some(&cancel), |_| {
        fastst_remote::list(url, &options, cap, &cancel)
    });
    warn_if_insecure(py)?;
    match listed?.map_err(|e| open_failed(name, e))? {
        Listing::Names(names) => Ok(Some(names)),
        Listing::OverCap => Ok(None),
        Listing::Endless { pages } => Err(rule_error(
            RuleId::ListingPagesOverCap,
            name,
            None,
            &format!(
                "the listing of the prefix did not end after {pages} pages (the most one \
                 listing reads is {}, and a page may not repeat its token); name the \
                 checkpoint's index or file",
                fastst_remote::LIST_PAGE_CAP
            ),
        )),
    }
}

/// What stopped an upload while its bytes were fed.
enum Stop {
    /// The store's answer (a part that failed after its retries).
    Store(fastst_core::Error),
    /// A Python exception: a signal handler's (KeyboardInterrupt).
    Python(PyErr),
}

/// The bytes of a save on their way to the store: parts sent as they
/// fill; while no part may be sent, this waits with the GIL released,
/// running Python's signal handlers now and then.
struct Sink<'u> {
    upload: &'u mut Upload,
    stopped: Option<Stop>,
}

impl Sink<'_> {
    /// Sends the full part once there is room for it.
    fn send(&mut self) -> Result<(), Stop> {
        while !self.upload.has_room() {
            let upload = &mut *self.upload;
            // Works whether this thread holds the GIL (a short chunk is
            // written without releasing it) or not: the wait itself never
            // holds it.
            Python::with_gil(|py| {
                py.check_signals().map_err(Stop::Python)?;
                py.allow_threads(|| upload.wait_some(Some(WAIT_SLICE)))
                    .map_err(Stop::Store)
            })?;
        }
        self.upload.send().map_err(Stop::Store)
    }
}

impl std::io::Write for Sink<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.stopped.is_some() {
            return Err(std::io::Error::other("the upload was stopped"));
        }
        let mut rest = buf;
        while !rest.is_empty() {
            let n = self.upload.fill(rest);
            rest = &rest[n..];
            if self.upload.part_full() {
                if let Err(stop) = self.send() {
                    self.stopped = Some(stop);
                    return Err(std::io::Error::other("the upload was stopped"));
                }
            }
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Sends the last part, waits for every part (hearing Ctrl-C) and
/// completes `upload`; on failure the upload is aborted.
fn complete(py: Python<'_>, mut upload: Upload) -> Result<(), Stop> {
    let mut sent = upload.send().map_err(Stop::Store);
    while sent.is_ok() && upload.in_flight() > 0 {
        sent = py.check_signals().map_err(Stop::Python).and_then(|()| {
            py.allow_threads(|| upload.wait_some(Some(WAIT_SLICE)))
                .map_err(Stop::Store)
        });
    }
    match sent {
        Ok(()) => py.allow_threads(|| upload.complete()).map_err(Stop::Store),
        Err(stop) => {
            let _ = py.allow_threads(|| upload.abort());
            Err(stop)
        }
    }
}

/// Writes the file `plan` lays out to the object `url` (named `name` in
/// errors) with a multipart upload, `sources` as for `WritePlan.write_file`:
/// parts go up as the tensors' bytes come, a bounded number in flight, and
/// the object appears under its key only when every part arrived. On any
/// error (the store's, after its retries, or a Python exception from an
/// iterator or a signal handler) the upload is aborted: nothing appears,
/// an old object stays as it was. The GIL is released while waiting.
#[pyfunction]
#[pyo3(signature = (plan, url, name, options, sources))]
fn upload_file(
    py: Python<'_>,
    plan: &Bound<'_, PyWritePlan>,
    url: &str,
    name: &str,
    options: Options,
    sources: &Bound<'_, PyAny>,
) -> PyResult<()> {
    let plan = plan.get();
    let total = plan.plan.total_len();
    let started = py.allow_threads(|| Upload::start(url, &options, total));
    warn_if_insecure(py)?;
    let mut upload = started.map_err(|e| open_failed(name, e))?;
    let mut sink = Sink {
        upload: &mut upload,
        stopped: None,
    };
    let fed = TensorStream::new(&plan.plan, &mut sink)
        .in_file(name)
        .and_then(|mut stream| {
            plan.feed(py, name, sources, &mut stream)?;
            stream.finish().in_file(name).map(|_| ())
        });
    let stopped = sink.stopped.take();
    let failed = match (fed, stopped) {
        (_, Some(stop)) => Some(stop),
        (Err(e), None) => Some(Stop::Python(e)),
        (Ok(()), None) => None,
    };
    let done = match failed {
        None => complete(py, upload),
        Some(stop) => {
            let _ = py.allow_threads(|| upload.abort());
            Err(stop)
        }
    };
    done.map_err(|stop| match stop {
        Stop::Store(e) => to_pyerr(name, e),
        Stop::Python(e) => e,
    })
}

/// Writes `data` as the object `url` (named `name` in errors) with one
/// PUT: it appears whole, replacing an old one, or not at all. For small
/// objects (a checkpoint's index). The GIL is released meanwhile.
#[pyfunction]
#[pyo3(signature = (url, name, options, data))]
fn put_remote(
    py: Python<'_>,
    url: &str,
    name: &str,
    options: Options,
    data: &[u8],
) -> PyResult<()> {
    let bytes = data.to_vec();
    let put = py.allow_threads(|| fastst_remote::upload::put(url, &options, bytes));
    warn_if_insecure(py)?;
    put.map_err(|e| open_failed(name, e))
}

/// Deletes the object `url` (named `name` in errors); one that is not
/// there is no error. The GIL is released meanwhile.
#[pyfunction]
#[pyo3(signature = (url, name, options))]
fn delete_remote(py: Python<'_>, url: &str, name: &str, options: Options) -> PyResult<()> {
    py.allow_threads(|| fastst_remote::upload::delete(url, &options))
        .map_err(|e| open_failed(name, e))
}

/// Opens and validates the object at `url` (an object store or an HTTP(S)
/// server) with ranged GETs; `options` are its `storage_options`;
/// `display_name` names it in errors (the URL without credentials). Only
/// the size prefix and the header are fetched.
#[pyfunction]
#[pyo3(signature = (url, display_name, options, header_cap = fastst_core::DEFAULT_HEADER_CAP))]
fn open_object(
    py: Python<'_>,
    url: &str,
    display_name: String,
    options: Options,
    header_cap: u64,
) -> PyResult<RawFile> {
    let cancel = Cancel::default();
    let source = open(py, url, &display_name, &options, &cancel)?;
    RawFile::of_object(py, source, display_name, header_cap)
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(open_object, m)?)?;
    m.add_function(wrap_pyfunction!(is_remote_url, m)?)?;
    m.add_function(wrap_pyfunction!(object_key, m)?)?;
    m.add_function(wrap_pyfunction!(read_remote, m)?)?;
    m.add_function(wrap_pyfunction!(list_remote, m)?)?;
    m.add_function(wrap_pyfunction!(open_urls, m)?)?;
    m.add_function(wrap_pyfunction!(upload_file, m)?)?;
    m.add_function(wrap_pyfunction!(put_remote, m)?)?;
    m.add_function(wrap_pyfunction!(delete_remote, m)?)?;
    Ok(())
}
