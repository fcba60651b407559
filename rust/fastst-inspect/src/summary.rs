//! A header at a glance: counts, parameters and bytes by dtype.

use fastst_core::{Dtype, Header};

/// Totals for one dtype.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DtypeTotals {
    /// The dtype.
    pub dtype: Dtype,
    /// Number of tensors of this dtype.
    pub tensors: u64,
    /// Number of elements across them.
    pub parameters: u128,
    /// Number of data bytes across them.
    pub bytes: u64,
}

/// What `fastst inspect` prints about a file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Summary {
    /// Number of tensors.
    pub tensors: u64,
    /// Elements across all tensors (a sum of u64 counts, so kept as u128).
    pub parameters: u128,
    /// Per-dtype totals, largest byte count first.
    pub by_dtype: Vec<DtypeTotals>,
    /// Length of the JSON header.
    pub header_len: u64,
    /// File offset of the first data byte.
    pub data_start: u64,
    /// Length of the byte buffer.
    pub data_len: u64,
    /// Metadata keys in header order.
    pub metadata_keys: Vec<String>,
}

/// Summarises a validated header.
pub fn summarize(header: &Header) -> Summary {
    let mut by_dtype: Vec<DtypeTotals> = Vec::new();
    let mut parameters = 0u128;
    for t in header.tensors() {
        let n = u128::from(t.nelements());
        parameters += n;
        match by_dtype.iter_mut().find(|d| d.dtype == t.dtype) {
            Some(d) => {
                d.tensors += 1;
                d.parameters += n;
                d.bytes += t.byte_len();
            }
            None => by_dtype.push(DtypeTotals {
                dtype: t.dtype,
                tensors: 1,
                parameters: n,
                bytes: t.byte_len(),
            }),
        }
    }
    by_dtype.sort_by(|a, b| {
        b.bytes
            .cmp(&a.bytes)
            .then(a.dtype.name().cmp(b.dtype.name()))
    });
    Summary {
        tensors: header.len() as u64,
        parameters,
        by_dtype,
        header_len: header.header_len(),
        data_start: header.data_start(),
        data_len: header.buffer_len(),
        metadata_keys: header
            .metadata()
            .map(|m| m.iter().map(|(k, _)| k.clone()).collect())
            .unwrap_or_default(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn totals() {
        let h = Header::parse(
            br#"{"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},"b":{"dtype":"BF16","shape":[4],"data_offsets":[24,32]},"c":{"dtype":"F32","shape":[],"data_offsets":[32,36]}}"#,
            36,
        )
        .unwrap();
        let s = summarize(&h);
        assert_eq!(s.tensors, 3);
        assert_eq!(s.parameters, 11);
        assert_eq!(
            s.by_dtype[0],
            DtypeTotals {
                dtype: Dtype::F32,
                tensors: 2,
                parameters: 7,
                bytes: 28
            }
        );
        assert_eq!(s.by_dtype[1].dtype, Dtype::Bf16);
        assert_eq!(s.metadata_keys, ["format"]);
        assert_eq!(s.data_start, 8 + s.header_len);
        assert_eq!(s.data_len, 36);
    }
}
