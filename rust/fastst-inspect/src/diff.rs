//! Comparing the values of two tensors of the same dtype and shape, straight
//! from their little-endian bytes, on several threads: the kernel of
//! `fastst diff`.
//!
//! Chunks whose bytes are equal are skipped with a plain comparison; only
//! chunks that differ are decoded element by element.

use fastst_core::convert::{bf16_to_f32, f16_to_f32};
use fastst_core::dtype::Dtype;

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
}

/// Bytes per chunk handed to a worker.
const CHUNK: usize = 1 << 20;

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

#[derive(Clone, Copy, Default)]
struct Partial {
    bytes_differ: bool,
    differing: u64,
    max_abs: f64,
    max_rel: f64,
}

impl Partial {
    fn merge(&mut self, o: Partial) {
        self.bytes_differ |= o.bytes_differ;
        self.differing += o.differing;
        self.max_abs = self.max_abs.max(o.max_abs);
        self.max_rel = self.max_rel.max(o.max_rel);
    }
}

fn compare_chunk(a: &[u8], b: &[u8], size: usize, read: Option<fn(&[u8]) -> f64>) -> Partial {
    let mut p = Partial::default();
    if a == b {
        return p;
    }
    p.bytes_differ = true;
    for (x, y) in a.chunks_exact(size).zip(b.chunks_exact(size)) {
        let Some(read) = read else {
            p.differing += u64::from(x != y);
            continue;
        };
        let (u, v) = (read(x), read(y));
        if u == v || (u.is_nan() && v.is_nan()) {
            continue;
        }
        p.differing += 1;
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
        p.max_abs = p.max_abs.max(abs);
        p.max_rel = p.max_rel.max(rel);
    }
    p
}

/// Compares `a` and `b`, the bytes of two tensors of `dtype` with the same
/// shape, on up to `threads` threads (0: one per core). Returns None when
/// the lengths differ.
pub fn diff_values(dtype: Dtype, a: &[u8], b: &[u8], threads: usize) -> Option<ValueDiff> {
    if a.len() != b.len() {
        return None;
    }
    let size = element_len(dtype);
    let read = reader(dtype);
    // Chunks hold whole elements.
    let chunk = CHUNK - CHUNK % size;
    let chunks = a.len().div_ceil(chunk).max(1);
    let workers = if threads == 0 {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    } else {
        threads
    }
    .clamp(1, chunks);
    let next = std::sync::atomic::AtomicUsize::new(0);
    let work = || {
        let mut p = Partial::default();
        loop {
            let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let start = i.saturating_mul(chunk);
            if start >= a.len() {
                break;
            }
            let end = (start + chunk).min(a.len());
            p.merge(compare_chunk(&a[start..end], &b[start..end], size, read));
        }
        p
    };
    let total = if workers == 1 {
        work()
    } else {
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..workers).map(|_| s.spawn(work)).collect();
            let mut total = Partial::default();
            for h in handles {
                // A worker only compares slices; it cannot panic on data,
                // but if it did the result would be incomplete, so treat
                // the bytes as different without statistics.
                match h.join() {
                    Ok(p) => total.merge(p),
                    Err(_) => {
                        total.bytes_differ = true;
                        total.differing = total.differing.max(1);
                    }
                }
            }
            total
        })
    };
    Some(ValueDiff {
        identical: !total.bytes_differ,
        differing: total.differing,
        max_abs: read.map(|_| total.max_abs),
        max_rel: read.map(|_| total.max_rel),
    })
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
