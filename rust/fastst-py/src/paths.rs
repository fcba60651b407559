//! Path arguments: `str`, `bytes` or `os.PathLike`, as `os.fsencode` takes
//! them. A `str` the file system encoding cannot encode (a lone surrogate)
//! raises Python's own `UnicodeEncodeError` (PyO3's `PathBuf` conversion
//! panics on it).

use std::path::PathBuf;

use pyo3::prelude::*;
use pyo3::types::PyBytes;

/// A path argument (see the module).
#[derive(Debug)]
pub(crate) struct FsPath(pub(crate) PathBuf);

impl<'py> FromPyObject<'py> for FsPath {
    fn extract_bound(ob: &Bound<'py, PyAny>) -> PyResult<Self> {
        let encoded = ob.py().import("os")?.call_method1("fsencode", (ob,))?;
        let bytes = encoded.downcast::<PyBytes>()?.as_bytes();
        #[cfg(unix)]
        let path = {
            use std::os::unix::ffi::OsStrExt;
            PathBuf::from(std::ffi::OsStr::from_bytes(bytes))
        };
        #[cfg(not(unix))]
        let path = PathBuf::from(String::from_utf8_lossy(bytes).into_owned());
        Ok(FsPath(path))
    }
}

impl std::ops::Deref for FsPath {
    type Target = std::path::Path;

    fn deref(&self) -> &std::path::Path {
        &self.0
    }
}

impl AsRef<std::path::Path> for FsPath {
    fn as_ref(&self) -> &std::path::Path {
        &self.0
    }
}
