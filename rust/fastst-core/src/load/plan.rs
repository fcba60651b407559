//! A load's read requests: the destinations, in file order, cut into
//! pieces of about `piece` source bytes (conversions: at most, in whole
//! elements, the destination split to match; copies: on the file's
//! [`DIRECT_ALIGN`] block boundaries, so that a direct read straight into
//! the destination reads no partial block inside a tensor), runs of small
//! neighbouring tensors joined into one.

use super::{Destination, HUGE_PAGE, SMALL};
use crate::dtype::Dtype;
use crate::io::DIRECT_ALIGN;
use crate::table::TensorInfo;

/// A tensor (or part of one) inside a read request.
#[derive(Debug)]
pub(super) struct Member<'a> {
    pub(super) info: &'a TensorInfo,
    pub(super) to: Dtype,
    /// Source bytes.
    pub(super) len: usize,
    pub(super) dst: &'a mut [u8],
}

/// One read request: a contiguous range of the file's data section and the
/// tensors (or parts) it holds, in order.
#[derive(Debug)]
pub(super) struct Part<'a> {
    /// Start in the data section.
    pub(super) begin: u64,
    /// Source bytes.
    pub(super) len: usize,
    pub(super) members: Vec<Member<'a>>,
    /// On the first request of a copy read straight into a destination of
    /// at least [`HUGE_PAGE`] bytes: that whole destination (its address
    /// and length) and where its tensor ends in the data section, for the
    /// huge-page choice made when the request is handed out.
    pub(super) span: Option<Span>,
    /// Whether the destination was advised huge pages when the request was
    /// handed out (set then).
    pub(super) huge: bool,
    /// Every member is a copy (a whole tensor or part of one), and one
    /// request fills them all, in order, straight into their destinations
    /// ([`plan_requests`]).
    pub(super) scatter: bool,
}

/// A whole destination, as numbers (see [`Part::span`]).
#[derive(Clone, Copy, Debug)]
pub(super) struct Span {
    pub(super) addr: usize,
    pub(super) len: usize,
    pub(super) end: u64,
}

impl<'a> Part<'a> {
    /// The request for `len` source bytes of one tensor from `offset` in
    /// it, read (converted `to`) into `dst`.
    fn of(info: &'a TensorInfo, to: Dtype, offset: u64, len: usize, dst: &'a mut [u8]) -> Self {
        Part {
            begin: info.begin + offset,
            len,
            members: vec![Member { info, to, len, dst }],
            span: None,
            huge: false,
            scatter: false,
        }
    }

    /// True when the part is one plain copy that can be read straight into
    /// its destination.
    pub(super) fn is_direct_copy(&self) -> bool {
        self.members.len() == 1 && self.members[0].to == self.members[0].info.dtype
    }
}

/// Splits the destinations (in file order) into read requests: copies
/// into requests of about `piece` source bytes, conversions and runs of
/// small tensors (which go through a buffer per thread) into requests of
/// at most `buffered` bytes; the data section starts at `data_start` in the
/// file.
pub(super) fn plan(
    mut dests: Vec<Destination<'_>>,
    piece: usize,
    buffered: usize,
    data_start: u64,
) -> Vec<Part<'_>> {
    dests.sort_by_key(|d| d.info.begin);
    let mut parts: Vec<Part<'_>> = Vec::new();
    let mut run: Option<Part<'_>> = None;
    for d in dests {
        let len = d.info.byte_len();
        if len == 0 {
            continue;
        }
        if len < SMALL {
            let fits = run.as_ref().is_some_and(|r| {
                r.begin + r.len as u64 == d.info.begin && r.len + len as usize <= buffered
            });
            if !fits {
                parts.extend(run.take());
            }
            let r = run.get_or_insert_with(|| Part {
                begin: d.info.begin,
                len: 0,
                members: Vec::new(),
                span: None,
                huge: false,
                scatter: false,
            });
            r.len += len as usize;
            r.members.push(Member {
                info: d.info,
                to: d.to,
                len: len as usize,
                dst: d.dst,
            });
            continue;
        }
        parts.extend(run.take());
        if d.to == d.info.dtype && piece as u64 >= DIRECT_ALIGN {
            // Each cut at the last block boundary before the next `piece`.
            let at = data_start + d.info.begin;
            let span = (d.dst.len() >= HUGE_PAGE).then_some(Span {
                addr: d.dst.as_ptr() as usize,
                len: d.dst.len(),
                end: d.info.end,
            });
            let first = parts.len();
            let (mut offset, mut rest) = (0u64, d.dst);
            while !rest.is_empty() {
                let cut = (at + offset + piece as u64) / DIRECT_ALIGN * DIRECT_ALIGN - at;
                let n = (cut - offset).min(rest.len() as u64) as usize;
                let (dst, tail) = std::mem::take(&mut rest).split_at_mut(n);
                parts.push(Part::of(d.info, d.to, offset, n, dst));
                offset += n as u64;
                rest = tail;
            }
            if let Some(p) = parts.get_mut(first) {
                p.span = span;
            }
            continue;
        }
        let (fs, ts) = (elem_size(d.info.dtype), elem_size(d.to));
        // Whole source elements per piece; the destination is split to match.
        let src_piece = (buffered / fs).max(1) * fs;
        let dst_piece = src_piece / fs * ts;
        let mut offset = 0u64;
        for dst in d.dst.chunks_mut(dst_piece) {
            let n = dst.len() / ts * fs;
            parts.push(Part::of(d.info, d.to, offset, n, dst));
            offset += n as u64;
        }
    }
    parts.extend(run);
    parts
}

/// The read requests of a load from a source that waits on a network,
/// where each request costs a round trip and the server's work: the copies,
/// in file order, as one stream of bytes cut into requests of at most
/// `piece` bytes that span the ends of tensors (one request fills several
/// destinations, straight), each ending where the object's offset is a
/// multiple of `align` when one lies within it (where a multipart upload
/// put the ends of its parts). Conversions are cut as [`plan`] cuts them
/// (at most `buffered` bytes, through a buffer), and break the stream;
/// so do gaps between tensors. The data section starts at `data_start`.
pub(super) fn plan_requests(
    mut dests: Vec<Destination<'_>>,
    piece: usize,
    align: usize,
    buffered: usize,
    data_start: u64,
) -> Vec<Part<'_>> {
    dests.sort_by_key(|d| d.info.begin);
    let (piece, align) = (piece.max(1) as u64, align.max(1) as u64);
    let mut parts: Vec<Part<'_>> = Vec::new();
    let mut open: Option<Part<'_>> = None;
    // Conversions in a row, planned together (runs of small ones joined).
    let mut converted: Vec<Destination<'_>> = Vec::new();
    for d in dests {
        let len = d.info.byte_len();
        if len == 0 {
            continue;
        }
        if d.to != d.info.dtype {
            parts.extend(open.take());
            converted.push(d);
            continue;
        }
        if !converted.is_empty() {
            let run = std::mem::take(&mut converted);
            parts.extend(plan(run, buffered, buffered, data_start));
        }
        let (mut offset, mut rest) = (0u64, d.dst);
        while !rest.is_empty() {
            let at = d.info.begin + offset;
            if open.as_ref().is_some_and(|r| r.begin + r.len as u64 != at) {
                parts.extend(open.take());
            }
            let r = open.get_or_insert_with(|| Part {
                begin: at,
                len: 0,
                members: Vec::new(),
                span: None,
                huge: false,
                scatter: true,
            });
            let end = request_end(data_start + r.begin, piece, align) - data_start;
            let n = (end - at).min(rest.len() as u64) as usize;
            let (dst, tail) = std::mem::take(&mut rest).split_at_mut(n);
            r.members.push(Member {
                info: d.info,
                to: d.to,
                len: n,
                dst,
            });
            r.len += n;
            offset += n as u64;
            rest = tail;
            if at + n as u64 == end {
                parts.extend(open.take());
            }
        }
    }
    parts.extend(open);
    parts.extend(plan(converted, buffered, buffered, data_start));
    parts
}

/// Where a request starting at `start` (an offset of the object) ends: at
/// most `piece` bytes on, at the last multiple of `align` up to there when
/// there is one past `start`.
fn request_end(start: u64, piece: u64, align: u64) -> u64 {
    let limit = start.saturating_add(piece);
    let aligned = limit / align * align;
    if aligned > start {
        aligned
    } else {
        limit
    }
}

/// Bytes per element, 1 for the sub-byte kinds (only ever copied, as bytes).
pub(super) fn elem_size(dtype: Dtype) -> usize {
    ((dtype.bits() / 8) as usize).max(1)
}
