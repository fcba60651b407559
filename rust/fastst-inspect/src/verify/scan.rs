//! `verify --values`: NaN/Inf counts of floating-point tensors, bytes
//! other than 0 and 1 in BOOL tensors, and other formats' files anywhere in
//! any tensor's bytes ([`crate::payload::scan`], windows of [`BLOCK`] bytes
//! read with [`OVERLAP`] more), across threads, read with positioned reads
//! (a file truncated underneath gives an error, never SIGBUS).

use std::sync::atomic::{AtomicU64, Ordering};

use super::payloads::tensor_finding;
use crate::payload::{self, Found, OVERLAP};
use crate::source::Source;
use crate::values::{count_values, ValueCounts};
use crate::{Finding, Progress, RuleId};
use fastst_core::internal::{fan_out, thread_count, zeroed};
use fastst_core::{Dtype, Result};

/// Bytes read and counted at a time (a multiple of every element size).
const BLOCK: usize = 8 << 20;

/// One tensor whose bytes are scanned.
pub(super) struct ScanItem {
    pub name: String,
    pub dtype: Dtype,
    pub abs_begin: u64,
    pub len: u64,
    /// Whether its values are counted (floating-point kinds and BOOL);
    /// every tensor's bytes are scanned for other formats' files.
    pub values: bool,
}

/// Scans `items` across threads; one finding per tensor with NaN/Inf
/// values, bad booleans or another format's file, in file order.
pub(super) fn scan_values(
    src: &Source,
    items: &[ScanItem],
    threads: usize,
    progress: Progress,
) -> Result<Vec<Finding>> {
    if items.is_empty() {
        return Ok(Vec::new());
    }
    let total: u64 = items.iter().map(|i| i.len).sum();
    let max_len = items.iter().map(|i| i.len).max().unwrap_or(0);
    let max_len = usize::try_from(max_len).unwrap_or(BLOCK);
    // Largest first, so that threads finish together.
    let mut order: Vec<usize> = (0..items.len()).collect();
    order.sort_unstable_by(|&a, &b| items[b].len.cmp(&items[a].len));
    let done = AtomicU64::new(0);
    let init = || -> Result<_> {
        let buf = zeroed((BLOCK + OVERLAP).min(max_len) as u64, "")?;
        Ok((buf, Vec::new()))
    };
    let each = |(buf, local): &mut (Vec<u8>, Vec<(usize, Finding)>), k: usize| -> Result<()> {
        let i = order[k];
        let item = &items[i];
        let end = item.abs_begin.saturating_add(item.len).min(src.len);
        let mut pos = item.abs_begin.min(end);
        let mut counts = ValueCounts::default();
        let mut files = Found::default();
        let mut from = 0;
        while pos < end {
            // BLOCK bytes counted and scanned, read with up to
            // OVERLAP more for a file that starts near the end.
            let n = (end - pos).min(BLOCK as u64) as usize;
            let w = (end - pos).min(buf.len() as u64) as usize;
            let piece = &mut buf[..w];
            src.read_exact_at(piece, pos)?;
            let shift = (pos - item.abs_begin) as usize;
            if shift == 0 {
                if let Some(p) =
                    payload::at_start(piece, end - pos).or_else(|| payload::text_script(piece))
                {
                    from = p.len.unwrap_or(1);
                    files.add(
                        Found {
                            first: Some(p),
                            count: 1,
                        },
                        0,
                    );
                }
            }
            let (seen, next) = payload::scan(piece, from, n, end - pos);
            files.add(seen, shift);
            from = next.saturating_sub(n);
            pos += n as u64;
            if item.values {
                let c = count_values(item.dtype, &piece[..n]);
                counts.nan += c.nan;
                counts.inf += c.inf;
                counts.bad_bool += c.bad_bool;
            }
            let d = done.fetch_add(n as u64, Ordering::Relaxed) + n as u64;
            if let Some(report) = progress {
                report(d, total);
            }
        }
        if let Some(f) = tensor_finding(&item.name, item.abs_begin, item.len, &files) {
            local.push((i, f));
        }
        if counts.nan + counts.inf > 0 {
            local.push((
                i,
                Finding::new(
                    RuleId::NonFiniteValues,
                    format!(
                        "tensor {:?} ({}): {} NaN and {} infinite value{}",
                        item.name,
                        item.dtype,
                        counts.nan,
                        counts.inf,
                        if counts.inf == 1 { "" } else { "s" }
                    ),
                )
                .tensor(&item.name)
                .at(item.abs_begin, item.len)
                .count(counts.nan + counts.inf),
            ));
        }
        if counts.bad_bool > 0 {
            local.push((
                i,
                Finding::new(
                    RuleId::InvalidBool,
                    format!(
                        "tensor {:?} (BOOL): {} {} neither 0 nor 1",
                        item.name,
                        counts.bad_bool,
                        if counts.bad_bool == 1 {
                            "byte is"
                        } else {
                            "bytes are"
                        }
                    ),
                )
                .tensor(&item.name)
                .at(item.abs_begin, item.len)
                .count(counts.bad_bool),
            ));
        }
        Ok(())
    };
    let workers = thread_count(threads);
    let states = fan_out(items.len(), workers, "a value scan", init, each)?;
    let mut found: Vec<(usize, Finding)> = states.into_iter().flat_map(|(_, l)| l).collect();
    found.sort_by_key(|(i, _)| (items[*i].abs_begin, *i));
    Ok(found.into_iter().map(|(_, f)| f).collect())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::testfs::raw;

    #[test]
    fn a_file_truncated_while_scanned_is_an_error_not_sigbus() {
        let mut data = vec![0u8; 2 * BLOCK];
        data[..4].copy_from_slice(&f32::NAN.to_le_bytes());
        let f = raw(&data);
        let src = Source::open(&f.0).unwrap();
        let items = [ScanItem {
            name: "x".to_owned(),
            dtype: Dtype::F32,
            abs_begin: 0,
            len: data.len() as u64,
            values: true,
        }];
        let found = scan_values(&src, &items, 2, None).unwrap();
        assert_eq!(found.len(), 1);
        std::fs::OpenOptions::new()
            .write(true)
            .open(&f.0)
            .unwrap()
            .set_len(BLOCK as u64 / 2)
            .unwrap();
        let e = scan_values(&src, &items, 2, None).unwrap_err();
        assert_eq!(e.rule(), "file-changed");
    }
}
