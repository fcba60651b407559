//! Forensics and hashes: what the `fastst` command's `verify`, `hash` and
//! `inspect` subcommands compute.
//!
//! Verification is tolerant where the reader is strict: it reads the length
//! prefix and the header bytes itself, keeps the strict verdict of
//! [`Header::parse`](fastst_core::Header::parse) as one finding, and, when the
//! reader rejects a file, parses the header a second time leniently
//! (duplicate keys kept, every entry checked on its own) so that every
//! structural problem is reported rather than only the first. Nothing in a
//! file is ever executed or unpickled: foreign content is recognised by its
//! magic number alone.
//!
//! Every finding carries a rule of the catalogue ([`RuleId`], see
//! [`fastst_core::rules`]) and a [`Severity`].

#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod canonical;
mod diff;
mod hash;
mod lenient;
mod metadata;
mod names;
mod source;
mod summary;
#[cfg(test)]
mod testfs;
mod values;
mod verify;

pub use fastst_core::rules::{RuleId, Severity};

pub use canonical::canonical_header;
pub use diff::{diff_values, ValueDiff};
pub use hash::{hash_path, HashOptions, HashReport, AUTOV1_LEN, AUTOV1_OFFSET};
pub use lenient::read_metadata;
pub use metadata::{is_known_metadata_key, HUGE_METADATA_IMAGE, HUGE_METADATA_VALUE};
pub use summary::{summarize, DtypeTotals, Summary};
pub use values::{count_values, ValueCounts};
pub use verify::{verify_path, VerifyOptions, VerifyReport};

pub use fastst_core::progress::Progress;

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
