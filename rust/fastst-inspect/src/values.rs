//! Counting NaN and infinite values in floating-point tensors and bytes
//! other than 0/1 in BOOL tensors, straight from the little-endian bytes.

use fastst_core::Dtype;

/// What a scan of one tensor's bytes found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ValueCounts {
    /// NaN elements (for C64: NaN components).
    pub nan: u64,
    /// Infinite elements (for C64: infinite components).
    pub inf: u64,
    /// BOOL bytes other than 0 and 1.
    pub bad_bool: u64,
}

impl ValueCounts {
    /// True when nothing was found.
    pub fn is_clean(&self) -> bool {
        self.nan == 0 && self.inf == 0 && self.bad_bool == 0
    }

    fn add(&mut self, other: ValueCounts) {
        self.nan += other.nan;
        self.inf += other.inf;
        self.bad_bool += other.bad_bool;
    }
}

/// Counts NaN/Inf of an IEEE-like float given as raw bits: `abs_mask`
/// clears the sign, `inf` is the all-ones exponent with a zero mantissa.
macro_rules! ieee_counts {
    ($bytes:expr, $t:ty, $n:expr, $abs_mask:expr, $inf:expr) => {{
        let mut c = ValueCounts::default();
        for chunk in $bytes.chunks_exact($n) {
            let mut raw = [0u8; $n];
            raw.copy_from_slice(chunk);
            let a = <$t>::from_le_bytes(raw) & $abs_mask;
            if a == $inf {
                c.inf += 1;
            } else if a > $inf {
                c.nan += 1;
            }
        }
        c
    }};
}

/// Scans `bytes`, the data of one tensor of `dtype`. Integer dtypes and the
/// packed F4/F6 kinds (which have neither NaN nor Inf) give zero counts.
pub fn count_values(dtype: Dtype, bytes: &[u8]) -> ValueCounts {
    // Large tensors are scanned in blocks so the compiler keeps the inner
    // loops tight; the counts simply add up.
    let mut total = ValueCounts::default();
    for block in bytes.chunks(1 << 20) {
        total.add(count_block(dtype, block));
    }
    total
}

fn count_block(dtype: Dtype, bytes: &[u8]) -> ValueCounts {
    match dtype {
        Dtype::F16 => ieee_counts!(bytes, u16, 2, 0x7fff, 0x7c00),
        Dtype::Bf16 => ieee_counts!(bytes, u16, 2, 0x7fff, 0x7f80),
        Dtype::F32 | Dtype::C64 => ieee_counts!(bytes, u32, 4, 0x7fff_ffff, 0x7f80_0000),
        Dtype::F64 => ieee_counts!(bytes, u64, 8, 0x7fff_ffff_ffff_ffff, 0x7ff0_0000_0000_0000),
        // E5M2 follows IEEE: exponent 11111 is Inf (mantissa 0) or NaN.
        Dtype::F8E5M2 => ieee_counts!(bytes, u8, 1, 0x7f, 0x7c),
        // E4M3 "fn": no Inf; S.1111.111 is NaN.
        Dtype::F8E4M3 => ValueCounts {
            nan: bytes.iter().filter(|&&b| b & 0x7f == 0x7f).count() as u64,
            ..ValueCounts::default()
        },
        // The "fnuz" kinds: no Inf, no negative zero; 0x80 is the only NaN.
        Dtype::F8E4M3Fnuz | Dtype::F8E5M2Fnuz => ValueCounts {
            nan: bytes.iter().filter(|&&b| b == 0x80).count() as u64,
            ..ValueCounts::default()
        },
        // E8M0 (scales): 0xff is NaN, no Inf.
        Dtype::F8E8M0 => ValueCounts {
            nan: bytes.iter().filter(|&&b| b == 0xff).count() as u64,
            ..ValueCounts::default()
        },
        Dtype::Bool => ValueCounts {
            bad_bool: bytes.iter().filter(|&&b| b > 1).count() as u64,
            ..ValueCounts::default()
        },
        Dtype::U8
        | Dtype::I8
        | Dtype::U16
        | Dtype::I16
        | Dtype::U32
        | Dtype::I32
        | Dtype::U64
        | Dtype::I64
        | Dtype::F4
        | Dtype::F6E2M3
        | Dtype::F6E3M2 => ValueCounts::default(),
    }
}

/// True for the dtypes [`count_values`] has anything to say about.
pub(crate) fn scannable(dtype: Dtype) -> bool {
    // BOOL (bytes other than 0/1) and every float kind stored whole-byte.
    dtype == Dtype::Bool || (dtype.is_float() && !dtype.is_sub_byte())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f32s(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn floats() {
        let b = f32s(&[
            1.0,
            f32::NAN,
            -f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::MAX,
            0.0,
        ]);
        assert_eq!(
            count_values(Dtype::F32, &b),
            ValueCounts {
                nan: 2,
                inf: 2,
                bad_bool: 0
            }
        );
        let d: Vec<u8> = [f64::NAN, 1.0, f64::INFINITY]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        assert_eq!(
            count_values(Dtype::F64, &d),
            ValueCounts {
                nan: 1,
                inf: 1,
                bad_bool: 0
            }
        );
        // f16: 0x7c00 inf, 0xfe00 nan, 0x3c00 one, 0x7bff max.
        let h: Vec<u8> = [0x7c00u16, 0xfe00, 0x3c00, 0x7bff]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        assert_eq!(
            count_values(Dtype::F16, &h),
            ValueCounts {
                nan: 1,
                inf: 1,
                bad_bool: 0
            }
        );
        // bf16: 0xff80 -inf, 0x7fc0 nan, 0x3f80 one.
        let bf: Vec<u8> = [0xff80u16, 0x7fc0, 0x3f80]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        assert_eq!(
            count_values(Dtype::Bf16, &bf),
            ValueCounts {
                nan: 1,
                inf: 1,
                bad_bool: 0
            }
        );
    }

    #[test]
    fn fp8_kinds() {
        assert_eq!(
            count_values(Dtype::F8E5M2, &[0x7c, 0xfc, 0x7d, 0x3c]),
            ValueCounts {
                nan: 1,
                inf: 2,
                bad_bool: 0
            }
        );
        assert_eq!(
            count_values(Dtype::F8E4M3, &[0x7f, 0xff, 0x7e, 0x78, 0x00]).nan,
            2
        );
        assert_eq!(count_values(Dtype::F8E4M3Fnuz, &[0x80, 0x00, 0x7f]).nan, 1);
        assert_eq!(count_values(Dtype::F8E8M0, &[0xff, 0xfe, 0x00]).nan, 1);
    }

    #[test]
    fn bools_and_integers() {
        assert_eq!(count_values(Dtype::Bool, &[0, 1, 2, 255]).bad_bool, 2);
        assert!(count_values(Dtype::I32, &[0xff; 8]).is_clean());
        assert!(ValueCounts::default().is_clean());
        for counts in [
            ValueCounts {
                nan: 1,
                ..ValueCounts::default()
            },
            ValueCounts {
                inf: 1,
                ..ValueCounts::default()
            },
            ValueCounts {
                bad_bool: 1,
                ..ValueCounts::default()
            },
        ] {
            assert!(!counts.is_clean(), "{counts:?}");
        }
        assert!(!scannable(Dtype::U8));
        assert!(scannable(Dtype::Bool));
    }
}
