//! Parts of a tensor: the bytes a basic index selects (a start, a count
//! and a step per dimension), read through the file's [`Source`] with few
//! requests and nothing else.
//!
//! A selection is a sequence of *runs*: byte ranges of the tensor, in
//! increasing order, whose bytes laid end to end are the selected elements
//! in C order ([`Runs`], made one at a time as they are read, never listed
//! whole). Runs closer together than the source's
//! [`Source::coalesce_gap`] are read as one range (the bytes between are
//! dropped); the reads of a batch go to [`Source::read_many`] together,
//! which a remote source runs concurrently. Beyond the destination, memory
//! stays bounded whatever the index: at most [`BATCH_RUNS`] runs and
//! [`BATCH_SCRATCH`] bytes of coalesced ranges at a time.
//!
//! The read-ahead asks the same question without reading: [`slice_ranges`]
//! lists a selection's byte ranges from the same runs, joined by the same
//! rule (`joins`).

use std::ops::Range;

use crate::dtype::Dtype;
use crate::error::{Error, Result};
use crate::io;
use crate::read::MappedFile;
use crate::table::TensorInfo;
use crate::validate::entry;

/// What a slice takes of one dimension: `count` indices from `start`,
/// `step` apart (`step` >= 1; a count of 0 selects nothing).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dim {
    /// The first index.
    pub start: u64,
    /// How many indices.
    pub count: u64,
    /// The distance between two indices.
    pub step: u64,
}

/// Runs a batch holds at most (their bookkeeping: 16 bytes each).
pub const BATCH_RUNS: usize = 1 << 16;

/// Bytes of coalesced ranges (read whole, then the runs copied out) a
/// batch holds at most, and so the memory a slice takes beyond its result.
pub const BATCH_SCRATCH: u64 = 64 << 20;

/// A coalesced range spans at most this many bytes: the batches' memory
/// limit is then met within one range.
const RANGE_CAP: u64 = 8 << 20;

/// The runs of a selection, in increasing order: byte ranges of the
/// tensor (offsets from its first byte).
#[derive(Clone, Debug)]
pub struct Runs {
    /// The dimensions walked one index at a time, outermost first:
    /// `(count, bits from one index to the next)`.
    axes: Vec<(u64, u64)>,
    /// The index reached in each of `axes`.
    at: Vec<u64>,
    /// Bit offset of the next run.
    next: u64,
    /// Bits per run.
    len: u64,
    /// Runs not returned yet.
    left: u64,
}

impl Runs {
    /// The runs of `dims` (one per dimension) of tensor `info`, or rule
    /// `read-past-end` when they do not fit its shape, or rule
    /// `sub-byte-not-whole` when packed elements would be cut inside a byte.
    pub fn new(info: &TensorInfo, dims: &[Dim]) -> Result<Runs> {
        let outside = |reason: String| Error::SliceOutside {
            tensor: info.name.clone(),
            reason,
        };
        if dims.len() != info.shape.len() {
            return Err(outside(format!(
                "has {} dimensions, the tensor {}",
                dims.len(),
                info.shape.len()
            )));
        }
        // An empty selection reads nothing: its other dimensions may be
        // anything.
        let empty = dims.iter().any(|d| d.count == 0);
        for (axis, (d, &n)) in dims.iter().zip(&info.shape).enumerate() {
            let last = (d.count.saturating_sub(1))
                .checked_mul(d.step)
                .and_then(|s| s.checked_add(d.start));
            if !empty && (d.step == 0 || last.is_none_or(|l| l >= n)) {
                return Err(outside(format!(
                    "takes {} indices from {} step {} of dimension {axis}, which holds {n}",
                    d.count, d.start, d.step
                )));
            }
        }
        // Bits from one index to the next, per dimension; a validated
        // tensor's bit count fits in 64 bits, and so does each stride.
        let mut strides = vec![0u64; dims.len()];
        let mut stride = info.dtype.bits();
        for (s, &n) in strides.iter_mut().zip(&info.shape).rev() {
            *s = stride;
            stride = stride.saturating_mul(n);
        }
        // The innermost whole dimensions, and the one before them when it
        // takes consecutive indices, are one run.
        let mut k = dims.len();
        let mut len = info.dtype.bits();
        let mut next = 0u64;
        while k > 0
            && dims[k - 1]
                == (Dim {
                    start: 0,
                    count: info.shape[k - 1],
                    step: 1,
                })
        {
            k -= 1;
            len = strides[k].saturating_mul(info.shape[k]);
        }
        if k > 0 && (dims[k - 1].step == 1 || dims[k - 1].count == 1) {
            k -= 1;
            len = strides[k].saturating_mul(dims[k].count);
            next = strides[k].saturating_mul(dims[k].start);
        }
        let mut axes = Vec::with_capacity(k);
        let mut count = 1u64;
        for (d, &s) in dims[..k].iter().zip(&strides) {
            next = next.saturating_add(d.start.saturating_mul(s));
            axes.push((d.count, d.step.saturating_mul(s)));
            count = count.saturating_mul(d.count);
        }
        let runs = Runs {
            at: vec![0; axes.len()],
            axes,
            next,
            len,
            left: if empty { 0 } else { count },
        };
        let whole = |bits: u64| bits % 8 == 0;
        if runs.left > 0
            && !(whole(runs.next)
                && whole(runs.len)
                && runs.axes.iter().all(|&(c, d)| c == 1 || whole(d)))
        {
            return Err(Error::SubByteNotWhole {
                tensor: info.name.clone(),
                shape: dims.iter().map(|d| d.count).collect(),
                dtype: info.dtype,
                bits: info.dtype.bits(),
            });
        }
        Ok(runs)
    }

    /// The bytes of the selection (the runs' total).
    pub fn bytes(&self) -> u64 {
        self.left.saturating_mul(self.len / 8)
    }

    /// The bytes from the start of the next run to the end of the last
    /// one, or None when no run is left (or, for a tensor whose bit count
    /// does not fit in 64 bits, which `new` never sees from a validated
    /// header, when the end does not either).
    pub fn span(&self) -> Option<Range<u64>> {
        if self.left == 0 {
            return None;
        }
        // The last run: every axis at its last index.
        let last =
            self.axes
                .iter()
                .zip(&self.at)
                .try_fold(self.next, |bit, (&(count, delta), &at)| {
                    count
                        .saturating_sub(1)
                        .saturating_sub(at)
                        .checked_mul(delta)
                        .and_then(|d| bit.checked_add(d))
                })?;
        Some(self.next / 8..last.checked_add(self.len)? / 8)
    }
}

/// Whether `run` is read in one range with `span`, the range of the runs
/// before it: it starts at most `gap` bytes after `span` ends, and the
/// range stays within [`RANGE_CAP`].
fn joins(span: &Range<u64>, run: &Range<u64>, gap: u64) -> bool {
    run.start.saturating_sub(span.end) <= gap && run.end.saturating_sub(span.start) <= RANGE_CAP
}

/// The byte ranges (offsets from the tensor's first byte) that reading
/// `dims` (one per dimension) of a tensor of `dtype` and `shape` takes, in
/// increasing order: the selection's runs as `Runs` makes them, those
/// that touch joined as the reader joins them (`joins`, with no gap: no
/// byte outside the selection), or, when that leaves more than
/// `max_ranges` ranges, the one range spanning them all. A shape no tensor
/// can have breaks the header's size rule (`size-overflow`,
/// `sub-byte-not-whole`); `dims` are checked as `Runs::new` checks them.
pub fn slice_ranges(
    dtype: Dtype,
    shape: &[u64],
    dims: &[Dim],
    max_ranges: usize,
) -> Result<Vec<Range<u64>>> {
    // The header's size rule, for a shape that did not come from one.
    let len = dtype.byte_len(shape).unwrap_or(0);
    entry::size("", dtype, shape, 0, len)?;
    let info = TensorInfo {
        name: String::new(),
        dtype,
        shape: shape.to_vec(),
        begin: 0,
        end: len,
    };
    let runs = Runs::new(&info, dims)?;
    let span = runs.span().unwrap_or(0..len);
    let mut out: Vec<Range<u64>> = Vec::new();
    for run in runs {
        if let Some(last) = out.last_mut().filter(|last| joins(last, &run, 0)) {
            last.end = run.end;
        } else if out.len() >= max_ranges {
            return Ok(vec![span]);
        } else {
            out.push(run);
        }
    }
    Ok(out)
}

impl Iterator for Runs {
    type Item = Range<u64>;

    fn next(&mut self) -> Option<Range<u64>> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let start = self.next / 8;
        // Odometer: the innermost axis moves first; one that wraps goes
        // back to its first index and moves the next one out. Offsets stay
        // inside the tensor (checked in `new`).
        for ((count, delta), at) in self.axes.iter().zip(self.at.iter_mut()).rev() {
            *at += 1;
            if *at < *count {
                self.next += delta;
                break;
            }
            self.next -= (*count - 1) * delta;
            *at = 0;
        }
        Some(start..start + self.len / 8)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = usize::try_from(self.left).unwrap_or(usize::MAX);
        (n, usize::try_from(self.left).ok())
    }
}

/// Runs read as one range: their span, and their places in the batch's
/// list of runs.
struct Group {
    span: Range<u64>,
    runs: Range<usize>,
    bytes: u64,
}

impl Group {
    fn span_len(&self) -> u64 {
        self.span.end - self.span.start
    }

    /// Read straight into the destination: no bytes between the runs.
    fn direct(&self) -> bool {
        self.span_len() == self.bytes
    }

    /// The scratch memory its read takes.
    fn scratch(&self) -> u64 {
        if self.direct() {
            0
        } else {
            self.span_len()
        }
    }
}

impl MappedFile {
    /// Fills `dst` with the elements of tensor `info` that `dims` (one per
    /// dimension) select, in C order: the selection's runs of bytes, read
    /// through the source, nearby ones as one range, a batch of ranges at a
    /// time (concurrently where the source can). `dst` must hold exactly the
    /// selection (rule `destination-size`); a file changed since it was
    /// opened is rule `file-changed`.
    pub fn read_slice_into(&self, info: &TensorInfo, dims: &[Dim], dst: &mut [u8]) -> Result<()> {
        self.slice_into(info, dims, dst, false)
    }

    /// [`MappedFile::read_slice_into`] reading no byte of a local file
    /// beyond the ranges it reads (a prefetch plan's slices, where the
    /// kernel's read-ahead would bring in the rows other ranks keep): when
    /// most of the selection's pages are not cached (the choice of whole
    /// loads, `load::around_cache`), the ranges are read around the page
    /// cache (`O_DIRECT`, whole blocks); a range whose pages are partly
    /// cached, or on a file system refusing direct reads, through the
    /// cache. Other sources read as [`MappedFile::read_slice_into`].
    pub fn read_slice_around_cache(
        &self,
        info: &TensorInfo,
        dims: &[Dim],
        dst: &mut [u8],
    ) -> Result<()> {
        self.slice_into(info, dims, dst, true)
    }

    fn slice_into(
        &self,
        info: &TensorInfo,
        dims: &[Dim],
        dst: &mut [u8],
        around: bool,
    ) -> Result<()> {
        let runs = Runs::new(info, dims)?;
        if runs.bytes() != dst.len() as u64 {
            return Err(Error::DestinationSize {
                tensor: info.name.clone(),
                what: "the destination",
                expected: runs.bytes(),
                got: dst.len() as u64,
            });
        }
        self.check_unchanged()?;
        let direct = match runs.span() {
            Some(span) if around => {
                crate::load::around_cache(self, info.begin + span.start..info.begin + span.end)
            }
            _ => None,
        };
        let start = self.header().data_start() + info.begin;
        gather(self, direct.as_ref(), start, runs, dst, &info.name)
    }
}

/// Reads `runs` (offsets from `base`) of `file` into `dst`, end to end;
/// through `direct` when given (a range through the source where its
/// direct read falls back).
fn gather(
    file: &MappedFile,
    direct: Option<&io::DirectFile>,
    base: u64,
    runs: Runs,
    mut dst: &mut [u8],
    tensor: &str,
) -> Result<()> {
    let src = file.source();
    // The partial blocks at either end of a direct read.
    let mut edges = match direct {
        Some(_) => Some(io::ReadBuffer::new(2 * io::DIRECT_ALIGN as usize, tensor)?),
        None => None,
    };
    let gap = src.coalesce_gap();
    let mut runs = runs.peekable();
    let mut listed: Vec<Range<u64>> = Vec::new();
    let mut groups: Vec<Group> = Vec::new();
    let mut scratch: Vec<u8> = Vec::new();
    while runs.peek().is_some() {
        listed.clear();
        groups.clear();
        let mut scratch_len = 0u64;
        while listed.len() < BATCH_RUNS && scratch_len < BATCH_SCRATCH {
            let Some(run) = runs.next() else { break };
            let bytes = run.end - run.start;
            match groups.last_mut() {
                Some(g) if joins(&g.span, &run, gap) => {
                    scratch_len -= g.scratch();
                    g.span.end = run.end;
                    g.runs.end += 1;
                    g.bytes += bytes;
                    scratch_len += g.scratch();
                }
                _ => groups.push(Group {
                    span: run.clone(),
                    runs: listed.len()..listed.len() + 1,
                    bytes,
                }),
            }
            listed.push(run);
        }
        if (scratch.len() as u64) < scratch_len {
            drop(std::mem::take(&mut scratch));
            scratch = io::zeroed(scratch_len, tensor)?;
        }
        // Each group's reads: straight into its part of the destination,
        // or its whole span into scratch memory to copy its runs out of.
        let mut reads: Vec<(u64, &mut [u8])> = Vec::with_capacity(groups.len());
        let mut copies: Vec<(&Group, &mut [u8])> = Vec::new();
        let mut spare = &mut scratch[..];
        for g in &groups {
            let (out, rest) = std::mem::take(&mut dst).split_at_mut(g.bytes as usize);
            dst = rest;
            if g.direct() {
                reads.push((base + g.span.start, out));
            } else {
                let (into, rest) = std::mem::take(&mut spare).split_at_mut(g.span_len() as usize);
                spare = rest;
                reads.push((base + g.span.start, into));
                copies.push((g, out));
            }
        }
        match (direct, edges.as_mut()) {
            (Some(direct), Some(edges)) => {
                for (offset, buf) in reads.iter_mut() {
                    match direct.read_into(*offset, buf, edges.as_mut_slice()) {
                        Some(done) => {
                            done.map_err(|e| crate::read::reading(tensor, file.read_failed(e)))?
                        }
                        None => file.read_at(*offset, buf, tensor)?,
                    }
                }
            }
            _ => src
                .read_many(&mut reads)
                .map_err(|e| crate::read::reading(tensor, e))?,
        }
        drop(reads);
        let mut from = &scratch[..];
        for (g, out) in copies {
            let (span, rest) = from.split_at(g.span_len() as usize);
            from = rest;
            let mut at = 0;
            for run in &listed[g.runs.clone()] {
                let n = (run.end - run.start) as usize;
                let s = (run.start - g.span.start) as usize;
                out[at..at + n].copy_from_slice(&span[s..s + n]);
                at += n;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::read::OpenOptions;
    use crate::source::tests::Memory;
    use crate::source::Source;
    use crate::{Dtype, RuleId};
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Arc, Mutex};

    /// The reads of each `read_many` call: `(offset, length)`.
    type Log = Arc<Mutex<Vec<Vec<(u64, usize)>>>>;

    /// An in-memory file that records its reads, with a chosen gap.
    #[derive(Debug)]
    struct Counting {
        memory: Memory,
        gap: u64,
        log: Log,
    }

    impl Source for Counting {
        fn len(&self) -> u64 {
            self.memory.len()
        }
        fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
            self.memory.read_at(offset, buf)
        }
        fn coalesce_gap(&self) -> u64 {
            self.gap
        }
        fn read_many(&self, reads: &mut [(u64, &mut [u8])]) -> Result<()> {
            let batch = reads.iter().map(|(o, b)| (*o, b.len())).collect();
            self.log.lock().unwrap().push(batch);
            reads
                .iter_mut()
                .try_for_each(|(o, b)| self.memory.read_at(*o, b))
        }
    }

    /// A file of one tensor `t` of `dtype` and `shape` whose byte `i` is
    /// `i * 7 % 251`, read through a [`Counting`] source with `gap`;
    /// its log of reads, and the offset where it ends.
    fn file(dtype: Dtype, shape: &[u64], gap: u64) -> (MappedFile, Log, Arc<AtomicU64>) {
        let len = dtype.byte_len(shape).unwrap();
        let header = format!(
            r#"{{"t":{{"dtype":"{}","shape":{shape:?},"data_offsets":[0,{len}]}}}}"#,
            dtype.name()
        );
        let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
        bytes.extend_from_slice(header.as_bytes());
        bytes.extend((0..len).map(|i| (i * 7 % 251) as u8));
        let memory = Memory::new(bytes);
        let end = Arc::clone(&memory.end);
        let log = Log::default();
        let source = Counting {
            memory,
            gap,
            log: Arc::clone(&log),
        };
        let f = MappedFile::from_source(source, OpenOptions::default()).unwrap();
        (f, log, end)
    }

    /// The reads logged since the last call.
    fn reads(log: &Log) -> Vec<Vec<(u64, usize)>> {
        std::mem::take(&mut *log.lock().unwrap())
    }

    /// The selection read the slow way: each element's bytes, in C order.
    fn brute(info: &TensorInfo, dims: &[Dim]) -> Vec<u8> {
        let size = (info.dtype.bits() / 8) as usize;
        let mut out = Vec::new();
        let mut at = vec![0u64; dims.len()];
        if dims.iter().any(|d| d.count == 0) {
            return out;
        }
        loop {
            let mut element = 0u64;
            for ((d, &n), &i) in dims.iter().zip(&info.shape).zip(&at) {
                element = element * n + d.start + i * d.step;
            }
            let byte = element as usize * size;
            out.extend((byte..byte + size).map(|i| (i * 7 % 251) as u8));
            let mut axis = dims.len();
            loop {
                if axis == 0 {
                    return out;
                }
                axis -= 1;
                at[axis] += 1;
                if at[axis] < dims[axis].count {
                    break;
                }
                at[axis] = 0;
            }
        }
    }

    fn slice(f: &MappedFile, dims: &[Dim]) -> Result<Vec<u8>> {
        let info = f.header().require("t").unwrap();
        let mut out = vec![0u8; Runs::new(info, dims)?.bytes() as usize];
        f.read_slice_into(info, dims, &mut out)?;
        Ok(out)
    }

    fn dim(start: u64, count: u64, step: u64) -> Dim {
        Dim { start, count, step }
    }

    #[test]
    fn slices_are_the_selected_elements_in_c_order() {
        // Every shape up to 3 dimensions of up to 4 indices (and a few
        // others), with pseudo-random selections, through gaps that
        // coalesce nothing, some, or everything.
        let mut seed = 12345u64;
        let mut rand = |n: u64| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) % n
        };
        for case in 0..3000 {
            let ndim = rand(4) as usize;
            let shape: Vec<u64> = (0..ndim).map(|_| rand(5)).collect();
            let dtype = [Dtype::U8, Dtype::F16, Dtype::F32, Dtype::C64][case % 4];
            let gap = [0, 3, 1 << 20][case % 3];
            let (f, log, _) = file(dtype, &shape, gap);
            let info = f.header().require("t").unwrap().clone();
            let dims: Vec<Dim> = shape
                .iter()
                .map(|&n| {
                    if n == 0 || rand(4) == 0 {
                        return dim(0, n, 1);
                    }
                    let start = rand(n);
                    let step = 1 + rand(3);
                    let count = rand((n - start).div_ceil(step) + 1);
                    dim(start, count, step)
                })
                .collect();
            let got = slice(&f, &dims).unwrap();
            assert_eq!(got, brute(&info, &dims), "{shape:?} {dims:?}");
            // Each read lies inside the tensor.
            let data = f.header().data_start();
            for (offset, len) in reads(&log).concat() {
                assert!(offset >= data && offset + len as u64 <= data + info.byte_len());
            }
        }
    }

    /// The byte offsets of the elements `dims` select (whole bytes only).
    fn selected_bytes(dtype: Dtype, shape: &[u64], dims: &[Dim]) -> Vec<u64> {
        let size = dtype.bits() / 8;
        let mut out = Vec::new();
        if dims.iter().any(|d| d.count == 0) {
            return out;
        }
        let mut at = vec![0u64; dims.len()];
        loop {
            let mut element = 0u64;
            for ((d, &n), &i) in dims.iter().zip(shape).zip(&at) {
                element = element * n + d.start + i * d.step;
            }
            out.extend(element * size..(element + 1) * size);
            let mut axis = dims.len();
            loop {
                if axis == 0 {
                    out.sort_unstable();
                    return out;
                }
                axis -= 1;
                at[axis] += 1;
                if at[axis] < dims[axis].count {
                    break;
                }
                at[axis] = 0;
            }
        }
    }

    #[test]
    fn slice_ranges_are_exactly_the_selected_bytes() {
        let mut seed = 777u64;
        let mut rand = |n: u64| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) % n
        };
        for case in 0..3000 {
            let ndim = rand(4) as usize;
            let shape: Vec<u64> = (0..ndim).map(|_| rand(5)).collect();
            let dtype = [Dtype::U8, Dtype::Bf16, Dtype::F32, Dtype::C64][case % 4];
            let dims: Vec<Dim> = shape
                .iter()
                .map(|&n| {
                    if n == 0 || rand(4) == 0 {
                        return dim(0, n, 1);
                    }
                    let start = rand(n);
                    let step = 1 + rand(3);
                    let count = rand((n - start).div_ceil(step) + 1);
                    dim(start, count, step)
                })
                .collect();
            let want = selected_bytes(dtype, &shape, &dims);
            let got = slice_ranges(dtype, &shape, &dims, usize::MAX).unwrap();
            let covered: Vec<u64> = got.iter().flat_map(Clone::clone).collect();
            assert_eq!(covered, want, "{dtype} {shape:?} {dims:?}");
            // Increasing, and joined: no two touch.
            assert!(got.windows(2).all(|w| w[0].end < w[1].start));
            // Above the cap: the one range spanning them.
            if got.len() > 1 {
                let cap = rand(got.len() as u64) as usize;
                let span = (got[0].start, got[got.len() - 1].end);
                assert_eq!(ends(dtype, &shape, &dims, cap), [span]);
                let all = slice_ranges(dtype, &shape, &dims, got.len()).unwrap();
                assert_eq!(all, got);
            }
        }
    }

    /// [`slice_ranges`] as `(start, end)` pairs.
    fn ends(dtype: Dtype, shape: &[u64], dims: &[Dim], max_ranges: usize) -> Vec<(u64, u64)> {
        let got = slice_ranges(dtype, shape, dims, max_ranges).unwrap();
        got.into_iter().map(|r| (r.start, r.end)).collect()
    }

    #[test]
    fn slice_ranges_of_packed_rows_and_odd_shapes() {
        // F4, two per byte: whole rows of whole bytes.
        let rows = [dim(1, 2, 2), dim(0, 6, 1)];
        assert_eq!(ends(Dtype::F4, &[4, 6], &rows, 8), [(3, 6), (9, 12)]);
        let e = slice_ranges(Dtype::F4, &[4, 6], &[dim(1, 2, 2), dim(1, 1, 1)], 8).unwrap_err();
        assert_eq!(e.rule(), RuleId::SubByteNotWhole);
        // Runs that touch (a count of one with any step) are one range.
        let touching = [dim(0, 3, 1), dim(0, 1, 5)];
        assert_eq!(ends(Dtype::F32, &[3, 1], &touching, 8), [(0, 12)]);
        // A scalar; nothing selected; a whole tensor.
        assert_eq!(ends(Dtype::F64, &[], &[], 8), [(0, 8)]);
        let none = [dim(0, 0, 1), dim(9, 9, 9)];
        assert!(ends(Dtype::F32, &[4, 6], &none, 0).is_empty());
        let whole = [dim(0, 1 << 20, 1), dim(0, 1 << 12, 1)];
        assert_eq!(
            ends(Dtype::U8, &[1 << 20, 1 << 12], &whole, 0),
            [(0, 1 << 32)]
        );
        // Shapes no tensor can have, dims outside the shape.
        let huge = [u64::MAX, 2];
        let e = slice_ranges(Dtype::U8, &huge, &[dim(0, 1, 1), dim(0, 1, 1)], 8).unwrap_err();
        assert_eq!(e.rule(), RuleId::SizeOverflow);
        let e = slice_ranges(Dtype::F6E2M3, &[3], &[dim(0, 3, 1)], 8).unwrap_err();
        assert_eq!(e.rule(), RuleId::SubByteNotWhole);
        let e = slice_ranges(Dtype::F32, &[4], &[dim(2, 3, 1)], 8).unwrap_err();
        assert_eq!(e.rule(), RuleId::ReadPastEnd);
    }

    #[test]
    fn the_span_of_the_runs_left() {
        let (f, _, _) = file(Dtype::U8, &[5, 3, 4], 0);
        let info = f.header().require("t").unwrap();
        let mut runs = Runs::new(info, &[dim(0, 3, 2), dim(0, 2, 2), dim(1, 2, 1)]).unwrap();
        let all: Vec<Range<u64>> = runs.clone().collect();
        assert_eq!(runs.span(), Some(all[0].start..all[all.len() - 1].end));
        runs.next();
        assert_eq!(runs.span(), Some(all[1].start..all[all.len() - 1].end));
        assert_eq!(runs.by_ref().count(), all.len() - 1);
        assert_eq!(runs.span(), None);
    }

    #[test]
    fn nearby_runs_are_read_as_one_range_and_distant_ones_alone() {
        // 8 rows of 1000 F32: columns 10..20 are 40 bytes, 3960 apart.
        let column = [dim(0, 8, 1), dim(10, 10, 1)];
        let (far, far_log, _) = file(Dtype::F32, &[8, 1000], 3959);
        let data = far.header().data_start();
        slice(&far, &column).unwrap();
        let want: Vec<(u64, usize)> = (0..8).map(|r| (data + r * 4000 + 40, 40)).collect();
        assert_eq!(reads(&far_log), vec![want]);
        let (near, log, _) = file(Dtype::F32, &[8, 1000], 3960);
        assert_eq!(
            slice(&near, &column).unwrap(),
            slice(&far, &column).unwrap()
        );
        assert_eq!(reads(&log)[0], vec![(data + 40, 7 * 4000 + 40)]);
        // Rows are one range; whole inner dimensions join their rows.
        let (f, log, _) = file(Dtype::U8, &[5, 3, 4], 0);
        let data = f.header().data_start();
        slice(&f, &[dim(1, 3, 1), dim(0, 3, 1), dim(0, 4, 1)]).unwrap();
        assert_eq!(reads(&log), vec![vec![(data + 12, 36)]]);
        slice(&f, &[dim(4, 1, 1), dim(1, 2, 1), dim(0, 4, 1)]).unwrap();
        assert_eq!(reads(&log), vec![vec![(data + 52, 8)]]);
        // A scalar, and an empty selection (nothing read).
        slice(&f, &[dim(2, 1, 1), dim(1, 1, 1), dim(3, 1, 1)]).unwrap();
        assert_eq!(reads(&log), vec![vec![(data + 31, 1)]]);
        assert!(slice(&f, &[dim(9, 0, 1), dim(1, 2, 1), dim(0, 4, 1)])
            .unwrap()
            .is_empty());
        assert!(reads(&log).is_empty());
    }

    #[test]
    fn memory_beyond_the_result_stays_bounded() {
        // One byte of each of 150 000 rows, far apart: one read each, in
        // batches of at most BATCH_RUNS.
        let (f, log, _) = file(Dtype::U8, &[150_000, 3], 0);
        let got = slice(&f, &[dim(0, 150_000, 1), dim(1, 1, 1)]).unwrap();
        assert_eq!(got.len(), 150_000);
        let batches = reads(&log);
        assert_eq!(batches.iter().map(Vec::len).sum::<usize>(), 150_000);
        assert!(batches.iter().all(|b| b.len() <= BATCH_RUNS));
        // Everything coalesces: ranges of at most RANGE_CAP bytes.
        let (f, log, _) = file(Dtype::U8, &[RANGE_CAP * 3 / 4096, 4096], 1 << 20);
        let rows = RANGE_CAP * 3 / 4096;
        slice(&f, &[dim(0, rows, 1), dim(7, 1, 1)]).unwrap();
        let ranges = reads(&log).concat();
        assert!(ranges.len() >= 3, "{}", ranges.len());
        assert!(ranges.iter().all(|&(_, n)| n as u64 <= RANGE_CAP));
    }

    #[test]
    fn slices_outside_the_tensor_or_its_bytes_are_refused() {
        let (f, _, _) = file(Dtype::F32, &[4, 6], 0);
        let outside = [
            vec![dim(0, 4, 1)],
            vec![dim(0, 4, 1), dim(0, 6, 1), dim(0, 1, 1)],
            vec![dim(0, 5, 1), dim(0, 6, 1)],
            vec![dim(1, 2, 3), dim(0, 6, 1)],
            vec![dim(0, 2, 0), dim(0, 6, 1)],
            vec![dim(0, 2, u64::MAX), dim(0, 6, 1)],
        ];
        for dims in outside {
            let e = slice(&f, &dims).unwrap_err();
            assert_eq!(
                (e.rule(), e.tensor()),
                (RuleId::ReadPastEnd, Some("t")),
                "{e}"
            );
        }
        let e = slice(&f, &[dim(0, 3, 1), dim(0, 7, 1)]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "tensor \"t\": the slice takes 7 indices from 0 step 1 of dimension 1, which holds 6"
        );
        let info = f.header().require("t").unwrap();
        let e = f
            .read_slice_into(info, &[dim(0, 1, 1), dim(0, 6, 1)], &mut [0u8; 23])
            .unwrap_err();
        assert_eq!(e.rule(), RuleId::DestinationSize);
        // Packed elements: whole rows of whole bytes only.
        let (f, _, _) = file(Dtype::F4, &[3, 4], 0);
        assert_eq!(slice(&f, &[dim(1, 2, 1), dim(0, 4, 1)]).unwrap().len(), 4);
        let e = slice(&f, &[dim(1, 2, 1), dim(1, 2, 1)]).unwrap_err();
        assert_eq!(e.rule(), RuleId::SubByteNotWhole);
        // A source that shrank underneath: file-changed.
        let (f, _, end) = file(Dtype::U8, &[100, 100], 0);
        end.store(f.header().data_start() + 5000, Ordering::Relaxed);
        let e = slice(&f, &[dim(0, 100, 1), dim(3, 2, 1)]).unwrap_err();
        assert_eq!(e.rule(), RuleId::FileChanged, "{e}");
    }
}
