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
//! allocated go through `load`, read-ahead through `read_ahead`. Writing: a
//! `write::PyWritePlan` takes names, dtypes, shapes and metadata, then the
//! tensors' buffers. Every core error becomes the Python class of its
//! rule's family through one conversion (`errors`).
//!
//! Python sees one submodule per job, each with its stub in
//! `python/fastst/_fastst/` (checked against the module by
//! `tests/contracts/test_stubs.py` and mypy's stubtest):
//! `fastst._fastst.read` (`file`, `buffer`, `load`, `read_ahead`),
//! `.write` (`write`, `layout_writer`), `.remote`, `.inspect` (`inspect`,
//! `identify`, `diff`, `stats`), `.catalogue` and `.text`.
//!
//! The modules, one job each:
//!
//! - `file`: `RawFile`, an open file (names, metadata, tensors, reads),
//!   and `parse_bytes`, a whole file held in bytes (`deserialize`).
//! - `source`: `PySource`, a Python file object as a core `Source`.
//! - `remote`: URLs of object stores and HTTP(S) servers (`fastst-remote`):
//!   opening (a checkpoint's shards several at once), index files,
//!   listing a prefix, writing.
//! - `buffer`: `TensorBuffer`, one tensor's bytes for the buffer protocol.
//! - `load`: `load_into`, many tensors into Python-allocated memory, and
//!   `fault_probe`, what a cold load asks before choosing its page size.
//! - `read_ahead`: `ReadAhead`, the core's background page reader.
//! - `write`: `WritePlan`, the writer.
//! - `layout_writer`: `LayoutWriter`, the streaming writer (tensors in any
//!   order, from any thread, committed once all are written).
//! - `identify`: what a file that is not safetensors is (the core's
//!   `identify`).
//! - `catalogue`: the rule catalogue, dtype facts and conversions.
//! - `errors`: the one conversion of a core error to the Python class of
//!   its rule's family (`result.in_file(name)?`).
//! - `text`: how a path, URL or message is shown, and the size grammar.
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
mod read_ahead;
mod remote;
mod source;
mod stats;
mod text;
mod wait;
mod write;

use pyo3::prelude::*;

/// The compiled part of fastst: `__version__` and one submodule per job,
/// each importable by its dotted name (`fastst._fastst.read`), each with
/// its stub (`python/fastst/_fastst/<job>.pyi`).
#[pymodule]
fn _fastst(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    submodule(m, "read", read_module)?;
    submodule(m, "write", write_module)?;
    submodule(m, "remote", remote::register)?;
    submodule(m, "inspect", inspect_module)?;
    submodule(m, "catalogue", catalogue::register)?;
    submodule(m, "text", text::register)?;
    Ok(())
}

/// Adds the submodule `name` that `fill` fills to `parent`, under
/// `parent`'s dotted name in `sys.modules` too, so that
/// `import fastst._fastst.read` and `from fastst._fastst.read import X`
/// work (an extension's submodules are not packages the import system
/// finds). Its functions and classes name it as their `__module__`.
fn submodule(
    parent: &Bound<'_, PyModule>,
    name: &str,
    fill: fn(&Bound<'_, PyModule>) -> PyResult<()>,
) -> PyResult<()> {
    let py = parent.py();
    let dotted = format!("{}.{name}", parent.name()?);
    let module = PyModule::new(py, &dotted)?;
    fill(&module)?;
    parent.add(name, &module)?;
    py.import("sys")?
        .getattr("modules")?
        .set_item(dotted, module)
}

/// `fastst._fastst.read`: open files, tensor buffers, whole loads into
/// memory Python allocated, read-ahead, and a whole file held in bytes.
fn read_module(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("DEFAULT_HEADER_CAP", fastst_core::DEFAULT_HEADER_CAP)?;
    m.add_class::<file::RawFile>()?;
    m.add_class::<buffer::TensorBuffer>()?;
    m.add_function(wrap_pyfunction!(file::parse_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(load::load_into, m)?)?;
    m.add_function(wrap_pyfunction!(load::fault_probe, m)?)?;
    m.add_function(wrap_pyfunction!(load::changing_mappings, m)?)?;
    read_ahead::register(m)
}

/// `fastst._fastst.write`: the writers and the atomic file operations.
fn write_module(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("MAX_ALIGN", fastst_core::MAX_ALIGN)?;
    m.add_class::<write::PyWritePlan>()?;
    m.add_class::<layout_writer::PyLayoutWriter>()?;
    m.add_function(wrap_pyfunction!(write::replace_file, m)?)?;
    m.add_function(wrap_pyfunction!(write::link_file, m)?)?;
    m.add_class::<write::ReplacedFile>()?;
    m.add_function(wrap_pyfunction!(write::data_alignment, m)?)
}

/// `fastst._fastst.inspect`: forensics and hashes (the fastst command),
/// what a file that is not safetensors is, two tensors' values compared,
/// what each tensor's values look like.
fn inspect_module(m: &Bound<'_, PyModule>) -> PyResult<()> {
    inspect::register(m)?;
    identify::register(m)?;
    diff::register(m)?;
    stats::register(m)
}
