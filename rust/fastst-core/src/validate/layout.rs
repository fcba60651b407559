//! The layout rules: tensors' byte ranges must tile the byte buffer
//! exactly (no hole, no overlap, nothing past the end, no trailing bytes),
//! and no name may appear twice. One walk finds every issue and hands it to
//! a sink: the strict reader stops at the first, `verify` reports them all
//! (with its own forensic reading of some: aliases, ghosts, hidden bytes).

use std::ops::ControlFlow;

use crate::error::{Error, Result};
use crate::header::TensorInfo;

/// A tensor's byte range in the buffer.
pub(crate) trait Extent {
    /// The tensor's name.
    fn name(&self) -> &str;
    /// First byte, relative to the byte buffer.
    fn begin(&self) -> u64;
    /// One past the last byte.
    fn end(&self) -> u64;
}

impl Extent for TensorInfo {
    fn name(&self) -> &str {
        &self.name
    }
    fn begin(&self) -> u64 {
        self.begin
    }
    fn end(&self) -> u64 {
        self.end
    }
}

/// A named byte range (what `verify` knows of an entry with usable offsets).
pub(crate) struct Span<'a> {
    /// The tensor's name.
    pub name: &'a str,
    /// First byte.
    pub begin: u64,
    /// One past the last byte.
    pub end: u64,
}

impl Extent for Span<'_> {
    fn name(&self) -> &str {
        self.name
    }
    fn begin(&self) -> u64 {
        self.begin
    }
    fn end(&self) -> u64 {
        self.end
    }
}

/// Sorts extents into file order: by offsets, then name.
pub(crate) fn sort<T: Extent>(extents: &mut [T]) {
    extents.sort_unstable_by(|a, b| {
        (a.begin(), a.end())
            .cmp(&(b.begin(), b.end()))
            .then_with(|| a.name().cmp(b.name()))
    });
}

/// One way the byte ranges fail to tile the buffer, found by [`walk`].
pub(crate) enum Issue<'a, T> {
    /// `t` ends past the end of the buffer.
    PastEnd {
        /// The tensor.
        t: &'a T,
        /// Length of the byte buffer.
        buffer_len: u64,
    },
    /// Bytes `[expected, t.begin)` belong to no tensor.
    Hole {
        /// The tensor after the hole.
        t: &'a T,
        /// Where the previous tensors end.
        expected: u64,
    },
    /// `t` begins before the previous tensors end (at `cursor`); `last` is
    /// the last non-empty tensor before it.
    Overlap {
        /// The tensor.
        t: &'a T,
        /// The last non-empty tensor before it.
        last: Option<&'a T>,
        /// Where the previous tensors end.
        cursor: u64,
    },
    /// Bytes `[covered, available)` after the last tensor belong to none.
    Trailing {
        /// Bytes the tensors cover.
        covered: u64,
        /// Length of the byte buffer.
        available: u64,
    },
}

impl<T: Extent> Issue<'_, T> {
    /// The rule broken, as the reader reports it.
    pub(crate) fn error(&self) -> Error {
        match *self {
            Issue::PastEnd { t, buffer_len } => Error::DataTooShort {
                tensor: t.name().to_owned(),
                end: t.end(),
                available: buffer_len,
            },
            Issue::Hole { t, expected } => Error::Hole {
                tensor: t.name().to_owned(),
                begin: t.begin(),
                end: t.end(),
                expected,
                gap: t.begin() - expected,
            },
            Issue::Overlap { t, last, cursor } => Error::Overlap {
                tensor: t.name().to_owned(),
                begin: t.begin(),
                end: t.end(),
                other: last.map(|l| l.name().to_owned()).unwrap_or_default(),
                other_end: cursor,
            },
            Issue::Trailing { covered, available } => Error::TrailingBytes {
                trailing: available - covered,
                covered,
                available,
            },
        }
    }
}

/// Walks `extents` (in file order, see [`sort`]; offsets already ordered)
/// over a buffer of `buffer_len` bytes, handing every issue to `report`;
/// stops as soon as `report` breaks. A tensor lying entirely past the end
/// is reported once and then skipped.
pub(crate) fn walk<'a, T: Extent>(
    extents: &'a [T],
    buffer_len: u64,
    mut report: impl FnMut(Issue<'a, T>) -> ControlFlow<()>,
) -> ControlFlow<()> {
    let mut cursor = 0u64;
    let mut last: Option<&'a T> = None;
    for t in extents {
        if t.end() > buffer_len {
            report(Issue::PastEnd { t, buffer_len })?;
            if t.begin() >= buffer_len {
                continue;
            }
        }
        if t.begin() > cursor {
            report(Issue::Hole {
                t,
                expected: cursor,
            })?;
        } else if t.begin() < cursor {
            report(Issue::Overlap { t, last, cursor })?;
        }
        cursor = cursor.max(t.end().min(buffer_len));
        if t.end() > t.begin() {
            last = Some(t);
        }
    }
    if cursor < buffer_len {
        report(Issue::Trailing {
            covered: cursor,
            available: buffer_len,
        })?;
    }
    ControlFlow::Continue(())
}

/// Positions `0..n` sorted by name (then position), as `u32`: the name
/// index. Names are compared after JSON unescaping (serde hands them so),
/// and sorted rather than hashed, as an attacker chooses them.
pub(crate) fn name_order<'a>(n: usize, name: impl Fn(usize) -> &'a str) -> Result<Vec<u32>> {
    let count = u32::try_from(n).map_err(|_| Error::TooManyTensors { count: n as u64 })?;
    let mut order: Vec<u32> = (0..count).collect();
    order.sort_unstable_by(|&a, &b| name(a as usize).cmp(name(b as usize)).then(a.cmp(&b)));
    Ok(order)
}

/// Runs of equal names in a [`name_order`]: `(first position, how many)`,
/// in name order.
pub(crate) fn duplicates<'a, 'o>(
    order: &'o [u32],
    name: impl Fn(usize) -> &'a str + 'o,
) -> impl Iterator<Item = (usize, usize)> + 'o {
    order
        .chunk_by(move |&a, &b| name(a as usize) == name(b as usize))
        .filter(|run| run.len() > 1)
        .map(|run| (run[0] as usize, run.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn issues(spans: &[(&str, u64, u64)], buffer_len: u64) -> Vec<&'static str> {
        let mut v: Vec<Span<'_>> = spans
            .iter()
            .map(|&(name, begin, end)| Span { name, begin, end })
            .collect();
        sort(&mut v);
        let mut out = Vec::new();
        let _ = walk(&v, buffer_len, |i| {
            out.push(i.error().rule().id());
            ControlFlow::Continue(())
        });
        out
    }

    #[test]
    fn tiling_and_each_issue() {
        assert!(issues(&[("a", 0, 4), ("b", 4, 8), ("e", 8, 8)], 8).is_empty());
        assert_eq!(issues(&[("a", 0, 4), ("b", 6, 8)], 8), ["hole"]);
        assert_eq!(issues(&[("a", 0, 6), ("b", 4, 8)], 8), ["overlap"]);
        assert_eq!(issues(&[("a", 0, 4)], 8), ["trailing-bytes"]);
        assert_eq!(issues(&[("a", 0, 10)], 8), ["data-too-short"]);
        assert_eq!(
            issues(&[("a", 0, 4), ("g", 20, 30)], 8),
            ["data-too-short", "trailing-bytes"]
        );
        assert!(issues(&[], 0).is_empty());
    }

    #[test]
    fn duplicate_runs() {
        let names = ["b", "a", "b", "c", "b"];
        let order = name_order(names.len(), |i| names[i]).unwrap_or_default();
        assert_eq!(order, [1, 0, 2, 4, 3]);
        let runs: Vec<_> = duplicates(&order, |i| names[i]).collect();
        assert_eq!(runs, [(0, 3)]);
    }
}
