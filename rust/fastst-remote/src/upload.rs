//! Writing one object with a multipart upload: parts cut from the bytes as
//! they come, a few of them in flight, the object appearing under its key
//! only when the upload completes.
//!
//! - [`Upload::start`] starts a multipart upload of the object a URL names
//!   (S3, GCS, Azure; not plain HTTP), its parts sized for the object's
//!   length ([`part_size`]).
//! - The bytes are copied into the part being filled ([`Upload::fill`]);
//!   a full part is sent ([`Upload::send`]) as a task on the crate's
//!   runtime while the next one fills. At most [`Upload::max_in_flight`]
//!   parts are on their way at once (together at most [`IN_FLIGHT_BYTES`]
//!   bytes, one part at least): the caller waits for room
//!   ([`Upload::wait_some`]) before it sends, so the memory a save takes
//!   stays bounded whatever the object's length.
//! - [`Upload::complete`] sends the last part, waits for all of them and
//!   completes the upload: only then does the object (a new one, or one
//!   replacing the old) appear. [`Upload::abort`], and dropping an
//!   unfinished upload, abort it: the parts sent are discarded and an old
//!   object under the key stays as it was.
//!
//! Small objects (a sharded checkpoint's index) are written with one PUT
//! ([`put`]), whole or not at all; [`delete`] removes an object.
//!
//! Each request is retried by `object_store` (5xx, 429, timeouts, resets),
//! as reads are. An upload has a deadline as a read has
//! ([`crate::Tuning::deadline`] for every [`crate::Tuning::concurrency`]
//! parts, all its waits on the store together; its start, its completion
//! and its abort one each), rule `remote-deadline`; so have [`put`] and
//! [`delete`]. [`Upload`] also implements [`std::io::Write`], waiting in
//! place, for callers with nothing to do while they wait.

use std::time::Duration;

use fastst_core::{Error, Result};
use object_store::{MultipartUpload, ObjectStoreExt, PutPayload};
use tokio::task::JoinSet;

use crate::error::from_store;
use crate::options::{store_for, takes_uploads, ConfigError};
use crate::redact::display;
use crate::runtime::runtime;
use crate::wait::{wait, Budget, Cancel};
use crate::OpenError;

/// The smallest part: S3 and GCS refuse parts under 5 MiB (except the
/// last one), so a smaller `FASTST_REMOTE_PART_SIZE` is raised to this.
pub const MIN_PART: usize = 5 << 20;

/// The most parts one upload may have (S3's and GCS's limit): the parts of
/// a large object are made larger so that it fits.
pub const MAX_PARTS: u64 = 10_000;

/// The most bytes of parts in flight at once (one part at least), as
/// reads bound their ranges in flight.
pub const IN_FLIGHT_BYTES: usize = 64 << 20;

/// The size of the parts of an object of `len` bytes for a configured
/// part size of `part`: at least [`MIN_PART`], and large enough that the
/// object takes at most [`MAX_PARTS`] parts.
pub fn part_size(part: usize, len: u64) -> usize {
    let fits = usize::try_from(len.div_ceil(MAX_PARTS)).unwrap_or(usize::MAX);
    part.max(MIN_PART).max(fits)
}

/// The most parts of `part_size` bytes in flight at once for a configured
/// `concurrency`: within [`IN_FLIGHT_BYTES`], one at least.
pub fn max_in_flight(part_size: usize, concurrency: usize) -> usize {
    (IN_FLIGHT_BYTES / part_size.max(1)).clamp(1, concurrency.max(1))
}

/// A multipart upload in progress.
pub struct Upload {
    /// `None` once completed or aborted.
    upload: Option<Box<dyn MultipartUpload>>,
    /// The part being filled (its capacity is the part size).
    part: Vec<u8>,
    part_size: usize,
    /// Bytes handed to parts already sent.
    sent: u64,
    max_in_flight: usize,
    tasks: JoinSet<Result<()>>,
    /// The deadline of the waits for parts, all together.
    budget: Budget,
    /// The deadline of one request (the completion, the abort).
    deadline: Duration,
}

impl std::fmt::Debug for Upload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upload")
            .field("part_size", &self.part_size)
            .field("sent", &self.sent)
            .field("in_flight", &self.tasks.len())
            .finish_non_exhaustive()
    }
}

/// A new part buffer of `size` bytes of capacity, or rule `out-of-memory`.
fn part_buffer(size: usize) -> Result<Vec<u8>> {
    let mut part = Vec::new();
    part.try_reserve_exact(size)
        .map_err(|_| Error::OutOfMemory {
            bytes: size as u64,
            tensor: String::new(),
        })?;
    Ok(part)
}

impl Upload {
    /// Starts a multipart upload of the object `url` (of a cloud store),
    /// configured by `options` as reads are (`storage_options` keys, the
    /// environment); `len` is the object's length, which sizes the parts.
    /// Nothing appears under the key until [`Upload::complete`].
    pub fn start(url: &str, options: &[(String, String)], len: u64) -> Result<Upload, OpenError> {
        let (store, path, tuning) = object_to_write(url, options)?;
        let upload = wait(
            async {
                (store.objects.put_multipart(&path).await)
                    .map_err(|e| from_store("cannot start the upload", e))
            },
            tuning.deadline,
            &Cancel::default(),
            || "cannot start the upload".into(),
        )?;
        let size = part_size(tuning.part, len);
        let parts = usize::try_from(len.div_ceil(size as u64)).unwrap_or(usize::MAX);
        Ok(Upload::new(upload, size, tuning)?.within(tuning.deadline_for(parts)))
    }

    /// An upload through `upload` in parts of `part_size` bytes, at most
    /// `tuning.concurrency` of them in flight (and [`IN_FLIGHT_BYTES`]),
    /// each request within `tuning.deadline`, the waits for the parts all
    /// together too ([`Upload::within`] sets another).
    pub fn new(
        upload: Box<dyn MultipartUpload>,
        part_size: usize,
        tuning: crate::Tuning,
    ) -> Result<Upload> {
        let part_size = part_size.max(1);
        Ok(Upload {
            upload: Some(upload),
            part: part_buffer(part_size)?,
            part_size,
            sent: 0,
            max_in_flight: max_in_flight(part_size, tuning.concurrency),
            tasks: JoinSet::new(),
            budget: Budget::new(tuning.deadline),
            deadline: tuning.deadline,
        })
    }

    /// This upload, its waits for parts (all together) within `limit`.
    pub fn within(mut self, limit: Duration) -> Upload {
        self.budget = Budget::new(limit);
        self
    }

    /// Bytes per part (the last one may be shorter).
    pub fn part_size(&self) -> usize {
        self.part_size
    }

    /// The most parts in flight at once.
    pub fn max_in_flight(&self) -> usize {
        self.max_in_flight
    }

    /// Parts sent whose answers have not been collected yet.
    pub fn in_flight(&self) -> usize {
        self.tasks.len()
    }

    /// Copies as much of `bytes` into the part being filled as it holds;
    /// the number of bytes taken.
    pub fn fill(&mut self, bytes: &[u8]) -> usize {
        let n = bytes.len().min(self.part_size - self.part.len());
        self.part.extend_from_slice(&bytes[..n]);
        n
    }

    /// Whether the part being filled is full (then [`Upload::send`] it).
    pub fn part_full(&self) -> bool {
        self.part.len() >= self.part_size
    }

    /// Whether another part may be sent now without exceeding
    /// [`Upload::max_in_flight`].
    pub fn has_room(&self) -> bool {
        self.tasks.len() < self.max_in_flight
    }

    /// Waits until a part in flight is answered, or `at_most` passed
    /// (`None`: no limit but the upload's deadline); the error of a failed
    /// part, or rule `remote-deadline` once the waits for parts took the
    /// upload's deadline. Returns at once when no part is in flight.
    pub fn wait_some(&mut self, at_most: Option<Duration>) -> Result<()> {
        if self.tasks.is_empty() {
            return Ok(());
        }
        let rt = runtime()?;
        let tasks = &mut self.tasks;
        let sent = self.sent;
        let joined = self.budget.wait(
            at_most,
            || format!("cannot upload the object ({sent} bytes sent)"),
            // The timer is made inside the runtime (it needs its clock).
            |t| Ok(rt.block_on(async { tokio::time::timeout(t, tasks.join_next()).await })),
        )?;
        let Ok(joined) = joined else {
            return Ok(());
        };
        match joined {
            None => Ok(()),
            Some(Ok(answered)) => answered,
            Some(Err(_)) => Err(Error::WorkerFailed {
                task: "the upload of a part",
            }),
        }
    }

    /// Sends the part filled so far (nothing when it is empty), without
    /// waiting for room: the caller waits first ([`Upload::has_room`],
    /// [`Upload::wait_some`]).
    pub fn send(&mut self) -> Result<()> {
        if self.part.is_empty() {
            return Ok(());
        }
        let Some(upload) = self.upload.as_mut() else {
            return Err(Error::StreamOrder {
                reason: "the upload was completed or aborted already".into(),
            });
        };
        let rt = runtime()?;
        let next = part_buffer(self.part_size)?;
        let bytes = std::mem::replace(&mut self.part, next);
        let (start, end) = (self.sent, self.sent + bytes.len() as u64);
        // In the runtime's context: a store may start work on the part at
        // once.
        let _inside = rt.enter();
        let put = upload.put_part(PutPayload::from(bytes));
        self.sent = end;
        self.tasks.spawn_on(
            async move {
                put.await.map_err(|e| {
                    from_store(
                        &format!("cannot upload bytes {start}..{end} of the object"),
                        e,
                    )
                })
            },
            rt.handle(),
        );
        Ok(())
    }

    /// Sends the last part, waits for every part and completes the upload:
    /// the object appears under its key now, whole. On any failure the
    /// upload is aborted (the key keeps what it had) and the error
    /// returned.
    pub fn complete(mut self) -> Result<()> {
        let done = self.finish();
        if done.is_err() {
            let _ = self.abort_now();
        }
        done
    }

    fn finish(&mut self) -> Result<()> {
        // An empty object still needs one (empty) part.
        if self.sent == 0 && self.part.is_empty() {
            let upload = self.upload.as_mut().ok_or_else(|| Error::StreamOrder {
                reason: "the upload was completed or aborted already".into(),
            })?;
            let rt = runtime()?;
            let _inside = rt.enter();
            let put = upload.put_part(PutPayload::default());
            self.tasks.spawn_on(
                async move {
                    put.await
                        .map_err(|e| from_store("cannot upload the object", e))
                },
                rt.handle(),
            );
        }
        self.send()?;
        while !self.tasks.is_empty() {
            self.wait_some(None)?;
        }
        let mut upload = self.upload.take().ok_or_else(|| Error::StreamOrder {
            reason: "the upload was completed or aborted already".into(),
        })?;
        let completed = wait(
            async {
                (upload.complete().await)
                    .map(|_| ())
                    .map_err(|e| from_store("cannot complete the upload", e))
            },
            self.deadline,
            &Cancel::default(),
            || "cannot complete the upload".into(),
        );
        if completed.is_err() {
            self.upload = Some(upload);
        }
        completed
    }

    /// Aborts the upload: the parts in flight are cancelled, the parts
    /// sent discarded by the store, and the key keeps what it had. The
    /// error of the store's answer to the abort, if any (the store drops
    /// unfinished uploads by its own rules then).
    pub fn abort(mut self) -> Result<()> {
        self.abort_now()
    }

    fn abort_now(&mut self) -> Result<()> {
        let Some(mut upload) = self.upload.take() else {
            return Ok(());
        };
        self.tasks.abort_all();
        let tasks = &mut self.tasks;
        wait(
            async {
                while tasks.join_next().await.is_some() {}
                (upload.abort().await).map_err(|e| from_store("cannot abort the upload", e))
            },
            self.deadline,
            &Cancel::default(),
            || "cannot abort the upload".into(),
        )
    }
}

impl Drop for Upload {
    /// An upload neither completed nor aborted is aborted in the
    /// background: nothing appears under the key.
    fn drop(&mut self) {
        let Some(mut upload) = self.upload.take() else {
            return;
        };
        self.tasks.abort_all();
        if let Ok(rt) = runtime() {
            rt.spawn(async move {
                let _ = upload.abort().await;
            });
        }
    }
}

/// What a write of the object `url` needs: a cloud store's object (not a
/// prefix ending in `/`), its store, path and tuning.
type Target = (
    crate::stores::Store,
    object_store::path::Path,
    crate::Tuning,
);

/// The store, path and tuning of the object `url` names, for a write;
/// refused (nothing sent) unless it is an object of a cloud store.
pub(crate) fn object_to_write(
    url: &str,
    options: &[(String, String)],
) -> Result<Target, OpenError> {
    let refuse = |why: &str| OpenError::Config(ConfigError(format!("{}: {why}", display(url))));
    if !takes_uploads(url) {
        return Err(refuse(
            "only objects of S3, GCS and Azure stores can be written \
             (not a plain HTTP server, nor a presigned URL)",
        ));
    }
    let (store, path, tuning) = store_for(url, options)?;
    if path.as_ref().is_empty() || url.ends_with('/') {
        return Err(refuse("the URL names no object (a prefix ending in /)"));
    }
    Ok((store, path, tuning))
}

/// Writes `bytes` as the object `url` with one PUT (a small object, such as
/// a checkpoint's index): it appears whole, replacing an old one, or not
/// at all.
pub fn put(url: &str, options: &[(String, String)], bytes: Vec<u8>) -> Result<(), OpenError> {
    let (store, path, tuning) = object_to_write(url, options)?;
    let what = "cannot write the object";
    wait(
        async {
            let put = store.objects.put(&path, PutPayload::from(bytes)).await;
            put.map(|_| ()).map_err(|e| from_store(what, e))
        },
        tuning.deadline,
        &Cancel::default(),
        || what.into(),
    )?;
    Ok(())
}

/// Deletes the object `url`; one that is not there is no error.
pub fn delete(url: &str, options: &[(String, String)]) -> Result<(), OpenError> {
    let (store, path, tuning) = object_to_write(url, options)?;
    let what = "cannot delete the object";
    wait(
        async {
            match store.objects.delete(&path).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
                Err(e) => Err(from_store(what, e)),
            }
        },
        tuning.deadline,
        &Cancel::default(),
        || what.into(),
    )?;
    Ok(())
}

impl std::io::Write for Upload {
    /// Takes all of `buf`, sending each part as it fills and waiting in
    /// place for room.
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut rest = buf;
        while !rest.is_empty() {
            let n = self.fill(rest);
            rest = &rest[n..];
            if self.part_full() {
                while !self.has_room() {
                    self.wait_some(None).map_err(std::io::Error::other)?;
                }
                self.send().map_err(std::io::Error::other)?;
            }
        }
        Ok(buf.len())
    }

    /// Parts are sent as they fill; the last one by [`Upload::complete`].
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::io::Write;
    use std::sync::Arc;

    use object_store::memory::InMemory;
    use object_store::path::Path;
    use object_store::ObjectStoreExt;

    use super::*;

    fn upload_to(store: &Arc<InMemory>, key: &str, part: usize) -> Upload {
        let rt = runtime().unwrap();
        let up = rt.block_on(store.put_multipart(&Path::from(key))).unwrap();
        let tuning = crate::Tuning {
            concurrency: 3,
            ..crate::Tuning::default()
        };
        Upload::new(up, part, tuning).unwrap()
    }

    fn object(store: &Arc<InMemory>, key: &str) -> Option<Vec<u8>> {
        let rt = runtime().unwrap();
        rt.block_on(async {
            match store.get(&Path::from(key)).await {
                Ok(got) => Some(got.bytes().await.unwrap().to_vec()),
                Err(_) => None,
            }
        })
    }

    #[test]
    fn parts_are_sized_for_the_store_and_the_object() {
        assert_eq!(part_size(1, 100), MIN_PART);
        assert_eq!(part_size(8 << 20, 100), 8 << 20);
        let huge = 200u64 << 30;
        assert_eq!(part_size(8 << 20, huge) as u64, huge.div_ceil(MAX_PARTS));
        assert!(part_size(8 << 20, huge) as u64 * MAX_PARTS >= huge);
    }

    #[test]
    fn the_object_appears_whole_when_the_upload_completes() {
        let store = Arc::new(InMemory::new());
        let bytes: Vec<u8> = (0..100_000u32).map(|i| (i % 253) as u8).collect();
        let mut up = upload_to(&store, "k", 4096);
        assert_eq!(up.max_in_flight(), 3);
        for chunk in bytes.chunks(1000) {
            up.write_all(chunk).unwrap();
        }
        assert!(up.in_flight() <= 3);
        while up.in_flight() > 0 {
            up.wait_some(Some(Duration::from_millis(5))).unwrap();
        }
        assert_eq!(object(&store, "k"), None, "nothing before completion");
        up.complete().unwrap();
        assert_eq!(object(&store, "k").unwrap(), bytes);

        let empty = upload_to(&store, "e", 4096);
        empty.complete().unwrap();
        assert_eq!(object(&store, "e").unwrap(), Vec::<u8>::new());
    }

    #[test]
    fn an_aborted_or_dropped_upload_leaves_the_old_object() {
        let store = Arc::new(InMemory::new());
        let rt = runtime().unwrap();
        rt.block_on(store.put(&Path::from("k"), vec![1u8, 2, 3].into()))
            .unwrap();
        let mut up = upload_to(&store, "k", 1024);
        up.write_all(&[9u8; 5000]).unwrap();
        up.abort().unwrap();
        assert_eq!(object(&store, "k").unwrap(), vec![1, 2, 3]);
        let mut up = upload_to(&store, "k", 1024);
        up.write_all(&[9u8; 5000]).unwrap();
        drop(up);
        assert_eq!(object(&store, "k").unwrap(), vec![1, 2, 3]);
        let mut up = upload_to(&store, "new", 1024);
        up.write_all(&[9u8; 10]).unwrap();
        drop(up);
        assert_eq!(object(&store, "new"), None);
    }

    #[test]
    fn plain_http_and_presigned_urls_take_no_uploads() {
        for url in [
            "http://127.0.0.1:1/a/b.safetensors",
            "https://s3.us-east-1.amazonaws.com/b/k?X-Amz-Signature=1",
        ] {
            let err = Upload::start(url, &[], 10).unwrap_err();
            assert!(matches!(err, OpenError::Config(_)), "{url}");
        }
        let err = Upload::start("s3://b/prefix/", &[], 10).unwrap_err();
        match err {
            OpenError::Config(e) => assert!(e.0.contains("names no object"), "{e}"),
            OpenError::Read(e) => panic!("{e}"),
        }
    }
}
