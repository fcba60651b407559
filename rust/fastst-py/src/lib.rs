//! Python bindings of fastst: PyO3 glue only, the format logic lives in
//! `fastst-core`.
#![deny(unsafe_op_in_unsafe_fn)]

mod buffer;
mod catalogue;
mod diff;
mod errors;
mod file;
mod identify;
mod inspect;
mod load;
mod prefetch;
mod source;
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
    // writer
    m.add_class::<write::PyWritePlan>()?;
    m.add_function(wrap_pyfunction!(write::parse_bytes, m)?)?;
    // forensics and hashes (the fastst command)
    inspect::register(m)?;
    // the catalogue of rules, dtype facts and conversions
    catalogue::register(m)?;
    // what a file that is not safetensors is
    identify::register(m)?;
    // the values of two tensors compared (fastst diff)
    diff::register(m)?;
    // reading a file's pages ahead of a load (fastst/_prefetch.py)
    prefetch::register(m)?;
    Ok(())
}
