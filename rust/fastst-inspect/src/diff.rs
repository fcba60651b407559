//! Comparing the values of two tensors of the same shape, straight from
//! their little-endian bytes, in one pass over both on several threads: the
//! kernel of `fastst diff`.
//!
//! Of the same dtype, chunks whose bytes are equal are skipped with a plain
//! comparison (decoding only the first side when the change profile is
//! asked for, for its norm); chunks that differ are decoded element by
//! element. Of different dtypes, both sides are decoded to `f64`.
//!
//! The change profile (relative L2 `||a - b|| / ||a||` and cosine
//! similarity) sums squares and products in `f64` over the element pairs
//! where both values are finite.

use fastst_core::internal::{fan_out, thread_count};
use fastst_core::{bf16_to_f32, f16_to_f32, Dtype};

use crate::stats::{decode, Number};

/// What differs between two tensors' values.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ValueDiff {
    /// Whether the bytes are identical.
    pub identical: bool,
    /// Elements whose values differ (NaN against NaN and -0 against +0
    /// count as equal); for dtypes without a numeric reading (BOOL, C64 and
    /// the 8/6/4-bit floats) the differing elements compared bit for bit.
    pub differing: u64,
    /// Largest `|a - b|` over the elements (infinite when one side is
    /// infinite or NaN and the other is not); None without a numeric reading.
    pub max_abs: Option<f64>,
    /// Largest `|a - b| / max(|a|, |b|)` over the differing elements.
    pub max_rel: Option<f64>,
    /// `||a - b|| / ||a||` (with the profile; None when `||a||` is 0 or a
    /// sum overflows).
    pub rel_l2: Option<f64>,
    /// `a . b / (||a|| ||b||)` (with the profile; None when a norm is 0).
    pub cosine: Option<f64>,
}

/// Elements per chunk handed to a worker (a multiple of 4, so that packed
/// kinds split on whole bytes).
const CHUNK: usize = 1 << 18;

/// How each dtype reads as a number (None: compared bit for bit).
fn reader(dtype: Dtype) -> Option<fn(&[u8]) -> f64> {
    fn le<const N: usize>(b: &[u8]) -> [u8; N] {
        let mut out = [0u8; N];
        out.copy_from_slice(&b[..N]);
        out
    }
    Some(match dtype {
        Dtype::U8 => |b| f64::from(b[0]),
        Dtype::I8 => |b| f64::from(b[0] as i8),
        Dtype::U16 => |b| f64::from(u16::from_le_bytes(le(b))),
        Dtype::I16 => |b| f64::from(i16::from_le_bytes(le(b))),
        Dtype::U32 => |b| f64::from(u32::from_le_bytes(le(b))),
        Dtype::I32 => |b| f64::from(i32::from_le_bytes(le(b))),
        Dtype::U64 => |b| u64::from_le_bytes(le(b)) as f64,
        Dtype::I64 => |b| i64::from_le_bytes(le(b)) as f64,
        Dtype::F16 => |b| f64::from(f16_to_f32(u16::from_le_bytes(le(b)))),
        Dtype::Bf16 => |b| f64::from(bf16_to_f32(u16::from_le_bytes(le(b)))),
        Dtype::F32 => |b| f64::from(f32::from_le_bytes(le(b))),
        Dtype::F64 => |b| f64::from_le_bytes(le(b)),
        _ => return None,
    })
}

/// Bytes per element for dtypes compared element-wise (packed sub-byte
/// dtypes are compared per byte).
fn element_len(dtype: Dtype) -> usize {
    match dtype {
        Dtype::Bool | Dtype::U8 | Dtype::I8 => 1,
        Dtype::U16 | Dtype::I16 | Dtype::F16 | Dtype::Bf16 => 2,
        Dtype::U32 | Dtype::I32 | Dtype::F32 => 4,
        Dtype::C64 | Dtype::U64 | Dtype::I64 | Dtype::F64 => 8,
        Dtype::F8E4M3 | Dtype::F8E5M2 | Dtype::F8E4M3Fnuz | Dtype::F8E5M2Fnuz | Dtype::F8E8M0 => 1,
        Dtype::F4 | Dtype::F6E2M3 | Dtype::F6E3M2 => 1,
    }
}

/// Any dtype's elements as `f64` (C64: two per element, real then
/// imaginary; BOOL: 0 or 1; the small float kinds through a table).
struct Decoder {
    dtype: Dtype,
    /// Values of the codes of the kinds read through a table.
    table: Vec<f64>,
}

impl Decoder {
    fn new(dtype: Dtype) -> Decoder {
        let codes: u16 = match dtype {
            Dtype::F4 => 16,
            Dtype::F6E2M3 | Dtype::F6E3M2 => 64,
            Dtype::Bool
            | Dtype::F8E4M3
            | Dtype::F8E5M2
            | Dtype::F8E4M3Fnuz
            | Dtype::F8E5M2Fnuz
            | Dtype::F8E8M0 => 256,
            _ => 0,
        };
        let table = (0..codes)
            .map(|c| match decode(dtype, c) {
                Number::Int(v) => v as f64,
                Number::Float(v) => v,
            })
            .collect();
        Decoder { dtype, table }
    }

    /// Replaces `out` with the values of `bytes` (whole elements).
    fn decode(&self, bytes: &[u8], out: &mut Vec<f64>) {
        out.clear();
        let t = &self.table;
        match self.dtype {
            Dtype::F4 => {
                for &b in bytes {
                    out.push(t[usize::from(b & 15)]);
                    out.push(t[usize::from(b >> 4)]);
                }
            }
            Dtype::F6E2M3 | Dtype::F6E3M2 => {
                for c in bytes.chunks_exact(3) {
                    let w = u32::from_le_bytes([c[0], c[1], c[2], 0]);
                    out.extend((0..4).map(|i| t[((w >> (6 * i)) & 63) as usize]));
                }
            }
            _ if !t.is_empty() => out.extend(bytes.iter().map(|&b| t[usize::from(b)])),
            // One loop per common kind (no call per element), so each inlines.
            Dtype::F32 | Dtype::C64 => out.extend(
                bytes
                    .chunks_exact(4)
                    .map(|c| f64::from(f32::from_le_bytes([c[0], c[1], c[2], c[3]]))),
            ),
            Dtype::Bf16 => out.extend(
                bytes
                    .chunks_exact(2)
                    .map(|c| f64::from(bf16_to_f32(u16::from_le_bytes([c[0], c[1]])))),
            ),
            Dtype::F16 => out.extend(
                bytes
                    .chunks_exact(2)
                    .map(|c| f64::from(f16_to_f32(u16::from_le_bytes([c[0], c[1]])))),
            ),
            dtype => {
                if let Some(read) = reader(dtype) {
                    let size = element_len(dtype);
                    out.extend(bytes.chunks_exact(size).map(read));
                }
            }
        }
    }
}

/// Sums over the element pairs where both values are finite.
#[derive(Clone, Copy, Default)]
struct Sums {
    diff2: f64,
    a2: f64,
    b2: f64,
    ab: f64,
}

impl Sums {
    fn merge(&mut self, o: Sums) {
        self.diff2 += o.diff2;
        self.a2 += o.a2;
        self.b2 += o.b2;
        self.ab += o.ab;
    }

    fn add(&mut self, xs: &[f64], ys: &[f64]) {
        for (&x, &y) in xs.iter().zip(ys) {
            if x.is_finite() && y.is_finite() {
                let d = x - y;
                self.diff2 += d * d;
                self.a2 += x * x;
                self.b2 += y * y;
                self.ab += x * y;
            }
        }
    }

    /// Both sides equal: only `a`'s squares.
    fn add_same(&mut self, xs: &[f64]) {
        let sq: f64 = xs.iter().filter(|x| x.is_finite()).map(|x| x * x).sum();
        self.a2 += sq;
        self.b2 += sq;
        self.ab += sq;
    }

    fn rel_l2(&self) -> Option<f64> {
        Some(self.diff2.sqrt() / self.a2.sqrt()).filter(|r| self.a2 > 0.0 && r.is_finite())
    }

    fn cosine(&self) -> Option<f64> {
        let norms = self.a2.sqrt() * self.b2.sqrt();
        Some((self.ab / norms).clamp(-1.0, 1.0)).filter(|c| norms > 0.0 && c.is_finite())
    }
}

#[derive(Clone, Copy, Default)]
struct Partial {
    bytes_differ: bool,
    differing: u64,
    max_abs: f64,
    max_rel: f64,
    sums: Sums,
}

impl Partial {
    fn merge(&mut self, o: Partial) {
        self.bytes_differ |= o.bytes_differ;
        self.differing += o.differing;
        self.max_abs = self.max_abs.max(o.max_abs);
        self.max_rel = self.max_rel.max(o.max_rel);
        self.sums.merge(o.sums);
    }

    /// Counts one pair of values that may differ.
    fn values(&mut self, u: f64, v: f64) {
        if u == v || (u.is_nan() && v.is_nan()) {
            return;
        }
        self.differing += 1;
        let abs = if u.is_nan() || v.is_nan() {
            f64::INFINITY
        } else {
            (u - v).abs()
        };
        let scale = u.abs().max(v.abs());
        let rel = if abs.is_infinite() || !scale.is_finite() {
            f64::INFINITY
        } else {
            abs / scale
        };
        self.max_abs = self.max_abs.max(abs);
        self.max_rel = self.max_rel.max(rel);
    }
}

fn compare_chunk(a: &[u8], b: &[u8], size: usize, read: Option<fn(&[u8]) -> f64>) -> Partial {
    let mut p = Partial::default();
    if a == b {
        return p;
    }
    p.bytes_differ = true;
    for (x, y) in a.chunks_exact(size).zip(b.chunks_exact(size)) {
        match read {
            Some(read) => p.values(read(x), read(y)),
            None => p.differing += u64::from(x != y),
        }
    }
    p
}

/// One side of a comparison: a tensor's dtype and bytes.
#[derive(Clone, Copy)]
pub struct Side<'a> {
    /// Its dtype.
    pub dtype: Dtype,
    /// Its little-endian bytes.
    pub bytes: &'a [u8],
}

impl Side<'_> {
    /// Elements, when the bytes hold whole ones.
    fn elements(&self) -> Option<usize> {
        let bits = usize::try_from(self.dtype.bits()).ok()?;
        let total = self.bytes.len().checked_mul(8)?;
        (total % bits == 0).then_some(total / bits)
    }

    /// The bytes of elements `[i, j)` (`i` and `j` multiples of 4 or the end).
    fn range(&self, i: usize, j: usize) -> &[u8] {
        let bits = self.dtype.bits() as usize;
        &self.bytes[i * bits / 8..j * bits / 8]
    }
}

/// Compares `a` and `b`, two tensors of the same shape (their dtypes may
/// differ), on up to `threads` threads (0: one per core), with the change
/// profile when `profile` is true. Of different dtypes, the elements are
/// compared as `f64` values (never `identical`), magnitudes included for
/// every kind. Returns None when the element counts differ, or when only
/// one side is C64.
pub fn compare_values(a: Side, b: Side, profile: bool, threads: usize) -> Option<ValueDiff> {
    let n = a.elements()?;
    let same = a.dtype == b.dtype;
    if n != b.elements()? || (a.dtype == Dtype::C64) != (b.dtype == Dtype::C64) {
        return None;
    }
    let (da, db) = (Decoder::new(a.dtype), Decoder::new(b.dtype));
    let size = element_len(a.dtype);
    let read = reader(a.dtype);
    let work = |(p, xs, ys): &mut (Partial, Vec<f64>, Vec<f64>), i: usize| {
        let start = i.saturating_mul(CHUNK);
        let end = start.saturating_add(CHUNK).min(n);
        let (x, y) = (a.range(start, end), b.range(start, end));
        let mut part = if same {
            compare_chunk(x, y, size, read)
        } else {
            Partial::default()
        };
        if same && !part.bytes_differ {
            if profile {
                da.decode(x, xs);
                part.sums.add_same(xs);
            }
        } else if profile || !same {
            da.decode(x, xs);
            db.decode(y, ys);
            if !same {
                part.bytes_differ = true;
                for (&u, &v) in xs.iter().zip(ys.iter()) {
                    part.values(u, v);
                }
            }
            if profile {
                part.sums.add(xs, ys);
            }
        }
        p.merge(part);
        Ok(())
    };
    let start = || Ok((Partial::default(), Vec::new(), Vec::new()));
    let chunks = n.div_ceil(CHUNK);
    let total = match fan_out(chunks, thread_count(threads), "a diff", start, work) {
        Ok(parts) => parts
            .into_iter()
            .fold(Partial::default(), |mut t, (p, _, _)| {
                t.merge(p);
                t
            }),
        // A worker only compares slices; it cannot panic on data, but if
        // it did the result would be incomplete, so the bytes count as
        // different, without statistics.
        Err(_) => Partial {
            bytes_differ: true,
            differing: 1,
            ..Partial::default()
        },
    };
    let numeric = read.is_some() || !same;
    Some(ValueDiff {
        identical: !total.bytes_differ,
        differing: total.differing,
        max_abs: numeric.then_some(total.max_abs),
        max_rel: numeric.then_some(total.max_rel),
        rel_l2: if profile { total.sums.rel_l2() } else { None },
        cosine: if profile { total.sums.cosine() } else { None },
    })
}

/// Compares `a` and `b`, the bytes of two tensors of `dtype` with the same
/// shape, on up to `threads` threads (0: one per core), without the change
/// profile. Returns None when the lengths differ.
pub fn diff_values(dtype: Dtype, a: &[u8], b: &[u8], threads: usize) -> Option<ValueDiff> {
    if a.len() != b.len() {
        return None;
    }
    compare_values(
        Side { dtype, bytes: a },
        Side { dtype, bytes: b },
        false,
        threads,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f32s(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn identical_and_different_floats() {
        let a = f32s(&[1.0, 2.0, f32::NAN, -0.0]);
        let d = diff_values(Dtype::F32, &a, &a, 1).expect("a result");
        assert!(d.identical && d.differing == 0 && d.max_abs == Some(0.0));
        let b = f32s(&[1.0, 2.5, f32::NAN, 0.0]);
        let d = diff_values(Dtype::F32, &a, &b, 4).expect("a result");
        // -0 against +0 is equal in value but not in bytes.
        assert!(!d.identical);
        assert_eq!(d.differing, 1);
        assert_eq!(d.max_abs, Some(0.5));
        assert_eq!(d.max_rel, Some(0.2));
        let c = f32s(&[1.0, f32::INFINITY, 1.0, 0.0]);
        let d = diff_values(Dtype::F32, &a, &c, 2).expect("a result");
        assert_eq!(d.differing, 2);
        assert_eq!(d.max_abs, Some(f64::INFINITY));
    }

    #[test]
    fn halves_ints_and_bit_compared_dtypes() {
        let a: Vec<u8> = [0x3c00u16, 0x4000]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        let b: Vec<u8> = [0x3c00u16, 0x4200]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        let d = diff_values(Dtype::F16, &a, &b, 1).expect("a result");
        assert_eq!(
            (d.differing, d.max_abs, d.max_rel),
            (1, Some(1.0), Some(1.0 / 3.0))
        );
        let d = diff_values(Dtype::I8, &[1, 0xff], &[1, 1], 1).expect("a result");
        assert_eq!((d.differing, d.max_abs), (1, Some(2.0)));
        let d = diff_values(Dtype::F8E4M3, &[1, 2, 3], &[1, 9, 9], 1).expect("a result");
        assert_eq!((d.differing, d.max_abs), (2, None));
        assert!(diff_values(Dtype::F32, &[0; 4], &[0; 8], 1).is_none());
        // 64-bit kinds are compared as values too.
        let bytes = |v: &[u64]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        let d =
            diff_values(Dtype::U64, &bytes(&[7, 1 << 40]), &bytes(&[7, 3]), 1).expect("a result");
        assert_eq!(
            (d.differing, d.max_abs),
            (1, Some((1u64 << 40) as f64 - 3.0))
        );
        let floats = |v: &[f64]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        let d = diff_values(Dtype::F64, &floats(&[1.5, -2.0]), &floats(&[1.5, 2.0]), 1)
            .expect("a result");
        assert_eq!(
            (d.differing, d.max_abs, d.max_rel),
            (1, Some(4.0), Some(2.0))
        );
    }

    #[test]
    fn the_change_profile_and_other_dtypes() {
        let side = |dtype, bytes| Side { dtype, bytes };
        let a = f32s(&[3.0, 0.0, 4.0, f32::NAN]);
        let b = f32s(&[3.0, 1.0, 4.0, 2.0]);
        // ||a|| = 5, ||a - b|| = 1 (NaN pairs left out), a.b = 25, ||b|| = sqrt(26).
        let d =
            compare_values(side(Dtype::F32, &a), side(Dtype::F32, &b), true, 2).expect("a result");
        assert_eq!((d.rel_l2, d.differing), (Some(0.2), 2));
        assert_eq!(d.cosine, Some(25.0 / (5.0 * 26f64.sqrt())));
        // Without the profile, none; equal bytes still have a norm.
        let d =
            compare_values(side(Dtype::F32, &a), side(Dtype::F32, &b), false, 1).expect("a result");
        assert_eq!((d.rel_l2, d.cosine), (None, None));
        let d =
            compare_values(side(Dtype::F32, &b), side(Dtype::F32, &b), true, 1).expect("a result");
        assert_eq!(
            (d.identical, d.rel_l2, d.cosine),
            (true, Some(0.0), Some(1.0))
        );
        // BF16 against F32: compared as values, magnitudes included.
        let h: Vec<u8> = [0x4040u16, 0x3f80, 0x4080, 0x4000]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        let d =
            compare_values(side(Dtype::Bf16, &h), side(Dtype::F32, &b), true, 1).expect("a result");
        assert!(!d.identical);
        assert_eq!(
            (d.differing, d.max_abs, d.rel_l2),
            (0, Some(0.0), Some(0.0))
        );
        // The small floats have values too (E4M3 0x38 is 1.0, 0x40 is 2.0).
        let d = compare_values(
            side(Dtype::F8E4M3, &[0x38, 0x40]),
            side(Dtype::F8E4M3, &[0x38, 0x38]),
            true,
            1,
        )
        .expect("a result");
        assert_eq!((d.max_abs, d.rel_l2), (None, Some((1f64 / 5.0).sqrt())));
        // A zero tensor has no relative change, a different count no result.
        let zeros = f32s(&[0.0; 4]);
        let d = compare_values(side(Dtype::F32, &zeros), side(Dtype::F32, &b), true, 1)
            .expect("a result");
        assert_eq!((d.rel_l2, d.cosine), (None, None));
        assert!(compare_values(side(Dtype::C64, &a), side(Dtype::F32, &b), true, 1).is_none());
        assert!(compare_values(side(Dtype::F16, &a), side(Dtype::F32, &b), true, 1).is_none());
    }

    #[test]
    fn many_chunks_on_many_threads_agree_with_one() {
        let n = 3 * CHUNK / 4 + 17;
        let a: Vec<f32> = (0..n).map(|i| i as f32).collect();
        let mut b = a.clone();
        for i in (0..n).step_by(100_003) {
            b[i] += 0.5;
        }
        let (a, b) = (f32s(&a), f32s(&b));
        let one = diff_values(Dtype::F32, &a, &b, 1).expect("a result");
        let many = diff_values(Dtype::F32, &a, &b, 7).expect("a result");
        assert_eq!(one, many);
        assert_eq!(one.differing, n.div_ceil(100_003) as u64);
        assert_eq!(one.max_abs, Some(0.5));
        let d = diff_values(Dtype::F32, &[], &[], 3).expect("a result");
        assert!(d.identical && d.differing == 0);
    }
}
