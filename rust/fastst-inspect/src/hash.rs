//! `hash`: the hashes the ecosystem identifies model files by, computed
//! with positioned reads (a file truncated underneath gives an error, never
//! SIGBUS), with the long streams on their own threads.
//!
//! - `sha256`: SHA-256 of the whole file.
//! - `autov1`: first 8 hex digits of the SHA-256 of the 0x10000 bytes at
//!   offset 0x100000 (fewer, or none, when the file is shorter), the old
//!   webui "model hash".
//! - `autov2`: first 10 hex digits of `sha256`.
//! - `autov3`: SHA-256 of every byte after the `8 + N` header, i.e. of the
//!   tensor data: kohya's `sshs_model_hash` (sd-scripts computes it the same
//!   way) and ModelSpec's `modelspec.hash_sha256` (with a `0x` prefix).
//!   CivitAI shows its first 12 hex digits as "AutoV3".
//! - `header_sha256`: SHA-256 of the canonical header (see
//!   [`canonical_header`](crate::canonical_header)).
//! - per tensor: SHA-256 of each tensor's bytes.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use sha2::{Digest, Sha256};

use crate::canonical::canonical_header;
use crate::source::Source;
use crate::{hex, Finding, Progress};
use fastst_core::internal::{thread_count, zeroed};
use fastst_core::{prefix_value, Error, Header, Result, DEFAULT_HEADER_CAP};

/// Offset of the bytes AutoV1 hashes.
pub const AUTOV1_OFFSET: u64 = 0x10_0000;
/// Number of bytes AutoV1 hashes.
pub const AUTOV1_LEN: u64 = 0x1_0000;

/// Bytes hashed between two progress reports.
const BLOCK: usize = 8 << 20;

/// Options for [`hash_path`].
#[derive(Clone, Copy, Debug)]
pub struct HashOptions {
    /// Also hash every tensor's bytes.
    pub tensors: bool,
    /// Worker threads (0: one per core). The whole-file and data streams
    /// get one thread each; per-tensor hashes share the rest (at least one).
    pub threads: usize,
    /// Largest header length accepted when parsing the header.
    pub header_cap: u64,
}

impl Default for HashOptions {
    fn default() -> Self {
        HashOptions {
            tensors: false,
            threads: 0,
            header_cap: DEFAULT_HEADER_CAP,
        }
    }
}

/// The hashes of one file (lower-case hex).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HashReport {
    /// Length of the file in bytes.
    pub file_len: u64,
    /// SHA-256 of the whole file.
    pub sha256: String,
    /// AutoV1: 8 hex digits of SHA-256 over 0x10000 bytes at offset 0x100000.
    pub autov1: String,
    /// AutoV2: the first 10 hex digits of the file's SHA-256.
    pub autov2: String,
    /// `None` when the length prefix points past the end of the file.
    pub autov3: Option<String>,
    /// The `N` of the length prefix, when the file has one that fits.
    pub header_len: Option<u64>,
    /// `None` when the strict reader rejects the header.
    pub header_sha256: Option<String>,
    /// `(name, sha256)` in file order; `None` unless asked for, or when the
    /// strict reader rejects the header.
    pub tensors: Option<Vec<(String, String)>>,
    /// Why the header could not be used, when it could not.
    pub header_problem: Option<Finding>,
}

fn sha256_of(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// Hashes the file's bytes `[start, end)` read in blocks, reporting
/// progress after each.
fn stream(src: &Source, start: u64, end: u64, progress: Progress) -> Result<String> {
    let mut h = Sha256::new();
    let total = end.saturating_sub(start);
    let mut buf = zeroed(total.min(BLOCK as u64), "")?;
    let mut pos = start;
    while pos < end {
        let n = (end - pos).min(buf.len() as u64) as usize;
        let block = &mut buf[..n];
        src.read_exact_at(block, pos)?;
        h.update(&*block);
        pos += n as u64;
        if let Some(report) = progress {
            report(pos - start, total);
        }
    }
    Ok(hex(&h.finalize()))
}

/// The header as the strict reader sees it, or why it cannot be used. Only
/// an operating-system failure (or the file changing) is an error.
fn read_header(src: &Source, cap: u64) -> Result<std::result::Result<Header, Finding>> {
    let parsed = src
        .read_header(cap)
        .and_then(|(n, json)| Header::parse(&json, src.len - 8 - n));
    match parsed {
        Ok(h) => Ok(Ok(h)),
        Err(e @ (Error::Io { .. } | Error::FileChanged { .. } | Error::OutOfMemory { .. })) => {
            Err(e)
        }
        Err(e) => Ok(Err(Finding::from_error(&e))),
    }
}

/// Computes every hash of the file at `path` with positioned reads.
pub fn hash_path(path: &Path, options: &HashOptions, progress: Progress) -> Result<HashReport> {
    hash(Source::open(path)?, options, progress)
}

/// [`hash_path`] of a file read through any core source (an object in a
/// store).
pub fn hash_source(
    source: Box<dyn fastst_core::Source>,
    options: &HashOptions,
    progress: Progress,
) -> Result<HashReport> {
    hash(Source::new(source), options, progress)
}

fn hash(src: Source, options: &HashOptions, progress: Progress) -> Result<HashReport> {
    let len = src.len;
    let raw_n = prefix_value(&src.read_range(0, 8)?);
    let data_start = raw_n.and_then(|n| n.checked_add(8)).filter(|&s| s <= len);
    let (header, header_problem) = match read_header(&src, options.header_cap)? {
        Ok(h) => (Some(h), None),
        Err(finding) => (None, Some(finding)),
    };
    let autov1_end = AUTOV1_OFFSET.saturating_add(AUTOV1_LEN).min(len);
    let autov1_start = AUTOV1_OFFSET.min(autov1_end);
    let autov1 = sha256_of(&src.read_range(autov1_start, autov1_end - autov1_start)?);
    let header_sha256 = header.as_ref().map(|h| sha256_of(&canonical_header(h)));

    // Per-tensor jobs, largest first so that workers finish together.
    let jobs: Vec<(usize, u64, u64)> = match (&header, options.tensors) {
        (Some(h), true) => {
            let base = h.data_start();
            let mut jobs: Vec<(usize, u64, u64)> = h
                .tensors()
                .iter()
                .enumerate()
                .map(|(i, t)| (i, base + t.begin, base + t.end))
                .collect();
            jobs.sort_unstable_by_key(|j| std::cmp::Reverse(j.2 - j.1));
            jobs
        }
        _ => Vec::new(),
    };
    let next = AtomicUsize::new(0);
    let tensor_hashes: Mutex<Vec<(usize, String)>> = Mutex::new(Vec::with_capacity(jobs.len()));
    let failure: Mutex<Option<Error>> = Mutex::new(None);
    let workers = thread_count(options.threads).saturating_sub(2).max(1);
    let src = &src;

    let (sha256, autov3) = std::thread::scope(|s| {
        let data = data_start.map(|start| s.spawn(move || stream(src, start, len, None)));
        if !jobs.is_empty() {
            for _ in 0..workers.min(jobs.len()) {
                s.spawn(|| {
                    let mut local = Vec::new();
                    loop {
                        let k = next.fetch_add(1, Ordering::Relaxed);
                        let Some(&(i, a, b)) = jobs.get(k) else { break };
                        match stream(src, a, b, None) {
                            Ok(hash) => local.push((i, hash)),
                            Err(e) => {
                                failure
                                    .lock()
                                    .unwrap_or_else(|p| p.into_inner())
                                    .get_or_insert(e);
                                break;
                            }
                        }
                    }
                    tensor_hashes
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .extend(local);
                });
            }
        }
        let whole = stream(src, 0, len, progress);
        // A panic in a hashing thread cannot come from file data (hashing
        // accepts any bytes); if one did, the hash is reported as missing.
        let autov3 = data.and_then(|h| h.join().ok()).transpose();
        (whole, autov3)
    });
    let sha256 = sha256?;
    let autov3 = autov3?;
    if let Some(e) = failure.into_inner().unwrap_or_else(|p| p.into_inner()) {
        return Err(e);
    }

    let tensors = match (&header, options.tensors) {
        (Some(h), true) => {
            let mut hashes = tensor_hashes
                .into_inner()
                .unwrap_or_else(|p| p.into_inner());
            hashes.sort_unstable_by_key(|(i, _)| *i);
            let named: Vec<(String, String)> = hashes
                .into_iter()
                .filter_map(|(i, hash)| h.tensors().get(i).map(|t| (t.name.clone(), hash)))
                .collect();
            Some(named)
        }
        _ => None,
    };
    Ok(HashReport {
        file_len: len,
        autov2: sha256[..10].to_owned(),
        sha256,
        autov1: autov1[..8].to_owned(),
        autov3,
        header_len: raw_n.filter(|_| data_start.is_some()),
        header_sha256,
        tensors,
        header_problem,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn streamed_equals_one_shot() {
        let data: Vec<u8> = (0..(BLOCK + 1000)).map(|i| (i % 251) as u8).collect();
        let f = crate::testfs::raw(&data);
        let src = Source::open(&f.0).unwrap();
        let n = data.len() as u64;
        assert_eq!(stream(&src, 0, n, None).unwrap(), sha256_of(&data));
        assert_eq!(stream(&src, 5, n, None).unwrap(), sha256_of(&data[5..]));
        // Progress counts the bytes of the range, block by block, to its end.
        let seen = std::sync::Mutex::new(Vec::new());
        let report = |done: u64, total: u64| seen.lock().unwrap().push((done, total));
        assert_eq!(
            stream(&src, 5, n, Some(&report)).unwrap(),
            sha256_of(&data[5..])
        );
        assert_eq!(
            seen.into_inner().unwrap(),
            vec![(BLOCK as u64, n - 5), (n - 5, n - 5)]
        );
        // SHA-256 of the empty string.
        assert_eq!(
            sha256_of(b""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod file_tests {
    use super::*;
    use crate::testfs::{build, raw};

    #[test]
    fn hashes_cover_the_right_bytes() {
        let header = r#"{"__metadata__":{"format":"pt"},"b":{"dtype":"U8","shape":[1200000],"data_offsets":[0,1200000]},"a":{"dtype":"U8","shape":[3],"data_offsets":[1200000,1200003]}}"#;
        let data: Vec<u8> = (0..1_200_003u32).map(|i| (i * 7 % 256) as u8).collect();
        let f = build(header, &data);
        let all = std::fs::read(&f.0).unwrap();
        for threads in [1, 4] {
            let options = HashOptions {
                tensors: true,
                threads,
                ..HashOptions::default()
            };
            let r = hash_path(&f.0, &options, None).unwrap();
            assert_eq!(r.sha256, sha256_of(&all));
            assert_eq!(r.autov2, r.sha256[..10]);
            assert_eq!(r.autov1, sha256_of(&all[0x10_0000..0x11_0000])[..8]);
            let start = 8 + header.len();
            assert_eq!(r.autov3.as_deref(), Some(sha256_of(&all[start..]).as_str()));
            let tensors = r.tensors.unwrap();
            assert_eq!(tensors[0], ("b".to_owned(), sha256_of(&data[..1_200_000])));
            assert_eq!(tensors[1], ("a".to_owned(), sha256_of(&data[1_200_000..])));
            let h = Header::parse(header.as_bytes(), data.len() as u64).unwrap();
            assert_eq!(r.header_sha256.unwrap(), sha256_of(&canonical_header(&h)));
            assert_eq!(r.header_len, Some(header.len() as u64));
        }
    }

    #[test]
    fn a_file_truncated_while_hashed_is_an_error_not_sigbus() {
        let data = vec![7u8; 3 * BLOCK];
        let f = raw(&data);
        let src = Source::open(&f.0).unwrap();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&f.0)
            .unwrap()
            .set_len(BLOCK as u64)
            .unwrap();
        let e = stream(&src, 0, src.len, None).unwrap_err();
        assert_eq!(e.rule(), "file-changed");
    }

    #[test]
    fn broken_files_still_get_file_hashes() {
        let f = raw(b"hello");
        let r = hash_path(&f.0, &HashOptions::default(), None).unwrap();
        assert_eq!(r.sha256, sha256_of(b"hello"));
        assert_eq!(r.autov1, sha256_of(b"")[..8]);
        assert_eq!(r.autov3, None);
        assert_eq!(
            r.header_problem.map(|p| p.rule.id()),
            Some("file-too-short")
        );
        let e = raw(b"");
        let r = hash_path(&e.0, &HashOptions::default(), None).unwrap();
        assert_eq!(r.sha256, sha256_of(b""));
        // A prefix that fits but a header the reader rejects.
        let bad = build("{\"a\":1}", b"xyz");
        let r = hash_path(
            &bad.0,
            &HashOptions {
                tensors: true,
                ..HashOptions::default()
            },
            None,
        )
        .unwrap();
        assert_eq!(r.autov3.as_deref(), Some(sha256_of(b"xyz").as_str()));
        assert_eq!(r.header_sha256, None);
        assert_eq!(r.tensors, None);
        assert_eq!(
            r.header_problem.map(|p| p.rule.id()),
            Some("entry-not-object")
        );
    }
}
