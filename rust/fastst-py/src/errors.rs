//! The one conversion from core errors to Python exceptions.
//!
//! Every core [`Error`] carries a [`RuleId`]; its [`Family`] names the
//! Python class (defined in `fastst/_errors.py`, or a builtin). Call sites
//! write `result.in_file(name)?`: the message is prefixed with the file name
//! and the exception gets `filename`, `tensor` and `rule` attributes.

use fastst_core::{Error, Family, RuleId, WriteFailure};
use pyo3::exceptions::{
    PyException, PyFileNotFoundError, PyIsADirectoryError, PyMemoryError, PyOSError,
    PyPermissionError, PyRuntimeError, PyTimeoutError, PyValueError,
};
use pyo3::prelude::*;
use pyo3::types::PyType;
use pyo3::PyTypeInfo;

/// Core results into Python results, naming the file.
pub trait InFile<T> {
    /// Converts the error (if any) into the Python exception of its rule's
    /// family, its message prefixed with `file`.
    fn in_file(self, file: &str) -> PyResult<T>;
}

impl<T> InFile<T> for Result<T, Error> {
    #[inline]
    fn in_file(self, file: &str) -> PyResult<T> {
        self.map_err(|e| to_pyerr(file, e))
    }
}

impl<T> InFile<T> for Result<T, WriteFailure<PyErr>> {
    fn in_file(self, file: &str) -> PyResult<T> {
        self.map_err(|f| match f {
            WriteFailure::Core(e) => to_pyerr(file, e),
            WriteFailure::Feed(e) => e,
        })
    }
}

/// The exception of `rule`'s family with message `message` (the file name
/// is prefixed unless empty), and `filename`, `tensor` and `rule`
/// attributes.
#[cold]
pub fn rule_error(rule: RuleId, file: &str, tensor: Option<&str>, message: &str) -> PyErr {
    let msg = if file.is_empty() {
        message.to_owned()
    } else {
        format!("{file}: {message}")
    };
    Python::with_gil(|py| {
        // A family class missing from `fastst._errors` (a broken or older
        // package) falls back to the root class rather than fail.
        let class = exception_class(py, rule.family(), rule)
            .or_else(|_| exception_class(py, Family::Finding, rule));
        let made = class.and_then(|class| {
            let value = class.call1((msg.as_str(),))?;
            // OSError's own `filename` would change its message; the file
            // is named in the message already.
            if rule.family() != Family::Io {
                value.setattr("filename", file)?;
            }
            value.setattr("tensor", tensor)?;
            value.setattr("rule", rule.id())?;
            Ok(PyErr::from_value(value))
        });
        // Making the exception can only fail if the package is broken; say
        // so rather than panic.
        made.unwrap_or_else(|e| {
            PyRuntimeError::new_err(format!(
                "{msg} (rule {}; its exception class could not be made: {e})",
                rule.id()
            ))
        })
    })
}

/// The Python class of a rule: its family's, a class of `fastst._errors`
/// named by [`Family::python_name`] (the catalogue decides), or a builtin
/// (`TimeoutError`, an `OSError`, for a remote deadline).
fn exception_class(py: Python<'_>, family: Family, rule: RuleId) -> PyResult<Bound<'_, PyType>> {
    let name = match family {
        Family::Usage => return Ok(PyValueError::type_object(py)),
        Family::Memory => return Ok(PyMemoryError::type_object(py)),
        Family::Io if rule == RuleId::RemoteDeadline => return Ok(PyTimeoutError::type_object(py)),
        Family::Io => return Ok(PyOSError::type_object(py)),
        // Findings are never raised; should one be, it is the root class.
        Family::Finding => "SafetensorError",
        other => other.python_name(),
    };
    Ok(py
        .import("fastst._errors")?
        .getattr(name)?
        .downcast_into::<PyType>()?)
}

/// Converts a core error about `file` into the matching Python exception.
/// OS errors become the builtin `OSError` subclass of their errno, as the
/// reference raises them; one raised by a file object's own method (a
/// Python exception) is the `OSError`'s cause, unless it is no
/// `Exception` (KeyboardInterrupt, SystemExit): that one is raised as
/// itself.
#[cold]
pub fn to_pyerr(file: &str, err: Error) -> PyErr {
    if let Error::Io { context, source } = &err {
        let msg = format!("{file}: {context}: {source}");
        let errno = source.raw_os_error();
        if let Some(cause) = source.get_ref().and_then(|e| e.downcast_ref::<PyErr>()) {
            return Python::with_gil(|py| {
                if !cause.is_instance_of::<PyException>(py) {
                    return cause.clone_ref(py);
                }
                let err = PyOSError::new_err(msg);
                err.set_cause(py, Some(cause.clone_ref(py)));
                err
            });
        }
        return match (source.kind(), errno) {
            (std::io::ErrorKind::NotFound, Some(no)) => {
                PyFileNotFoundError::new_err((no, msg, file.to_owned()))
            }
            (std::io::ErrorKind::PermissionDenied, Some(no)) => {
                PyPermissionError::new_err((no, msg, file.to_owned()))
            }
            (std::io::ErrorKind::IsADirectory, Some(no)) => {
                PyIsADirectoryError::new_err((no, msg, file.to_owned()))
            }
            (_, Some(no)) => PyOSError::new_err((no, msg, file.to_owned())),
            (_, None) => PyOSError::new_err(msg),
        };
    }
    rule_error(err.rule(), file, err.tensor(), &err.to_string())
}

/// The error for any use of a closed file (the one place it is made).
#[cold]
pub fn closed(file: &str) -> PyErr {
    rule_error(
        RuleId::ClosedFile,
        file,
        None,
        "file is closed (the `with` block ended or close() was called); arrays obtained before stay valid",
    )
}
