//! The core's single sources of truth, exported to Python: the rule
//! catalogue, the dtype facts and the allowed dtype conversions, plus the
//! one helper that makes the exception of a rule.

use fastst_core::conversions as core_conversions;
use fastst_core::{Dtype, RuleId};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use crate::errors::{closed, rule_error};

fn lookup(rule: &str) -> PyResult<RuleId> {
    RuleId::from_id(rule)
        .ok_or_else(|| PyValueError::new_err(format!("no rule {rule:?} in the catalogue")))
}

/// Every rule, in catalogue order: dicts with `id`, `family` (the Python
/// exception class name; "OSError" for OS failures, "Finding" for rules
/// `verify` only reports), `severity`, `verdict` (what a `verify` finding
/// of it says: "malformed" or "red-flag"; None for rules `verify` does not
/// report) and `summary`.
#[pyfunction]
fn rule_catalogue(py: Python<'_>) -> PyResult<Bound<'_, PyList>> {
    let out = PyList::empty(py);
    for r in RuleId::ALL {
        let d = PyDict::new(py);
        d.set_item("id", r.id())?;
        d.set_item("family", r.family().python_name())?;
        d.set_item("severity", r.severity().name())?;
        d.set_item("verdict", r.verdict().map(|v| v.name()))?;
        d.set_item("summary", r.summary())?;
        out.append(d)?;
    }
    Ok(out)
}

/// Per dtype name: `bits` per element, `packed` (several elements share a
/// byte: F4 and the F6 kinds) and `float` (floating point, complex
/// included).
#[pyfunction]
fn dtype_facts(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let out = PyDict::new(py);
    for d in Dtype::ALL {
        let facts = PyDict::new(py);
        facts.set_item("bits", d.bits())?;
        facts.set_item("packed", d.is_sub_byte())?;
        facts.set_item("float", d.is_float())?;
        out.set_item(d.name(), facts)?;
    }
    Ok(out)
}

/// The `(from, to)` dtype pairs a load may convert between
/// (`get_tensor(..., dtype=...)`), `from != to`.
#[pyfunction]
fn conversions() -> Vec<(&'static str, &'static str)> {
    core_conversions()
        .into_iter()
        .map(|(from, to)| (from.name(), to.name()))
        .collect()
}

/// The Python class name of a rule's family (see `rule_catalogue`).
#[pyfunction]
fn error_family(rule: &str) -> PyResult<&'static str> {
    Ok(lookup(rule)?.family().python_name())
}

/// The exception for breaking `rule`: the class of its family, message
/// `"{filename}: {message}"` (just `message` when `filename` is empty),
/// attributes `filename`, `tensor` and `rule` set. Returned, not raised.
#[pyfunction]
#[pyo3(name = "rule_error", signature = (rule, filename, message, tensor = None))]
fn rule_error_for(
    py: Python<'_>,
    rule: &str,
    filename: &str,
    message: &str,
    tensor: Option<&str>,
) -> PyResult<PyObject> {
    let err = rule_error(lookup(rule)?, filename, tensor, message);
    Ok(err.into_value(py).into_any())
}

/// The `ClosedFileError` for any use of the closed file `filename`: the one
/// message, made in one place, for the compiled files and Python's own
/// (sharded checkpoints). Returned, not raised.
#[pyfunction]
fn closed_file_error(py: Python<'_>, filename: &str) -> PyObject {
    closed(filename).into_value(py).into_any()
}

/// Adds this file's functions to `fastst._fastst.catalogue`.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(rule_catalogue, m)?)?;
    m.add_function(wrap_pyfunction!(dtype_facts, m)?)?;
    m.add_function(wrap_pyfunction!(conversions, m)?)?;
    m.add_function(wrap_pyfunction!(error_family, m)?)?;
    m.add_function(wrap_pyfunction!(rule_error_for, m)?)?;
    m.add_function(wrap_pyfunction!(closed_file_error, m)?)?;
    Ok(())
}
