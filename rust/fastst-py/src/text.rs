//! How text is shown and read, the one rule each: a path or URL as every
//! message shows it (`display_path`, `display_text`: bytes that are not
//! UTF-8 escaped, URLs without credentials) and the one size grammar
//! (`parse_size`). Python: `fastst._fastst.text`.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// `path` as every message shows it: [`display_name`] of its bytes.
pub fn display_path(path: &std::path::Path) -> String {
    #[cfg(unix)]
    return display_name(std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str()));
    #[cfg(not(unix))]
    display_name(path.to_string_lossy().as_bytes())
}

/// `name` (a file name's bytes or a URL) as every message shows it, the
/// one rule (Python's `fastst._paths.readable` calls it): each byte that is
/// not UTF-8 shown as `\xNN` (as Python's `backslashreplace` does, so that
/// no name is lost to a replacement character), then anything from a
/// `scheme://` on shown as a URL without user, password, query (a presigned
/// URL's signature) or fragment, whether it parses or not
/// (`fastst_remote::display`).
#[pyfunction]
#[pyo3(name = "display_path")]
pub fn display_name(name: &[u8]) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    for chunk in name.utf8_chunks() {
        out.push_str(chunk.valid());
        for b in chunk.invalid() {
            let _ = write!(out, "\\x{b:02x}");
        }
    }
    fastst_remote::display(&out)
}

/// `text` (a message) with every URL in it, from its `scheme://` to the
/// next blank, shown by [`display_name`]'s rule (`fastst_remote::in_text`):
/// the command passes every error message through it.
#[pyfunction]
pub fn display_text(text: &str) -> String {
    fastst_remote::in_text(text)
}

/// The bytes a size string names, in fastst's one size grammar
/// (`fastst_core::parse_size`); ValueError saying why for anything else.
#[pyfunction]
fn parse_size(text: &str) -> PyResult<u64> {
    fastst_core::parse_size(text).map_err(|e| PyValueError::new_err(e.reason))
}

/// Adds this file's functions to `fastst._fastst.text`.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(display_name, m)?)?;
    m.add_function(wrap_pyfunction!(display_text, m)?)?;
    m.add_function(wrap_pyfunction!(parse_size, m)?)?;
    Ok(())
}
