//! The one conversion from core errors to Python exceptions.
//!
//! Every core [`Error`] carries a [`RuleId`]; its [`Family`] names the
//! Python class (defined in `fastst/_errors.py`, or a builtin). Call sites
//! write `result.in_file(name)?`: the message is prefixed with the file name
//! and the exception gets `filename`, `tensor` and `rule` attributes.

use fastst_core::{Error, Family, RuleId};
use pyo3::exceptions::{
    PyFileNotFoundError, PyIsADirectoryError, PyMemoryError, PyOSError, PyPermissionError,
    PyValueError,
};
use pyo3::prelude::*;

pyo3::import_exception!(fastst._errors, SafetensorError);
pyo3::import_exception!(fastst._errors, HeaderFramingError);
pyo3::import_exception!(fastst._errors, HeaderJsonError);
pyo3::import_exception!(fastst._errors, MetadataError);
pyo3::import_exception!(fastst._errors, TensorTableError);
pyo3::import_exception!(fastst._errors, LayoutError);
pyo3::import_exception!(fastst._errors, TensorNotFoundError);
pyo3::import_exception!(fastst._errors, ClosedFileError);
pyo3::import_exception!(fastst._errors, SerializeError);
pyo3::import_exception!(fastst._errors, UnsupportedDtypeError);
pyo3::import_exception!(fastst._errors, ShardIndexError);

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
    let err = match rule.family() {
        Family::HeaderFraming => HeaderFramingError::new_err(msg),
        Family::HeaderJson => HeaderJsonError::new_err(msg),
        Family::Metadata => MetadataError::new_err(msg),
        Family::TensorTable => TensorTableError::new_err(msg),
        Family::Layout => LayoutError::new_err(msg),
        Family::TensorNotFound => TensorNotFoundError::new_err(msg),
        Family::ClosedFile => ClosedFileError::new_err(msg),
        Family::Serialize => SerializeError::new_err(msg),
        Family::UnsupportedDtype => UnsupportedDtypeError::new_err(msg),
        Family::ShardIndex => ShardIndexError::new_err(msg),
        Family::Usage => PyValueError::new_err(msg),
        Family::Memory => PyMemoryError::new_err(msg),
        Family::Io => PyOSError::new_err(msg),
        Family::Finding => SafetensorError::new_err(msg),
    };
    Python::with_gil(|py| {
        let value = err.value(py);
        // Setting attributes on a fresh exception instance cannot fail in
        // practice; if it did, the exception is still raised without them.
        let _ = value.setattr("filename", file);
        let _ = value.setattr("tensor", tensor);
        let _ = value.setattr("rule", rule.id());
    });
    err
}

/// Converts a core error about `file` into the matching Python exception.
/// OS errors become the builtin `OSError` subclass of their errno, as the
/// reference raises them.
#[cold]
pub fn to_pyerr(file: &str, err: Error) -> PyErr {
    if let Error::Io { context, source } = &err {
        let msg = format!("{file}: {context}: {source}");
        let errno = source.raw_os_error();
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
