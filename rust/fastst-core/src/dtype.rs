//! The element types a `.safetensors` file can declare.

use std::fmt;

/// One element type of the format, as named in a header's `"dtype"` field.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dtype {
    /// Booleans, one byte each (0 or 1).
    Bool,
    /// Unsigned 8-bit integers.
    U8,
    /// Signed 8-bit integers.
    I8,
    /// Unsigned 16-bit integers.
    U16,
    /// Signed 16-bit integers.
    I16,
    /// IEEE half precision floats.
    F16,
    /// bfloat16 floats.
    Bf16,
    /// Unsigned 32-bit integers.
    U32,
    /// Signed 32-bit integers.
    I32,
    /// IEEE single precision floats.
    F32,
    /// Complex numbers of two F32.
    C64,
    /// Unsigned 64-bit integers.
    U64,
    /// Signed 64-bit integers.
    I64,
    /// IEEE double precision floats.
    F64,
    /// 8-bit floats, 4 exponent and 3 mantissa bits (no infinities).
    F8E4M3,
    /// 8-bit floats, 5 exponent and 2 mantissa bits.
    F8E5M2,
    /// 8-bit E4M3 floats without negative zero or infinities.
    F8E4M3Fnuz,
    /// 8-bit E5M2 floats without negative zero or infinities.
    F8E5M2Fnuz,
    /// 8-bit exponent-only scales.
    F8E8M0,
    /// 4-bit E2M1 floats, two per byte.
    F4,
    /// 6-bit E2M3 floats, packed.
    F6E2M3,
    /// 6-bit E3M2 floats, packed.
    F6E3M2,
}

impl Dtype {
    /// Every dtype, in a stable order.
    pub const ALL: [Dtype; 22] = [
        Dtype::Bool,
        Dtype::U8,
        Dtype::I8,
        Dtype::U16,
        Dtype::I16,
        Dtype::F16,
        Dtype::Bf16,
        Dtype::U32,
        Dtype::I32,
        Dtype::F32,
        Dtype::C64,
        Dtype::U64,
        Dtype::I64,
        Dtype::F64,
        Dtype::F8E4M3,
        Dtype::F8E5M2,
        Dtype::F8E4M3Fnuz,
        Dtype::F8E5M2Fnuz,
        Dtype::F8E8M0,
        Dtype::F4,
        Dtype::F6E2M3,
        Dtype::F6E3M2,
    ];

    /// The name used in headers (`"F32"`, `"BF16"`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            Dtype::Bool => "BOOL",
            Dtype::U8 => "U8",
            Dtype::I8 => "I8",
            Dtype::U16 => "U16",
            Dtype::I16 => "I16",
            Dtype::F16 => "F16",
            Dtype::Bf16 => "BF16",
            Dtype::U32 => "U32",
            Dtype::I32 => "I32",
            Dtype::F32 => "F32",
            Dtype::C64 => "C64",
            Dtype::U64 => "U64",
            Dtype::I64 => "I64",
            Dtype::F64 => "F64",
            Dtype::F8E4M3 => "F8_E4M3",
            Dtype::F8E5M2 => "F8_E5M2",
            Dtype::F8E4M3Fnuz => "F8_E4M3FNUZ",
            Dtype::F8E5M2Fnuz => "F8_E5M2FNUZ",
            Dtype::F8E8M0 => "F8_E8M0",
            Dtype::F4 => "F4",
            Dtype::F6E2M3 => "F6_E2M3",
            Dtype::F6E3M2 => "F6_E3M2",
        }
    }

    /// Parses a header name. Names are case-sensitive: `"f32"` is not a dtype.
    pub fn from_name(name: &str) -> Option<Dtype> {
        Dtype::ALL.iter().copied().find(|d| d.name() == name)
    }

    /// Size of one element in bits (4 for `F4`, 6 for the `F6` kinds).
    pub const fn bits(self) -> u64 {
        match self {
            Dtype::F4 => 4,
            Dtype::F6E2M3 | Dtype::F6E3M2 => 6,
            Dtype::Bool
            | Dtype::U8
            | Dtype::I8
            | Dtype::F8E4M3
            | Dtype::F8E5M2
            | Dtype::F8E4M3Fnuz
            | Dtype::F8E5M2Fnuz
            | Dtype::F8E8M0 => 8,
            Dtype::U16 | Dtype::I16 | Dtype::F16 | Dtype::Bf16 => 16,
            Dtype::U32 | Dtype::I32 | Dtype::F32 => 32,
            Dtype::C64 | Dtype::U64 | Dtype::I64 | Dtype::F64 => 64,
        }
    }

    /// Natural alignment of one element in bytes (1 for sub-byte kinds).
    pub const fn alignment(self) -> u64 {
        let b = self.bits() / 8;
        if b == 0 {
            1
        } else if self as u8 == Dtype::C64 as u8 {
            4
        } else {
            b
        }
    }

    /// True for the kinds that pack several elements into a byte.
    pub const fn is_sub_byte(self) -> bool {
        self.bits() % 8 != 0
    }

    /// True for floating-point kinds (incl. complex), used by forensics.
    pub const fn is_float(self) -> bool {
        !matches!(
            self,
            Dtype::Bool
                | Dtype::U8
                | Dtype::I8
                | Dtype::U16
                | Dtype::I16
                | Dtype::U32
                | Dtype::I32
                | Dtype::U64
                | Dtype::I64
        )
    }

    /// Number of bytes a tensor of `shape` occupies: the format's one
    /// byte-size rule (the reader, the writer and `verify` all use it).
    /// Fails when the element count or the bit count overflows 64 bits, or
    /// when sub-byte elements do not fill whole bytes.
    pub fn byte_len(self, shape: &[u64]) -> Result<u64, SizeError> {
        let elements = shape
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d))
            .ok_or(SizeError::Overflow)?;
        let bits = elements
            .checked_mul(self.bits())
            .ok_or(SizeError::Overflow)?;
        if bits % 8 != 0 {
            return Err(SizeError::NotWholeBytes { elements });
        }
        Ok(bits / 8)
    }

    /// Rank used to order tensors when writing: the reference writer sorts by
    /// this rank descending, then by name (its dtype enum's declaration
    /// order), so that wide types come first and stay aligned. Checked
    /// against the reference package for every dtype it can write; the F6
    /// kinds, which it cannot write, sit between F4 and U8 as in its enum.
    pub const fn write_rank(self) -> u8 {
        match self {
            Dtype::Bool => 0,
            Dtype::F4 => 1,
            Dtype::F6E2M3 => 2,
            Dtype::F6E3M2 => 3,
            Dtype::U8 => 4,
            Dtype::I8 => 5,
            Dtype::F8E5M2 => 6,
            Dtype::F8E4M3 => 7,
            Dtype::F8E8M0 => 8,
            Dtype::F8E4M3Fnuz => 9,
            Dtype::F8E5M2Fnuz => 10,
            Dtype::I16 => 11,
            Dtype::U16 => 12,
            Dtype::F16 => 13,
            Dtype::Bf16 => 14,
            Dtype::I32 => 15,
            Dtype::U32 => 16,
            Dtype::F32 => 17,
            Dtype::C64 => 18,
            Dtype::F64 => 19,
            Dtype::I64 => 20,
            Dtype::U64 => 21,
        }
    }
}

/// Why a shape has no byte size ([`Dtype::byte_len`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SizeError {
    /// The element count or the bit count overflows 64 bits.
    Overflow,
    /// Packed sub-byte elements do not fill whole bytes.
    NotWholeBytes {
        /// Number of elements of the shape.
        elements: u64,
    },
}

impl fmt::Display for Dtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The float kinds converted to and from one another on load.
pub(crate) const WIDE: [Dtype; 4] = [Dtype::F64, Dtype::F32, Dtype::F16, Dtype::Bf16];

/// The 8-bit float kinds, converted on load to each of [`WIDE`].
pub(crate) const EIGHT: [Dtype; 5] = [
    Dtype::F8E4M3,
    Dtype::F8E5M2,
    Dtype::F8E4M3Fnuz,
    Dtype::F8E5M2Fnuz,
    Dtype::F8E8M0,
];

/// The conversions on load in words, for the refusal of another one.
pub(crate) fn conversions_text() -> String {
    let names = |set: &[Dtype]| set.iter().map(|d| d.name()).collect::<Vec<_>>().join(", ");
    format!(
        "conversions exist between {} (each way), and from {} to each of those",
        names(&WIDE),
        names(&EIGHT)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_are_case_sensitive() {
        for d in Dtype::ALL {
            assert_eq!(Dtype::from_name(d.name()), Some(d));
            assert_eq!(Dtype::from_name(&d.name().to_lowercase()), None);
        }
        assert_eq!(Dtype::from_name("F8_E4M3FN"), None);
    }

    #[test]
    fn byte_lengths() {
        assert_eq!(Dtype::F32.byte_len(&[3]), Ok(12));
        assert_eq!(Dtype::F32.byte_len(&[]), Ok(4));
        assert_eq!(Dtype::F32.byte_len(&[2, 0, 7]), Ok(0));
        let not_whole = |elements| Err(SizeError::NotWholeBytes { elements });
        assert_eq!(Dtype::F4.byte_len(&[3]), not_whole(3));
        assert_eq!(Dtype::F4.byte_len(&[4]), Ok(2));
        assert_eq!(Dtype::F6E2M3.byte_len(&[2, 2]), Ok(3));
        assert_eq!(Dtype::F6E2M3.byte_len(&[2]), not_whole(2));
        assert_eq!(
            Dtype::F64.byte_len(&[u64::MAX / 4]),
            Err(SizeError::Overflow)
        );
        assert_eq!(
            Dtype::U8.byte_len(&[1 << 32, 1 << 32]),
            Err(SizeError::Overflow)
        );
        assert_eq!(Dtype::C64.alignment(), 4);
    }

    #[test]
    fn write_ranks_are_distinct() {
        let mut ranks: Vec<u8> = Dtype::ALL.iter().map(|d| d.write_rank()).collect();
        ranks.sort_unstable();
        ranks.dedup();
        assert_eq!(ranks.len(), Dtype::ALL.len());
    }

    #[test]
    fn alignments_bits_and_kinds_of_every_dtype() {
        // (dtype, bits, alignment in bytes, sub-byte, float)
        let table = [
            (Dtype::Bool, 8, 1, false, false),
            (Dtype::U8, 8, 1, false, false),
            (Dtype::I8, 8, 1, false, false),
            (Dtype::U16, 16, 2, false, false),
            (Dtype::I16, 16, 2, false, false),
            (Dtype::F16, 16, 2, false, true),
            (Dtype::Bf16, 16, 2, false, true),
            (Dtype::U32, 32, 4, false, false),
            (Dtype::I32, 32, 4, false, false),
            (Dtype::F32, 32, 4, false, true),
            (Dtype::C64, 64, 4, false, true),
            (Dtype::U64, 64, 8, false, false),
            (Dtype::I64, 64, 8, false, false),
            (Dtype::F64, 64, 8, false, true),
            (Dtype::F8E4M3, 8, 1, false, true),
            (Dtype::F8E5M2, 8, 1, false, true),
            (Dtype::F8E4M3Fnuz, 8, 1, false, true),
            (Dtype::F8E5M2Fnuz, 8, 1, false, true),
            (Dtype::F8E8M0, 8, 1, false, true),
            (Dtype::F4, 4, 1, true, true),
            (Dtype::F6E2M3, 6, 1, true, true),
            (Dtype::F6E3M2, 6, 1, true, true),
        ];
        assert_eq!(table.len(), Dtype::ALL.len());
        for (d, bits, align, sub_byte, float) in table {
            assert_eq!(d.bits(), bits, "{d}");
            assert_eq!(d.alignment(), align, "{d}");
            assert_eq!(d.is_sub_byte(), sub_byte, "{d}");
            assert_eq!(d.is_float(), float, "{d}");
            assert_eq!(d.to_string(), d.name());
        }
    }
}
