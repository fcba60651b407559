//! `verify`'s reading of the layout: the walk of
//! [`fastst_core::internal::layout`] reporting every issue, with the forensic
//! reading of some (two names for the same bytes, tensors wholly past the
//! end) and a scan of the bytes no tensor covers for other formats.

use std::ops::ControlFlow;

use crate::source::Source;
use crate::{Finding, RuleId, Severity};
use fastst_core::internal::layout::{self, Issue, Span};
use fastst_core::internal::sniff;
use fastst_core::{Error, Result};

/// Holes, overlaps, aliases, ghosts, data past the end and trailing bytes,
/// each reported; bytes no tensor covers are scanned for other formats.
pub(super) fn layout_findings(
    src: &Source,
    spans: &mut [Span<'_>],
    data_start: u64,
    buffer_len: u64,
    out: &mut Vec<Finding>,
) -> Result<()> {
    layout::sort(spans);
    let abs = |off: u64| data_start.saturating_add(off);
    let mut failed: Option<Error> = None;
    let _ = layout::walk(spans, buffer_len, |issue| {
        let found = Finding::from_error(&issue.error());
        let done = match issue {
            Issue::PastEnd { t, buffer_len } if t.begin >= buffer_len && t.end > t.begin => {
                out.push(
                    Finding::new(RuleId::GhostTensor,
                        format!(
                            "tensor {:?}: data_offsets [{}, {}] lie entirely past the end of the {buffer_len}-byte buffer: the header lists data the file does not hold",
                            t.name, t.begin, t.end
                        ),
                    )
                    .tensor(t.name)
                    .at(abs(t.begin), t.end - t.begin),
                );
                Ok(())
            }
            Issue::PastEnd { t, .. } => {
                out.push(found.at(abs(t.begin), t.end - t.begin));
                Ok(())
            }
            Issue::Hole { t, expected } => {
                unreferenced(src, found, abs(expected), t.begin - expected, out)
            }
            Issue::Overlap {
                t, last: Some(l), ..
            } if l.begin == t.begin && l.end == t.end && t.end > t.begin => {
                out.push(
                    Finding::new(RuleId::AliasedTensor,
                        format!(
                            "tensor {:?}: data_offsets [{}, {}] are exactly those of tensor {:?}: both names read the same bytes",
                            t.name, t.begin, t.end, l.name
                        ),
                    )
                    .tensor(t.name)
                    .at(abs(t.begin), t.end - t.begin),
                );
                Ok(())
            }
            Issue::Overlap { t, cursor, .. } => {
                out.push(found.at(abs(t.begin), cursor.min(t.end) - t.begin));
                Ok(())
            }
            Issue::Trailing { covered, available } => {
                unreferenced(src, found, data_start + covered, available - covered, out)
            }
        };
        match done {
            Ok(()) => ControlFlow::Continue(()),
            Err(e) => {
                failed = Some(e);
                ControlFlow::Break(())
            }
        }
    });
    failed.map_or(Ok(()), Err)
}

/// Reports a byte range no tensor covers: the layout finding with how many
/// of its bytes are non-zero, and a `hidden-payload` finding when the range
/// starts with another format's magic number.
pub(super) fn unreferenced(
    src: &Source,
    finding: Finding,
    abs: u64,
    len: u64,
    out: &mut Vec<Finding>,
) -> Result<()> {
    let scan = src.scan_region(abs, len)?;
    let what = if scan.nonzero == 0 {
        "all of them zero".to_owned()
    } else {
        format!("{} of them non-zero", scan.nonzero)
    };
    out.push(
        Finding {
            message: format!(
                "{} ({len} bytes at file offset {abs}, {what})",
                finding.message
            ),
            ..finding
        }
        .at(abs, len)
        .count(scan.nonzero),
    );
    if let Some(magic) = sniff(&scan.head) {
        let severity = if magic.executable {
            Severity::Critical
        } else {
            Severity::High
        };
        out.push(
            Finding::new(
                RuleId::HiddenPayload,
                format!(
                    "{len} bytes at file offset {abs} that no tensor covers start like a {}",
                    magic.name
                ),
            )
            .severity(severity)
            .at(abs, len),
        );
    }
    Ok(())
}
