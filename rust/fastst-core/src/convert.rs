//! Dtype conversion kernels used on load: every pair between F64, F32, F16
//! and BF16, and the 8-bit float kinds to those four. Results are exact
//! IEEE conversions, rounded once to nearest even where the target is
//! narrower (F64 is never rounded through F32 on its way to F16/BF16);
//! NaN and infinities are preserved (kinds without an infinity map overflow
//! to NaN, as ml_dtypes does).

use std::sync::OnceLock;

use crate::dtype::{Dtype, EIGHT, WIDE};
use crate::error::{Error, Result};
use crate::parallel::par_chunks;

/// The conversions supported, `(from, to)`.
pub fn supported(from: Dtype, to: Dtype) -> bool {
    from == to || (WIDE.contains(&to) && (WIDE.contains(&from) || EIGHT.contains(&from)))
}

#[cold]
fn not_allowed(tensor: &str, from: Dtype, to: Dtype) -> Error {
    Error::ConversionNotAllowed {
        tensor: tensor.to_owned(),
        from,
        to,
    }
}

/// Checks that converting `src_len` bytes of `from` (tensor `tensor`, or
/// `""`) into a `dst_len`-byte destination of `to` is a supported
/// conversion between whole elements with a destination of exactly the
/// converted size.
pub fn check(tensor: &str, from: Dtype, to: Dtype, src_len: u64, dst_len: usize) -> Result<()> {
    let (fs, ts) = (from.bits() / 8, to.bits() / 8);
    if !supported(from, to) || from.is_sub_byte() || to.is_sub_byte() {
        return Err(not_allowed(tensor, from, to));
    }
    let expected = src_len / fs * ts;
    if src_len % fs != 0 || dst_len as u64 != expected {
        return Err(Error::DestinationSize {
            tensor: tensor.to_owned(),
            what: "the conversion destination",
            expected,
            got: dst_len as u64,
        });
    }
    Ok(())
}

/// Every supported conversion `(from, to)` between different dtypes, in
/// [`Dtype::ALL`] order: what `get_tensor(..., dtype=...)` accepts.
pub fn conversions() -> Vec<(Dtype, Dtype)> {
    let mut out = Vec::new();
    for from in Dtype::ALL {
        for to in Dtype::ALL {
            if from != to && supported(from, to) {
                out.push((from, to));
            }
        }
    }
    out
}

/// How an 8-bit float kind encodes special values.
#[derive(Clone, Copy)]
enum Special {
    /// IEEE-like: all-ones exponent is Inf (mantissa 0) or NaN.
    Ieee,
    /// "fn": no infinities; only all-ones exponent and mantissa is NaN.
    Fn,
    /// "fnuz": no infinities, no negative zero; 0x80 is the only NaN.
    Fnuz,
    /// Every code a finite number (F4, the F6 kinds).
    Finite,
}

fn decode_minifloat(bits: u32, exp_bits: u32, man_bits: u32, bias: i32, special: Special) -> f32 {
    let sign_shift = exp_bits + man_bits;
    let sign = (bits >> sign_shift) & 1;
    let exp = ((bits >> man_bits) & ((1 << exp_bits) - 1)) as i32;
    let man = bits & ((1 << man_bits) - 1);
    let max_exp = (1 << exp_bits) - 1;
    let neg = if sign == 1 { -1.0f32 } else { 1.0f32 };
    match special {
        Special::Ieee if exp == max_exp => {
            return if man == 0 {
                neg * f32::INFINITY
            } else {
                f32::NAN
            };
        }
        Special::Fn if exp == max_exp && man == (1 << man_bits) - 1 => return f32::NAN,
        Special::Fnuz if sign == 1 && exp == 0 && man == 0 => return f32::NAN,
        _ => {}
    }
    let value = if exp == 0 {
        // Subnormal: man * 2^(1 - bias - man_bits); exact in f32 for these kinds.
        man as f32 * 2f32.powi(1 - bias - man_bits as i32)
    } else {
        (1.0 + man as f32 / (1u32 << man_bits) as f32) * 2f32.powi(exp - bias)
    };
    neg * value
}

/// The value of `code`, one element of a float kind narrower than 16
/// bits: the F8 kinds, F6 (low 6 bits) and F4 (low 4 bits), as ml_dtypes
/// decodes them (NaN for any other dtype). Exact: every such value is an
/// `f32`.
pub fn minifloat_to_f32(dtype: Dtype, code: u8) -> f32 {
    let b = u32::from(code);
    match dtype {
        Dtype::F8E4M3 => decode_minifloat(b, 4, 3, 7, Special::Fn),
        Dtype::F8E5M2 => decode_minifloat(b, 5, 2, 15, Special::Ieee),
        Dtype::F8E4M3Fnuz => decode_minifloat(b, 4, 3, 8, Special::Fnuz),
        Dtype::F8E5M2Fnuz => decode_minifloat(b, 5, 2, 16, Special::Fnuz),
        // E8M0: an unsigned power of two, 0xFF is NaN.
        Dtype::F8E8M0 if code == 0xff => f32::NAN,
        Dtype::F8E8M0 => 2f32.powi(b as i32 - 127),
        Dtype::F4 => decode_minifloat(b, 2, 1, 1, Special::Finite),
        Dtype::F6E2M3 => decode_minifloat(b, 2, 3, 1, Special::Finite),
        Dtype::F6E3M2 => decode_minifloat(b, 3, 2, 3, Special::Finite),
        _ => f32::NAN,
    }
}

fn table8(dtype: Dtype) -> &'static [f32; 256] {
    static TABLES: [OnceLock<[f32; 256]>; 5] = [
        OnceLock::new(),
        OnceLock::new(),
        OnceLock::new(),
        OnceLock::new(),
        OnceLock::new(),
    ];
    let slot = match dtype {
        Dtype::F8E4M3 => 0,
        Dtype::F8E5M2 => 1,
        Dtype::F8E4M3Fnuz => 2,
        Dtype::F8E5M2Fnuz => 3,
        _ => 4,
    };
    TABLES[slot].get_or_init(|| {
        let mut t = [0f32; 256];
        for (i, v) in t.iter_mut().enumerate() {
            *v = minifloat_to_f32(dtype, i as u8);
        }
        t
    })
}

/// IEEE half to single, exact.
pub fn f16_to_f32(h: u16) -> f32 {
    let sign = u32::from(h >> 15) << 31;
    let exp = u32::from((h >> 10) & 0x1f);
    let man = u32::from(h & 0x3ff);
    let bits = if exp == 0x1f {
        sign | 0x7f80_0000 | (man << 13)
    } else if exp != 0 {
        sign | ((exp + 112) << 23) | (man << 13)
    } else if man == 0 {
        sign
    } else {
        // Subnormal half: normalise.
        let shift = man.leading_zeros() - 21;
        let man = (man << shift) & 0x3ff;
        sign | ((113 - shift) << 23) | (man << 13)
    };
    f32::from_bits(bits)
}

/// bfloat16 to single, exact.
pub fn bf16_to_f32(h: u16) -> f32 {
    f32::from_bits(u32::from(h) << 16)
}

/// Single to bfloat16, round to nearest even; NaN stays a (quiet) NaN.
pub fn f32_to_bf16(f: f32) -> u16 {
    let bits = f.to_bits();
    if f.is_nan() {
        return ((bits >> 16) as u16) | 0x0040;
    }
    let rounding = 0x7fff + ((bits >> 16) & 1);
    (bits.wrapping_add(rounding) >> 16) as u16
}

/// Single to IEEE half, round to nearest even; overflow gives infinity,
/// NaN stays a (quiet) NaN.
pub fn f32_to_f16(f: f32) -> u16 {
    let bits = f.to_bits();
    let sign = ((bits >> 16) & 0x8000) as u16;
    let exp = ((bits >> 23) & 0xff) as i32;
    let man = bits & 0x7f_ffff;
    if exp == 0xff {
        return if man == 0 {
            sign | 0x7c00
        } else {
            sign | 0x7e00 | ((man >> 13) as u16)
        };
    }
    let e = exp - 127 + 15;
    if e >= 0x1f {
        return sign | 0x7c00;
    }
    if e <= 0 {
        // Result is subnormal or zero.
        if e < -10 {
            return sign;
        }
        let m = man | 0x80_0000;
        let shift = (14 - e) as u32;
        let half = 1u32 << (shift - 1);
        let rest = m & ((1u32 << shift) - 1);
        let mut out = m >> shift;
        if rest > half || (rest == half && (out & 1) == 1) {
            out += 1;
        }
        return sign | out as u16;
    }
    let mut out = ((e as u32) << 10) | (man >> 13);
    let rest = man & 0x1fff;
    if rest > 0x1000 || (rest == 0x1000 && (out & 1) == 1) {
        out += 1; // may carry into the exponent, up to infinity: correct.
    }
    sign | out as u16
}

/// Double to a binary16-like kind of `exp_bits` exponent and `man_bits`
/// mantissa bits (IEEE half: 5, 10; bfloat16: 8, 7), rounded once to
/// nearest even; overflow gives infinity, NaN stays a quiet NaN keeping
/// the top payload bits that fit.
fn f64_to_narrow(x: f64, exp_bits: u32, man_bits: u32) -> u16 {
    let bits = x.to_bits();
    let sign = ((bits >> 63) as u16) << (exp_bits + man_bits);
    let exp = ((bits >> 52) & 0x7ff) as i64;
    let man = bits & ((1u64 << 52) - 1);
    let max_exp = (1u64 << exp_bits) - 1;
    let inf = sign | (max_exp << man_bits) as u16;
    if exp == 0x7ff {
        if man == 0 {
            return inf;
        }
        return inf | (1 << (man_bits - 1)) | (man >> (52 - man_bits)) as u16;
    }
    let bias = (1i64 << (exp_bits - 1)) - 1;
    let e = exp - 1023 + bias;
    if e >= max_exp as i64 {
        return inf;
    }
    // The significand with its leading bit (none for a subnormal double,
    // far below the smallest subnormal of either target), and how many of
    // its low bits are rounded away.
    let full = if exp == 0 { man } else { man | (1 << 52) };
    let shift = if e >= 1 {
        52 - u64::from(man_bits)
    } else {
        52 - u64::from(man_bits) + (1 - e) as u64
    };
    if shift > 53 {
        return sign; // below half the smallest subnormal: zero
    }
    let mut out = (full >> shift) as u16;
    if e >= 1 {
        out = (out & ((1 << man_bits) - 1)) | ((e as u16) << man_bits);
    }
    let rest = full & ((1u64 << shift) - 1);
    let half = 1u64 << (shift - 1);
    if rest > half || (rest == half && out & 1 == 1) {
        out += 1; // may carry into the exponent, up to infinity: correct.
    }
    sign | out
}

/// Double to IEEE half, rounded once to nearest even.
pub fn f64_to_f16(x: f64) -> u16 {
    f64_to_narrow(x, 5, 10)
}

/// Double to bfloat16, rounded once to nearest even.
pub fn f64_to_bf16(x: f64) -> u16 {
    f64_to_narrow(x, 8, 7)
}

/// Applies `f` to every `A`-byte element of `src`, writing `B`-byte
/// elements into `dst` (several threads for large inputs).
fn map<const A: usize, const B: usize>(
    src: &[u8],
    dst: &mut [u8],
    f: impl Fn([u8; A]) -> [u8; B] + Sync,
) {
    par_chunks(src, A, dst, B, |s, d| {
        for (i, o) in s.chunks_exact(A).zip(d.chunks_exact_mut(B)) {
            let mut e = [0u8; A];
            e.copy_from_slice(i);
            o.copy_from_slice(&f(e));
        }
    });
}

/// The exact single-precision value of a 16-bit float kind.
fn widen16(from: Dtype) -> fn(u16) -> f32 {
    if from == Dtype::Bf16 {
        bf16_to_f32
    } else {
        f16_to_f32
    }
}

/// A single-precision value as a 16-bit float kind (round to nearest even).
fn narrow16(to: Dtype) -> fn(f32) -> u16 {
    if to == Dtype::Bf16 {
        f32_to_bf16
    } else {
        f32_to_f16
    }
}

/// Converts the little-endian elements of `src` (of kind `from`) into `dst`
/// (of kind `to`, little-endian), using several threads for large inputs.
pub fn convert(from: Dtype, to: Dtype, src: &[u8], dst: &mut [u8]) -> Result<()> {
    check("", from, to, src.len() as u64, dst.len())?;
    let (fs, ts) = ((from.bits() / 8) as usize, (to.bits() / 8) as usize);
    if from == to {
        par_chunks(src, fs, dst, ts, |s, d| d.copy_from_slice(s));
        return Ok(());
    }
    match (from, to) {
        (Dtype::Bf16, Dtype::F32) => par_chunks(src, 2, dst, 4, |s, d| {
            for (i, o) in s.chunks_exact(2).zip(d.chunks_exact_mut(4)) {
                o.copy_from_slice(&bf16_to_f32(u16::from_le_bytes([i[0], i[1]])).to_le_bytes());
            }
        }),
        (Dtype::F16, Dtype::F32) => par_chunks(src, 2, dst, 4, |s, d| {
            for (i, o) in s.chunks_exact(2).zip(d.chunks_exact_mut(4)) {
                o.copy_from_slice(&f16_to_f32(u16::from_le_bytes([i[0], i[1]])).to_le_bytes());
            }
        }),
        (Dtype::F32, Dtype::Bf16) => par_chunks(src, 4, dst, 2, |s, d| {
            for (i, o) in s.chunks_exact(4).zip(d.chunks_exact_mut(2)) {
                let f = f32::from_le_bytes([i[0], i[1], i[2], i[3]]);
                o.copy_from_slice(&f32_to_bf16(f).to_le_bytes());
            }
        }),
        (Dtype::F32, Dtype::F16) => par_chunks(src, 4, dst, 2, |s, d| {
            for (i, o) in s.chunks_exact(4).zip(d.chunks_exact_mut(2)) {
                let f = f32::from_le_bytes([i[0], i[1], i[2], i[3]]);
                o.copy_from_slice(&f32_to_f16(f).to_le_bytes());
            }
        }),
        (eight, Dtype::F32) if EIGHT.contains(&eight) => {
            let table = table8(eight);
            par_chunks(src, 1, dst, 4, |s, d| {
                for (&b, o) in s.iter().zip(d.chunks_exact_mut(4)) {
                    o.copy_from_slice(&table[b as usize].to_le_bytes());
                }
            })
        }
        // Every other pair goes through the exact single-precision value
        // (one rounding, at the end), or from F64 straight to the target.
        (Dtype::F64, Dtype::F32) => map(src, dst, |e: [u8; 8]| {
            (f64::from_le_bytes(e) as f32).to_le_bytes()
        }),
        (Dtype::F64, Dtype::F16) => map(src, dst, |e: [u8; 8]| {
            f64_to_f16(f64::from_le_bytes(e)).to_le_bytes()
        }),
        (Dtype::F64, Dtype::Bf16) => map(src, dst, |e: [u8; 8]| {
            f64_to_bf16(f64::from_le_bytes(e)).to_le_bytes()
        }),
        (Dtype::F32, Dtype::F64) => map(src, dst, |e: [u8; 4]| {
            f64::from(f32::from_le_bytes(e)).to_le_bytes()
        }),
        (Dtype::F16 | Dtype::Bf16, Dtype::F64) => {
            let widen = widen16(from);
            map(src, dst, |e: [u8; 2]| {
                f64::from(widen(u16::from_le_bytes(e))).to_le_bytes()
            })
        }
        (Dtype::F16 | Dtype::Bf16, Dtype::F16 | Dtype::Bf16) => {
            let (widen, narrow) = (widen16(from), narrow16(to));
            map(src, dst, |e: [u8; 2]| {
                narrow(widen(u16::from_le_bytes(e))).to_le_bytes()
            })
        }
        (eight, Dtype::F64) if EIGHT.contains(&eight) => {
            let table = table8(eight);
            map(src, dst, |e: [u8; 1]| {
                f64::from(table[e[0] as usize]).to_le_bytes()
            })
        }
        (eight, Dtype::F16 | Dtype::Bf16) if EIGHT.contains(&eight) => {
            let (table, narrow) = (table8(eight), narrow16(to));
            map(src, dst, |e: [u8; 1]| {
                narrow(table[e[0] as usize]).to_le_bytes()
            })
        }
        _ => return Err(not_allowed("", from, to)),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f16_round_trips_every_value() {
        for h in 0..=u16::MAX {
            let f = f16_to_f32(h);
            if f.is_nan() {
                assert!(
                    f32::from_bits(u32::from(f32_to_f16(f))).is_nan()
                        || f16_to_f32(f32_to_f16(f)).is_nan()
                );
            } else {
                assert_eq!(f32_to_f16(f), h, "{h:#06x}");
            }
        }
    }

    #[test]
    fn bf16_round_trips_and_rounds_to_even() {
        for h in 0..=u16::MAX {
            let f = bf16_to_f32(h);
            if !f.is_nan() {
                assert_eq!(f32_to_bf16(f), h);
            }
        }
        // halfway cases round to even
        assert_eq!(f32_to_bf16(f32::from_bits(0x3f80_8000)), 0x3f80);
        assert_eq!(f32_to_bf16(f32::from_bits(0x3f81_8000)), 0x3f82);
        assert_eq!(f32_to_bf16(f32::MAX), 0x7f80);
    }

    #[test]
    fn f16_rounding_edges() {
        assert_eq!(f32_to_f16(65504.0), 0x7bff);
        assert_eq!(f32_to_f16(65520.0), 0x7c00); // halfway to the next: rounds to inf
        assert_eq!(f32_to_f16(65519.99), 0x7bff);
        assert_eq!(f32_to_f16(2f32.powi(-25)), 0); // halfway to smallest subnormal: even = 0
        assert_eq!(f32_to_f16(2f32.powi(-25) * 1.0001), 1);
        assert_eq!(f32_to_f16(-0.0), 0x8000);
    }

    /// F4 and the F6 kinds: every code finite, the sign in the top bit
    /// of the element, as ml_dtypes decodes them.
    #[test]
    fn four_and_six_bit_values() {
        let cases: [(Dtype, u8, f32); 10] = [
            (Dtype::F4, 0x1, 0.5),
            (Dtype::F4, 0x7, 6.0),
            (Dtype::F4, 0x9, -0.5),
            (Dtype::F4, 0xf, -6.0),
            (Dtype::F6E2M3, 0x01, 0.125),
            (Dtype::F6E2M3, 0x1f, 7.5),
            (Dtype::F6E2M3, 0x3f, -7.5),
            (Dtype::F6E3M2, 0x01, 0.0625),
            (Dtype::F6E3M2, 0x1f, 28.0),
            (Dtype::F6E3M2, 0x3f, -28.0),
        ];
        for (dtype, code, want) in cases {
            assert_eq!(minifloat_to_f32(dtype, code), want, "{dtype} {code:#x}");
        }
        assert!((0..16).all(|c| minifloat_to_f32(Dtype::F4, c).is_finite()));
        assert!((0..64).all(|c| minifloat_to_f32(Dtype::F6E3M2, c).is_finite()));
        assert!(
            minifloat_to_f32(Dtype::F32, 0).is_nan(),
            "not a small float"
        );
    }

    #[test]
    fn eight_bit_specials() {
        assert!(minifloat_to_f32(Dtype::F8E4M3, 0x7f).is_nan());
        assert_eq!(minifloat_to_f32(Dtype::F8E4M3, 0x7e), 448.0);
        assert_eq!(minifloat_to_f32(Dtype::F8E5M2, 0x7c), f32::INFINITY);
        assert!(minifloat_to_f32(Dtype::F8E4M3Fnuz, 0x80).is_nan());
        assert_eq!(minifloat_to_f32(Dtype::F8E4M3Fnuz, 0x00), 0.0);
        assert_eq!(minifloat_to_f32(Dtype::F8E8M0, 127), 1.0);
        assert!(minifloat_to_f32(Dtype::F8E8M0, 255).is_nan());
    }

    /// Large enough to take the multi-threaded path (see `parallel.rs`).
    const BIG: usize = (1 << 21) + 7;

    fn pseudo_random(n: usize, seed: u64) -> Vec<u32> {
        let mut x = seed;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 16) as u32
            })
            .collect()
    }

    #[test]
    fn large_conversions_match_the_element_kernels() {
        let words = pseudo_random(BIG, 0x2545_f491_4f6c_dd1d);
        let halves: Vec<u8> = words
            .iter()
            .flat_map(|w| (*w as u16).to_le_bytes())
            .collect();
        let singles: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        let mut wide = vec![0u8; BIG * 4];
        let mut narrow = vec![0u8; BIG * 2];
        type Widen = fn(u16) -> f32;
        type Narrow = fn(f32) -> u16;
        let widen: [(Dtype, Widen); 2] = [(Dtype::Bf16, bf16_to_f32), (Dtype::F16, f16_to_f32)];
        for (from, kernel) in widen {
            wide.fill(0xAA);
            convert(from, Dtype::F32, &halves, &mut wide).expect("convert");
            for (i, (s, d)) in halves.chunks_exact(2).zip(wide.chunks_exact(4)).enumerate() {
                let want = kernel(u16::from_le_bytes([s[0], s[1]])).to_bits();
                let got = u32::from_le_bytes([d[0], d[1], d[2], d[3]]);
                assert_eq!(got, want, "{from:?} element {i}");
            }
        }
        let narrow_kernels: [(Dtype, Narrow); 2] =
            [(Dtype::Bf16, f32_to_bf16), (Dtype::F16, f32_to_f16)];
        for (to, kernel) in narrow_kernels {
            narrow.fill(0xAA);
            convert(Dtype::F32, to, &singles, &mut narrow).expect("convert");
            for (i, (s, d)) in singles
                .chunks_exact(4)
                .zip(narrow.chunks_exact(2))
                .enumerate()
            {
                let want = kernel(f32::from_le_bytes([s[0], s[1], s[2], s[3]]));
                assert_eq!(u16::from_le_bytes([d[0], d[1]]), want, "{to:?} element {i}");
            }
        }
        // Same-dtype copies and 8-bit tables take the same fan-out.
        let mut copy = vec![0u8; singles.len()];
        convert(Dtype::F32, Dtype::F32, &singles, &mut copy).expect("copy");
        assert!(copy == singles);
        // One-byte elements: the fan-out splits on whole elements of the
        // kind's own size (64 MiB: many elements per chunk at any size
        // that would be wrong by a factor of 64).
        let bytes: Vec<u8> = (0..64usize << 20).map(|i| (i % 251) as u8).collect();
        let mut copy = vec![0u8; bytes.len()];
        convert(Dtype::U8, Dtype::U8, &bytes, &mut copy).expect("u8 copy");
        assert!(copy == bytes);
        drop((bytes, copy));
        let bytes: Vec<u8> = words.iter().map(|w| *w as u8).collect();
        convert(Dtype::F8E4M3, Dtype::F32, &bytes, &mut wide).expect("f8");
        for (i, (&b, d)) in bytes.iter().zip(wide.chunks_exact(4)).enumerate() {
            let want = minifloat_to_f32(Dtype::F8E4M3, b).to_bits();
            assert_eq!(
                u32::from_le_bytes([d[0], d[1], d[2], d[3]]),
                want,
                "f8 element {i}"
            );
        }
    }

    /// NaN payloads: the top payload bits that fit are kept and the result
    /// is a quiet NaN of the same sign.
    #[test]
    fn nan_payloads_are_kept_where_they_fit() {
        for (bits, half, bf) in [
            (0x7fc0_0000u32, 0x7e00u16, 0x7fc0u16),
            (0xffc0_0000, 0xfe00, 0xffc0),
            (0x7fff_ffff, 0x7fff, 0x7fff),
            (0x7fc1_2000, 0x7e09, 0x7fc1),
            (0x7fe0_0000, 0x7f00, 0x7fe0),
            (0xffd5_5555, 0xfeaa, 0xffd5),
            (0x7f80_0001, 0x7e00, 0x7fc0), // signalling: quietened
            (0x7fa0_0000, 0x7f00, 0x7fe0), // signalling: quietened, payload kept
        ] {
            let f = f32::from_bits(bits);
            assert_eq!(f32_to_f16(f), half, "f16 of {bits:#010x}");
            assert_eq!(f32_to_bf16(f), bf, "bf16 of {bits:#010x}");
        }
    }

    #[test]
    fn convert_checks_lengths_and_pairs() {
        let mut out = [0u8; 8];
        assert!(convert(Dtype::Bf16, Dtype::F32, &[0, 0x3f, 0, 0x40], &mut out).is_ok());
        assert_eq!(f32::from_le_bytes([out[0], out[1], out[2], out[3]]), 0.5);
        assert!(convert(Dtype::Bf16, Dtype::F32, &[0, 0x3f], &mut out).is_err());
        assert!(convert(Dtype::I32, Dtype::F32, &[0; 4], &mut out[..4]).is_err());
    }

    /// Sum of `bits[i] * (i + 1)` (wrapping): one number that changes when
    /// any value or its position changes.
    fn weighted(bits: impl Iterator<Item = u64>) -> u64 {
        bits.zip(1u64..)
            .fold(0u64, |acc, (b, i)| acc.wrapping_add(b.wrapping_mul(i)))
    }

    /// Every value of every 8-bit kind against ml_dtypes (`float8_e4m3fn`,
    /// `float8_e5m2`, `float8_e4m3fnuz`, `float8_e5m2fnuz`, `float8_e8m0fnu`
    /// cast to float32): the NaN codes, and the weighted sum of the other
    /// values' f32 bit patterns, through the element decoder, its table and
    /// `convert`.
    #[test]
    fn eight_bit_kinds_match_ml_dtypes() {
        let expected: [(Dtype, &[usize], u64); 5] = [
            (Dtype::F8E4M3, &[127, 255], 87_460_516_200_448),
            (
                Dtype::F8E5M2,
                &[125, 126, 127, 253, 254, 255],
                86_142_699_438_080,
            ),
            (Dtype::F8E4M3Fnuz, &[128], 87_896_069_505_024),
            (Dtype::F8E5M2Fnuz, &[128], 88_258_021_163_008),
            (Dtype::F8E8M0, &[255], 46_364_176_154_624),
        ];
        let codes: Vec<u8> = (0..=255).collect();
        for (dtype, nans, sum) in expected {
            let mut out = vec![0u8; 256 * 4];
            convert(dtype, Dtype::F32, &codes, &mut out).expect("convert");
            let converted: Vec<f32> = out
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            let decoded: Vec<f32> = codes.iter().map(|&b| minifloat_to_f32(dtype, b)).collect();
            let table = table8(dtype);
            for values in [&converted[..], &decoded[..], &table[..]] {
                let nan_codes: Vec<usize> = (0..256).filter(|&i| values[i].is_nan()).collect();
                assert_eq!(nan_codes, nans, "{dtype}");
                let bits = values.iter().map(|v| {
                    if v.is_nan() {
                        0
                    } else {
                        u64::from(v.to_bits())
                    }
                });
                assert_eq!(weighted(bits), sum, "{dtype}");
            }
        }
        // A few values by name (ml_dtypes): smallest subnormal, largest
        // normal, one, negative zero, infinity.
        assert_eq!(minifloat_to_f32(Dtype::F8E4M3, 0x01), 2f32.powi(-9));
        assert_eq!(minifloat_to_f32(Dtype::F8E4M3, 0x38), 1.0);
        assert_eq!(minifloat_to_f32(Dtype::F8E4M3, 0xfe), -448.0);
        assert_eq!(minifloat_to_f32(Dtype::F8E4M3, 0x80).to_bits(), 0x8000_0000);
        assert_eq!(minifloat_to_f32(Dtype::F8E5M2, 0x7b), 57344.0);
        assert_eq!(minifloat_to_f32(Dtype::F8E5M2, 0xfc), f32::NEG_INFINITY);
        assert_eq!(minifloat_to_f32(Dtype::F8E5M2Fnuz, 0xff), -57344.0);
        assert_eq!(minifloat_to_f32(Dtype::F8E4M3Fnuz, 0x7f), 240.0);
        assert_eq!(minifloat_to_f32(Dtype::F8E8M0, 0x00), 2f32.powi(-127));
        assert_eq!(minifloat_to_f32(Dtype::F8E8M0, 0xfe), 2f32.powi(127));
        assert!(minifloat_to_f32(Dtype::F32, 0).is_nan());
    }

    /// Every F16 value widened, against numpy's float16 -> float32 (NaN
    /// payloads included): weighted sum of the bit patterns.
    #[test]
    fn f16_widening_matches_numpy() {
        let halves: Vec<u8> = (0..=u16::MAX).flat_map(u16::to_le_bytes).collect();
        let mut wide = vec![0u8; halves.len() * 2];
        convert(Dtype::F16, Dtype::F32, &halves, &mut wide).expect("convert");
        let want = 5_905_984_343_024_599_040;
        let kernel = (0..=u16::MAX).map(|h| u64::from(f16_to_f32(h).to_bits()));
        assert_eq!(weighted(kernel), want);
        let converted = wide
            .chunks_exact(4)
            .map(|c| u64::from(u32::from_le_bytes([c[0], c[1], c[2], c[3]])));
        assert_eq!(weighted(converted), want);
        // Subnormals by name: the smallest and the largest.
        assert_eq!(f16_to_f32(0x0001), 2f32.powi(-24));
        assert_eq!(f16_to_f32(0x03ff), 1023.0 * 2f32.powi(-24));
        assert_eq!(f16_to_f32(0x8200), -(2f32.powi(-15)));
        assert_eq!(f16_to_f32(0x7c01).to_bits(), 0x7f80_2000);
        assert_eq!(bf16_to_f32(0xc0a0), -5.0);
    }

    /// 2^20 spread F32 bit patterns narrowed, against numpy (float16) and
    /// ml_dtypes (bfloat16), NaNs left out (their payloads are checked in
    /// `nan_payloads_are_kept_where_they_fit`).
    #[test]
    fn narrowing_matches_numpy_and_ml_dtypes() {
        let singles: Vec<f32> = (0u64..1 << 20)
            .map(|i| f32::from_bits((i.wrapping_mul(0x9E37_79B1).wrapping_add(0x12345)) as u32))
            .filter(|f| !f.is_nan())
            .collect();
        assert_eq!(singles.len(), 1_044_481);
        let halves = singles.iter().map(|&f| u64::from(f32_to_f16(f)));
        assert_eq!(weighted(halves), 17_596_869_304_769_817);
        let brains = singles.iter().map(|&f| u64::from(f32_to_bf16(f)));
        assert_eq!(weighted(brains), 17_839_040_551_075_935);
    }

    #[test]
    fn supported_pairs_and_checks() {
        use Dtype::*;
        let wide = [F16, Bf16, F32, F64];
        let mut want = Vec::new();
        for from in Dtype::ALL {
            for to in Dtype::ALL {
                let eight = matches!(from, F8E4M3 | F8E5M2 | F8E4M3Fnuz | F8E5M2Fnuz | F8E8M0);
                if from != to && wide.contains(&to) && (wide.contains(&from) || eight) {
                    want.push((from, to));
                }
            }
        }
        assert_eq!(conversions(), want);
        assert_eq!(conversions().len(), 12 + 5 * 4);
        for d in Dtype::ALL {
            assert!(supported(d, d), "{d}");
        }
        assert!(!supported(F32, I32) && !supported(F32, F8E4M3) && !supported(F4, F32));
        assert!(check("t", I64, I64, 16, 16).is_ok());
        assert!(check("t", Bf16, F32, 6, 12).is_ok());
        assert!(check("t", F32, F16, 0, 0).is_ok());
        let e = check("t", Bf16, F32, 6, 8).err();
        assert!(
            matches!(e, Some(Error::DestinationSize { ref tensor, what: "the conversion destination", expected: 12, got: 8 }) if tensor == "t"),
            "{e:?}"
        );
        // A partial source element is refused even when the sizes agree.
        let e = check("t", F32, F16, 6, 2).err();
        assert!(
            matches!(
                e,
                Some(Error::DestinationSize {
                    expected: 2,
                    got: 2,
                    ..
                })
            ),
            "{e:?}"
        );
        let e = check("t", F32, I64, 8, 16).err();
        assert!(
            matches!(e, Some(Error::ConversionNotAllowed { ref tensor, from: F32, to: I64 }) if tensor == "t"),
            "{e:?}"
        );
        // Packed kinds are never converted, not even to themselves.
        for d in [F4, F6E2M3, F6E3M2] {
            let e = check("", d, d, 3, 3).err();
            assert!(
                matches!(e, Some(Error::ConversionNotAllowed { .. })),
                "{e:?}"
            );
        }
        let e = convert(F16, I16, &[0; 2], &mut [0; 2]).err();
        assert!(
            matches!(
                e,
                Some(Error::ConversionNotAllowed {
                    from: F16,
                    to: I16,
                    ..
                })
            ),
            "{e:?}"
        );
        // Small same-kind copies and each element kernel, through `convert`.
        let src = [1u8, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16];
        let mut dst = [0u8; 16];
        convert(U64, U64, &src, &mut dst).expect("copy");
        assert_eq!(dst, src);
        let mut out = [0u8; 4];
        convert(F32, Bf16, &1.5f32.to_le_bytes(), &mut out[..2]).expect("bf16");
        assert_eq!(u16::from_le_bytes([out[0], out[1]]), 0x3fc0);
        convert(F32, F16, &(-2.0f32).to_le_bytes(), &mut out[..2]).expect("f16");
        assert_eq!(u16::from_le_bytes([out[0], out[1]]), 0xc000);
        convert(F16, F32, &0x3c00u16.to_le_bytes(), &mut out).expect("f16 up");
        assert_eq!(f32::from_le_bytes(out), 1.0);
        convert(F8E5M2, F32, &[0x3c], &mut out).expect("f8");
        assert_eq!(f32::from_le_bytes(out), 1.0);
    }
    /// Narrowing from F64 agrees with narrowing from F32 wherever the value
    /// is a single (then both round once), every 16-bit value survives the
    /// trip through F64, and the pairs between F16 and BF16 are the
    /// composition through the exact single.
    #[test]
    fn f64_and_16_bit_pairs_agree_with_the_single_kernels() {
        use Dtype::*;
        for i in 0u64..1 << 20 {
            let f = f32::from_bits((i.wrapping_mul(0x9E37_79B1).wrapping_add(0x12345)) as u32);
            let d = f64::from(f);
            assert_eq!(f64_to_f16(d), f32_to_f16(f), "{:#010x}", f.to_bits());
            assert_eq!(f64_to_bf16(d), f32_to_bf16(f), "{:#010x}", f.to_bits());
            // A signalling NaN comes back quiet where the hardware does the
            // round trip (unoptimised builds); every other value exactly.
            if f.is_nan() {
                assert!((d as f32).is_nan());
            } else {
                assert_eq!((d as f32).to_bits(), f.to_bits());
            }
        }
        let all: Vec<u8> = (0..=u16::MAX).flat_map(u16::to_le_bytes).collect();
        for (kind, widen, narrow) in [
            (
                F16,
                f16_to_f32 as fn(u16) -> f32,
                f64_to_f16 as fn(f64) -> u16,
            ),
            (Bf16, bf16_to_f32, f64_to_bf16),
        ] {
            let mut wide = vec![0u8; all.len() * 4];
            convert(kind, F64, &all, &mut wide).expect("widen");
            let mut back = vec![0u8; all.len()];
            convert(F64, kind, &wide, &mut back).expect("narrow");
            for h in 0..=u16::MAX {
                let i = usize::from(h);
                let d = f64::from_le_bytes(wide[i * 8..i * 8 + 8].try_into().expect("8"));
                assert_eq!(
                    d.to_bits(),
                    f64::from(widen(h)).to_bits(),
                    "{kind} {h:#06x}"
                );
                let b = u16::from_le_bytes([back[2 * i], back[2 * i + 1]]);
                if d.is_nan() {
                    assert!(
                        widen(b).is_nan() && (b ^ h) & 0x8000 == 0,
                        "{kind} {h:#06x}"
                    );
                } else {
                    assert_eq!(b, h, "{kind} {h:#06x}");
                    assert_eq!(narrow(d), h);
                }
            }
        }
        let mut out = vec![0u8; all.len()];
        convert(F16, Bf16, &all, &mut out).expect("f16 -> bf16");
        for (h, o) in (0..=u16::MAX).zip(out.chunks_exact(2)) {
            assert_eq!(u16::from_le_bytes([o[0], o[1]]), f32_to_bf16(f16_to_f32(h)));
        }
        convert(Bf16, F16, &all, &mut out).expect("bf16 -> f16");
        for (h, o) in (0..=u16::MAX).zip(out.chunks_exact(2)) {
            assert_eq!(u16::from_le_bytes([o[0], o[1]]), f32_to_f16(bf16_to_f32(h)));
        }
    }

    /// F64 narrows with one rounding: values that rounding through F32
    /// would make ties (then rounded to even, the wrong way) round up;
    /// exact ties round to even; the edges of the subnormals and of the
    /// largest finite value; NaN and infinities.
    #[test]
    fn f64_narrows_once_to_nearest_even() {
        let p = |e: i32| 2f64.powi(e);
        // 1 + 2^-8 + 2^-30: through F32 it is the tie 1 + 2^-8, then 1.0.
        assert_eq!(f64_to_bf16(1.0 + p(-8) + p(-30)), 0x3f81);
        assert_eq!(f32_to_bf16((1.0 + p(-8) + p(-30)) as f32), 0x3f80);
        assert_eq!(f64_to_f16(1.0 + p(-11) + p(-40)), 0x3c01);
        assert_eq!(f64_to_bf16(1.0 + p(-8)), 0x3f80);
        assert_eq!(f64_to_bf16(1.0 + 3.0 * p(-8)), 0x3f82);
        assert_eq!(f64_to_f16(p(-25)), 0);
        assert_eq!(f64_to_f16(p(-25) * (1.0 + p(-40))), 1);
        assert_eq!(f64_to_f16(-p(-24)), 0x8001);
        assert_eq!(f64_to_f16(p(-14) - p(-25)), 0x0400); // rounds up to the smallest normal
        assert_eq!(f64_to_bf16(p(-133)), 1);
        assert_eq!(f64_to_bf16(p(-134)), 0);
        assert_eq!(f64_to_bf16(p(-134) * (1.0 + p(-50))), 1);
        assert_eq!(f64_to_bf16(f64::from_bits(1)), 0);
        assert_eq!(f64_to_f16(-f64::from_bits(1)), 0x8000);
        assert_eq!(f64_to_f16(65504.0), 0x7bff);
        assert_eq!(f64_to_f16(65520.0 - p(-30)), 0x7bff);
        assert_eq!(f64_to_f16(65520.0), 0x7c00);
        assert_eq!(f64_to_f16(-1e300), 0xfc00);
        assert_eq!(f64_to_bf16(f64::MAX), 0x7f80);
        assert_eq!(f64_to_bf16(f64::NEG_INFINITY), 0xff80);
        assert_eq!(f64_to_f16(f64::INFINITY), 0x7c00);
        assert_eq!(f64_to_f16(f64::NAN), 0x7e00);
        assert_eq!(f64_to_bf16(-f64::NAN), 0xffc0);
        assert_eq!(f64_to_f16(f64::from_bits(0x7ff0_0000_0000_0001)), 0x7e00);
        assert_eq!(
            (f64::from_bits(0x3ff0_0000_1000_0000) as f32).to_bits(),
            0x3f80_0000
        );
        assert_eq!(
            (f64::from_bits(0x3ff0_0000_3000_0000) as f32).to_bits(),
            0x3f80_0002
        );
    }

    /// The 8-bit kinds widen to F16, BF16 and F64 as their exact single
    /// rounded once (exact wherever the target holds the value).
    #[test]
    fn eight_bit_kinds_to_every_wide_kind() {
        use Dtype::*;
        let codes: Vec<u8> = (0..=255).collect();
        for kind in [F8E4M3, F8E5M2, F8E4M3Fnuz, F8E5M2Fnuz, F8E8M0] {
            let table = table8(kind);
            let mut d = vec![0u8; 256 * 8];
            convert(kind, F64, &codes, &mut d).expect("f64");
            let mut h = vec![0u8; 512];
            let mut b = vec![0u8; 512];
            convert(kind, F16, &codes, &mut h).expect("f16");
            convert(kind, Bf16, &codes, &mut b).expect("bf16");
            for i in 0..256 {
                let v = table[i];
                let got = f64::from_le_bytes(d[i * 8..i * 8 + 8].try_into().expect("8"));
                assert!(got.to_bits() == f64::from(v).to_bits() || (got.is_nan() && v.is_nan()));
                assert_eq!(u16::from_le_bytes([h[2 * i], h[2 * i + 1]]), f32_to_f16(v));
                assert_eq!(u16::from_le_bytes([b[2 * i], b[2 * i + 1]]), f32_to_bf16(v));
            }
        }
        // E4M3 and E5M2 fit in F16 exactly: 448, and E5M2's infinity.
        let mut h = [0u8; 2];
        convert(F8E4M3, F16, &[0x7e], &mut h).expect("f16");
        assert_eq!(f16_to_f32(u16::from_le_bytes(h)), 448.0);
        convert(F8E5M2, F16, &[0xfc], &mut h).expect("f16");
        assert_eq!(u16::from_le_bytes(h), 0xfc00);
    }
}
