//! A parsed and validated header: the table of tensors and the optional
//! `__metadata__` map, and the framing rule of the 8-byte length prefix.
//!
//! [`Header::parse`] reads the JSON strictly (`json.rs`: serde visitors, one
//! error per rule, duplicate keys caught at every level, nothing allocated
//! because a header claims a size), then applies the table rules
//! (`src/validate/`: sizes, duplicates, layout), stopping at the first
//! broken rule.

mod json;

use crate::error::{Error, Result};
pub use crate::table::TensorInfo;

/// Default upper bound on the header length prefix (100 MB).
pub const DEFAULT_HEADER_CAP: u64 = 100_000_000;

/// Things a valid header may contain that `fastst verify` reports as
/// warnings; the reader accepts them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ParseNotes {
    /// Bytes of JSON whitespace before the opening `{`.
    pub leading_whitespace: usize,
    /// `(tensor, field)` pairs for fields other than dtype/shape/data_offsets.
    pub unknown_fields: Vec<(String, String)>,
    /// `__metadata__` was present but `null`.
    pub metadata_null: bool,
}

/// A parsed and validated header.
#[derive(Clone, Debug)]
pub struct Header {
    tensors: Vec<TensorInfo>,
    by_name: Vec<u32>,
    metadata: Option<Vec<(String, String)>>,
    notes: ParseNotes,
    header_len: u64,
    buffer_len: u64,
}

impl Header {
    /// Parses and validates `json` (the `N` header bytes after the length
    /// prefix) for a byte buffer of `buffer_len` bytes.
    pub fn parse(json: &[u8], buffer_len: u64) -> Result<Header> {
        let (mut tensors, metadata, notes) = json::parse(json)?;
        let header_len = json.len() as u64;
        let by_name = crate::validate::strict_table(&mut tensors, buffer_len)?;
        Ok(Header {
            tensors,
            by_name,
            metadata,
            notes,
            header_len,
            buffer_len,
        })
    }

    /// Tensors in file order (by data offsets).
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// Tensors in name order (byte-wise on UTF-8, as Rust and Python sort strings).
    pub fn tensors_by_name(&self) -> impl ExactSizeIterator<Item = &TensorInfo> + '_ {
        self.by_name.iter().map(move |&i| &self.tensors[i as usize])
    }

    /// Looks a tensor up by name.
    pub fn get(&self, name: &str) -> Option<&TensorInfo> {
        self.by_name
            .binary_search_by(|&i| self.tensors[i as usize].name.as_str().cmp(name))
            .ok()
            .map(|pos| &self.tensors[self.by_name[pos] as usize])
    }

    /// Looks a tensor up by name, failing with [`Error::TensorNotFound`].
    pub fn require(&self, name: &str) -> Result<&TensorInfo> {
        self.get(name).ok_or_else(|| Error::TensorNotFound {
            name: name.to_owned(),
        })
    }

    /// The `__metadata__` map in header order, or `None` when absent.
    pub fn metadata(&self) -> Option<&[(String, String)]> {
        self.metadata.as_deref()
    }

    /// Warnings collected while parsing.
    pub fn notes(&self) -> &ParseNotes {
        &self.notes
    }

    /// Length of the JSON header in bytes (the `N` of the prefix).
    pub fn header_len(&self) -> u64 {
        self.header_len
    }

    /// Absolute file offset of the byte buffer (`8 + N`).
    pub fn data_start(&self) -> u64 {
        8 + self.header_len
    }

    /// Length of the byte buffer.
    pub fn buffer_len(&self) -> u64 {
        self.buffer_len
    }

    /// Number of tensors.
    pub fn len(&self) -> usize {
        self.tensors.len()
    }

    /// True when the file holds no tensor.
    pub fn is_empty(&self) -> bool {
        self.tensors.is_empty()
    }
}

/// Reads the 8-byte prefix of a file of `file_len` bytes and checks it
/// against the file's length and the cap; returns `N`.
pub fn check_prefix(prefix: &[u8], file_len: u64, cap: u64) -> Result<u64> {
    let Some(n) = prefix_value(prefix) else {
        return Err(Error::FileTooShort { len: file_len });
    };
    if n == 0 {
        return Err(Error::HeaderLengthZero);
    }
    if n > cap {
        return Err(Error::HeaderTooLarge { len: n, cap });
    }
    let available = file_len.saturating_sub(8);
    if n > available {
        return Err(Error::HeaderPastEnd { len: n, available });
    }
    Ok(n)
}

/// The header length `N` the first 8 bytes of `bytes` announce (little
/// endian), unchecked; `None` when there are fewer than 8 bytes.
pub fn prefix_value(bytes: &[u8]) -> Option<u64> {
    let raw: [u8; 8] = bytes.get(..8)?.try_into().ok()?;
    Some(u64::from_le_bytes(raw))
}

/// Parses a whole file held in memory (length prefix, header, byte buffer),
/// as `deserialize` needs; the header's offsets are relative to
/// [`Header::data_start`].
pub fn parse_file_bytes(bytes: &[u8], cap: u64) -> Result<Header> {
    let n = check_prefix(bytes, bytes.len() as u64, cap)?;
    // `check_prefix` guarantees 8 + n <= bytes.len().
    let start = usize::try_from(n)
        .ok()
        .and_then(|n| n.checked_add(8))
        .filter(|&s| s <= bytes.len())
        .ok_or(Error::HeaderPastEnd {
            len: n,
            available: bytes.len().saturating_sub(8) as u64,
        })?;
    let json = bytes.get(8..start).unwrap_or_default();
    Header::parse(json, (bytes.len() - start) as u64)
}
