//! The requests: the opening GET, and reads cut into concurrent ranged
//! GETs, each received by a task of the runtime straight into the caller's
//! buffers (one or several consecutive ones).

use std::ops::Range;
use std::sync::Arc;

use fastst_core::{Error, Result};
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{GetOptions, GetRange, GetResult, ObjectStore, ObjectStoreExt};
use tokio::sync::Semaphore;

use crate::error::{changed, from_store, protocol};
use crate::options::Tuning;
use crate::FIRST_READ;

/// The object's length, ETag and first bytes (at most [`FIRST_READ`]),
/// from one ranged GET; an empty object (which no range fits) is measured
/// with a HEAD.
pub(crate) async fn open(
    store: &dyn ObjectStore,
    path: &Path,
) -> Result<(u64, Option<String>, Vec<u8>)> {
    let options = GetOptions {
        range: Some(GetRange::Bounded(0..FIRST_READ)),
        ..GetOptions::default()
    };
    let got = match store.get_opts(path, options).await {
        Ok(got) => got,
        Err(e) => {
            // A range of an empty object is not satisfiable (416): ask its
            // size.
            if matches!(e, object_store::Error::Generic { .. }) && e.to_string().contains("416") {
                if let Ok(meta) = store.head(path).await {
                    if meta.size == 0 {
                        return Ok((0, meta.e_tag, Vec::new()));
                    }
                }
            }
            return Err(from_store("cannot open the object", e));
        }
    };
    let (len, etag) = (got.meta.size, got.meta.e_tag.clone());
    let want = len.min(FIRST_READ);
    // At most FIRST_READ bytes: the size the server announces allocates
    // nothing beyond that.
    let mut first = vec![0u8; want as usize];
    receive(got, 0..want, &mut Scatter::new(vec![&mut first[..]]), 0)
        .await
        .map_err(|short| short.error)?;
    Ok((len, etag, first))
}

/// One contiguous byte range of a read and where its bytes go.
#[derive(Debug, PartialEq, Eq)]
pub struct Part {
    /// Bytes of the object.
    pub range: Range<u64>,
    /// Where they go in the caller's buffer.
    pub at: Range<usize>,
}

/// `len` bytes at `offset` cut into requests of at most `part` bytes (the
/// last one shorter), in order; nothing for an empty read.
pub fn parts(offset: u64, len: usize, part: usize) -> Vec<Part> {
    let part = part.max(1);
    (0..len)
        .step_by(part)
        .map(|at| {
            let n = part.min(len - at);
            let start = offset + at as u64;
            Part {
                range: start..start + n as u64,
                at: at..at + n,
            }
        })
        .collect()
}

/// What reading an object needs (owned, so that its requests can run as
/// tasks of the runtime).
pub(crate) struct Object {
    pub(crate) store: Arc<dyn ObjectStore>,
    pub(crate) path: Path,
    pub(crate) len: u64,
    pub(crate) etag: Option<String>,
    pub(crate) in_flight: Arc<Semaphore>,
}

impl Object {
    /// Fills `buf` with the bytes at `offset`: concurrent ranged GETs of at
    /// most `tuning.part` bytes, each streamed into its place.
    pub(crate) async fn read(
        self: &Arc<Self>,
        offset: u64,
        buf: &mut [u8],
        tuning: Tuning,
    ) -> Result<()> {
        self.read_many(&mut [(offset, buf)], tuning).await
    }

    /// Fills each buffer of `reads` with the bytes at its offset: the
    /// parts of all of them in one queue, `tuning.concurrency` in flight.
    pub(crate) async fn read_many(
        self: &Arc<Self>,
        reads: &mut [(u64, &mut [u8])],
        tuning: Tuning,
    ) -> Result<()> {
        let mut pieces = Vec::with_capacity(reads.len());
        for (offset, buf) in reads.iter_mut() {
            let mut rest: &mut [u8] = buf;
            for p in parts(*offset, rest.len(), tuning.part) {
                let (head, tail) = std::mem::take(&mut rest).split_at_mut(p.at.len());
                pieces.push((p.range, head));
                rest = tail;
            }
        }
        futures::stream::iter(
            pieces
                .into_iter()
                .map(|(range, dst)| self.get(range, vec![dst])),
        )
        .buffer_unordered(tuning.concurrency.max(1))
        .try_collect::<()>()
        .await
    }

    /// Fills `bufs`, in order, with the bytes from `offset` on, by one
    /// ranged GET.
    pub(crate) async fn read_scatter(
        self: &Arc<Self>,
        offset: u64,
        bufs: Vec<&mut [u8]>,
    ) -> Result<()> {
        let len: usize = bufs.iter().map(|b| b.len()).sum();
        self.get(offset..offset + len as u64, bufs).await
    }

    /// `range` into `bufs` (their lengths add up to its length), received
    /// by a task of the runtime (the thread that reads the connection
    /// copies its bytes out, rather than handing each chunk to a waiting
    /// thread).
    async fn get(self: &Arc<Self>, range: Range<u64>, bufs: Vec<&mut [u8]>) -> Result<()> {
        let me = Arc::clone(self);
        crate::lend::on_runtime(bufs, move |bufs| async move {
            me.get_into(range, Scatter::new(bufs)).await
        })?
        .await
    }

    /// `range` into `dst` (its length), with ranged GETs conditional on the
    /// ETag seen at open. A body that ends early or breaks off is asked
    /// for again from where it stopped (the bytes received are kept), up
    /// to [`BODY_RETRIES`] times; the requests themselves are retried by
    /// `object_store` (5xx, timeouts, resets before the body).
    async fn get_into(&self, range: Range<u64>, mut dst: Scatter<'_>) -> Result<()> {
        let _permit = self
            .in_flight
            .acquire()
            .await
            .map_err(|_| Error::WorkerFailed {
                task: "a remote read",
            })?;
        let mut at = 0usize;
        let mut tries = 0u32;
        loop {
            let rest = range.start + at as u64..range.end;
            let got = self.get_once(rest.clone()).await?;
            match receive(got, rest, &mut dst, at).await {
                Ok(()) => return Ok(()),
                Err(Short { got, error }) => {
                    at += got;
                    tries += 1;
                    if tries > BODY_RETRIES {
                        return Err(error);
                    }
                    tokio::time::sleep(body_backoff(tries)).await;
                }
            }
        }
    }

    /// The answer to one GET of `range`, checked against the object opened.
    async fn get_once(&self, range: Range<u64>) -> Result<GetResult> {
        let options = GetOptions {
            range: Some(GetRange::Bounded(range.clone())),
            if_match: self.etag.clone(),
            ..GetOptions::default()
        };
        let got = self
            .store
            .get_opts(&self.path, options)
            .await
            .map_err(|e| {
                from_store(
                    &format!("cannot read bytes {}..{}", range.start, range.end),
                    e,
                )
            })?;
        if got.meta.size != self.len {
            return Err(changed(format!(
                "its length is now {} bytes, it had {}",
                got.meta.size, self.len
            )));
        }
        if let (Some(then), Some(now)) = (self.etag.as_deref(), got.meta.e_tag.as_deref()) {
            if then != now {
                return Err(changed(format!("its ETag is now {now}, it was {then}")));
            }
        }
        Ok(got)
    }
}

/// Times a body that ended early is asked for again.
const BODY_RETRIES: u32 = 4;

/// The pause before the `n`th new request for the rest of a body.
fn body_backoff(n: u32) -> std::time::Duration {
    std::time::Duration::from_millis(50u64 << n.min(6))
}

/// A body that did not arrive whole: the bytes that did, and why.
struct Short {
    got: usize,
    error: Error,
}

/// Consecutive buffers that one ranged GET fills, in order, as if they
/// were one.
pub(crate) struct Scatter<'a> {
    bufs: Vec<&'a mut [u8]>,
    len: usize,
    /// The buffer the last copy ended in, and where it starts.
    at: (usize, usize),
}

impl<'a> Scatter<'a> {
    pub(crate) fn new(bufs: Vec<&'a mut [u8]>) -> Self {
        let len = bufs.iter().map(|b| b.len()).sum();
        Scatter {
            bufs,
            len,
            at: (0, 0),
        }
    }

    fn len(&self) -> usize {
        self.len
    }

    /// Copies `bytes` to position `pos`: false, with nothing copied, when
    /// they go past the end.
    fn put(&mut self, mut pos: usize, mut bytes: &[u8]) -> bool {
        if pos
            .checked_add(bytes.len())
            .is_none_or(|end| end > self.len)
        {
            return false;
        }
        // Copies come in order: the search starts where the last one ended.
        let (mut i, mut start) = if pos >= self.at.1 { self.at } else { (0, 0) };
        while !bytes.is_empty() {
            let Some(buf) = self.bufs.get_mut(i) else {
                return false;
            };
            let end = start + buf.len();
            if pos < end {
                let n = (end - pos).min(bytes.len());
                buf[pos - start..pos - start + n].copy_from_slice(&bytes[..n]);
                (bytes, pos) = (&bytes[n..], pos + n);
                self.at = (i, start);
            }
            if pos >= end {
                (i, start) = (i + 1, end);
            }
        }
        true
    }
}

/// Streams the body of `got`, the answer to a GET of `range`, into `dst`
/// from position `from` on (`range` is as long as the rest of `dst`). The
/// answer must be for exactly that range (else an error with nothing kept)
/// and may not hold more bytes; a body that ends early or breaks off keeps
/// what arrived.
async fn receive(
    got: GetResult,
    range: Range<u64>,
    dst: &mut Scatter<'_>,
    from: usize,
) -> Result<(), Short> {
    let fail = |got: usize, error: Error| Short { got, error };
    if got.range != range {
        return Err(fail(
            0,
            protocol(format!(
                "the store answered bytes {}..{} to a request for {}..{}",
                got.range.start, got.range.end, range.start, range.end
            )),
        ));
    }
    let what = || format!("cannot read bytes {}..{}", range.start, range.end);
    let want = dst.len().saturating_sub(from);
    let mut body = got.into_stream();
    let mut at = 0usize;
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(|e| fail(at, from_store(&what(), e)))?;
        if at + chunk.len() > want || !dst.put(from + at, &chunk) {
            // More than asked for: nothing of this answer is trusted.
            return Err(fail(
                0,
                protocol(format!(
                    "the store sent more than the {want} bytes of range {}..{}",
                    range.start, range.end
                )),
            ));
        }
        at += chunk.len();
    }
    if at != want {
        return Err(fail(
            at,
            protocol(format!(
                "the store sent {at} of the {want} bytes of range {}..{}",
                range.start, range.end
            )),
        ));
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// The answer of a store to a GET of `range` whose body is `chunks`
    /// (an `Err` chunk breaks the body off).
    fn answer(range: Range<u64>, chunks: Vec<Result<Vec<u8>, ()>>) -> GetResult {
        let body = futures::stream::iter(chunks.into_iter().map(|c| {
            c.map(Into::into)
                .map_err(|()| object_store::Error::Generic {
                    store: "test",
                    source: "connection reset".into(),
                })
        }));
        GetResult {
            payload: object_store::GetResultPayload::Stream(body.boxed()),
            meta: object_store::ObjectMeta {
                location: Path::from("m"),
                last_modified: Default::default(),
                size: 100,
                e_tag: None,
                version: None,
            },
            range,
            attributes: Default::default(),
            extensions: Default::default(),
        }
    }

    /// What `receive` keeps of an answer to a GET of 10..20: `Ok(10)`
    /// for all of it, else the bytes it keeps for the next request.
    fn kept(got: GetResult) -> Result<usize, usize> {
        let mut dst = [0u8; 10];
        let mut dst = Scatter::new(vec![&mut dst[..]]);
        let out = crate::runtime()
            .unwrap()
            .block_on(receive(got, 10..20, &mut dst, 0));
        out.map(|()| 10).map_err(|short| short.got)
    }

    #[test]
    fn a_scatter_fills_its_buffers_in_order_and_refuses_what_goes_past_them() {
        let (mut a, mut b, mut c) = ([0u8; 3], [0u8; 0], [0u8; 4]);
        let mut s = Scatter::new(vec![&mut a[..], &mut b[..], &mut c[..]]);
        assert_eq!(s.len(), 7);
        assert!(s.put(0, &[1, 2]));
        assert!(s.put(2, &[3, 4, 5]));
        assert!(s.put(5, &[6, 7]));
        assert!(!s.put(6, &[9, 9]), "past the end");
        assert!(!s.put(usize::MAX, &[9]));
        // A later request starts over from an earlier place.
        assert!(s.put(1, &[8]));
        drop(s);
        assert_eq!((a, c), ([1, 8, 3], [4, 5, 6, 7]));
    }

    #[test]
    fn answers_are_kept_only_as_far_as_they_fit_the_request() {
        let ok = |n: usize| Ok(vec![7u8; n]);
        assert_eq!(kept(answer(10..20, vec![ok(4), ok(6)])), Ok(10));
        // Cut short, or broken off: what arrived is kept, the rest asked again.
        assert_eq!(kept(answer(10..20, vec![ok(4)])), Err(4));
        assert_eq!(kept(answer(10..20, vec![ok(3), Err(()), ok(7)])), Err(3));
        // More than asked for, or another range: nothing is kept.
        assert_eq!(kept(answer(10..20, vec![ok(6), ok(6)])), Err(0));
        assert_eq!(kept(answer(0..10, vec![ok(10)])), Err(0));
    }

    #[test]
    fn reads_are_cut_into_parts_that_tile_the_buffer() {
        assert!(parts(5, 0, 4).is_empty());
        let got = parts(10, 10, 4);
        assert_eq!(
            got,
            vec![
                Part {
                    range: 10..14,
                    at: 0..4
                },
                Part {
                    range: 14..18,
                    at: 4..8
                },
                Part {
                    range: 18..20,
                    at: 8..10
                },
            ]
        );
        assert_eq!(
            parts(0, 3, 8),
            vec![Part {
                range: 0..3,
                at: 0..3
            }]
        );
        assert_eq!(parts(0, 8, 8).len(), 1);
        // A zero part size still makes progress, one byte at a time.
        assert_eq!(parts(0, 2, 0).len(), 2);
    }
}
