//! `stats`: what a tensor's values look like (min, max, mean, std, abs-max,
//! NaN/Inf/zero counts and a histogram), from one pass over its bytes on
//! several threads, read with positioned reads through the core (a file
//! truncated underneath gives an error, never SIGBUS).
//!
//! How each dtype is read:
//!
//! - Kinds of at most 16 bits (BOOL, the 8- and 16-bit integers, F16, BF16,
//!   every F8 kind, F4, F6): each value is one of at most 65 536 codes, so a
//!   pass only counts codes; every statistic, the histogram included, is
//!   then computed from the counts and is exact (sums of integers in `i128`;
//!   of floats as exact products added with compensated summation).
//! - F32, F64 and C64 (its real and imaginary parts, described together as
//!   F32 values): blocks of a few thousand values, hot in cache, are read
//!   twice (sum, min and max, then squared deviations from the block's
//!   mean) and blocks are merged with Chan's formula; all in `f64`.
//! - I32, U32, I64, U64: sums in `i128` (exact), min and max exact, the
//!   spread as for floats.
//!
//! Mean and std (population, numpy's `ddof=0`) describe the finite values;
//! NaN and infinite values are only counted. The histogram has equal-width
//! bins over `[min, max]` of the finite values, with numpy's rule for the
//! edges (`[v - 0.5, v + 0.5]` when every value is `v`, last bin closed). For
//! the 32- and 64-bit kinds a value is binned by its value as F32 cut to
//! bfloat16 precision (8 significant bits), so the bin of a value within
//! about 0.4% of an edge may be its neighbour ([`Histogram::exact`] is then
//! false); everything else is exact.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use fastst_core::internal::{fan_out, minifloat_to_f32, thread_count, zeroed};
use fastst_core::{
    bf16_to_f32, f16_to_f32, Backend, Dtype, Error, MappedFile, OpenOptions, Result, TensorInfo,
    DEFAULT_HEADER_CAP,
};

use crate::Progress;

/// Bytes read at a time by a worker.
const CHUNK: usize = 8 << 20;
/// Values per block of the wide kinds (read twice while in cache).
const BLOCK: usize = 2048;
/// Codes of a 16-bit kind; the size of every code table.
const CODES: usize = 1 << 16;

type Table = Box<[u64; CODES]>;

/// Most histogram bins.
pub const MAX_BINS: usize = 4096;

/// Options for [`stats_path`].
#[derive(Clone, Copy, Debug)]
pub struct StatsOptions {
    /// Histogram bins (1 to [`MAX_BINS`]; others are taken as the nearest).
    pub bins: usize,
    /// Worker threads (0: one per core).
    pub threads: usize,
    /// Largest header length accepted.
    pub header_cap: u64,
}

impl Default for StatsOptions {
    fn default() -> Self {
        StatsOptions {
            bins: 32,
            threads: 0,
            header_cap: DEFAULT_HEADER_CAP,
        }
    }
}

/// A value: exact for the integer kinds and BOOL, `f64` for the others.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Number {
    /// An integer (integer kinds and BOOL).
    Int(i128),
    /// A float.
    Float(f64),
}

/// Equal-width bins over `[lo, hi]`.
#[derive(Clone, Debug, PartialEq)]
pub struct Histogram {
    /// Left edge of the first bin.
    pub lo: f64,
    /// Right edge of the last bin.
    pub hi: f64,
    /// Values per bin.
    pub counts: Vec<u64>,
    /// False for the 32- and 64-bit kinds, binned by their value cut to
    /// 8 significant bits (a value close to an edge may be one bin off).
    pub exact: bool,
}

/// What one tensor's values look like.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorStats {
    /// The tensor's name.
    pub name: String,
    /// Its dtype.
    pub dtype: Dtype,
    /// Its shape.
    pub shape: Vec<u64>,
    /// Values described: the elements (C64: twice, real and imaginary parts).
    pub values: u64,
    /// Values that are neither NaN nor infinite.
    pub finite: u64,
    /// NaN values.
    pub nan: u64,
    /// Infinite values (either sign).
    pub inf: u64,
    /// Values equal to zero (-0.0 included; BOOL: false).
    pub zero: u64,
    /// Smallest finite value.
    pub min: Option<Number>,
    /// Largest finite value.
    pub max: Option<Number>,
    /// Largest magnitude of a finite value.
    pub abs_max: Option<Number>,
    /// Mean of the finite values (None when there are none, or it overflows).
    pub mean: Option<f64>,
    /// Population standard deviation of the finite values.
    pub std: Option<f64>,
    /// The finite values binned (None when there are none).
    pub histogram: Option<Histogram>,
}

/// How a dtype's bytes are read.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Reading {
    /// Every value is a code of `bits` bits, counted.
    Codes { bits: u32 },
    /// F32 and C64 (`4`) or F64 (`8`).
    Float { size: usize },
    /// I32, U32, I64, U64.
    Int,
}

fn reading(dtype: Dtype) -> Reading {
    match dtype {
        Dtype::F32 | Dtype::C64 => Reading::Float { size: 4 },
        Dtype::F64 => Reading::Float { size: 8 },
        Dtype::I32 | Dtype::U32 | Dtype::I64 | Dtype::U64 => Reading::Int,
        // Every other kind has at most 16 bits.
        _ => Reading::Codes {
            bits: dtype.bits() as u32,
        },
    }
}

/// Bytes that hold a whole number of values (chunks are multiples of it).
fn unit(dtype: Dtype) -> usize {
    match (dtype, reading(dtype)) {
        (Dtype::I64 | Dtype::U64, _) => 8,
        (Dtype::I32 | Dtype::U32, _) => 4,
        (_, Reading::Float { size }) => size,
        (_, Reading::Codes { bits: 6 }) => 3,
        (_, Reading::Codes { bits: 16 }) => 2,
        _ => 1,
    }
}

fn new_table() -> Result<Table> {
    let mut v: Vec<u64> = Vec::new();
    v.try_reserve_exact(CODES).map_err(|_| Error::OutOfMemory {
        bytes: (CODES * 8) as u64,
        tensor: String::new(),
    })?;
    v.resize(CODES, 0);
    v.into_boxed_slice()
        .try_into()
        .map_err(|_| Error::WorkerFailed { task: "stats" })
}

// codes --------------------------------------------------------------------

/// Where codes (or histogram keys) are counted: a table of counts, or, for
/// a small tensor, a list sorted later.
trait Codes {
    fn add(&mut self, code: u16);
    /// Adds `n` of `code`.
    fn add_n(&mut self, code: u16, n: u64);
}

impl Codes for [u64; CODES] {
    #[inline(always)]
    fn add(&mut self, code: u16) {
        self[usize::from(code)] += 1;
    }

    fn add_n(&mut self, code: u16, n: u64) {
        self[usize::from(code)] += n;
    }
}

impl Codes for Vec<u16> {
    fn add(&mut self, code: u16) {
        self.push(code);
    }

    fn add_n(&mut self, code: u16, n: u64) {
        // Only small tensors use a list: `n` is below their length.
        self.extend(std::iter::repeat_n(code, n as usize));
    }
}

/// Counts the codes of `bytes`.
fn count_codes(bits: u32, bytes: &[u8], out: &mut impl Codes) {
    match bits {
        16 => {
            for c in bytes.chunks_exact(2) {
                out.add(u16::from_le_bytes([c[0], c[1]]));
            }
        }
        4 => {
            for &b in bytes {
                out.add(u16::from(b & 15));
                out.add(u16::from(b >> 4));
            }
        }
        6 => {
            // Four little-endian 6-bit fields in every 3 bytes.
            for c in bytes.chunks_exact(3) {
                let w = u32::from_le_bytes([c[0], c[1], c[2], 0]);
                for i in 0..4 {
                    out.add(((w >> (6 * i)) & 63) as u16);
                }
            }
        }
        _ => {
            // Four counters per code, so that runs of one code do not wait
            // on each other's increments.
            let mut lanes = [[0u64; 256]; 4];
            let mut quads = bytes.chunks_exact(4);
            for q in &mut quads {
                for (lane, &b) in lanes.iter_mut().zip(q) {
                    lane[usize::from(b)] += 1;
                }
            }
            for &b in quads.remainder() {
                lanes[0][usize::from(b)] += 1;
            }
            for code in 0..=255u8 {
                let n: u64 = lanes.iter().map(|l| l[usize::from(code)]).sum();
                out.add_n(u16::from(code), n);
            }
        }
    }
}

/// `(code, count)` of every code counted, in code order.
fn table_pairs(table: &[u64; CODES]) -> Vec<(u16, u64)> {
    (0..=u16::MAX)
        .zip(table.iter())
        .filter(|(_, &c)| c > 0)
        .map(|(k, &c)| (k, c))
        .collect()
}

/// `(code, count)` of a list of codes (sorted in place).
fn list_pairs(codes: &mut [u16]) -> Vec<(u16, u64)> {
    codes.sort_unstable();
    let mut out: Vec<(u16, u64)> = Vec::new();
    for &c in codes.iter() {
        match out.last_mut() {
            Some((k, n)) if *k == c => *n += 1,
            _ => out.push((c, 1)),
        }
    }
    out
}

/// The value of code `code` of a code-read dtype.
pub(crate) fn decode(dtype: Dtype, code: u16) -> Number {
    let code = u32::from(code);
    let float = match dtype {
        Dtype::Bool => return Number::Int(i128::from(code != 0)),
        Dtype::U8 | Dtype::U16 => return Number::Int(i128::from(code)),
        Dtype::I8 => return Number::Int(i128::from(code as u8 as i8)),
        Dtype::I16 => return Number::Int(i128::from(code as u16 as i16)),
        Dtype::F16 => f64::from(f16_to_f32(code as u16)),
        Dtype::Bf16 => f64::from(bf16_to_f32(code as u16)),
        Dtype::F8E4M3
        | Dtype::F8E5M2
        | Dtype::F8E4M3Fnuz
        | Dtype::F8E5M2Fnuz
        | Dtype::F8E8M0
        | Dtype::F4
        | Dtype::F6E2M3
        | Dtype::F6E3M2 => f64::from(minifloat_to_f32(dtype, code as u8)),
        // Not code-read: never asked.
        _ => f64::NAN,
    };
    Number::Float(float)
}

/// Neumaier's compensated sum.
#[derive(Clone, Copy, Default)]
struct Sum {
    sum: f64,
    comp: f64,
}

impl Sum {
    fn add(&mut self, x: f64) {
        let t = self.sum + x;
        if self.sum.abs() >= x.abs() {
            self.comp += (self.sum - t) + x;
        } else {
            self.comp += (x - t) + self.sum;
        }
        self.sum = t;
    }

    fn value(self) -> f64 {
        self.sum + self.comp
    }
}

// wide kinds ---------------------------------------------------------------

/// What the blocks of a wide tensor add up to so far.
#[derive(Clone, Copy)]
struct Wide {
    /// Finite values, their mean and sum of squared deviations (Chan).
    n: u64,
    mean: f64,
    m2: f64,
    nan: u64,
    inf: u64,
    zero: u64,
    fmin: f64,
    fmax: f64,
    /// Integer kinds: exact sum and extremes.
    isum: i128,
    imin: i128,
    imax: i128,
}

impl Default for Wide {
    fn default() -> Self {
        Wide {
            n: 0,
            mean: 0.0,
            m2: 0.0,
            nan: 0,
            inf: 0,
            zero: 0,
            fmin: f64::INFINITY,
            fmax: f64::NEG_INFINITY,
            isum: 0,
            imin: i128::MAX,
            imax: i128::MIN,
        }
    }
}

impl Wide {
    /// Merges another part (Chan et al.'s pairwise update).
    fn merge(&mut self, o: &Wide) {
        if self.n == 0 {
            (self.n, self.mean, self.m2) = (o.n, o.mean, o.m2);
        } else if o.n > 0 {
            let n = self.n + o.n;
            let delta = o.mean - self.mean;
            let (na, nb) = (self.n as f64, o.n as f64);
            self.mean += delta * (nb / n as f64);
            self.m2 += o.m2 + delta * delta * (na * nb / n as f64);
            self.n = n;
        }
        self.nan += o.nan;
        self.inf += o.inf;
        self.zero += o.zero;
        self.fmin = self.fmin.min(o.fmin);
        self.fmax = self.fmax.max(o.fmax);
        self.isum += o.isum;
        self.imin = self.imin.min(o.imin);
        self.imax = self.imax.max(o.imax);
    }

    /// Adds a block of finite values; counts their histogram keys.
    fn add_block(&mut self, v: &[f64], keys: &mut impl Codes) {
        if v.is_empty() {
            return;
        }
        let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
        let mut s = [0.0f64; 4];
        let mut quads = v.chunks_exact(4);
        for q in &mut quads {
            for k in 0..4 {
                s[k] += q[k];
                lo = lo.min(q[k]);
                hi = hi.max(q[k]);
            }
        }
        for &x in quads.remainder() {
            s[0] += x;
            lo = lo.min(x);
            hi = hi.max(x);
        }
        let mean = ((s[0] + s[1]) + (s[2] + s[3])) / v.len() as f64;
        let mut m2 = [0.0f64; 2];
        let mut zero = 0u64;
        for (i, &x) in v.iter().enumerate() {
            let d = x - mean;
            m2[i & 1] += d * d;
            zero += u64::from(x == 0.0);
            keys.add(key(x));
        }
        self.merge(&Wide {
            n: v.len() as u64,
            mean,
            m2: m2[0] + m2[1],
            zero,
            fmin: lo,
            fmax: hi,
            ..Wide::default()
        });
    }
}

/// The histogram key of a wide value: its top 16 bits as F32 (a bfloat16
/// cut toward zero).
fn key(x: f64) -> u16 {
    ((x as f32).to_bits() >> 16) as u16
}

/// The value a key stands for.
fn key_value(k: u16) -> f64 {
    f64::from(f32::from_bits(u32::from(k) << 16))
}

/// Reads wide floats (`size` 4 or 8 bytes) block by block.
fn scan_floats(size: usize, bytes: &[u8], acc: &mut Wide, keys: &mut impl Codes) {
    let mut buf = [0.0f64; BLOCK];
    for block in bytes.chunks(BLOCK * size) {
        let n = block.len() / size;
        if size == 4 {
            for (d, c) in buf.iter_mut().zip(block.chunks_exact(4)) {
                *d = f64::from(f32::from_le_bytes([c[0], c[1], c[2], c[3]]));
            }
        } else {
            for (d, c) in buf.iter_mut().zip(block.chunks_exact(8)) {
                let mut b = [0u8; 8];
                b.copy_from_slice(c);
                *d = f64::from_le_bytes(b);
            }
        }
        let vals = &mut buf[..n];
        let nonfinite = vals.iter().filter(|x| !x.is_finite()).count();
        if nonfinite == 0 {
            acc.add_block(vals, keys);
            continue;
        }
        // Keep the finite values (in place), count the others.
        let mut kept = 0;
        for i in 0..n {
            let x = vals[i];
            if x.is_nan() {
                acc.nan += 1;
            } else if x.is_infinite() {
                acc.inf += 1;
            } else {
                vals[kept] = x;
                kept += 1;
            }
        }
        acc.add_block(&vals[..kept], keys);
    }
}

/// Reads wide integers block by block: exact sum and extremes, the spread
/// in `f64`.
fn scan_ints(dtype: Dtype, bytes: &[u8], acc: &mut Wide, keys: &mut impl Codes) {
    let size = unit(dtype);
    let read = |c: &[u8]| -> i128 {
        let mut b = [0u8; 8];
        b[..size].copy_from_slice(c);
        match dtype {
            Dtype::I32 => i128::from(i32::from_le_bytes([b[0], b[1], b[2], b[3]])),
            Dtype::U32 => i128::from(u32::from_le_bytes([b[0], b[1], b[2], b[3]])),
            Dtype::I64 => i128::from(i64::from_le_bytes(b)),
            _ => i128::from(u64::from_le_bytes(b)),
        }
    };
    let mut floats = [0.0f64; BLOCK];
    for block in bytes.chunks(BLOCK * size) {
        let n = block.len() / size;
        let (mut sum, mut lo, mut hi) = (0i128, i128::MAX, i128::MIN);
        for (d, c) in floats.iter_mut().zip(block.chunks_exact(size)) {
            let v = read(c);
            sum += v;
            lo = lo.min(v);
            hi = hi.max(v);
            // Exact below 2^53; the spread tolerates the rounding above.
            *d = v as f64;
        }
        let mut part = Wide::default();
        part.add_block(&floats[..n], keys);
        part.isum = sum;
        part.imin = lo;
        part.imax = hi;
        acc.merge(&part);
    }
}

// one tensor ---------------------------------------------------------------

/// Equal-width bins as numpy's `histogram(values, bins)` lays them out.
struct Bins {
    lo: f64,
    hi: f64,
    edges: Vec<f64>,
    counts: Vec<u64>,
}

impl Bins {
    fn new(min: f64, max: f64, bins: usize) -> Option<Bins> {
        let (lo, hi) = if min == max {
            (min - 0.5, max + 0.5)
        } else {
            (min, max)
        };
        let span = hi - lo;
        if !span.is_finite() || bins == 0 {
            return None;
        }
        let n = bins as f64;
        let step = span / n;
        let mut edges: Vec<f64> = (0..=bins)
            .map(|i| {
                if step == 0.0 {
                    i as f64 / n * span + lo
                } else {
                    i as f64 * step + lo
                }
            })
            .collect();
        edges[bins] = hi;
        Some(Bins {
            lo,
            hi,
            edges,
            counts: vec![0; bins],
        })
    }

    /// Adds `count` values `x` (within `[lo, hi]`).
    fn add(&mut self, x: f64, count: u64) {
        let bins = self.counts.len();
        let f = (x - self.lo) / (self.hi - self.lo) * bins as f64;
        let mut i = (f as usize).min(bins - 1);
        if i > 0 && x < self.edges[i] {
            i -= 1;
        }
        if i + 1 < bins && x >= self.edges[i + 1] {
            i += 1;
        }
        self.counts[i] += count;
    }

    fn done(self, exact: bool) -> Histogram {
        Histogram {
            lo: self.lo,
            hi: self.hi,
            counts: self.counts,
            exact,
        }
    }
}

fn finite(x: f64) -> Option<f64> {
    Some(x).filter(|x| x.is_finite())
}

impl TensorStats {
    fn empty(info: &TensorInfo) -> TensorStats {
        TensorStats {
            name: info.name.clone(),
            dtype: info.dtype,
            shape: info.shape.clone(),
            values: 0,
            finite: 0,
            nan: 0,
            inf: 0,
            zero: 0,
            min: None,
            max: None,
            abs_max: None,
            mean: None,
            std: None,
            histogram: None,
        }
    }

    /// The statistics of a code-read tensor from its `(code, count)` pairs.
    fn of_codes(info: &TensorInfo, pairs: &[(u16, u64)], bins: usize) -> TensorStats {
        let dtype = info.dtype;
        let mut s = TensorStats::empty(info);
        let (mut fsum, mut isum) = (Sum::default(), 0i128);
        let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
        let (mut ilo, mut ihi) = (i128::MAX, i128::MIN);
        for &(c, count) in pairs {
            s.values += count;
            match decode(dtype, c) {
                Number::Int(v) => {
                    s.finite += count;
                    s.zero += if v == 0 { count } else { 0 };
                    isum += v * i128::from(count);
                    ilo = ilo.min(v);
                    ihi = ihi.max(v);
                }
                Number::Float(v) if v.is_nan() => s.nan += count,
                Number::Float(v) if v.is_infinite() => s.inf += count,
                Number::Float(v) => {
                    s.finite += count;
                    s.zero += if v == 0.0 { count } else { 0 };
                    // Exact: at most 11 significant bits times a count.
                    fsum.add(v * count as f64);
                    lo = lo.min(v);
                    hi = hi.max(v);
                }
            }
        }
        if s.finite == 0 {
            return s;
        }
        let n = s.finite as f64;
        let (mean, lo, hi) = if ilo <= ihi {
            s.set_range(Number::Int(ilo), Number::Int(ihi));
            (isum as f64 / n, ilo as f64, ihi as f64)
        } else {
            s.set_range(Number::Float(lo), Number::Float(hi));
            (fsum.value() / n, lo, hi)
        };
        let mut m2 = Sum::default();
        let mut hist = Bins::new(lo, hi, bins);
        for &(c, count) in pairs {
            let v = match decode(dtype, c) {
                Number::Int(v) => v as f64,
                Number::Float(v) if v.is_finite() => v,
                Number::Float(_) => continue,
            };
            m2.add((v - mean) * (v - mean) * count as f64);
            if let Some(h) = hist.as_mut() {
                h.add(v, count);
            }
        }
        s.mean = finite(mean);
        s.std = finite((m2.value() / n).sqrt());
        s.histogram = hist.map(|h| h.done(true));
        s
    }

    /// The statistics of a wide tensor from its moments and the `(key,
    /// count)` pairs of its finite values.
    fn of_wide(info: &TensorInfo, w: &Wide, keys: &[(u16, u64)], bins: usize) -> TensorStats {
        let mut s = TensorStats::empty(info);
        s.finite = w.n;
        s.nan = w.nan;
        s.inf = w.inf;
        s.zero = w.zero;
        s.values = w.n + w.nan + w.inf;
        if w.n == 0 {
            return s;
        }
        let n = w.n as f64;
        let (lo, hi) = if reading(info.dtype) == Reading::Int {
            s.set_range(Number::Int(w.imin), Number::Int(w.imax));
            s.mean = finite(w.isum as f64 / n);
            (w.imin as f64, w.imax as f64)
        } else {
            s.set_range(Number::Float(w.fmin), Number::Float(w.fmax));
            s.mean = finite(w.mean);
            (w.fmin, w.fmax)
        };
        s.std = finite((w.m2 / n).sqrt());
        s.histogram = Bins::new(lo, hi, bins).map(|mut h| {
            for &(k, count) in keys {
                // A cut value stays within the values' range.
                h.add(key_value(k).clamp(lo, hi), count);
            }
            h.done(false)
        });
        s
    }

    fn set_range(&mut self, min: Number, max: Number) {
        self.abs_max = Some(match (min, max) {
            (Number::Int(a), Number::Int(b)) => Number::Int(a.abs().max(b.abs())),
            (Number::Float(a), Number::Float(b)) => Number::Float(a.abs().max(b.abs())),
            _ => max,
        });
        self.min = Some(min);
        self.max = Some(max);
    }
}

/// Scans `bytes` of a `dtype` tensor into `wide` (wide kinds) and `codes`.
fn scan(dtype: Dtype, bytes: &[u8], wide: &mut Wide, codes: &mut impl Codes) {
    match reading(dtype) {
        Reading::Codes { bits } => count_codes(bits, bytes, codes),
        Reading::Float { size } => scan_floats(size, bytes, wide, codes),
        Reading::Int => scan_ints(dtype, bytes, wide, codes),
    }
}

fn finish(info: &TensorInfo, wide: &Wide, pairs: &[(u16, u64)], bins: usize) -> TensorStats {
    match reading(info.dtype) {
        Reading::Codes { .. } => TensorStats::of_codes(info, pairs, bins),
        _ => TensorStats::of_wide(info, wide, pairs, bins),
    }
}

/// Tensors of at most this many bytes count their codes in a list rather
/// than a table (sorting a few thousand codes beats clearing and scanning
/// 65 536 counters).
const SMALL: usize = 8 << 10;

/// A tensor's state while its chunks come in (tensors of several chunks).
struct Pending {
    /// Chunks not yet merged.
    remaining: usize,
    /// Code counts (code-read kinds) or histogram keys (wide kinds).
    table: Option<Table>,
    wide: Wide,
    done: Option<TensorStats>,
}

fn lock(p: &Mutex<Pending>) -> std::sync::MutexGuard<'_, Pending> {
    p.lock().unwrap_or_else(|e| e.into_inner())
}

/// What a worker reuses from chunk to chunk.
struct Scratch {
    table: Table,
    list: Vec<u16>,
}

/// Scans one chunk of `info`'s bytes. A tensor read in one chunk gets its
/// statistics at once; a chunk of a larger tensor is merged into the
/// tensor's state, and its last chunk computes them.
fn scan_chunk(
    info: &TensorInfo,
    bytes: &[u8],
    whole: bool,
    pending: &Mutex<Pending>,
    scratch: &mut Scratch,
    bins: usize,
) -> Result<()> {
    let mut wide = Wide::default();
    if whole && bytes.len() <= SMALL {
        scratch.list.clear();
        scan(info.dtype, bytes, &mut wide, &mut scratch.list);
        let stats = finish(info, &wide, &list_pairs(&mut scratch.list), bins);
        lock(pending).done = Some(stats);
        return Ok(());
    }
    let table = &mut scratch.table;
    table.fill(0);
    scan(info.dtype, bytes, &mut wide, &mut **table);
    if whole {
        let stats = finish(info, &wide, &table_pairs(table), bins);
        lock(pending).done = Some(stats);
        return Ok(());
    }
    let mut p = lock(pending);
    let Pending {
        table: merged,
        wide: total,
        remaining,
        done,
    } = &mut *p;
    let merged = match merged {
        Some(t) => t,
        None => merged.insert(new_table()?),
    };
    for (t, l) in merged.iter_mut().zip(table.iter()) {
        *t += *l;
    }
    total.merge(&wide);
    *remaining -= 1;
    if *remaining == 0 {
        *done = Some(finish(info, total, &table_pairs(merged), bins));
        p.table = None;
    }
    Ok(())
}

// a file ---------------------------------------------------------------------

/// One chunk of one tensor: `(tensor index, offset in the tensor, length)`.
type Job = (usize, u64, usize);

/// Statistics of the tensors of the file at `path` named in `names` (every
/// tensor when None), in file order. A name the file does not hold is an
/// error (rule `tensor-not-found`); so is a file the reader rejects, or one
/// that changes while it is read.
pub fn stats_path(
    path: &Path,
    names: Option<&[String]>,
    options: &StatsOptions,
    progress: Progress,
) -> Result<Vec<TensorStats>> {
    let file = MappedFile::open(path, open_options(options))?;
    stats(&file, names, options, progress)
}

/// [`stats_path`] of a file read through any core source (an object in a
/// store): each byte of the tensors chosen is read once.
pub fn stats_source(
    source: impl fastst_core::Source + 'static,
    names: Option<&[String]>,
    options: &StatsOptions,
    progress: Progress,
) -> Result<Vec<TensorStats>> {
    let file = MappedFile::from_source(source, open_options(options))?;
    stats(&file, names, options, progress)
}

fn open_options(options: &StatsOptions) -> OpenOptions {
    OpenOptions {
        header_cap: options.header_cap,
        backend: Backend::Pread,
    }
}

fn stats(
    file: &MappedFile,
    names: Option<&[String]>,
    options: &StatsOptions,
    progress: Progress,
) -> Result<Vec<TensorStats>> {
    let header = file.header();
    let chosen: Vec<&TensorInfo> = match names {
        None => header.tensors().iter().collect(),
        Some(names) => {
            for n in names {
                header.require(n)?;
            }
            let wanted: std::collections::HashSet<&str> =
                names.iter().map(String::as_str).collect();
            header
                .tensors()
                .iter()
                .filter(|t| wanted.contains(t.name.as_str()))
                .collect()
        }
    };
    let mut jobs: Vec<Job> = Vec::new();
    let mut pending = Vec::with_capacity(chosen.len());
    for (i, t) in chosen.iter().enumerate() {
        let step = (CHUNK - CHUNK % unit(t.dtype)) as u64;
        let len = t.byte_len();
        let chunks = len.div_ceil(step).max(1);
        for c in 0..chunks {
            let offset = c * step;
            jobs.push((i, offset, (len - offset).min(step) as usize));
        }
        pending.push(Mutex::new(Pending {
            remaining: chunks as usize,
            table: None,
            wide: Wide::default(),
            done: None,
        }));
    }
    let total: u64 = chosen.iter().map(|t| t.byte_len()).sum();
    let largest = jobs.iter().map(|j| j.2).max().unwrap_or(0);
    let done_bytes = AtomicU64::new(0);
    let bins = options.bins.clamp(1, MAX_BINS);
    let init = || -> Result<_> {
        let buf = zeroed(largest as u64, "")?;
        let scratch = Scratch {
            table: new_table()?,
            list: Vec::new(),
        };
        Ok((buf, scratch))
    };
    let each = |(buf, scratch): &mut (Vec<u8>, Scratch), k: usize| -> Result<()> {
        let (i, offset, n) = jobs[k];
        let info = chosen[i];
        let bytes = &mut buf[..n];
        file.read_tensor_into(info, offset, bytes)?;
        let whole = n as u64 == info.byte_len();
        scan_chunk(info, bytes, whole, &pending[i], scratch, bins)?;
        let so_far = done_bytes.fetch_add(n as u64, Ordering::Relaxed) + n as u64;
        if let Some(report) = progress {
            report(so_far, total);
        }
        Ok(())
    };
    fan_out(
        jobs.len(),
        thread_count(options.threads),
        "stats",
        init,
        each,
    )?;
    pending
        .into_iter()
        .map(|p| {
            let p = p.into_inner().unwrap_or_else(|e| e.into_inner());
            p.done.ok_or(Error::WorkerFailed { task: "stats" })
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::testfs::build;

    fn one(header: &str, data: &[u8], threads: usize) -> Vec<TensorStats> {
        let f = build(header, data);
        let options = StatsOptions {
            bins: 4,
            threads,
            ..StatsOptions::default()
        };
        stats_path(&f.0, None, &options, None).unwrap()
    }

    #[test]
    fn small_floats_decode_as_ml_dtypes_does() {
        let f = |d, c| match decode(d, c) {
            Number::Float(v) => v,
            Number::Int(_) => panic!("a float kind"),
        };
        assert_eq!(f(Dtype::F8E4M3, 0x7e), 448.0);
        assert_eq!(f(Dtype::F8E4M3, 0x01), 2f64.powi(-9));
        assert!(f(Dtype::F8E4M3, 0xff).is_nan());
        assert_eq!(f(Dtype::F8E5M2, 0x7b), 57344.0);
        assert_eq!(f(Dtype::F8E5M2, 0xfc), f64::NEG_INFINITY);
        assert!(f(Dtype::F8E5M2, 0x7d).is_nan());
        assert_eq!(f(Dtype::F8E4M3Fnuz, 0x7f), 240.0);
        assert_eq!(f(Dtype::F8E5M2Fnuz, 0x7f), 57344.0);
        assert!(f(Dtype::F8E5M2Fnuz, 0x80).is_nan());
        assert_eq!(f(Dtype::F8E8M0, 127), 1.0);
        assert_eq!(f(Dtype::F4, 0x7), 6.0);
        assert_eq!(f(Dtype::F4, 0x9), -0.5);
        assert_eq!(f(Dtype::F6E2M3, 0x1f), 7.5);
        assert_eq!(f(Dtype::F6E3M2, 0x1f), 28.0);
        assert_eq!(decode(Dtype::I8, 0xff), Number::Int(-1));
        assert_eq!(decode(Dtype::Bool, 7), Number::Int(1));
    }

    #[test]
    fn counts_moments_and_bins() {
        let v = [1.0f32, f32::NAN, -3.0, f32::INFINITY, 0.0, 2.0];
        let data: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        let header = r#"{"x":{"dtype":"F32","shape":[6],"data_offsets":[0,24]}}"#;
        let s = &one(header, &data, 1)[0];
        assert_eq!((s.values, s.finite, s.nan, s.inf, s.zero), (6, 4, 1, 1, 1));
        assert_eq!(s.min, Some(Number::Float(-3.0)));
        assert_eq!(s.abs_max, Some(Number::Float(3.0)));
        assert_eq!(s.mean, Some(0.0));
        assert_eq!(s.std, Some(3.5f64.sqrt()));
        let h = s.histogram.as_ref().unwrap();
        // Edges -3, -1.75, -0.5, 0.75, 2: the last bin is closed.
        assert_eq!(
            (h.lo, h.hi, &h.counts[..], h.exact),
            (-3.0, 2.0, &[1, 0, 1, 2][..], false)
        );
        // Integers: exact extremes and sum, numpy's bins for a single value.
        let header = r#"{"i":{"dtype":"I64","shape":[2],"data_offsets":[0,16]}}"#;
        let ints = |v: [i64; 2]| -> Vec<u8> { v.iter().flat_map(|x| x.to_le_bytes()).collect() };
        let s = &one(header, &ints([i64::MIN, i64::MAX]), 1)[0];
        assert_eq!(s.abs_max, Some(Number::Int(1i128 << 63)));
        assert_eq!(s.mean, Some(-0.5));
        let s = &one(header, &ints([5, 5]), 1)[0];
        assert_eq!(s.std, Some(0.0));
        let h = s.histogram.as_ref().unwrap();
        assert_eq!((h.lo, h.hi, &h.counts[..]), (4.5, 5.5, &[0, 0, 2, 0][..]));
        // Nothing finite: counts only.
        let header = r#"{"e":{"dtype":"BF16","shape":[1],"data_offsets":[0,2]},"z":{"dtype":"U8","shape":[0],"data_offsets":[2,2]}}"#;
        let s = one(header, &0x7fc0u16.to_le_bytes(), 1);
        assert_eq!(
            (s[0].nan, s[0].mean, s[0].histogram.is_none()),
            (1, None, true)
        );
        assert_eq!((s[1].values, s[1].min), (0, None));
    }

    #[test]
    fn chunks_tables_and_lists_agree() {
        // BF16 over three chunks (a table per chunk, merged) against the
        // same values as one small tensor (a list) and on one thread.
        let n = CHUNK + CHUNK / 4;
        let data: Vec<u8> = (0..n)
            .map(|i| ((i * 2654435761usize) >> 7) as u8 & 0xbf)
            .collect();
        let header = format!(
            r#"{{"big":{{"dtype":"BF16","shape":[{}],"data_offsets":[0,{n}]}},"f":{{"dtype":"F32","shape":[{}],"data_offsets":[{n},{}]}}}}"#,
            n / 2,
            n / 4,
            2 * n
        );
        let mut all = data.clone();
        all.extend_from_slice(&data);
        let many = one(&header, &all, 3);
        assert_eq!(many, one(&header, &all, 1));
        let mut table = new_table().unwrap();
        count_codes(16, &data, &mut *table);
        let mut list = Vec::new();
        count_codes(16, &data, &mut list);
        assert_eq!(table_pairs(&table), list_pairs(&mut list));
        assert_eq!(many[0].values, (n / 2) as u64);
        assert_eq!(many[1].values, many[1].finite + many[1].nan + many[1].inf);
    }

    #[test]
    fn missing_names_truncated_files_and_changes_are_errors() {
        let header = r#"{"x":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}}"#;
        let f = build(header, b"abcd");
        let names = ["y".to_owned()];
        let e = stats_path(&f.0, Some(&names), &StatsOptions::default(), None).unwrap_err();
        assert_eq!(e.rule(), "tensor-not-found");
        let f = build(header, b"abc");
        let e = stats_path(&f.0, None, &StatsOptions::default(), None).unwrap_err();
        assert_eq!(e.rule(), "data-too-short");
    }
}
