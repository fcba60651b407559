//! fastst-inspect: the forensics of `.safetensors` files, what the `fastst`
//! command's `verify`, `hash`, `inspect`, `meta` and `diff` compute.
//!
//! It builds on `fastst-core` (the reader and writer) and only reads: the
//! reader never depends on this crate. Nothing in a file is ever executed
//! or unpickled: foreign content is recognised by its magic number alone
//! ([`fastst_core::identify()`]).
//!
//! # Brief overview
//!
//! Verification is tolerant where the reader is strict. [`verify_path`]
//! reads the length prefix and the header bytes itself, keeps the strict
//! verdict of [`Header::parse`](fastst_core::Header::parse) as one finding,
//! and, when the reader rejects a file, parses the header a second time
//! leniently (duplicate keys kept, every entry checked on its own) and runs
//! the core's own rules ([`entry`](fastst_core::internal::entry),
//! [`layout`](fastst_core::internal::layout)) collect-all, so that
//! every structural problem is reported rather than only the first; then
//! the forensic checks (names, dtypes, metadata conventions, bytes no tensor
//! covers, and with [`VerifyOptions::values`] NaN/Inf and bad booleans).
//! Every result is a [`Finding`] carrying a rule of the catalogue
//! ([`RuleId`], see [`fastst_core::RuleId`]) and a [`Severity`].
//!
//! [`hash_path`] computes the hashes model files are known by (SHA-256,
//! AutoV1/V2/V3, the canonical header's, per tensor) with positioned reads
//! on several threads. Long work reports through a [`Progress`] callback.
//!
//! The modules (private; their items are re-exported here), one job each:
//!
//! - `verify`: the strict verdict, the lenient re-read, layout forensics
//!   (`verify/layout.rs`), entry checks (`verify/entry.rs`) and the value
//!   scan (`verify/scan.rs`), producing a [`VerifyReport`].
//! - `lenient`: the lenient header parse (duplicates kept), and
//!   [`read_metadata`] of files the reader rejects.
//! - `names`, `metadata`: checks on tensor names and dtypes, and on
//!   `__metadata__` against the ecosystem's conventions and for what its
//!   values carry.
//! - `payload`: other formats' files (pickle programs, zip archives,
//!   executables, scripts) and code, links and blobs in text, recognised
//!   by their structure in tensor data, metadata and the file's first
//!   bytes; nothing is decoded or run.
//! - `values`: NaN/Inf and boolean counts from raw bytes ([`count_values`]).
//! - `hash`: [`hash_path`]; `canonical`: the canonical header it hashes
//!   ([`canonical_header`]).
//! - `summary`: a header at a glance ([`summarize`]).
//! - `diff`: the values of two tensors compared ([`diff_values`]).
//! - `stats`: what each tensor's values look like: min, max, mean, std,
//!   NaN/Inf/zero counts, a histogram ([`stats_path`]).
//! - `source`: positioned, bounded reads of a file opened by the core's
//!   one opener ([`fastst_core::internal::open`]).
//!
//! # Example
//!
//! Verify and hash a small file, then the same file with bytes appended:
//!
//! ```
//! use fastst_core::{serialize, Dtype, NewTensor, WritePlan, DEFAULT_HEADER_CAP};
//! use fastst_inspect::{hash_path, verify_path, HashOptions, RuleId, VerifyOptions};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = std::env::temp_dir().join(format!("fastst-inspect-doc-{}", std::process::id()));
//! std::fs::create_dir_all(&dir)?;
//! let path = dir.join("model.safetensors");
//! let plan = WritePlan::new(
//!     vec![NewTensor::new("weight", Dtype::F32, vec![2])],
//!     None,
//!     DEFAULT_HEADER_CAP,
//! )?;
//! let weight: Vec<u8> = [0.5f32, f32::NAN].iter().flat_map(|v| v.to_le_bytes()).collect();
//! let mut bytes = serialize(&plan, &[&weight])?;
//! std::fs::write(&path, &bytes)?;
//!
//! // The reader accepts it; reading the values finds the NaN.
//! let options = VerifyOptions { values: true, ..VerifyOptions::default() };
//! let report = verify_path(&path, &options, None)?;
//! assert!(report.accepted && report.complete);
//! let rules: Vec<RuleId> = report.findings.iter().map(|f| f.rule).collect();
//! assert_eq!(rules, [RuleId::NonFiniteValues]);
//!
//! let hashes = hash_path(&path, &HashOptions { tensors: true, ..HashOptions::default() }, None)?;
//! assert_eq!(hashes.autov2, hashes.sha256[..10]);
//! assert_eq!(hashes.tensors.map(|t| t.len()), Some(1));
//!
//! // Four bytes no tensor covers: the reader rejects the file, verify says
//! // where they are.
//! bytes.extend_from_slice(b"junk");
//! std::fs::write(&path, &bytes)?;
//! let report = verify_path(&path, &VerifyOptions::default(), None)?;
//! assert!(!report.accepted);
//! let trailing = report.findings.iter().find(|f| f.rule == RuleId::TrailingBytes);
//! assert_eq!(trailing.and_then(|f| f.length), Some(4));
//!
//! std::fs::remove_dir_all(&dir)?;
//! # Ok(())
//! # }
//! ```

#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod canonical;
mod diff;
mod hash;
mod lenient;
mod metadata;
mod names;
mod payload;
mod source;
mod stats;
mod summary;
#[cfg(test)]
use fastst_core::internal::testfs;
mod values;
mod verify;

pub use fastst_core::{RuleId, Severity, Verdict};

pub use canonical::canonical_header;
pub use diff::{compare_values, diff_values, Side, ValueDiff};
pub use hash::{hash_path, hash_source, HashOptions, HashReport, AUTOV1_LEN, AUTOV1_OFFSET};
pub use lenient::{read_metadata, read_metadata_source};
pub use metadata::{is_known_metadata_key, HUGE_METADATA_IMAGE, HUGE_METADATA_VALUE};
pub use stats::{stats_path, stats_source, Histogram, Number, StatsOptions, TensorStats, MAX_BINS};
pub use summary::{summarize, DtypeTotals, Summary};
pub use values::{count_values, ValueCounts};
pub use verify::{verify_path, verify_source, VerifyOptions, VerifyReport};

pub use fastst_core::Progress;

/// One problem (or fact) found in a file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    /// The catalogue rule it reports.
    pub rule: RuleId,
    /// How serious it is.
    pub severity: Severity,
    /// What was found, naming the tensor or key involved.
    pub message: String,
    /// The tensor involved, where there is one.
    pub tensor: Option<String>,
    /// The `__metadata__` key involved, where there is one.
    pub key: Option<String>,
    /// Absolute file offset of the bytes involved, where known.
    pub offset: Option<u64>,
    /// Number of bytes involved, where known.
    pub length: Option<u64>,
    /// Number of offending elements or bytes (NaN/Inf values, non-0/1
    /// booleans, non-zero unreferenced bytes), where counted.
    pub count: Option<u64>,
}

impl Finding {
    /// A finding of rule `rule` with the rule's default severity.
    pub fn new(rule: RuleId, message: impl Into<String>) -> Finding {
        Finding {
            rule,
            severity: rule.severity(),
            message: message.into(),
            tensor: None,
            key: None,
            offset: None,
            length: None,
            count: None,
        }
    }

    /// The finding for a reader error (its rule and message).
    pub fn from_error(err: &fastst_core::Error) -> Finding {
        let mut f = Finding::new(err.rule(), err.to_string());
        f.tensor = err.tensor().map(str::to_owned);
        if let fastst_core::Error::DuplicateMetadataKey { key }
        | fastst_core::Error::MetadataValueNotString { key, .. } = err
        {
            f.key = Some(key.clone());
        }
        f
    }

    pub(crate) fn tensor(mut self, name: &str) -> Finding {
        self.tensor = Some(name.to_owned());
        self
    }

    pub(crate) fn key(mut self, key: &str) -> Finding {
        self.key = Some(key.to_owned());
        self
    }

    pub(crate) fn at(mut self, offset: u64, length: u64) -> Finding {
        self.offset = Some(offset);
        self.length = Some(length);
        self
    }

    pub(crate) fn count(mut self, count: u64) -> Finding {
        self.count = Some(count);
        self
    }

    pub(crate) fn severity(mut self, severity: Severity) -> Finding {
        self.severity = severity;
        self
    }
}

/// Lower-case hexadecimal of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for &b in bytes {
        s.push(char::from(DIGITS[usize::from(b >> 4)]));
        s.push(char::from(DIGITS[usize::from(b & 0x0f)]));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_encodes() {
        assert_eq!(hex(&[0x00, 0xab, 0x7f]), "00ab7f");
    }
}
