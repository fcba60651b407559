//! fastst-py: the Python extension module `fastst._fastst`, PyO3 glue only.
//!
//! The format logic lives in `fastst-core` (reading, validating, writing)
//! and `fastst-inspect` (forensics); this crate turns their types into
//! Python objects and their errors into Python exceptions, and releases the
//! GIL while bytes move. The Python package `fastst` (in `python/`) is the
//! library users call; it calls these functions and classes.
//!
//! # Brief overview
//!
//! Reading: `fastst.safe_open` opens a `file::RawFile` (a core
//! `MappedFile`, from a path or from a Python file object seen as a core
//! `Source` through `source::PySource`); each tensor it hands out is a
//! `buffer::TensorBuffer`, which owns the tensor's bytes (a private mapping
//! or a copy) and exports them through the buffer protocol, so numpy and
//! the frameworks wrap them without a copy. Whole loads into memory Python
//! allocated go through `load`, read-ahead through `prefetch`. Writing: a
//! `write::PyWritePlan` takes names, dtypes, shapes and metadata, then the
//! tensors' buffers. Every core error becomes the Python class of its
//! rule's family through one conversion (`errors`).
//!
//! The modules, one job each:
//!
//! - `file`: `RawFile`, an open file (names, metadata, tensors, reads).
//! - `source`: `PySource`, a Python file object as a core `Source`.
//! - `remote`: URLs of object stores and HTTP(S) servers (`fastst-remote`):
//!   opening (a checkpoint's shards several at once), index files,
//!   listing a prefix, writing.
//! - `buffer`: `TensorBuffer`, one tensor's bytes for the buffer protocol.
//! - `load`: `load_into`, many tensors into Python-allocated memory, and
//!   `fault_probe`, what a cold load asks before choosing its page size.
//! - `prefetch`: `Prefetcher`, the core's background page reader.
//! - `write`: `WritePlan` and `parse_bytes` (the writer and `deserialize`).
//! - `layout_writer`: `LayoutWriter`, the streaming writer (tensors in any
//!   order, from any thread, committed once all are written).
//! - `identify`: what a file that is not safetensors is (the core's
//!   `identify`).
//! - `catalogue`: the rule catalogue, dtype facts and conversions.
//! - `errors`: the one conversion of a core error to the Python class of
//!   its rule's family (`result.in_file(name)?`).
//! - `inspect`: `verify_file`, `hash_file`, `inspect_file`, `verify_rules`,
//!   `read_metadata` (over `fastst-inspect`).
//! - `paths`: `FsPath`, a path argument (`str`, `bytes`, `os.PathLike`).
//! - `diff`: `diff_buffers`, two tensors' values compared.
//! - `stats`: `stats_file`, what each tensor's values look like.
//! - `wait`: waits on a remote store that hear Ctrl-C (the work on a
//!   helper thread, signals run on the main thread, reads cancelled).
#![deny(unsafe_op_in_unsafe_fn)]

mod buffer;
mod catalogue;
mod diff;
mod errors;
mod file;
mod identify;
mod inspect;
mod layout_writer;
mod load;
mod paths;
mod prefetch;
mod remote;
mod source;
mod stats;
mod wait;
mod write;

use pyo3::prelude::*;

/// The compiled part of fastst.
#[pymodule]
fn _fastst(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("DEFAULT_HEADER_CAP", fastst_core::DEFAULT_HEADER_CAP)?;
    m.add_class::<file::RawFile>()?;
    m.add_class::<buffer::TensorBuffer>()?;
    // whole loads into destinations allocated by Python
    m.add_function(wrap_pyfunction!(load::load_into, m)?)?;
    m.add_function(wrap_pyfunction!(load::fault_probe, m)?)?;
    // writer
    m.add_class::<write::PyWritePlan>()?;
    m.add_class::<layout_writer::PyLayoutWriter>()?;
    m.add("MAX_ALIGN", fastst_core::MAX_ALIGN)?;
    m.add_function(wrap_pyfunction!(write::parse_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(write::replace_file, m)?)?;
    m.add_function(wrap_pyfunction!(write::link_file, m)?)?;
    m.add_function(wrap_pyfunction!(write::data_alignment, m)?)?;
    // forensics and hashes (the fastst command)
    inspect::register(m)?;
    // the catalogue of rules, dtype facts and conversions
    catalogue::register(m)?;
    // the one way a path or URL is shown in messages
    m.add_function(wrap_pyfunction!(errors::display_name, m)?)?;
    m.add_function(wrap_pyfunction!(errors::display_text, m)?)?;
    // what a file that is not safetensors is
    identify::register(m)?;
    // the values of two tensors compared (fastst diff)
    diff::register(m)?;
    // what each tensor's values look like (fastst stats)
    stats::register(m)?;
    // reading a file's pages ahead of a load (fastst/_read/prefetch.py)
    prefetch::register(m)?;
    // objects in object stores and behind HTTP(S)
    remote::register(m)?;
    Ok(())
}
