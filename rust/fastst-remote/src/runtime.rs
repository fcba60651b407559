//! The one tokio runtime every request runs on, made on first use: a few
//! worker threads drive the connections and copy the bodies into their
//! destinations (`lend`); the threads that read block on it (never
//! holding Python's GIL: the glue releases it).

use std::sync::OnceLock;

use fastst_core::{Error, Result};
use tokio::runtime::Runtime;

/// Worker threads at most: the workers only move bytes between sockets
/// and buffers.
const MAX_WORKERS: usize = 4;

/// Makes rustls's ring provider the process default, unless a provider is
/// installed already (then that one is used); before any client is built.
pub(crate) fn install_tls() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// The crate's runtime, or the I/O error of its start (out of threads or
/// descriptors: its errno kept). A failed start is tried again at the
/// next call.
pub fn runtime() -> Result<&'static Runtime> {
    static RUNTIME: OnceLock<Runtime> = OnceLock::new();
    if let Some(made) = RUNTIME.get() {
        return Ok(made);
    }
    let workers = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .clamp(2, MAX_WORKERS);
    let made = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .thread_name("fastst-remote")
        .enable_all()
        .build()
        .map_err(|e| Error::Io {
            context: "cannot start the runtime of remote reads".into(),
            source: e,
        })?;
    // A thread that started one first wins; this one is dropped.
    Ok(RUNTIME.get_or_init(|| made))
}
