//! `verify --values`: NaN/Inf counts of floating-point tensors and bytes
//! other than 0 and 1 in BOOL tensors, across threads.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use super::super::source::Source;
use super::super::values::{count_values, ValueCounts};
use super::super::{Finding, Progress, RuleId};
use crate::dtype::Dtype;
use crate::error::Result;
use crate::parallel::thread_count;

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
    let Some(map) = src.map()? else {
        return Ok(Vec::new());
    };
    let bytes: &[u8] = &map;
    let total: u64 = items.iter().map(|i| i.len).sum();
    // Largest first, so that threads finish together.
    let mut order: Vec<usize> = (0..items.len()).collect();
    order.sort_unstable_by(|&a, &b| items[b].len.cmp(&items[a].len));
    let next = AtomicUsize::new(0);
    let done = AtomicU64::new(0);
    let results: Mutex<Vec<(usize, Finding)>> = Mutex::new(Vec::new());
    let workers = thread_count(threads).min(items.len()).max(1);
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| {
                let mut local = Vec::new();
                loop {
                    let k = next.fetch_add(1, Ordering::Relaxed);
                    let Some(&i) = order.get(k) else { break };
                    let item = &items[i];
                    let range = usize::try_from(item.abs_begin)
                        .ok()
                        .zip(usize::try_from(item.abs_begin.saturating_add(item.len)).ok())
                        .and_then(|(a, b)| bytes.get(a..b));
                    let Some(data) = range else { continue };
                    let mut counts = ValueCounts::default();
                    for piece in data.chunks(8 << 20) {
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
    let mut found = results.into_inner().unwrap_or_else(|p| p.into_inner());
    found.sort_by_key(|(i, _)| (items[*i].abs_begin, *i));
    Ok(found.into_iter().map(|(_, f)| f).collect())
}
