//! `verify --values`: NaN/Inf counts of floating-point tensors and bytes
//! other than 0 and 1 in BOOL tensors, across threads, read with positioned
//! reads (a file truncated underneath gives an error, never SIGBUS).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use crate::source::Source;
use crate::values::{count_values, ValueCounts};
use crate::{Finding, Progress, RuleId};
use fastst_core::internal::{thread_count, zeroed};
use fastst_core::{Dtype, Error, Result};

/// Bytes read and counted at a time (a multiple of every element size).
const BLOCK: usize = 8 << 20;

/// One tensor whose values can be scanned.
pub(super) struct ScanItem {
    pub name: String,
    pub dtype: Dtype,
    pub abs_begin: u64,
    pub len: u64,
}

/// Scans the values of `items` across threads; one finding per tensor with
/// NaN/Inf values or bad booleans, in file order.
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
    let next = AtomicUsize::new(0);
    let done = AtomicU64::new(0);
    let results: Mutex<Vec<(usize, Finding)>> = Mutex::new(Vec::new());
    let failure: Mutex<Option<Error>> = Mutex::new(None);
    let fail = |e: Error| {
        failure
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_or_insert(e);
    };
    let workers = thread_count(threads).min(items.len()).max(1);
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| {
                let mut local = Vec::new();
                let mut buf = match zeroed(BLOCK.min(max_len) as u64, "") {
                    Ok(b) => b,
                    Err(e) => return fail(e),
                };
                'items: loop {
                    let k = next.fetch_add(1, Ordering::Relaxed);
                    let Some(&i) = order.get(k) else { break };
                    let item = &items[i];
                    let end = item.abs_begin.saturating_add(item.len).min(src.len);
                    let mut pos = item.abs_begin.min(end);
                    let mut counts = ValueCounts::default();
                    while pos < end {
                        let n = (end - pos).min(buf.len() as u64) as usize;
                        let piece = &mut buf[..n];
                        if let Err(e) = src.read_exact_at(piece, pos) {
                            fail(e);
                            break 'items;
                        }
                        pos += n as u64;
                        let c = count_values(item.dtype, piece);
                        counts.nan += c.nan;
                        counts.inf += c.inf;
                        counts.bad_bool += c.bad_bool;
                        let d = done.fetch_add(piece.len() as u64, Ordering::Relaxed)
                            + piece.len() as u64;
                        if let Some(report) = progress {
                            report(d, total);
                        }
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
                }
                results
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .extend(local);
            });
        }
    });
    if let Some(e) = failure.into_inner().unwrap_or_else(|p| p.into_inner()) {
        return Err(e);
    }
    let mut found = results.into_inner().unwrap_or_else(|p| p.into_inner());
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
