//! Mapping core errors onto the Python exception tree defined in
//! `fastst/_errors.py`; every message is prefixed with the file name.

use fastst_core::{Error, ErrorKind};
use pyo3::exceptions::{PyFileNotFoundError, PyIsADirectoryError, PyOSError, PyPermissionError};
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

/// Converts a core error about `file` into the matching Python exception,
/// with `filename`, `tensor` and `rule` attributes set.
#[cold]
pub fn to_pyerr(py: Python<'_>, file: &str, err: Error) -> PyErr {
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
    let msg = if file.is_empty() {
        err.to_string()
    } else {
        format!("{file}: {err}")
    };
    let pyerr = match err.kind() {
        ErrorKind::HeaderFraming => HeaderFramingError::new_err(msg),
        ErrorKind::Json => HeaderJsonError::new_err(msg),
        ErrorKind::Metadata => MetadataError::new_err(msg),
        ErrorKind::TensorTable => TensorTableError::new_err(msg),
        ErrorKind::Layout => LayoutError::new_err(msg),
        ErrorKind::TensorNotFound => TensorNotFoundError::new_err(msg),
        ErrorKind::Write => SerializeError::new_err(msg),
        ErrorKind::Io => SafetensorError::new_err(msg),
    };
    let value = pyerr.value(py);
    // Attribute setting on a fresh exception instance cannot fail in practice;
    // if it did, the exception is still raised without the extras.
    let _ = value.setattr("filename", file);
    let _ = value.setattr("tensor", err.tensor());
    let _ = value.setattr("rule", err.rule());
    pyerr
}

/// The error for any use of a closed file.
#[cold]
pub fn closed(file: &str) -> PyErr {
    ClosedFileError::new_err(format!(
        "{file}: file is closed (the `with` block ended or close() was called); arrays obtained before stay valid"
    ))
}
