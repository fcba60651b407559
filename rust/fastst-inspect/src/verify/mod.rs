//! `verify`: every structural rule of the format plus forensic checks, each
//! problem reported as a [`Finding`] rather than stopping at the first.
//!
//! The strict reader's verdict comes first ([`Header::parse`]); when it
//! rejects the file, the header is read a second time leniently and the
//! same rules ([`fastst_core::internal::entry`],
//! [`fastst_core::internal::layout`]) run collect-all: [`entry`] checks each
//! entry, [`layout`] walks the byte ranges (with the forensic reading of
//! aliases, ghosts and hidden bytes), [`scan`] counts bad values, and
//! [`payloads`] looks for other formats' files in the first bytes and in
//! the tensors' (every byte of them with `values`, their starts without).

mod entry;
mod layout;
mod payloads;
mod scan;
#[cfg(test)]
mod tests;

use std::path::Path;

use self::entry::{check_entry, metadata_blocks};
use self::layout::layout_findings;
use self::payloads::{head_findings, prefix_pickle, Placed};
use self::scan::{scan_values, ScanItem};
use crate::lenient;
use crate::metadata::metadata_findings;
use crate::names::{dtype_findings, name_findings};
use crate::source::Source;
use crate::values::scannable;
use crate::{Finding, Progress, RuleId, Severity};
use fastst_core::internal::layout::{duplicates, name_order, Span};
use fastst_core::internal::{sniff, whitespace_len, SNIFF_LEN};
use fastst_core::{check_prefix, Dtype, Error, Header, Result, DEFAULT_HEADER_CAP};

/// Options for [`verify_path`].
#[derive(Clone, Copy, Debug)]
pub struct VerifyOptions {
    /// Largest header length accepted (the reader's cap).
    pub header_cap: u64,
    /// Also read every tensor's data: NaN/Inf counts for floating-point
    /// kinds, non-0/1 bytes for BOOL, other formats' files at any offset
    /// (without it, only each tensor's first bytes are looked at).
    pub values: bool,
    /// Worker threads for the value scan (0: one per core).
    pub threads: usize,
}

impl Default for VerifyOptions {
    fn default() -> Self {
        VerifyOptions {
            header_cap: DEFAULT_HEADER_CAP,
            values: false,
            threads: 0,
        }
    }
}

/// Everything [`verify_path`] found about one file.
#[derive(Clone, Debug)]
pub struct VerifyReport {
    /// Length of the file in bytes.
    pub file_len: u64,
    /// The header length from the prefix, when the prefix is usable.
    pub header_len: Option<u64>,
    /// Tensor entries in the header (duplicates counted), when it could be
    /// read at all.
    pub tensors: Option<u64>,
    /// True when the strict reader (`safe_open`) accepts the file.
    pub accepted: bool,
    /// True when the tensor table could be examined (strictly or
    /// leniently); false when the header could not be located or parsed,
    /// so that tensor-level checks could not run.
    pub complete: bool,
    /// Tensors whose values were scanned (`None` unless asked for).
    pub values_checked: Option<u64>,
    /// Findings, most severe first (discovery order within a severity).
    pub findings: Vec<Finding>,
}

/// Verifies the file at `path`. Fails only when the file cannot be read
/// (I/O errors); everything wrong with its contents is a finding.
pub fn verify_path(
    path: &Path,
    options: &VerifyOptions,
    progress: Progress,
) -> Result<VerifyReport> {
    verify(Source::open(path)?, options, progress)
}

/// [`verify_path`] of a file read through any core source (an object in a
/// store).
pub fn verify_source(
    source: Box<dyn fastst_core::Source>,
    options: &VerifyOptions,
    progress: Progress,
) -> Result<VerifyReport> {
    verify(Source::new(source), options, progress)
}

fn verify(src: Source, options: &VerifyOptions, progress: Progress) -> Result<VerifyReport> {
    let head = src.read_range(0, SNIFF_LEN as u64)?;
    let mut report = VerifyReport {
        file_len: src.len,
        header_len: None,
        tensors: None,
        accepted: false,
        complete: false,
        values_checked: None,
        findings: Vec::new(),
    };
    let n = match check_prefix(&head, src.len, options.header_cap) {
        Ok(n) => n,
        Err(e) => {
            report.findings.push(Finding::from_error(&e));
            foreign_content(&head, &mut report.findings);
            return Ok(finish(report));
        }
    };
    report.header_len = Some(n);
    prefix_pickle(&src, &mut report.findings)?;
    let json = src.read_range(8, n)?;
    let buffer_len = src.len - 8 - n;
    let data_start = 8 + n;
    let mut items = Vec::new();
    match Header::parse(&json, buffer_len) {
        Ok(header) => {
            report.accepted = true;
            report.complete = true;
            report.tensors = Some(header.len() as u64);
            accepted_findings(&header, &mut report.findings, &mut items);
        }
        Err(strict) => {
            foreign_content(&head, &mut report.findings);
            let whitespace = whitespace_len(&json);
            if let Some(entries) = rejected_findings(
                &src,
                &json,
                data_start,
                buffer_len,
                &mut report.findings,
                &mut items,
            )? {
                report.complete = true;
                report.tensors = Some(entries);
                if whitespace > 0 {
                    report.findings.push(whitespace_finding(whitespace));
                }
            }
            let strict_finding = Finding::from_error(&strict);
            if !report
                .findings
                .iter()
                .any(|f| covers(strict_finding.rule, f.rule))
            {
                report.findings.push(strict_finding);
            }
        }
    }
    if options.values && report.complete {
        report.values_checked = Some(items.iter().filter(|i| i.values).count() as u64);
        let found = scan_values(&src, &items, options.threads, progress)?;
        report.findings.extend(found);
    } else if report.complete {
        let placed: Vec<Placed> = items
            .iter()
            .map(|i| Placed {
                name: i.name.clone(),
                abs_begin: i.abs_begin,
                len: i.len,
            })
            .collect();
        head_findings(&src, &placed, &mut report.findings)?;
    }
    Ok(finish(report))
}

fn finish(mut report: VerifyReport) -> VerifyReport {
    // Stable: discovery order is kept within a severity.
    report
        .findings
        .sort_by_key(|f| std::cmp::Reverse(f.severity));
    report
}

/// True when a finding of rule `found` already reports what the strict
/// reader's first error `strict` says.
fn covers(strict: RuleId, found: RuleId) -> bool {
    strict == found
        || matches!(
            (strict, found),
            (RuleId::Overlap, RuleId::AliasedTensor) | (RuleId::DataTooShort, RuleId::GhostTensor)
        )
}

fn foreign_content(head: &[u8], out: &mut Vec<Finding>) {
    if let Some(magic) = sniff(head) {
        let severity = if magic.executable {
            Severity::Critical
        } else {
            Severity::High
        };
        out.push(
            Finding::new(
                RuleId::ForeignContent,
                format!(
                    "the file is not safetensors: it starts like a {}",
                    magic.name
                ),
            )
            .severity(severity)
            .at(0, head.len() as u64),
        );
    }
}

fn whitespace_finding(n: usize) -> Finding {
    Finding::new(
        RuleId::LeadingWhitespace,
        format!("{n} bytes of whitespace precede the header's opening `{{`"),
    )
    .at(8, n as u64)
}

fn unknown_field(tensor: &str, field: &str) -> Finding {
    Finding::new(
        RuleId::UnknownField,
        format!("tensor {tensor:?}: unknown field {field:?} (readers ignore it)"),
    )
    .tensor(tensor)
}

fn no_tensors() -> Finding {
    Finding::new(RuleId::NoTensors, "the file holds no tensor")
}

/// Findings for a file the strict reader accepts: the header's notes,
/// names, dtypes, sizes and metadata.
fn accepted_findings(header: &Header, out: &mut Vec<Finding>, items: &mut Vec<ScanItem>) {
    let notes = header.notes();
    if notes.leading_whitespace > 0 {
        out.push(whitespace_finding(notes.leading_whitespace));
    }
    for (tensor, field) in &notes.unknown_fields {
        out.push(unknown_field(tensor, field));
    }
    if notes.metadata_null {
        out.push(Finding::new(
            RuleId::MetadataNull,
            "__metadata__ is null (readers treat it as absent)",
        ));
    }
    if let Some(pairs) = header.metadata() {
        metadata_findings(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())), out);
    }
    if header.is_empty() {
        out.push(no_tensors());
    }
    let data_start = header.data_start();
    for t in header.tensors() {
        name_findings(&t.name, out);
        dtype_findings(&t.name, t.dtype, data_start + t.begin, t.byte_len(), out);
        if t.byte_len() > 0 {
            items.push(ScanItem {
                name: t.name.clone(),
                dtype: t.dtype,
                abs_begin: data_start + t.begin,
                len: t.byte_len(),
                values: scannable(t.dtype),
            });
        }
    }
}

/// Findings from the lenient reading of a header the strict reader rejects;
/// returns the number of tensor entries, or `None` (and no finding) when
/// the header is not a JSON object at all.
fn rejected_findings(
    src: &Source,
    json: &[u8],
    data_start: u64,
    buffer_len: u64,
    out: &mut Vec<Finding>,
    items: &mut Vec<ScanItem>,
) -> Result<Option<u64>> {
    let mut names: Vec<String> = Vec::new();
    let mut placed: Vec<(usize, u64, u64)> = Vec::new();
    let mut found: Vec<Finding> = Vec::new();
    let mut scan: Vec<ScanItem> = Vec::new();
    let metadata = lenient::parse_with(json, |name, node| {
        let idx = names.len();
        name_findings(&name, &mut found);
        let (offsets, dtype) = check_entry(&name, &node, &mut found);
        if let Some((begin, end)) = offsets {
            let len = end - begin;
            if let Some(dtype) = dtype {
                dtype_findings(
                    &name,
                    dtype,
                    data_start.saturating_add(begin),
                    len,
                    &mut found,
                );
            }
            if len > 0 && end <= buffer_len {
                scan.push(ScanItem {
                    name: name.clone(),
                    dtype: dtype.unwrap_or(Dtype::U8),
                    abs_begin: data_start + begin,
                    len,
                    values: dtype.is_some_and(scannable),
                });
            }
            placed.push((idx, begin, end));
        }
        names.push(name);
    });
    let Some(metadata) = metadata else {
        return Ok(None);
    };
    // Duplicate tensor names (serde gives keys unescaped, so `"a"` and
    // `"\u0061"` are the same name, as the rule requires), found by sorting
    // rather than hashing names an attacker chose; reported in header order.
    let mut runs: Vec<(usize, usize)> = match name_order(names.len(), |i| &names[i]) {
        Ok(order) => duplicates(&order, |i| &names[i]).collect(),
        Err(e) => {
            out.push(Finding::from_error(&e));
            Vec::new()
        }
    };
    runs.sort_unstable();
    for (first, n) in runs {
        let f = Finding::from_error(&Error::DuplicateTensor {
            name: names[first].clone(),
        });
        out.push(Finding {
            message: format!(
                "{} ({n} entries; readers disagree on which one wins)",
                f.message
            ),
            ..f
        });
    }
    metadata_blocks(&metadata, out);
    if names.is_empty() {
        out.push(no_tensors());
    }
    out.append(&mut found);
    items.append(&mut scan);
    let mut spans: Vec<Span<'_>> = placed
        .into_iter()
        .map(|(idx, begin, end)| Span {
            name: &names[idx],
            begin,
            end,
        })
        .collect();
    layout_findings(src, &mut spans, data_start, buffer_len, out)?;
    Ok(Some(names.len() as u64))
}
