//! `verify`: every structural rule of the format plus forensic checks, each
//! problem reported as a [`Finding`] rather than stopping at the first.

use std::collections::HashSet;
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use serde_json::Value;

use super::lenient::{self, Node};
use super::magic::{sniff, SNIFF_LEN};
use super::metadata::metadata_findings;
use super::names::{dtype_findings, name_findings};
use super::source::Source;
use super::values::{count_values, scannable};
use super::{thread_count, Finding, Progress, RuleId, Severity};
use crate::dtype::Dtype;
use crate::error::{Error, Result};
use crate::header::{check_prefix, Header, DEFAULT_HEADER_CAP};

/// Options for [`verify_path`].
#[derive(Clone, Copy, Debug)]
pub struct VerifyOptions {
    /// Largest header length accepted (the reader's cap).
    pub header_cap: u64,
    /// Also read every tensor's data: NaN/Inf counts for floating-point
    /// kinds, non-0/1 bytes for BOOL.
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
    let src = Source::open(path)?;
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
            let whitespace = leading_whitespace(&json);
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
        report.values_checked = Some(items.len() as u64);
        let found = scan_values(&src, &items, options.threads, progress)?;
        report.findings.extend(found);
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

fn leading_whitespace(json: &[u8]) -> usize {
    json.iter()
        .take_while(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
        .count()
}

fn whitespace_finding(n: usize) -> Finding {
    Finding::new(
        RuleId::LeadingWhitespace,
        format!("{n} bytes of whitespace precede the header's opening `{{`"),
    )
    .at(8, n as u64)
}

/// One tensor whose values can be scanned.
struct ScanItem {
    name: String,
    dtype: Dtype,
    abs_begin: u64,
    len: u64,
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
        if scannable(t.dtype) && t.byte_len() > 0 {
            items.push(ScanItem {
                name: t.name.clone(),
                dtype: t.dtype,
                abs_begin: data_start + t.begin,
                len: t.byte_len(),
            });
        }
    }
}

/// Describes a JSON value for messages, as the strict parser does.
fn describe(v: &Value) -> String {
    match v {
        Value::Null => "null".to_owned(),
        Value::Bool(b) => format!("the boolean {b}"),
        Value::Number(n) => format!("the number {n}"),
        Value::String(s) => format!("the string {s:?}"),
        Value::Array(_) => "a list".to_owned(),
        Value::Object(_) => "an object".to_owned(),
    }
}

/// The keys of one object seen so far: a short list for the usual handful
/// of keys, a hash set once there are many (hostile headers).
#[derive(Default)]
struct Seen<'a> {
    few: Vec<&'a str>,
    many: HashSet<&'a str>,
}

impl<'a> Seen<'a> {
    /// Records `key`; false when it was seen before.
    fn insert(&mut self, key: &'a str) -> bool {
        if self.many.is_empty() {
            if self.few.contains(&key) {
                return false;
            }
            if self.few.len() < 16 {
                self.few.push(key);
                return true;
            }
            self.many.extend(self.few.drain(..));
        }
        self.many.insert(key)
    }
}

/// A tensor entry whose offsets are usable, placed in the byte buffer
/// (`idx`: its position in the header).
struct Placed {
    idx: usize,
    begin: u64,
    end: u64,
}

/// Checks one leniently read entry; returns its offsets when they are
/// usable and, separately, its dtype when the whole entry is valid (so that
/// its values can be scanned).
fn check_entry(
    name: &str,
    node: &Node,
    out: &mut Vec<Finding>,
) -> (Option<(u64, u64)>, Option<Dtype>) {
    let pairs = match node {
        Node::Pairs(pairs) => pairs,
        Node::Other(v) => {
            out.push(Finding::from_error(&Error::EntryNotObject {
                tensor: name.to_owned(),
                found: describe(v),
            }));
            return (None, None);
        }
    };
    let mut seen = Seen::default();
    let mut reported: HashSet<&str> = HashSet::new();
    let (mut dtype_v, mut shape_v, mut offsets_v) = (None, None, None);
    for (field, value) in pairs {
        if !seen.insert(field.as_str()) {
            if reported.insert(field.as_str()) {
                out.push(Finding::from_error(&Error::DuplicateField {
                    tensor: name.to_owned(),
                    field: field.clone(),
                }));
            }
            continue;
        }
        match field.as_str() {
            "dtype" => dtype_v = Some(value),
            "shape" => shape_v = Some(value),
            "data_offsets" => offsets_v = Some(value),
            _ => out.push(unknown_field(name, field)),
        }
    }
    let mut fail = |err: Error| out.push(Finding::from_error(&err));
    let missing = |field: &'static str| Error::MissingField {
        tensor: name.to_owned(),
        field,
    };
    let wrong = |field: &'static str, expected: &'static str, v: &Value| Error::WrongFieldType {
        tensor: name.to_owned(),
        field,
        expected,
        found: describe(v),
    };
    let dtype = match dtype_v {
        None => {
            fail(missing("dtype"));
            None
        }
        Some(Value::String(s)) => {
            let d = Dtype::from_name(s);
            if d.is_none() {
                fail(Error::UnknownDtype {
                    tensor: name.to_owned(),
                    dtype: s.clone(),
                });
            }
            d
        }
        Some(v) => {
            fail(wrong("dtype", "a string", v));
            None
        }
    };
    let shape = match shape_v {
        None => {
            fail(missing("shape"));
            None
        }
        Some(Value::Array(items)) => {
            let mut shape = Vec::with_capacity(items.len());
            let mut ok = true;
            for item in items {
                match item.as_u64().filter(|&d| d < 1 << 63) {
                    Some(d) => shape.push(d),
                    None => {
                        fail(Error::BadShapeEntry {
                            tensor: name.to_owned(),
                            value: item.to_string(),
                        });
                        ok = false;
                        break;
                    }
                }
            }
            ok.then_some(shape)
        }
        Some(v) => {
            fail(wrong("shape", "a list of non-negative integers", v));
            None
        }
    };
    let offsets = match offsets_v {
        None => {
            fail(missing("data_offsets"));
            None
        }
        Some(v) => match v.as_array().map(|a| a.as_slice()) {
            Some([b, e]) => match (b.as_u64(), e.as_u64()) {
                (Some(b), Some(e)) if b <= e => Some((b, e)),
                (Some(b), Some(e)) => {
                    fail(Error::OffsetsReversed {
                        tensor: name.to_owned(),
                        begin: b,
                        end: e,
                    });
                    None
                }
                _ => {
                    fail(Error::BadOffsets {
                        tensor: name.to_owned(),
                        found: "a value that is not a non-negative integer".to_owned(),
                    });
                    None
                }
            },
            Some(list) => {
                fail(Error::BadOffsets {
                    tensor: name.to_owned(),
                    found: format!("a list of {} values", list.len()),
                });
                None
            }
            None => {
                fail(Error::BadOffsets {
                    tensor: name.to_owned(),
                    found: describe(v),
                });
                None
            }
        },
    };
    let placed = offsets;
    let (Some(dtype), Some(shape), Some((begin, end))) = (dtype, shape, offsets) else {
        return (placed, None);
    };
    let overflow = || Error::SizeOverflow {
        tensor: name.to_owned(),
        shape: shape.clone(),
        dtype,
    };
    let Some(bits) = shape
        .iter()
        .copied()
        .try_fold(1u64, u64::checked_mul)
        .and_then(|n| n.checked_mul(dtype.bits()))
    else {
        fail(overflow());
        return (placed, None);
    };
    if bits % 8 != 0 {
        fail(Error::SubByteNotWhole {
            tensor: name.to_owned(),
            shape,
            dtype,
            bits: dtype.bits(),
        });
        return (placed, None);
    }
    let held = end - begin;
    if held != bits / 8 {
        fail(Error::ByteLengthMismatch {
            tensor: name.to_owned(),
            begin,
            end,
            held,
            shape,
            dtype,
            needed: bits / 8,
        });
        return (placed, None);
    }
    (placed, Some(dtype))
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
    let mut placed: Vec<Placed> = Vec::new();
    let mut found: Vec<Finding> = Vec::new();
    let mut scan: Vec<ScanItem> = Vec::new();
    let metadata = lenient::parse_with(json, |name, node| {
        let idx = names.len();
        name_findings(&name, &mut found);
        let (offsets, dtype) = check_entry(&name, &node, &mut found);
        if let Some((begin, end)) = offsets {
            if let Some(dtype) = dtype {
                let len = end - begin;
                dtype_findings(
                    &name,
                    dtype,
                    data_start.saturating_add(begin),
                    len,
                    &mut found,
                );
                if scannable(dtype) && len > 0 && end <= buffer_len {
                    scan.push(ScanItem {
                        name: name.clone(),
                        dtype,
                        abs_begin: data_start + begin,
                        len,
                    });
                }
            }
            placed.push(Placed { idx, begin, end });
        }
        names.push(name);
    });
    let Some(metadata) = metadata else {
        return Ok(None);
    };
    // Duplicate tensor names (serde gives keys unescaped, so `"a"` and
    // `"\u0061"` are the same name, as the rule requires), found by sorting
    // rather than hashing names an attacker chose; reported in header order.
    let mut order: Vec<usize> = (0..names.len()).collect();
    order.sort_unstable_by(|&a, &b| names[a].cmp(&names[b]).then(a.cmp(&b)));
    let mut duplicates: Vec<(usize, usize)> = order
        .chunk_by(|&a, &b| names[a] == names[b])
        .filter(|run| run.len() > 1)
        .map(|run| (run[0], run.len()))
        .collect();
    drop(order);
    duplicates.sort_unstable();
    for (first, n) in duplicates {
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
    layout_findings(src, &mut placed, &names, data_start, buffer_len, out)?;
    Ok(Some(names.len() as u64))
}

fn metadata_blocks(blocks: &[Node], out: &mut Vec<Finding>) {
    if blocks.len() > 1 {
        out.push(Finding::from_error(&Error::DuplicateMetadata));
    }
    let Some(first) = blocks.first() else {
        return;
    };
    match first {
        Node::Other(Value::Null) => {
            out.push(Finding::new(
                RuleId::MetadataNull,
                "__metadata__ is null (readers treat it as absent)",
            ));
        }
        Node::Other(v) => out.push(Finding::from_error(&Error::MetadataNotMap {
            found: describe(v),
        })),
        Node::Pairs(pairs) => {
            let mut seen: HashSet<&str> = HashSet::new();
            let mut reported: HashSet<&str> = HashSet::new();
            let mut strings = Vec::with_capacity(pairs.len());
            for (key, value) in pairs {
                if !seen.insert(key.as_str()) {
                    if reported.insert(key.as_str()) {
                        out.push(Finding::from_error(&Error::DuplicateMetadataKey {
                            key: key.clone(),
                        }));
                    }
                    continue;
                }
                match value {
                    Value::String(s) => strings.push((key.as_str(), s.as_str())),
                    other => out.push(Finding::from_error(&Error::MetadataValueNotString {
                        key: key.clone(),
                        found: describe(other),
                    })),
                }
            }
            metadata_findings(strings.into_iter(), out);
        }
    }
}

/// Holes, overlaps, aliases, ghosts, data past the end and trailing bytes,
/// each reported; bytes no tensor covers are scanned for other formats.
fn layout_findings(
    src: &Source,
    placed: &mut [Placed],
    names: &[String],
    data_start: u64,
    buffer_len: u64,
    out: &mut Vec<Finding>,
) -> Result<()> {
    placed.sort_by(|a, b| (a.begin, a.end, &names[a.idx]).cmp(&(b.begin, b.end, &names[b.idx])));
    let name = |p: &Placed| names[p.idx].as_str();
    let mut cursor = 0u64;
    let mut last: Option<&Placed> = None;
    for p in placed.iter() {
        let abs = |off: u64| data_start.saturating_add(off);
        if p.end > buffer_len {
            if p.begin >= buffer_len && p.end > p.begin {
                out.push(
                    Finding::new(RuleId::GhostTensor,
                        format!(
                            "tensor {:?}: data_offsets [{}, {}] lie entirely past the end of the {buffer_len}-byte buffer: the header lists data the file does not hold",
                            name(p), p.begin, p.end
                        ),
                    )
                    .tensor(name(p))
                    .at(abs(p.begin), p.end - p.begin),
                );
            } else {
                let err = Error::DataTooShort {
                    tensor: name(p).to_owned(),
                    end: p.end,
                    available: buffer_len,
                };
                out.push(Finding::from_error(&err).at(abs(p.begin), p.end - p.begin));
            }
            if p.begin >= buffer_len {
                continue;
            }
        }
        if p.begin > cursor {
            let err = Error::Hole {
                tensor: name(p).to_owned(),
                begin: p.begin,
                end: p.end,
                expected: cursor,
                gap: p.begin - cursor,
            };
            unreferenced(
                src,
                Finding::from_error(&err),
                abs(cursor),
                p.begin - cursor,
                out,
            )?;
        } else if p.begin < cursor {
            match last {
                Some(l) if l.begin == p.begin && l.end == p.end && p.end > p.begin => out.push(
                    Finding::new(RuleId::AliasedTensor,
                        format!(
                            "tensor {:?}: data_offsets [{}, {}] are exactly those of tensor {:?}: both names read the same bytes",
                            name(p), p.begin, p.end, name(l)
                        ),
                    )
                    .tensor(name(p))
                    .at(abs(p.begin), p.end - p.begin),
                ),
                _ => {
                    let err = Error::Overlap {
                        tensor: name(p).to_owned(),
                        begin: p.begin,
                        end: p.end,
                        other: last.map(|l| name(l).to_owned()).unwrap_or_default(),
                        other_end: cursor,
                    };
                    let overlap = cursor.min(p.end) - p.begin;
                    out.push(Finding::from_error(&err).at(abs(p.begin), overlap));
                }
            }
        }
        cursor = cursor.max(p.end.min(buffer_len));
        if p.end > p.begin {
            last = Some(p);
        }
    }
    if cursor < buffer_len {
        let err = Error::TrailingBytes {
            trailing: buffer_len - cursor,
            covered: cursor,
            available: buffer_len,
        };
        unreferenced(
            src,
            Finding::from_error(&err),
            data_start + cursor,
            buffer_len - cursor,
            out,
        )?;
    }
    Ok(())
}

/// Reports a byte range no tensor covers: the layout finding with how many
/// of its bytes are non-zero, and a `hidden-payload` finding when the range
/// starts with another format's magic number.
fn unreferenced(
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

/// Scans the values of `items` across threads; one finding per tensor with
/// NaN/Inf values or bad booleans, in file order.
fn scan_values(
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
                    let mut counts = super::ValueCounts::default();
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::super::testfile::{build, raw};
    use super::*;

    fn verify(file: &super::super::testfile::TempFile, values: bool) -> VerifyReport {
        let options = VerifyOptions {
            values,
            ..VerifyOptions::default()
        };
        verify_path(&file.0, &options, None).unwrap()
    }

    fn rules(report: &VerifyReport) -> Vec<&'static str> {
        report.findings.iter().map(|f| f.rule.id()).collect()
    }

    #[test]
    fn clean_file_has_no_findings() {
        let f = build(
            r#"{"__metadata__":{"format":"pt"},"a.weight":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#,
            &[0; 8],
        );
        let r = verify(&f, true);
        assert!(r.accepted && r.complete);
        assert_eq!(r.findings, []);
        assert_eq!(r.values_checked, Some(1));
        assert_eq!(r.tensors, Some(1));
    }

    #[test]
    fn accepted_file_warnings() {
        let f = build(
            "  {\"__metadata__\":{\"mine\":\"x\"},\"../x\":{\"dtype\":\"I8\",\"shape\":[1],\"data_offsets\":[0,1],\"note\":1},\"l.weight\":{\"dtype\":\"I8\",\"shape\":[1],\"data_offsets\":[1,2]}}",
            &[0; 2],
        );
        let r = verify(&f, false);
        assert!(r.accepted);
        let got = rules(&r);
        for want in [
            "leading-whitespace",
            "unknown-field",
            "unknown-metadata-key",
            "path-like-name",
            "suspicious-weight-dtype",
        ] {
            assert!(got.contains(&want), "{want} not in {got:?}");
        }
        assert_eq!(r.values_checked, None);
    }

    #[test]
    fn every_layout_problem_is_reported() {
        // a: [0,4]; hole [4,8]; b: [8,16]; c overlaps b; d aliases b;
        // e past the end; trailing zip after 16.
        let header = r#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},
            "b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]},
            "c":{"dtype":"F32","shape":[1],"data_offsets":[12,16]},
            "d":{"dtype":"F32","shape":[2],"data_offsets":[8,16]},
            "e":{"dtype":"F32","shape":[1],"data_offsets":[1000,1004]}}"#;
        let mut data = vec![0u8; 16];
        data[4] = 7;
        data.extend_from_slice(b"PK\x03\x04 some zip bytes");
        let f = build(header, &data);
        let r = verify(&f, false);
        assert!(!r.accepted && r.complete);
        let got = rules(&r);
        for want in [
            "hole",
            "overlap",
            "aliased-tensor",
            "ghost-tensor",
            "trailing-bytes",
            "hidden-payload",
        ] {
            assert!(got.contains(&want), "{want} not in {got:?}");
        }
        assert_eq!(r.findings[0].rule, "hidden-payload");
        assert_eq!(r.findings[0].severity, Severity::Critical);
        let hole = r.findings.iter().find(|f| f.rule == "hole").unwrap();
        assert_eq!(hole.count, Some(1));
        assert_eq!(hole.offset, Some(8 + header.len() as u64 + 4));
        // The strict verdict is not repeated.
        assert_eq!(got.iter().filter(|r| **r == "hole").count(), 1);
    }

    #[test]
    fn every_table_problem_is_reported() {
        let header = r#"{"__metadata__":{"k":"v","k":"w","n":3},
            "a":{"dtype":"F33","shape":[1],"data_offsets":[0,4]},
            "a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},
            "b":{"dtype":"F32","dtype":"F32","shape":[-1],"data_offsets":[4,8]},
            "c":[1],
            "d":{"dtype":"F32","shape":[2],"data_offsets":[4]},
            "e":{"dtype":"F32","shape":[3],"data_offsets":[8,12]},
            "f":{"dtype":"F4","shape":[3],"data_offsets":[12,12]},
            "g":{"shape":[1],"data_offsets":[12,13]},
            "h":{"dtype":"F32","shape":[1],"data_offsets":[13,9]}}"#;
        let f = build(header, &[0u8; 13]);
        let r = verify(&f, false);
        let got = rules(&r);
        for want in [
            "duplicate-tensor",
            "duplicate-metadata-key",
            "metadata-value-not-string",
            "unknown-dtype",
            "duplicate-field",
            "bad-shape-entry",
            "entry-not-object",
            "bad-offsets",
            "byte-length-mismatch",
            "sub-byte-not-whole",
            "missing-field",
            "offsets-reversed",
        ] {
            assert!(got.contains(&want), "{want} not in {got:?}");
        }
        let dup = r
            .findings
            .iter()
            .find(|f| f.rule == "duplicate-tensor")
            .unwrap();
        assert_eq!(dup.tensor.as_deref(), Some("a"));
    }

    #[test]
    fn foreign_files_and_bad_prefixes() {
        let pickle = raw(b"\x80\x04\x95\x10\x00\x00\x00\x00\x00\x00\x00}\x94.");
        let r = verify(&pickle, false);
        assert!(!r.complete);
        assert_eq!(r.findings[0].rule, "foreign-content");
        assert_eq!(r.findings[0].severity, Severity::Critical);
        assert!(rules(&r).contains(&"header-too-large") || rules(&r).contains(&"header-past-end"));
        let short = raw(b"abc");
        assert_eq!(rules(&verify(&short, false)), ["file-too-short"]);
        let zero = raw(&[0u8; 8]);
        assert_eq!(rules(&verify(&zero, false)), ["header-length-zero"]);
        let junk = build("{\"a\":", b"");
        let r = verify(&junk, false);
        assert_eq!(rules(&r), ["json-syntax"]);
        assert!(!r.complete);
    }

    #[test]
    fn values_are_counted() {
        let mut data = Vec::new();
        for x in [1.0f32, f32::NAN, f32::INFINITY, 2.0] {
            data.extend_from_slice(&x.to_le_bytes());
        }
        data.extend_from_slice(&[0, 1, 2]);
        let f = build(
            r#"{"x":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"m":{"dtype":"BOOL","shape":[3],"data_offsets":[16,19]}}"#,
            &data,
        );
        let r = verify(&f, true);
        let nf = r
            .findings
            .iter()
            .find(|f| f.rule == "non-finite-values")
            .unwrap();
        assert_eq!(nf.count, Some(2));
        assert_eq!(nf.tensor.as_deref(), Some("x"));
        let b = r
            .findings
            .iter()
            .find(|f| f.rule == "invalid-bool")
            .unwrap();
        assert_eq!(b.count, Some(1));
        assert_eq!(r.values_checked, Some(2));
    }

    #[test]
    fn missing_file_is_an_error() {
        let err = verify_path(
            Path::new("/nonexistent/fastst/x.safetensors"),
            &VerifyOptions::default(),
            None,
        );
        assert!(matches!(err, Err(Error::Io { .. })));
    }
}

#[cfg(test)]
mod seen_tests {
    use super::Seen;

    #[test]
    fn seen_switches_to_a_set_without_forgetting() {
        let keys: Vec<String> = (0..100).map(|i| format!("k{i}")).collect();
        let mut seen = Seen::default();
        for k in &keys {
            assert!(seen.insert(k));
        }
        for k in &keys {
            assert!(!seen.insert(k), "{k}");
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod mutation_tests {
    use super::super::testfile::raw;
    use super::*;
    use crate::{MappedFile, OpenOptions};

    /// xorshift64*: a small deterministic generator for the mutations.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n.max(1) as u64) as usize
        }
    }

    fn seed() -> Vec<u8> {
        let header = br#"{"__metadata__":{"format":"pt"},"a.weight":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"m":{"dtype":"BOOL","shape":[2],"data_offsets":[8,10]},"z":{"dtype":"F16","shape":[0,3],"data_offsets":[10,10]}}"#;
        let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
        bytes.extend_from_slice(header);
        bytes.extend_from_slice(&1.5f32.to_le_bytes());
        bytes.extend_from_slice(&f32::NAN.to_le_bytes());
        bytes.extend_from_slice(&[1, 0]);
        bytes
    }

    #[test]
    fn mutated_files_never_panic_and_agree_with_the_reader() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let options = VerifyOptions {
            values: true,
            threads: 2,
            ..VerifyOptions::default()
        };
        for _ in 0..500 {
            let mut bytes = seed();
            for _ in 0..1 + rng.below(4) {
                let pos = rng.below(bytes.len());
                match rng.below(4) {
                    0 if !bytes.is_empty() => bytes[pos] = rng.next() as u8,
                    1 => bytes.truncate(pos),
                    2 => bytes.insert(pos.min(bytes.len()), rng.next() as u8),
                    _ if !bytes.is_empty() => {
                        bytes.remove(pos);
                    }
                    _ => {}
                }
            }
            let file = raw(&bytes);
            let report = verify_path(&file.0, &options, None).unwrap();
            let reader = MappedFile::open(&file.0, OpenOptions::default());
            assert_eq!(report.accepted, reader.is_ok(), "{:?}", report.findings);
            let worst = report.findings.iter().map(|f| f.severity).max();
            if report.accepted {
                assert!(
                    worst.is_none_or(|s| s < Severity::High),
                    "{:?}",
                    report.findings
                );
            } else {
                assert!(
                    worst.is_some_and(|s| s >= Severity::High),
                    "{:?}",
                    report.findings
                );
                let err = reader.err().unwrap();
                assert!(
                    report.findings.iter().any(|f| covers(err.rule(), f.rule)),
                    "{} not in {:?}",
                    err.rule(),
                    report.findings
                );
            }
        }
    }
}
