//! Forensics and hashes: what the `fastst` command's `verify`, `hash` and
//! `inspect` subcommands compute.
//!
//! Verification is tolerant where the reader is strict: it reads the length
//! prefix and the header bytes itself, keeps the strict verdict of
//! [`Header::parse`](crate::Header::parse) as one finding, and, when the
//! reader rejects a file, parses the header a second time leniently
//! (duplicate keys kept, every entry checked on its own) so that every
//! structural problem is reported rather than only the first. Nothing in a
//! file is ever executed or unpickled: foreign content is recognised by its
//! magic number alone.
//!
//! Every finding carries a stable rule identifier (see [`RULES`]) and a
//! [`Severity`].

mod canonical;
mod hash;
mod lenient;
mod magic;
mod metadata;
mod names;
mod source;
mod summary;
mod values;
mod verify;

use std::fmt;

pub use canonical::canonical_header;
pub use hash::{hash_path, HashOptions, HashReport, AUTOV1_LEN, AUTOV1_OFFSET};
pub use lenient::read_metadata;
pub use magic::{sniff, Magic};
pub use metadata::{is_known_metadata_key, HUGE_METADATA_IMAGE, HUGE_METADATA_VALUE};
pub use summary::{summarize, DtypeTotals, Summary};
pub use values::{count_values, ValueCounts};
pub use verify::{verify_path, VerifyOptions, VerifyReport};

/// Called with `(bytes done, bytes in all)` while long work goes on; it may
/// be called from any thread, often (every few MiB).
pub type Progress<'a> = Option<&'a (dyn Fn(u64, u64) + Sync)>;

/// How serious a finding is, from `Info` (worth knowing) to `Critical`
/// (do not load this file).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Severity {
    /// Worth knowing; never a problem by itself.
    Info,
    /// Unusual but harmless to load.
    Low,
    /// Suspicious: may hide something or break some loaders.
    Medium,
    /// The strict reader rejects the file, or readers would disagree on it.
    High,
    /// The file carries content that can execute code (pickle, archives,
    /// executables) or is not a safetensors file at all.
    Critical,
}

impl Severity {
    /// Every severity, lowest first.
    pub const ALL: [Severity; 5] = [
        Severity::Info,
        Severity::Low,
        Severity::Medium,
        Severity::High,
        Severity::Critical,
    ];

    /// Lower-case name: `"info"`, `"low"`, `"medium"`, `"high"`, `"critical"`.
    pub const fn name(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Low => "low",
            Severity::Medium => "medium",
            Severity::High => "high",
            Severity::Critical => "critical",
        }
    }

    /// Parses a lower-case name.
    pub fn from_name(name: &str) -> Option<Severity> {
        Severity::ALL.into_iter().find(|s| s.name() == name)
    }
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One rule of the catalogue: its stable identifier, default severity and a
/// one-line description.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rule {
    /// Stable identifier, e.g. `"trailing-bytes"`.
    pub id: &'static str,
    /// Severity findings of this rule get (a few rules raise or lower it per
    /// finding, e.g. `foreign-content` for data-only formats).
    pub severity: Severity,
    /// One line saying what the rule checks.
    pub summary: &'static str,
}

const fn rule(id: &'static str, severity: Severity, summary: &'static str) -> Rule {
    Rule {
        id,
        severity,
        summary,
    }
}

/// Every rule a finding can carry. The first block are the reader's own
/// rules (a file that breaks one is rejected by `safe_open`); the rest are
/// forensic checks the reader does not enforce.
pub const RULES: &[Rule] = &[
    rule(
        "file-too-short",
        Severity::High,
        "file is shorter than the 8-byte header length prefix",
    ),
    rule(
        "header-length-zero",
        Severity::High,
        "header length prefix is 0",
    ),
    rule(
        "header-too-large",
        Severity::High,
        "header length prefix is above the header size cap",
    ),
    rule(
        "header-past-end",
        Severity::High,
        "header length prefix points past the end of the file",
    ),
    rule(
        "header-not-utf8",
        Severity::High,
        "header is not valid UTF-8",
    ),
    rule(
        "header-start",
        Severity::High,
        "header does not start with `{` after optional whitespace",
    ),
    rule("json-syntax", Severity::High, "header is not strict JSON"),
    rule(
        "json-too-deep",
        Severity::High,
        "header JSON is nested too deeply",
    ),
    rule(
        "duplicate-tensor",
        Severity::High,
        "a tensor name appears twice; readers disagree on which entry wins",
    ),
    rule(
        "duplicate-metadata-key",
        Severity::High,
        "a key appears twice in __metadata__",
    ),
    rule(
        "duplicate-metadata",
        Severity::High,
        "__metadata__ appears twice",
    ),
    rule(
        "metadata-not-map",
        Severity::High,
        "__metadata__ is not an object of strings",
    ),
    rule(
        "metadata-value-not-string",
        Severity::High,
        "a __metadata__ value is not a string",
    ),
    rule(
        "entry-not-object",
        Severity::High,
        "a tensor entry is not an object",
    ),
    rule(
        "duplicate-field",
        Severity::High,
        "a field appears twice in a tensor entry",
    ),
    rule(
        "missing-field",
        Severity::High,
        "a tensor entry lacks dtype, shape or data_offsets",
    ),
    rule(
        "wrong-field-type",
        Severity::High,
        "a tensor entry field has the wrong JSON type",
    ),
    rule(
        "unknown-dtype",
        Severity::High,
        "a tensor declares a dtype the format does not define",
    ),
    rule(
        "bad-shape-entry",
        Severity::High,
        "a shape entry is not a non-negative integer below 2^63",
    ),
    rule(
        "size-overflow",
        Severity::High,
        "shape x dtype size overflows 64-bit arithmetic",
    ),
    rule(
        "sub-byte-not-whole",
        Severity::High,
        "packed sub-byte elements do not fill whole bytes",
    ),
    rule(
        "bad-offsets",
        Severity::High,
        "data_offsets are not two non-negative integers",
    ),
    rule(
        "offsets-reversed",
        Severity::High,
        "data_offsets begin after they end",
    ),
    rule(
        "byte-length-mismatch",
        Severity::High,
        "data_offsets hold a different byte count than shape x dtype",
    ),
    rule(
        "hole",
        Severity::High,
        "bytes between two tensors belong to no tensor",
    ),
    rule(
        "overlap",
        Severity::High,
        "two tensors' byte ranges overlap",
    ),
    rule(
        "data-too-short",
        Severity::High,
        "a tensor's bytes run past the end of the file",
    ),
    rule(
        "trailing-bytes",
        Severity::High,
        "bytes after the last tensor belong to no tensor",
    ),
    rule(
        "foreign-content",
        Severity::Critical,
        "the file is another format (pickle, zip, executable...) under a safetensors name",
    ),
    rule(
        "hidden-payload",
        Severity::Critical,
        "bytes no tensor covers start with the magic number of another format",
    ),
    rule(
        "ghost-tensor",
        Severity::High,
        "a tensor's bytes lie entirely past the end of the file",
    ),
    rule(
        "aliased-tensor",
        Severity::High,
        "two tensors read exactly the same bytes",
    ),
    rule(
        "hash-mismatch",
        Severity::High,
        "a hash embedded in the metadata does not match the file",
    ),
    rule(
        "control-char-name",
        Severity::Medium,
        "a tensor name holds control, bidirectional or invisible characters",
    ),
    rule(
        "path-like-name",
        Severity::Medium,
        "a tensor name looks like a file path (absolute, `..`, backslash, `~`)",
    ),
    rule(
        "non-finite-values",
        Severity::Medium,
        "a floating-point tensor holds NaN or infinite values",
    ),
    rule(
        "invalid-bool",
        Severity::Medium,
        "a BOOL tensor holds bytes other than 0 and 1",
    ),
    rule(
        "large-tensor",
        Severity::Low,
        "a tensor is 2 GiB or larger (beyond 32-bit byte counts)",
    ),
    rule(
        "suspicious-weight-dtype",
        Severity::Low,
        "a weight or bias tensor has an integer, BOOL or complex dtype",
    ),
    rule(
        "empty-name",
        Severity::Low,
        "a tensor is named by the empty string",
    ),
    rule(
        "unknown-field",
        Severity::Low,
        "a tensor entry has a field other than dtype, shape and data_offsets",
    ),
    rule(
        "leading-whitespace",
        Severity::Low,
        "whitespace precedes the header's opening `{`",
    ),
    rule("metadata-null", Severity::Low, "__metadata__ is null"),
    rule(
        "huge-metadata-value",
        Severity::Low,
        "a __metadata__ value is unusually large",
    ),
    rule(
        "malformed-metadata-value",
        Severity::Low,
        "a known __metadata__ key holds a value of the wrong shape",
    ),
    rule(
        "unknown-metadata-key",
        Severity::Info,
        "a __metadata__ key follows none of the known conventions",
    ),
    rule("no-tensors", Severity::Info, "the file holds no tensor"),
    rule(
        "no-embedded-hash",
        Severity::Info,
        "the metadata holds no hash to check the file against",
    ),
];

/// Looks a rule up by identifier.
pub fn find_rule(id: &str) -> Option<&'static Rule> {
    RULES.iter().find(|r| r.id == id)
}

/// One problem (or fact) found in a file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    /// Rule identifier from [`RULES`].
    pub rule: &'static str,
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
    pub fn new(rule: &'static str, message: impl Into<String>) -> Finding {
        let severity = find_rule(rule).map_or(Severity::High, |r| r.severity);
        Finding {
            rule,
            severity,
            message: message.into(),
            tensor: None,
            key: None,
            offset: None,
            length: None,
            count: None,
        }
    }

    /// The finding for a reader error (its rule and message).
    pub fn from_error(err: &crate::Error) -> Finding {
        let mut f = Finding::new(err.rule(), err.to_string());
        f.tensor = err.tensor().map(str::to_owned);
        if let crate::Error::DuplicateMetadataKey { key }
        | crate::Error::MetadataValueNotString { key, .. } = err
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

/// Number of worker threads to use: `requested`, or the machine's
/// parallelism when `requested` is 0.
pub(crate) fn thread_count(requested: usize) -> usize {
    if requested > 0 {
        requested
    } else {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reader_rule_is_in_the_catalogue() {
        let reader_rules = [
            "file-too-short",
            "header-length-zero",
            "header-too-large",
            "header-past-end",
            "header-not-utf8",
            "header-start",
            "json-syntax",
            "json-too-deep",
            "duplicate-tensor",
            "duplicate-metadata-key",
            "duplicate-metadata",
            "metadata-not-map",
            "metadata-value-not-string",
            "entry-not-object",
            "duplicate-field",
            "missing-field",
            "wrong-field-type",
            "unknown-dtype",
            "bad-shape-entry",
            "size-overflow",
            "sub-byte-not-whole",
            "bad-offsets",
            "offsets-reversed",
            "byte-length-mismatch",
            "hole",
            "overlap",
            "data-too-short",
            "trailing-bytes",
        ];
        for id in reader_rules {
            let r = find_rule(id).unwrap_or_else(|| panic!("{id} missing"));
            assert_eq!(r.severity, Severity::High, "{id}");
        }
    }

    #[test]
    fn rule_ids_are_unique_and_kebab_case() {
        let mut ids: Vec<&str> = RULES.iter().map(|r| r.id).collect();
        ids.sort_unstable();
        let n = ids.len();
        ids.dedup();
        assert_eq!(ids.len(), n);
        for id in ids {
            assert!(id
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'));
        }
    }

    #[test]
    fn severities_order_and_names() {
        assert!(Severity::Info < Severity::Low);
        assert!(Severity::High < Severity::Critical);
        for s in Severity::ALL {
            assert_eq!(Severity::from_name(s.name()), Some(s));
        }
        assert_eq!(Severity::from_name("HIGH"), None);
    }

    #[test]
    fn hex_encodes() {
        assert_eq!(hex(&[0x00, 0xab, 0x7f]), "00ab7f");
    }
}

/// Builds files on disk for the tests of this module.
#[cfg(test)]
pub(crate) mod testfile {
    use std::path::PathBuf;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A file removed when dropped.
    pub struct TempFile(pub PathBuf);

    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    /// Writes `raw` bytes to a fresh temporary file.
    pub fn raw(raw: &[u8]) -> TempFile {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!(
            "fastst-inspect-{}-{n}.safetensors",
            std::process::id()
        ));
        std::fs::write(&path, raw)
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
        TempFile(path)
    }

    /// Writes a file made of the length prefix, `header` and `data`.
    pub fn build(header: &str, data: &[u8]) -> TempFile {
        let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
        bytes.extend_from_slice(header.as_bytes());
        bytes.extend_from_slice(data);
        raw(&bytes)
    }
}
