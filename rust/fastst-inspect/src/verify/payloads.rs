//! Other formats' files where a safetensors file should hold only numbers
//! ([`crate::payload`]): the file's first bytes walked as a pickle from
//! offset 0, the header-length prefix included (a polyglot that
//! `pickle.load` or `torch.load` would run), and, without reading every
//! byte, the start of each tensor (its first [`HEAD`] bytes, neighbours
//! read together, a batch of reads at a time). The value scan
//! (`verify --values`, [`super::scan`]) looks at every offset of every
//! tensor instead.

use std::ops::Range;

use crate::payload::{self, pickle, Found, HEAD, OVERLAP};
use crate::source::Source;
use crate::{Finding, RuleId, Severity};
use fastst_core::internal::zeroed;
use fastst_core::Result;

/// One tensor's bytes in the file.
pub(super) struct Placed {
    pub name: String,
    pub abs_begin: u64,
    pub len: u64,
}

/// Most bytes one read of neighbouring heads covers.
const RUN: u64 = 1 << 20;

/// Most bytes of heads held at once.
const BATCH: u64 = 8 << 20;

/// Most of the file's first bytes walked as a pickle.
const PREFIX_WALK: u64 = 1 << 20;

/// The `tensor-payload` finding for what `found` holds of tensor `name`
/// (`len` bytes at file offset `abs_begin`).
pub(super) fn tensor_finding(
    name: &str,
    abs_begin: u64,
    len: u64,
    found: &Found,
) -> Option<Finding> {
    let p = found.first.as_ref()?;
    let at = abs_begin + p.at as u64;
    let more = match found.count {
        0 | 1 => String::new(),
        n => format!("; {n} places in all"),
    };
    let mut f = Finding::new(
        RuleId::TensorPayload,
        format!(
            "tensor {name:?}: its bytes hold {} at file offset {at} (byte {} of {len}){more}",
            p.what, p.at
        ),
    )
    .tensor(name)
    .count(found.count.max(1));
    f.offset = Some(at);
    f.length = p.len.map(|n| n as u64);
    Some(f)
}

/// A `pickle-prefix` finding when the file's first bytes, from offset 0,
/// walk as a pickle program (critical when it imports or calls).
pub(super) fn prefix_pickle(src: &Source, out: &mut Vec<Finding>) -> Result<()> {
    let mut first = src.read_range(0, OVERLAP as u64)?;
    let mut w = pickle::walk(&first, src.len);
    if w.outcome == pickle::Outcome::Unfinished && (first.len() as u64) < src.len {
        first = src.read_range(0, PREFIX_WALK)?;
        w = pickle::walk(&first, src.len);
    }
    let counts = match w.outcome {
        pickle::Outcome::Program => w.ops >= 2 || w.code,
        pickle::Outcome::Unfinished => w.code && w.ops >= 4,
        pickle::Outcome::Invalid => false,
    };
    if !counts {
        return Ok(());
    }
    let what = match &w.import {
        Some(name) => format!("a pickle program that imports {name}"),
        None if w.code => "a pickle program that calls code".to_owned(),
        None => "a pickle program".to_owned(),
    };
    let size = match w.outcome {
        pickle::Outcome::Program => format!("{} bytes", w.len),
        _ => format!("{}+ bytes", w.len),
    };
    let severity = if w.code {
        Severity::Critical
    } else {
        Severity::High
    };
    out.push(
        Finding::new(
            RuleId::PicklePrefix,
            format!(
                "the file's first {size}, its 8-byte header-length prefix included, also parse as {what}: pickle.load or torch.load of this file runs it"
            ),
        )
        .severity(severity)
        .at(0, w.len as u64),
    );
    Ok(())
}

/// `tensor-payload` findings for the tensors whose first bytes hold
/// another format's file; `tensors` may be in any order and overlap.
pub(super) fn head_findings(
    src: &Source,
    tensors: &[Placed],
    out: &mut Vec<Finding>,
) -> Result<()> {
    let mut order: Vec<&Placed> = tensors
        .iter()
        .filter(|t| t.len > 0 && t.abs_begin < src.len)
        .collect();
    order.sort_by_key(|t| t.abs_begin);
    let head = |t: &Placed| t.abs_begin..(t.abs_begin + t.len.min(HEAD as u64)).min(src.len);
    // Runs of neighbouring heads, each read as one range.
    let gap = src.coalesce_gap();
    let mut runs: Vec<(Range<u64>, Range<usize>)> = Vec::new();
    for (k, t) in order.iter().enumerate() {
        let h = head(t);
        match runs.last_mut() {
            Some((r, members))
                if h.start <= r.end.saturating_add(gap) && h.end.max(r.end) - r.start <= RUN =>
            {
                r.end = r.end.max(h.end);
                members.end = k + 1;
            }
            _ => runs.push((h, k..k + 1)),
        }
    }
    let mut found: Vec<(u64, Finding)> = Vec::new();
    let mut batch_start = 0;
    while batch_start < runs.len() {
        let mut batch_end = batch_start;
        let mut bytes = 0u64;
        while batch_end < runs.len() && (batch_end == batch_start || bytes < BATCH) {
            bytes += runs[batch_end].0.end - runs[batch_end].0.start;
            batch_end += 1;
        }
        let batch = &runs[batch_start..batch_end];
        let mut bufs = Vec::with_capacity(batch.len());
        for (r, _) in batch {
            bufs.push(zeroed(r.end - r.start, "")?);
        }
        {
            let mut reads: Vec<(u64, &mut [u8])> = batch
                .iter()
                .zip(bufs.iter_mut())
                .map(|((r, _), b)| (r.start, &mut b[..]))
                .collect();
            src.read_many(&mut reads)?;
        }
        for ((r, members), buf) in batch.iter().zip(&bufs) {
            for t in &order[members.clone()] {
                let h = head(t);
                let slice = &buf[(h.start - r.start) as usize..(h.end - r.start) as usize];
                let seen = payload::at_start(slice, t.len)
                    .or_else(|| payload::text_script(slice))
                    .map_or_else(
                        || payload::scan(slice, 0, slice.len(), t.len).0,
                        |p| Found {
                            first: Some(p),
                            count: 1,
                        },
                    );
                if let Some(f) = tensor_finding(&t.name, t.abs_begin, t.len, &seen) {
                    found.push((t.abs_begin, f));
                }
            }
        }
        batch_start = batch_end;
    }
    found.sort_by_key(|(at, _)| *at);
    out.extend(found.into_iter().map(|(_, f)| f));
    Ok(())
}
