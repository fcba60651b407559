//! The tensor table's entry type, shared by the parser that builds it
//! ([`crate::header`]) and the rules that check it ([`crate::validate`]):
//! header -> validate -> table, so that neither needs the other's types.

use crate::dtype::Dtype;

/// One tensor entry of the header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    /// The tensor's name (any UTF-8 string except `__metadata__`).
    pub name: String,
    /// Element type.
    pub dtype: Dtype,
    /// Shape, outermost dimension first; empty for a 0-rank scalar.
    pub shape: Vec<u64>,
    /// First byte, relative to the start of the byte buffer.
    pub begin: u64,
    /// One past the last byte, relative to the start of the byte buffer.
    pub end: u64,
}

impl TensorInfo {
    /// Number of elements (1 for a scalar). Validated headers never overflow.
    pub fn nelements(&self) -> u64 {
        self.shape
            .iter()
            .copied()
            .try_fold(1u64, u64::checked_mul)
            .unwrap_or(u64::MAX)
    }

    /// Length in bytes of the tensor's data.
    pub fn byte_len(&self) -> u64 {
        self.end - self.begin
    }
}
