//! Objects in object stores (S3 and S3-compatible, GCS, Azure Blob) and
//! files behind HTTP(S) as fastst [`Source`]s, read with ranged GETs
//! through the `object_store` crate, and objects written with multipart
//! uploads.
//!
//! - [`RemoteSource::open`] learns the object's length and ETag from one
//!   ranged GET of its first [`FIRST_READ`] bytes, kept: the size prefix
//!   and a small header are read from them, nothing else is fetched.
//! - [`Source::read_at`] fetches exactly the bytes asked for, straight into
//!   the caller's buffer; a large read is cut into parts of
//!   [`Tuning::part`] bytes fetched concurrently, at most
//!   [`Tuning::concurrency`] requests in flight per object. A whole load
//!   ([`Source::load_hint`], [`Source::read_request`]) asks for larger
//!   ranges (up to [`Tuning::load_part`]) that span the ends of tensors,
//!   each one GET whose body is scattered straight into the destinations.
//! - Every later GET carries `If-Match` with the ETag seen at open (and
//!   the answer's size and ETag are compared): an object replaced since it
//!   was opened is rule `file-changed`, like a local file that changed.
//! - Transient failures (5xx, timeouts, connection resets, a body cut
//!   short) are retried with backoff by `object_store`; a part is handed
//!   out only when every one of its bytes arrived.
//! - Every wait has a deadline ([`Tuning::deadline`], rule
//!   `remote-deadline`) and can be stopped from another thread
//!   ([`Cancel`]: a file closed, a load left, Ctrl-C); every answer read
//!   whole has a cap ([`guard`]), every listing a cap on objects and on
//!   pages ([`list`]).
//!
//! Writing ([`upload`]): an [`Upload`] writes one object of a cloud store
//! with a multipart upload, part by part as the bytes come, with bounded
//! memory; the object appears only when the upload completes, and a
//! failed or abandoned upload is aborted (an old object stays). A
//! [`LayoutUpload`] ([`layout_upload`]) is the streaming writer's object:
//! tensors in any order, from any thread, each part sent under its own
//! number once every byte of it was written.
//!
//! Configuration ([`options`]): URL schemes, credentials from the
//! environment the way the cloud SDKs read them, `storage_options` keys,
//! and the tuning knobs. No request that carries credentials follows a
//! redirect, so that a signed request goes only where it was signed for
//! (`client`); one store serves every object of a bucket or server with
//! the same settings (`stores`). Requests run on one small tokio runtime
//! owned by the crate ([`runtime`]); callers block on it, so the Python
//! glue releases the GIL around every call.
//!
//! ```no_run
//! use fastst_core::{MappedFile, OpenOptions};
//! use fastst_remote::RemoteSource;
//!
//! let source = RemoteSource::open("s3://bucket/model.safetensors", &[]).expect("opened");
//! let file = MappedFile::from_source(source, OpenOptions::default())?;
//! println!("{} tensors", file.header().len());
//! # Ok::<(), fastst_core::Error>(())
//! ```

#![deny(missing_docs)]

mod client;
mod error;
mod fetch;
pub mod guard;
pub mod layout_upload;
mod lend;
pub mod options;
mod redact;
mod runtime;
mod stores;
pub mod upload;
mod urls;
mod wait;

use std::sync::Arc;

use fastst_core::{Error, LoadHint, Result, Source};
use object_store::list::PaginatedListOptions;
use object_store::path::Path;
use object_store::ObjectStore;

pub use client::certificates_unchecked;
pub use error::ANSWER_SHOWN;
pub use fetch::{parts, Part};
pub use layout_upload::{LayoutUpload, TensorUpload};
pub use options::{ConfigError, Tuning};
pub use redact::{display, in_text};
pub use runtime::runtime;
pub use upload::Upload;
pub use urls::{is_url, literal_key};
pub use wait::Cancel;

use wait::wait;

/// Bytes fetched by the first request of an open: the size prefix and any
/// header shorter than this arrive with it.
pub const FIRST_READ: u64 = 64 << 10;

/// Two byte ranges of one read closer than this are fetched as one range
/// (the bytes between are dropped): a request costs a round trip before
/// its first byte, in which one stream of a real network would have
/// brought about this much (see docs/remote.md, "What is fetched").
pub const COALESCE_GAP: u64 = 1 << 20;

/// Why an object could not be opened.
#[derive(Debug)]
pub enum OpenError {
    /// The URL or the options are wrong (nothing was requested).
    Config(ConfigError),
    /// The store's answer, or its bytes, as a core error.
    Read(Error),
}

impl From<Error> for OpenError {
    fn from(e: Error) -> Self {
        OpenError::Read(e)
    }
}

/// An object read with ranged GETs.
#[derive(Debug)]
pub struct RemoteSource {
    store: Arc<dyn ObjectStore>,
    path: Path,
    len: u64,
    etag: Option<String>,
    /// The object's first bytes, from the opening request.
    first: Vec<u8>,
    tuning: Tuning,
    in_flight: Arc<tokio::sync::Semaphore>,
    cancel: Cancel,
}

impl RemoteSource {
    /// Opens the object `url` with `options` (`storage_options` keys, see
    /// [`options`]): one ranged GET of its first bytes, which tells its
    /// length and ETag. A missing object is an I/O error of kind
    /// `NotFound` (ENOENT), a refused one of kind `PermissionDenied`
    /// (EACCES); others name the store's answer (its HTTP status).
    pub fn open(url: &str, options: &[(String, String)]) -> Result<RemoteSource, OpenError> {
        RemoteSource::open_with(url, options, Cancel::default())
    }

    /// [`RemoteSource::open`], the waits of the opening and of every later
    /// read stopped by `cancel` (which may be shared with other objects,
    /// e.g. the shards of one checkpoint).
    pub fn open_with(
        url: &str,
        options: &[(String, String)],
        cancel: Cancel,
    ) -> Result<RemoteSource, OpenError> {
        let (store, path, tuning) = options::store_for(url, options)?;
        if path.as_ref().is_empty() || url.ends_with('/') {
            return Err(OpenError::Config(ConfigError(format!(
                "{}: the URL names no object (a prefix ending in /)",
                display(url)
            ))));
        }
        Ok(RemoteSource::in_store(store.objects, path, tuning, cancel)?)
    }

    /// Opens the object at `path` in `store`.
    fn in_store(
        store: Arc<dyn ObjectStore>,
        path: Path,
        tuning: Tuning,
        cancel: Cancel,
    ) -> Result<RemoteSource> {
        let (len, etag, first) = wait(
            fetch::open(&*store, &path),
            tuning.deadline,
            &cancel,
            || "cannot open the object".into(),
        )?;
        Ok(RemoteSource {
            store,
            path,
            len,
            etag,
            first,
            in_flight: Arc::new(tokio::sync::Semaphore::new(tuning.concurrency)),
            tuning,
            cancel,
        })
    }

    /// The tuning in force for this object.
    pub fn tuning(&self) -> Tuning {
        self.tuning
    }

    /// What stops this object's reads in flight (a clone: giving it stops
    /// them here too).
    pub fn canceller(&self) -> Cancel {
        self.cancel.clone()
    }

    /// Runs the reads `work` fetching `parts` parts, within their deadline
    /// and until cancelled; errors say they read `len` bytes at `offset`.
    fn wait<T>(
        &self,
        work: impl std::future::Future<Output = Result<T>>,
        deadline: std::time::Duration,
        (offset, len): (u64, usize),
    ) -> Result<T> {
        wait(work, deadline, &self.cancel, || {
            format!("cannot read {len} bytes at offset {offset}")
        })
    }

    /// Checks that `buf.len()` bytes at `offset` lie inside the object
    /// (else rule `file-changed`), and fills `buf` when they are bytes of
    /// the opening request (the prefix and the header): true then.
    fn kept(&self, offset: u64, buf: &mut [u8]) -> Result<bool> {
        let end = self.inside(offset, buf.len())?;
        if end > self.first.len() as u64 {
            return Ok(false);
        }
        buf.copy_from_slice(&self.first[offset as usize..end as usize]);
        Ok(true)
    }

    /// The end of the `len` bytes at `offset`, which must lie inside the
    /// object (else rule `file-changed`).
    fn inside(&self, offset: u64, len: usize) -> Result<u64> {
        offset
            .checked_add(len as u64)
            .filter(|&e| e <= self.len)
            .ok_or_else(|| Error::FileChanged {
                what: format!(
                    "a read of {len} bytes at offset {offset} goes past the {} bytes the object had",
                    self.len
                ),
            })
    }

    /// What the requests for this object need.
    fn object(&self) -> Arc<fetch::Object> {
        Arc::new(fetch::Object {
            store: Arc::clone(&self.store),
            path: self.path.clone(),
            len: self.len,
            etag: self.etag.clone(),
            in_flight: Arc::clone(&self.in_flight),
        })
    }
}

impl Source for RemoteSource {
    fn len(&self) -> u64 {
        self.len
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        if self.kept(offset, buf)? {
            return Ok(());
        }
        let what = (offset, buf.len());
        let parts = buf.len().div_ceil(self.tuning.part.max(1));
        let deadline = self.tuning.deadline_for(parts);
        self.wait(self.object().read(offset, buf, self.tuning), deadline, what)
    }

    /// Nearby ranges are fetched as one when the bytes between take less
    /// time to arrive than a request of its own takes to answer
    /// ([`COALESCE_GAP`]).
    fn coalesce_gap(&self) -> u64 {
        COALESCE_GAP
    }

    /// The reads' parts all in one queue, [`Tuning::concurrency`] GETs in
    /// flight.
    fn read_many(&self, reads: &mut [(u64, &mut [u8])]) -> Result<()> {
        let mut fetched = Vec::with_capacity(reads.len());
        for (offset, buf) in reads.iter_mut() {
            if !self.kept(*offset, buf)? {
                fetched.push((*offset, &mut **buf));
            }
        }
        let (Some(&(first, _)), Some(total)) = (
            fetched.first(),
            fetched
                .iter()
                .map(|(_, b)| b.len())
                .reduce(usize::saturating_add),
        ) else {
            return Ok(());
        };
        let part = self.tuning.part.max(1);
        let parts = fetched.iter().map(|(_, b)| b.len().div_ceil(part)).sum();
        self.wait(
            self.object().read_many(&mut fetched, self.tuning),
            self.tuning.deadline_for(parts),
            (first, total),
        )
    }

    fn load_hint(&self) -> Option<LoadHint> {
        Some(LoadHint {
            threads: self.tuning.concurrency,
            piece: self.tuning.part,
            max_piece: self.tuning.load_part.max(self.tuning.part),
        })
    }

    /// A load's piece: one ranged GET filling `bufs` in order (when it
    /// holds more than [`Tuning::load_part`] bytes, or only bytes of the
    /// opening request: buffer by buffer, as [`Source::read_many`] reads).
    fn read_request(&self, offset: u64, bufs: &mut [&mut [u8]]) -> Result<()> {
        // Distinct buffers in memory: their lengths add up without overflow.
        let len: usize = bufs.iter().map(|b| b.len()).sum();
        let end = self.inside(offset, len)?;
        if end <= self.first.len() as u64 || len > self.tuning.load_part.max(self.tuning.part) {
            let mut reads: Vec<(u64, &mut [u8])> = Vec::with_capacity(bufs.len());
            let mut at = offset;
            for buf in bufs.iter_mut() {
                let n = buf.len() as u64;
                reads.push((at, &mut **buf));
                at += n;
            }
            return self.read_many(&mut reads);
        }
        let bufs: Vec<&mut [u8]> = bufs.iter_mut().map(|b| &mut **b).collect();
        let deadline = self.tuning.deadline_for_request(len);
        self.wait(
            self.object().read_scatter(offset, bufs),
            deadline,
            (offset, len),
        )
    }
}

/// The most pages one listing reads: a store sends up to a thousand
/// objects a page, so this is far more than [`list`]'s cap on objects
/// needs, and bounds a listing that never ends (empty pages marked "more").
pub const LIST_PAGE_CAP: usize = 1_000;

/// What a listing of a prefix found.
#[derive(Debug, PartialEq, Eq)]
pub enum Listing {
    /// The names of the objects directly under the prefix, sorted.
    Names(Vec<String>),
    /// More objects (at any depth) than the cap asked for.
    OverCap,
    /// More pages than [`LIST_PAGE_CAP`], or a page whose token for the
    /// next one is its own (a listing that would never end).
    Endless {
        /// Pages read.
        pages: usize,
    },
}

/// Lists the prefix `url` (a URL ending in `/`): the names of the objects
/// directly under it (sub-prefixes are not descended into), sorted. The
/// listing is read page by page and stops once it met more than `cap`
/// objects under the prefix (at any depth), so that a bucket of millions
/// is never listed whole, or read [`LIST_PAGE_CAP`] pages; it has the
/// deadline of a read and ends when `cancel` is given. Stores that cannot
/// list (plain HTTP) fail.
pub fn list(
    url: &str,
    options: &[(String, String)],
    cap: usize,
    cancel: &Cancel,
) -> Result<Listing, OpenError> {
    let (store, prefix, tuning) = options::store_for(url, options)?;
    let Some(pages) = store.pages else {
        return Err(OpenError::Config(ConfigError(format!(
            "{}: this store cannot list a prefix (a plain HTTP server): name the checkpoint's index or file",
            display(url)
        ))));
    };
    let listed = async {
        let under = Some(prefix.as_ref())
            .filter(|p| !p.is_empty())
            .map(|p| format!("{p}{}", object_store::path::DELIMITER));
        let (mut names, mut seen, mut token) = (Vec::new(), 0usize, None::<String>);
        for page in 1..=LIST_PAGE_CAP {
            let options = PaginatedListOptions {
                page_token: token.clone(),
                ..PaginatedListOptions::default()
            };
            let got = pages
                .list_paginated(under.as_deref(), options)
                .await
                .map_err(|e| error::from_store("cannot list the prefix", e))?;
            for meta in got.result.objects {
                seen += 1;
                if seen > cap {
                    return Ok(Listing::OverCap);
                }
                let mut rest = meta.location.prefix_match(&prefix).into_iter().flatten();
                if let (Some(name), None) = (rest.next(), rest.next()) {
                    names.push(name.as_ref().to_owned());
                }
            }
            match got.page_token {
                None => {
                    names.sort();
                    return Ok(Listing::Names(names));
                }
                Some(next) if token.as_deref() == Some(next.as_str()) => {
                    return Ok(Listing::Endless { pages: page })
                }
                next => token = next,
            }
        }
        Ok::<_, Error>(Listing::Endless {
            pages: LIST_PAGE_CAP,
        })
    };
    Ok(wait(listed, tuning.deadline, cancel, || {
        "cannot list the prefix".into()
    })?)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use object_store::memory::InMemory;
    use object_store::ObjectStoreExt;

    /// `bytes` as the object `m` of an in-memory store (object_store's
    /// own store, not a stand-in for it).
    fn stored(bytes: Vec<u8>) -> (Arc<dyn ObjectStore>, Path) {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let path = Path::from("m");
        runtime()
            .unwrap()
            .block_on(store.put(&path, bytes.into()))
            .unwrap();
        (store, path)
    }

    #[test]
    fn reads_in_parts_give_the_object_bytes_and_a_replaced_object_is_file_changed() {
        let bytes: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        let (store, path) = stored(bytes.clone());
        let tuning = Tuning {
            concurrency: 3,
            part: 4096,
            ..Tuning::default()
        };
        let src =
            RemoteSource::in_store(store.clone(), path.clone(), tuning, Cancel::default()).unwrap();
        assert_eq!(src.len(), bytes.len() as u64);
        assert_eq!(src.first.len() as u64, FIRST_READ);
        for (offset, len) in [(0, 8), (10, 70_000), (65_530, 10), (100_001, 199_999)] {
            let mut buf = vec![0u8; len];
            src.read_at(offset as u64, &mut buf).unwrap();
            assert_eq!(buf, bytes[offset..offset + len], "{offset} {len}");
        }
        // Many reads at once: kept bytes, a read in parts, a small one.
        let (mut a, mut b, mut c) = (vec![0u8; 10], vec![0u8; 70_000], vec![0u8; 3]);
        src.read_many(&mut [(5, &mut a), (100_000, &mut b), (299_990, &mut c)])
            .unwrap();
        assert_eq!(
            (a, c),
            (bytes[5..15].to_vec(), bytes[299_990..299_993].to_vec())
        );
        assert!(b == bytes[100_000..170_000]);
        let mut past = vec![0u8; 2];
        let err = src.read_many(&mut [(0, &mut [0u8; 4][..]), (299_999, &mut past)]);
        assert_eq!(err.unwrap_err().rule(), "file-changed");
        assert_eq!(
            src.read_at(bytes.len() as u64 - 1, &mut past)
                .unwrap_err()
                .rule(),
            "file-changed"
        );
        runtime()
            .unwrap()
            .block_on(store.put(&path, vec![1u8; bytes.len()].into()))
            .unwrap();
        // The first bytes were kept at open; later ones are asked for.
        src.read_at(0, &mut past).unwrap();
        let mut later = vec![0u8; 10];
        let err = src.read_at(200_000, &mut later).unwrap_err();
        assert_eq!(err.rule(), "file-changed", "{err}");
    }

    #[test]
    fn a_missing_object_is_not_found() {
        let (store, _) = stored(vec![1, 2, 3]);
        let err = RemoteSource::in_store(
            store,
            Path::from("nope"),
            Tuning::default(),
            Cancel::default(),
        )
        .unwrap_err();
        match err {
            Error::Io { source, .. } => assert_eq!(source.kind(), std::io::ErrorKind::NotFound),
            other => panic!("{other}"),
        }
    }
}
