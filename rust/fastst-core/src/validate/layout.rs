//! The layout rules: tensors' byte ranges must tile the byte buffer
//! exactly (no hole, no overlap, nothing past the end, no trailing bytes),
//! and no name may appear twice. One walk finds every issue and hands it to
//! a sink: the strict reader stops at the first, `verify` reports them all
//! (with its own forensic reading of some: aliases, ghosts, hidden bytes).

use std::ops::ControlFlow;

use crate::error::{Error, Result};
use crate::table::TensorInfo;

/// A tensor's byte range in the buffer.
pub trait Extent {
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
pub struct Span<'a> {
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
pub fn sort<T: Extent>(extents: &mut [T]) {
    extents.sort_unstable_by(|a, b| {
        (a.begin(), a.end())
            .cmp(&(b.begin(), b.end()))
            .then_with(|| a.name().cmp(b.name()))
    });
}

/// One way the byte ranges fail to tile the buffer, found by [`walk`].
pub enum Issue<'a, T> {
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
    pub fn error(&self) -> Error {
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
pub fn walk<'a, T: Extent>(
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
pub fn name_order<'a>(n: usize, name: impl Fn(usize) -> &'a str) -> Result<Vec<u32>> {
    let count = u32::try_from(n).map_err(|_| Error::TooManyTensors { count: n as u64 })?;
    let mut order: Vec<u32> = (0..count).collect();
    order.sort_unstable_by(|&a, &b| name(a as usize).cmp(name(b as usize)).then(a.cmp(&b)));
    Ok(order)
}

/// Runs of equal names in a [`name_order`]: `(first position, how many)`,
/// in name order.
pub fn duplicates<'a, 'o>(
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

    fn errors(spans: &[(&'static str, u64, u64)], buffer_len: u64) -> Vec<Error> {
        let mut v: Vec<Span<'static>> = spans
            .iter()
            .map(|&(name, begin, end)| Span { name, begin, end })
            .collect();
        sort(&mut v);
        let mut out = Vec::new();
        let _ = walk(&v, buffer_len, |i| {
            out.push(i.error());
            ControlFlow::Continue(())
        });
        out
    }

    #[test]
    fn issues_carry_the_offsets() {
        let e = errors(&[("a", 0, 4), ("b", 6, 8)], 8);
        assert!(
            matches!(&e[..], [Error::Hole { tensor, begin: 6, end: 8, expected: 4, gap: 2 }] if tensor == "b"),
            "{e:?}"
        );
        let e = errors(&[("a", 0, 6), ("b", 4, 8)], 8);
        assert!(
            matches!(&e[..], [Error::Overlap { tensor, begin: 4, end: 8, other, other_end: 6 }] if tensor == "b" && other == "a"),
            "{e:?}"
        );
        let e = errors(&[("a", 0, 3)], 8);
        assert!(
            matches!(
                &e[..],
                [Error::TrailingBytes {
                    trailing: 5,
                    covered: 3,
                    available: 8
                }]
            ),
            "{e:?}"
        );
        let e = errors(&[("a", 0, 4), ("b", 4, 12)], 8);
        assert!(
            matches!(&e[..], [Error::DataTooShort { tensor, end: 12, available: 8 }] if tensor == "b"),
            "{e:?}"
        );
    }

    #[test]
    fn the_walk_at_its_boundaries() {
        // An empty tensor inside another is an overlap, and is never the
        // "other" tensor of a later overlap.
        let e = errors(&[("a", 0, 6), ("e", 2, 2), ("b", 4, 8)], 8);
        let others: Vec<_> = e
            .iter()
            .map(|e| match e {
                Error::Overlap { tensor, other, .. } => format!("{tensor}<{other}"),
                other => format!("{other:?}"),
            })
            .collect();
        assert_eq!(others, ["e<a", "b<a"]);
        // A tensor beginning exactly at the end of the buffer is past the end,
        // not also after a hole.
        assert_eq!(
            issues(&[("a", 0, 4), ("g", 8, 12)], 8),
            ["data-too-short", "trailing-bytes"]
        );
        // A tensor running past the end still covers the buffer up to it.
        assert_eq!(issues(&[("a", 0, 4), ("b", 4, 12)], 8), ["data-too-short"]);
        assert_eq!(
            issues(&[("a", 0, 4), ("b", 2, 12)], 8),
            ["data-too-short", "overlap"]
        );
        assert!(issues(&[("a", 0, 8)], 8).is_empty());
        assert_eq!(issues(&[], 3), ["trailing-bytes"]);
        // The walk stops as soon as the sink breaks.
        let v = [
            Span {
                name: "a",
                begin: 2,
                end: 4,
            },
            Span {
                name: "b",
                begin: 9,
                end: 12,
            },
        ];
        let mut seen = 0;
        let flow = walk(&v, 8, |_| {
            seen += 1;
            ControlFlow::Break(())
        });
        assert_eq!((seen, flow), (1, ControlFlow::Break(())));
        let flow = walk(&v[..0], 0, |_| ControlFlow::Break(()));
        assert_eq!(flow, ControlFlow::Continue(()));
    }

    #[test]
    fn file_order_is_offsets_then_name() {
        let mut v = vec![
            Span {
                name: "c",
                begin: 4,
                end: 8,
            },
            Span {
                name: "b",
                begin: 4,
                end: 4,
            },
            Span {
                name: "a",
                begin: 4,
                end: 4,
            },
            Span {
                name: "d",
                begin: 0,
                end: 4,
            },
            Span {
                name: "e",
                begin: 4,
                end: 6,
            },
        ];
        sort(&mut v);
        let names: Vec<_> = v.iter().map(|s| (s.name, s.begin(), s.end())).collect();
        assert_eq!(
            names,
            [
                ("d", 0, 4),
                ("a", 4, 4),
                ("b", 4, 4),
                ("e", 4, 6),
                ("c", 4, 8)
            ]
        );
        let infos = [("x", 3, 5)];
        for &(name, begin, end) in &infos {
            let s = Span { name, begin, end };
            assert_eq!((s.name(), s.begin(), s.end()), ("x", 3, 5));
        }
    }

    #[test]
    fn too_many_tensors_for_the_index() {
        let n = u32::MAX as usize + 1;
        let e = name_order(n, |_| "").err();
        assert!(
            matches!(e, Some(Error::TooManyTensors { count }) if count == n as u64),
            "{e:?}"
        );
        assert_eq!(name_order(0, |_| "").ok(), Some(vec![]));
    }
}
