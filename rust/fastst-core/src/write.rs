//! Writing `.safetensors` files: the header bytes, byte-identical to the
//! reference writer's for the same tensors, and a streaming writer that
//! replaces a file atomically.
//!
//! A [`WritePlan`] takes the tensors' names, dtypes and shapes plus the
//! metadata, orders the tensors (dtype rank descending, then name, as the
//! reference does), assigns the data offsets and renders the header. The
//! bytes of each tensor are then fed in that order to a [`TensorStream`],
//! which checks every tensor gets exactly its byte length. [`AtomicFile`] is
//! the destination for files: a temporary file next to the target, renamed
//! over it on [`AtomicFile::commit`] and removed on any failure, so the
//! target is either the old file or the complete new one.

use std::cmp::Reverse;
use std::ffi::OsString;
use std::fs::{self, File};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::dtype::Dtype;
use crate::error::{Error, Result};

/// The key reserved for the metadata map in a header.
pub const METADATA_KEY: &str = "__metadata__";

/// Size of the write buffer that coalesces small tensors into larger writes.
pub const WRITE_BUFFER: usize = 1 << 20;

/// One tensor to write: its name, element type and shape (in elements).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewTensor {
    pub name: String,
    pub dtype: Dtype,
    pub shape: Vec<u64>,
}

impl NewTensor {
    pub fn new(name: impl Into<String>, dtype: Dtype, shape: Vec<u64>) -> NewTensor {
        NewTensor {
            name: name.into(),
            dtype,
            shape,
        }
    }
}

/// A tensor placed in the file: where its bytes go and where it came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedTensor {
    pub name: String,
    pub dtype: Dtype,
    pub shape: Vec<u64>,
    /// First byte, relative to the start of the byte buffer.
    pub begin: u64,
    /// One past the last byte, relative to the start of the byte buffer.
    pub end: u64,
    /// Position of this tensor in the list given to [`WritePlan::new`].
    pub index: usize,
}

impl PlannedTensor {
    /// Length in bytes of the tensor's data.
    pub fn byte_len(&self) -> u64 {
        self.end - self.begin
    }
}

/// The layout of a file to write: tensors in file order with their
/// offsets, and the complete header (length prefix, JSON, space padding).
#[derive(Clone, Debug)]
pub struct WritePlan {
    tensors: Vec<PlannedTensor>,
    header: Vec<u8>,
    data_len: u64,
}

impl WritePlan {
    /// Orders `tensors`, assigns their offsets and renders the header.
    ///
    /// Metadata keys are written in sorted order (the reference writes them
    /// in hash order, so only files with at most one key can match it byte
    /// for byte). Fails on a name equal to `__metadata__`, a repeated name
    /// or metadata key, a shape whose byte size overflows or does not fill
    /// whole bytes, and a header longer than `header_cap`.
    pub fn new(
        tensors: Vec<NewTensor>,
        metadata: Option<Vec<(String, String)>>,
        header_cap: u64,
    ) -> Result<WritePlan> {
        let mut lens = Vec::with_capacity(tensors.len());
        for t in &tensors {
            if t.name == METADATA_KEY {
                return Err(Error::ReservedName {
                    name: t.name.clone(),
                });
            }
            lens.push(tensor_byte_len(t)?);
        }
        let mut order: Vec<usize> = (0..tensors.len()).collect();
        order.sort_by(|&a, &b| {
            let (ta, tb) = (&tensors[a], &tensors[b]);
            Reverse(ta.dtype.write_rank())
                .cmp(&Reverse(tb.dtype.write_rank()))
                .then_with(|| ta.name.cmp(&tb.name))
        });
        let mut by_name: Vec<&str> = tensors.iter().map(|t| t.name.as_str()).collect();
        by_name.sort_unstable();
        if let Some(pair) = by_name.windows(2).find(|p| p[0] == p[1]) {
            return Err(Error::DuplicateName {
                name: pair[0].to_owned(),
            });
        }
        let metadata = match metadata {
            None => None,
            Some(mut pairs) => {
                pairs.sort_by(|a, b| a.0.cmp(&b.0));
                if let Some(pair) = pairs.windows(2).find(|p| p[0].0 == p[1].0) {
                    return Err(Error::DuplicateKey {
                        key: pair[0].0.clone(),
                    });
                }
                Some(pairs)
            }
        };

        let mut slots: Vec<Option<NewTensor>> = tensors.into_iter().map(Some).collect();
        let mut planned = Vec::with_capacity(slots.len());
        let mut offset = 0u64;
        for index in order {
            let Some(t) = slots.get_mut(index).and_then(Option::take) else {
                continue;
            };
            let end = offset
                .checked_add(lens[index])
                .ok_or_else(|| Error::BadTensorSize {
                    tensor: t.name.clone(),
                    reason: "the file's data would exceed 2^64 bytes".to_owned(),
                })?;
            planned.push(PlannedTensor {
                name: t.name,
                dtype: t.dtype,
                shape: t.shape,
                begin: offset,
                end,
                index,
            });
            offset = end;
        }

        let header = render_header(&planned, metadata.as_deref(), header_cap)?;
        let total_ok = (header.len() as u64).checked_add(offset).is_some();
        if !total_ok {
            return Err(Error::FileTooLarge {
                reason: "the file would exceed 2^64 bytes".to_owned(),
            });
        }
        Ok(WritePlan {
            tensors: planned,
            header,
            data_len: offset,
        })
    }

    /// Tensors in file order.
    pub fn tensors(&self) -> &[PlannedTensor] {
        &self.tensors
    }

    /// The bytes before the data: 8-byte length prefix, JSON, padding.
    pub fn header(&self) -> &[u8] {
        &self.header
    }

    /// Length of the padded JSON header (the `N` of the prefix).
    pub fn header_len(&self) -> u64 {
        self.header.len() as u64 - 8
    }

    /// Length of the byte buffer (all tensors' data).
    pub fn data_len(&self) -> u64 {
        self.data_len
    }

    /// Length of the whole file.
    pub fn total_len(&self) -> u64 {
        self.header.len() as u64 + self.data_len
    }
}

fn tensor_byte_len(t: &NewTensor) -> Result<u64> {
    let bad = |reason: String| Error::BadTensorSize {
        tensor: t.name.clone(),
        reason,
    };
    let n = t
        .shape
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| {
            bad(format!(
                "shape {:?} of {} overflows 64-bit byte arithmetic",
                t.shape, t.dtype
            ))
        })?;
    let bits = n.checked_mul(t.dtype.bits()).ok_or_else(|| {
        bad(format!(
            "shape {:?} of {} overflows 64-bit byte arithmetic",
            t.shape, t.dtype
        ))
    })?;
    if bits % 8 != 0 {
        return Err(bad(format!(
            "shape {:?} holds {n} elements of {} ({} bits each), which do not fill whole bytes",
            t.shape,
            t.dtype,
            t.dtype.bits()
        )));
    }
    Ok(bits / 8)
}

/// Renders the header as the reference does: compact JSON, `__metadata__`
/// first, each entry's fields in the order dtype, shape, data_offsets,
/// strings escaped as serde_json escapes them, spaces up to a multiple of 8.
fn render_header(
    tensors: &[PlannedTensor],
    metadata: Option<&[(String, String)]>,
    header_cap: u64,
) -> Result<Vec<u8>> {
    let mut out: Vec<u8> = Vec::with_capacity(8 + 16 + tensors.len() * 80);
    out.extend_from_slice(&[0u8; 8]);
    out.push(b'{');
    let mut first = true;
    if let Some(pairs) = metadata {
        push_json_str(&mut out, METADATA_KEY);
        out.extend_from_slice(b":{");
        for (i, (k, v)) in pairs.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            push_json_str(&mut out, k);
            out.push(b':');
            push_json_str(&mut out, v);
        }
        out.push(b'}');
        first = false;
    }
    for t in tensors {
        if !first {
            out.push(b',');
        }
        first = false;
        push_json_str(&mut out, &t.name);
        out.extend_from_slice(b":{\"dtype\":");
        push_json_str(&mut out, t.dtype.name());
        out.extend_from_slice(b",\"shape\":[");
        for (i, d) in t.shape.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            push_u64(&mut out, *d);
        }
        out.extend_from_slice(b"],\"data_offsets\":[");
        push_u64(&mut out, t.begin);
        out.push(b',');
        push_u64(&mut out, t.end);
        out.extend_from_slice(b"]}");
        // Give up early on a runaway header rather than building gigabytes.
        if (out.len() as u64).saturating_sub(8) > header_cap {
            return Err(Error::HeaderOverCap {
                len: out.len() as u64 - 8,
                cap: header_cap,
            });
        }
    }
    out.push(b'}');
    let json_len = out.len() - 8;
    let padded = json_len.div_ceil(8) * 8;
    out.resize(8 + padded, b' ');
    let n = padded as u64;
    if n > header_cap {
        return Err(Error::HeaderOverCap {
            len: n,
            cap: header_cap,
        });
    }
    out[..8].copy_from_slice(&n.to_le_bytes());
    Ok(out)
}

fn push_u64(out: &mut Vec<u8>, v: u64) {
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    let mut v = v;
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    out.extend_from_slice(&buf[i..]);
}

/// Writes `s` as a JSON string, escaping exactly what serde_json escapes:
/// `"`, `\`, and control characters below 0x20 (`\b \t \n \f \r` by name,
/// the others as `\u00xx` with lower-case hex). Everything else, non-ASCII
/// included, is written as UTF-8.
fn push_json_str(out: &mut Vec<u8>, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push(b'"');
    let bytes = s.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let esc: Option<u8> = match b {
            b'"' => Some(b'"'),
            b'\\' => Some(b'\\'),
            0x08 => Some(b'b'),
            0x09 => Some(b't'),
            0x0a => Some(b'n'),
            0x0c => Some(b'f'),
            0x0d => Some(b'r'),
            0x00..=0x1f => Some(b'u'),
            _ => None,
        };
        let Some(esc) = esc else { continue };
        out.extend_from_slice(&bytes[start..i]);
        out.push(b'\\');
        out.push(esc);
        if esc == b'u' {
            out.extend_from_slice(&[b'0', b'0', HEX[(b >> 4) as usize], HEX[(b & 0xf) as usize]]);
        }
        start = i + 1;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

/// Feeds a plan's tensors, in file order, to a writer: the header first,
/// then each tensor's bytes (in as many parts as convenient), checking that
/// each tensor gets exactly its byte length.
pub struct TensorStream<'p, W: Write> {
    plan: &'p WritePlan,
    out: W,
    next: usize,
    filled: u64,
}

impl<'p, W: Write> TensorStream<'p, W> {
    /// Writes the header of `plan` to `out`.
    pub fn new(plan: &'p WritePlan, mut out: W) -> Result<TensorStream<'p, W>> {
        out.write_all(plan.header())
            .map_err(|e| Error::io("writing the header", e))?;
        Ok(TensorStream {
            plan,
            out,
            next: 0,
            filled: 0,
        })
    }

    /// The tensor whose bytes come next, or `None` once all were written.
    pub fn current(&self) -> Option<&'p PlannedTensor> {
        self.plan.tensors.get(self.next)
    }

    /// Appends `bytes` to the current tensor's data.
    pub fn write(&mut self, bytes: &[u8]) -> Result<()> {
        if bytes.is_empty() {
            return Ok(());
        }
        let Some(t) = self.current() else {
            return Err(Error::StreamOrder {
                reason: format!("{} bytes given after the last tensor", bytes.len()),
            });
        };
        let got = self.filled.saturating_add(bytes.len() as u64);
        if got > t.byte_len() {
            return Err(Error::DataLength {
                tensor: t.name.clone(),
                expected: t.byte_len(),
                got,
            });
        }
        self.out
            .write_all(bytes)
            .map_err(|e| Error::io(format!("writing the data of tensor {:?}", t.name), e))?;
        self.filled = got;
        Ok(())
    }

    /// Ends the current tensor, checking it received all its bytes.
    pub fn end_tensor(&mut self) -> Result<()> {
        let Some(t) = self.current() else {
            return Err(Error::StreamOrder {
                reason: "no tensor left to end".to_owned(),
            });
        };
        if self.filled != t.byte_len() {
            return Err(Error::DataLength {
                tensor: t.name.clone(),
                expected: t.byte_len(),
                got: self.filled,
            });
        }
        self.next += 1;
        self.filled = 0;
        Ok(())
    }

    /// Checks every tensor was written and hands the writer back.
    pub fn finish(self) -> Result<W> {
        if let Some(t) = self.current() {
            return Err(Error::DataLength {
                tensor: t.name.clone(),
                expected: t.byte_len(),
                got: self.filled,
            });
        }
        Ok(self.out)
    }
}

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// A new file being written next to its target. [`AtomicFile::commit`]
/// renames it over the target; dropping it uncommitted removes it, so the
/// target is never seen half-written and no temporary file is left behind.
///
/// The temporary file is created with the default mode (0o666 less the
/// umask), or with the permissions of the file it replaces. When the target
/// is a symbolic link, the file it points to is replaced.
#[derive(Debug)]
pub struct AtomicFile {
    target: PathBuf,
    temp: PathBuf,
    file: Option<File>,
    replaces: bool,
}

impl AtomicFile {
    /// Creates the temporary file in the target's folder.
    pub fn create(target: &Path) -> Result<AtomicFile> {
        let target = resolve_target(target);
        let dir = match target.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let base: OsString = target
            .file_name()
            .map(|n| n.to_os_string())
            .ok_or_else(|| {
                Error::io(
                    "choosing a temporary file",
                    io::Error::new(io::ErrorKind::InvalidInput, "the path names no file"),
                )
            })?;
        let existing = fs::metadata(&target).ok().filter(|m| m.is_file());
        let pid = std::process::id();
        let mut last_err = None;
        for _ in 0..64 {
            let count = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.subsec_nanos())
                .unwrap_or(0);
            let mut name = OsString::from(".");
            name.push(&base);
            name.push(format!(".{pid}-{count}-{nanos:08x}.fastst-tmp"));
            let temp = dir.join(name);
            match File::options().write(true).create_new(true).open(&temp) {
                Ok(file) => {
                    let atomic = AtomicFile {
                        target,
                        temp,
                        file: Some(file),
                        replaces: existing.is_some(),
                    };
                    if let Some(meta) = existing {
                        fs::set_permissions(&atomic.temp, meta.permissions()).map_err(|e| {
                            Error::io("copying the permissions of the file being replaced", e)
                        })?;
                    }
                    return Ok(atomic);
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last_err = Some(e),
                Err(e) => {
                    return Err(Error::io(
                        "creating a temporary file in the target's folder",
                        e,
                    ))
                }
            }
        }
        Err(Error::io(
            "creating a temporary file in the target's folder",
            last_err.unwrap_or_else(|| io::Error::from(io::ErrorKind::AlreadyExists)),
        ))
    }

    /// The file being written.
    pub fn file(&mut self) -> Result<&mut File> {
        self.file.as_mut().ok_or_else(|| {
            Error::io(
                "writing the temporary file",
                io::Error::other("file already closed"),
            )
        })
    }

    /// True when a file already exists at the target (it will be replaced).
    pub fn replaces_existing(&self) -> bool {
        self.replaces
    }

    /// Path of the temporary file.
    pub fn temp_path(&self) -> &Path {
        &self.temp
    }

    /// Path the file will have once committed.
    pub fn target(&self) -> &Path {
        &self.target
    }

    /// Closes the file and renames it over the target. With `durable`, the
    /// data is flushed to the device before the rename and the folder after
    /// it, so a system crash leaves either the old file or the new one.
    pub fn commit(mut self, durable: bool) -> Result<()> {
        let file = self.file.take().ok_or_else(|| {
            Error::io(
                "committing the temporary file",
                io::Error::other("file already closed"),
            )
        })?;
        if durable {
            file.sync_all()
                .map_err(|e| Error::io("flushing the new file to disk", e))?;
        }
        drop(file);
        fs::rename(&self.temp, &self.target)
            .map_err(|e| Error::io("renaming the temporary file over the target", e))?;
        // The temporary path no longer exists: nothing to clean up.
        self.temp = PathBuf::new();
        if durable {
            if let Some(dir) = self.target.parent() {
                let dir = if dir.as_os_str().is_empty() {
                    Path::new(".")
                } else {
                    dir
                };
                // Folders cannot be opened for syncing everywhere; the file
                // itself is already safe, so a failure here is not an error.
                if let Ok(d) = File::open(dir) {
                    let _ = d.sync_all();
                }
            }
        }
        Ok(())
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        self.file.take();
        if !self.temp.as_os_str().is_empty() {
            let _ = fs::remove_file(&self.temp);
        }
    }
}

fn resolve_target(target: &Path) -> PathBuf {
    match fs::symlink_metadata(target) {
        Ok(m) if m.file_type().is_symlink() => {
            fs::canonicalize(target).unwrap_or_else(|_| target.to_path_buf())
        }
        _ => target.to_path_buf(),
    }
}

/// Writes the tensors of `plan` to `path` atomically; `data[i]` holds the
/// bytes of the `i`-th tensor given to [`WritePlan::new`].
pub fn write_file(plan: &WritePlan, data: &[&[u8]], path: &Path, durable: bool) -> Result<()> {
    let mut atomic = AtomicFile::create(path)?;
    let out = BufWriter::with_capacity(WRITE_BUFFER, atomic.file()?);
    let mut stream = TensorStream::new(plan, out)?;
    feed(plan, data, &mut stream)?;
    let out = stream.finish()?;
    out.into_inner()
        .map_err(|e| Error::io("writing the data", e.into_error()))?;
    atomic.commit(durable)
}

/// Serialises the tensors of `plan` to memory; `data[i]` holds the bytes of
/// the `i`-th tensor given to [`WritePlan::new`].
pub fn serialize(plan: &WritePlan, data: &[&[u8]]) -> Result<Vec<u8>> {
    let cap = usize::try_from(plan.total_len()).map_err(|_| Error::FileTooLarge {
        reason: "the file does not fit in memory".to_owned(),
    })?;
    let mut stream = TensorStream::new(plan, Vec::with_capacity(cap))?;
    feed(plan, data, &mut stream)?;
    stream.finish()
}

fn feed<W: Write>(
    plan: &WritePlan,
    data: &[&[u8]],
    stream: &mut TensorStream<'_, W>,
) -> Result<()> {
    for t in plan.tensors() {
        let bytes = data.get(t.index).ok_or_else(|| Error::StreamOrder {
            reason: format!("no data given for tensor {:?}", t.name),
        })?;
        stream.write(bytes)?;
        stream.end_tensor()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::header::{check_prefix, Header, DEFAULT_HEADER_CAP};

    fn plan(tensors: Vec<NewTensor>, meta: Option<Vec<(&str, &str)>>) -> Result<WritePlan> {
        let meta = meta.map(|m| {
            m.into_iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect()
        });
        WritePlan::new(tensors, meta, DEFAULT_HEADER_CAP)
    }

    fn json_of(p: &WritePlan) -> &str {
        std::str::from_utf8(&p.header()[8..]).unwrap_or("<not utf-8>")
    }

    #[test]
    fn header_matches_reference_layout() {
        let p = plan(
            vec![
                NewTensor::new("b", Dtype::F32, vec![3]),
                NewTensor::new("a", Dtype::I64, vec![2]),
                NewTensor::new("c", Dtype::Bf16, vec![3]),
                NewTensor::new("z", Dtype::F32, vec![0]),
            ],
            Some(vec![("k", "v")]),
        )
        .expect("plan");
        let expected = concat!(
            r#"{"__metadata__":{"k":"v"},"a":{"dtype":"I64","shape":[2],"data_offsets":[0,16]},"#,
            r#""b":{"dtype":"F32","shape":[3],"data_offsets":[16,28]},"#,
            r#""z":{"dtype":"F32","shape":[0],"data_offsets":[28,28]},"#,
            r#""c":{"dtype":"BF16","shape":[3],"data_offsets":[28,34]}}"#
        );
        assert_eq!(json_of(&p).trim_end_matches(' '), expected);
        assert_eq!(p.header_len() % 8, 0);
        assert_eq!(p.data_len(), 34);
        let order: Vec<usize> = p.tensors().iter().map(|t| t.index).collect();
        assert_eq!(order, vec![1, 0, 3, 2]);
    }

    #[test]
    fn dtype_order_is_the_reference_order() {
        // File order the reference package (0.8.0) gives one tensor of each
        // dtype it can write, with names that sort against that order.
        let expected = [
            "U64",
            "I64",
            "F64",
            "C64",
            "F32",
            "U32",
            "I32",
            "BF16",
            "F16",
            "U16",
            "I16",
            "F8_E5M2FNUZ",
            "F8_E4M3FNUZ",
            "F8_E8M0",
            "F8_E4M3",
            "F8_E5M2",
            "I8",
            "U8",
            "F4",
            "BOOL",
        ];
        let tensors = expected
            .iter()
            .rev()
            .enumerate()
            .map(|(i, name)| {
                let dtype = Dtype::from_name(name).expect("known dtype");
                NewTensor::new(format!("{i:02}"), dtype, vec![2])
            })
            .collect();
        let p = plan(tensors, None).expect("plan");
        let got: Vec<&str> = p.tensors().iter().map(|t| t.dtype.name()).collect();
        assert_eq!(got, expected);
    }

    #[test]
    fn parse_file_bytes_checks_framing() {
        let p = plan(vec![NewTensor::new("a", Dtype::U8, vec![2])], None).expect("plan");
        let bytes = serialize(&p, &[&[5, 6]]).expect("ser");
        let h = crate::header::parse_file_bytes(&bytes, DEFAULT_HEADER_CAP).expect("parse");
        assert_eq!(h.data_start(), p.header().len() as u64);
        let e =
            crate::header::parse_file_bytes(&bytes[..5], DEFAULT_HEADER_CAP).expect_err("short");
        assert_eq!(e.rule(), "file-too-short");
        let e = crate::header::parse_file_bytes(&bytes[..bytes.len() - 1], DEFAULT_HEADER_CAP)
            .expect_err("truncated");
        assert_eq!(e.rule(), "data-too-short");
    }

    #[test]
    fn empty_file_and_empty_metadata() {
        let p = plan(vec![], None).expect("plan");
        assert_eq!(p.header(), b"\x08\0\0\0\0\0\0\0{}      ");
        let p = plan(vec![], Some(vec![])).expect("plan");
        assert_eq!(json_of(&p), r#"{"__metadata__":{}}     "#);
    }

    #[test]
    fn escaping_matches_serde_json() {
        let samples = [
            "plain",
            "a\u{1}\n\t\"\\/é\u{2028}\u{1F600}\u{7f}",
            "\u{0}\u{8}\u{c}\r\u{1f}\u{1e}",
            "",
            "日本語",
        ];
        for s in samples {
            let mut ours = Vec::new();
            push_json_str(&mut ours, s);
            let theirs = serde_json::to_string(s).expect("serde_json");
            assert_eq!(ours, theirs.as_bytes(), "{s:?}");
        }
        for b in 0u8..=0x7f {
            let s = String::from(char::from(b));
            let mut ours = Vec::new();
            push_json_str(&mut ours, &s);
            assert_eq!(ours, serde_json::to_string(&s).expect("json").as_bytes());
        }
    }

    #[test]
    fn numbers_render() {
        for v in [0u64, 7, 10, 99, 1234567890, u64::MAX] {
            let mut out = Vec::new();
            push_u64(&mut out, v);
            assert_eq!(out, v.to_string().as_bytes());
        }
    }

    #[test]
    fn metadata_keys_are_sorted_and_unique() {
        let p = plan(vec![], Some(vec![("b", "1"), ("a", "2")])).expect("plan");
        assert!(json_of(&p).starts_with(r#"{"__metadata__":{"a":"2","b":"1"}}"#));
        let e = plan(vec![], Some(vec![("a", "1"), ("a", "2")])).expect_err("must fail");
        assert_eq!(e.rule(), "duplicate-key");
    }

    #[test]
    fn rejects_bad_input() {
        let e = plan(
            vec![NewTensor::new("__metadata__", Dtype::F32, vec![1])],
            None,
        )
        .expect_err("must fail");
        assert_eq!(e.rule(), "reserved-name");
        let e = plan(
            vec![
                NewTensor::new("x", Dtype::F32, vec![1]),
                NewTensor::new("x", Dtype::I8, vec![1]),
            ],
            None,
        )
        .expect_err("must fail");
        assert_eq!(e.rule(), "duplicate-name");
        let e = plan(vec![NewTensor::new("x", Dtype::F4, vec![3])], None).expect_err("must fail");
        assert_eq!(e.rule(), "bad-tensor-size");
        assert_eq!(e.tensor(), Some("x"));
        let e = plan(
            vec![NewTensor::new("x", Dtype::F64, vec![u64::MAX / 2, 3])],
            None,
        )
        .expect_err("must fail");
        assert_eq!(e.rule(), "bad-tensor-size");
        let e = plan(
            vec![
                NewTensor::new("x", Dtype::F64, vec![1 << 61]),
                NewTensor::new("y", Dtype::F64, vec![1 << 61]),
            ],
            None,
        )
        .expect_err("must fail");
        assert_eq!(e.rule(), "bad-tensor-size");
    }

    #[test]
    fn header_cap_is_enforced() {
        let tensors: Vec<NewTensor> = (0..100)
            .map(|i| NewTensor::new(format!("t{i}"), Dtype::F32, vec![1]))
            .collect();
        let e = WritePlan::new(tensors.clone(), None, 1000).expect_err("must fail");
        assert_eq!(e.rule(), "header-over-cap");
        let p = WritePlan::new(tensors, None, DEFAULT_HEADER_CAP).expect("plan");
        let n = p.header_len();
        assert!(WritePlan::new(
            (0..100)
                .map(|i| NewTensor::new(format!("t{i}"), Dtype::F32, vec![1]))
                .collect(),
            None,
            n
        )
        .is_ok());
    }

    #[test]
    fn serialized_bytes_parse_back() {
        let f32s: Vec<u8> = (0..12u8).collect();
        let f4 = [0x21u8, 0x43];
        let p = plan(
            vec![
                NewTensor::new("w", Dtype::F32, vec![3]),
                NewTensor::new("q", Dtype::F4, vec![2, 2]),
                NewTensor::new("s", Dtype::F6E2M3, vec![4]),
                NewTensor::new("e", Dtype::U8, vec![0, 5]),
                NewTensor::new("scalar", Dtype::I16, vec![]),
            ],
            Some(vec![("format", "pt")]),
        )
        .expect("plan");
        let f6 = [1u8, 2, 3];
        let scalar = [7u8, 0];
        let bytes = serialize(&p, &[&f32s, &f4, &f6, &[], &scalar]).expect("serialize");
        assert_eq!(bytes.len() as u64, p.total_len());
        let n = check_prefix(&bytes, bytes.len() as u64, DEFAULT_HEADER_CAP).expect("prefix");
        let start = 8 + n as usize;
        let h = Header::parse(&bytes[8..start], (bytes.len() - start) as u64).expect("parse");
        let w = h.require("w").expect("w");
        assert_eq!(
            &bytes[start + w.begin as usize..start + w.end as usize],
            &f32s[..]
        );
        let q = h.require("q").expect("q");
        assert_eq!(
            &bytes[start + q.begin as usize..start + q.end as usize],
            &f4[..]
        );
        assert_eq!(h.require("scalar").expect("s").shape, Vec::<u64>::new());
        assert_eq!(
            h.metadata(),
            Some(&[("format".to_owned(), "pt".to_owned())][..])
        );
    }

    #[test]
    fn stream_checks_lengths() {
        let p = plan(
            vec![
                NewTensor::new("a", Dtype::F32, vec![2]),
                NewTensor::new("b", Dtype::U8, vec![3]),
            ],
            None,
        )
        .expect("plan");
        let e = serialize(&p, &[&[0u8; 7], &[0u8; 3]]).expect_err("must fail");
        assert_eq!(e.rule(), "data-length");
        assert_eq!(e.tensor(), Some("a"));
        let e = serialize(&p, &[&[0u8; 8], &[0u8; 4]]).expect_err("must fail");
        assert_eq!(e.tensor(), Some("b"));
        let e = serialize(&p, &[&[0u8; 8]]).expect_err("must fail");
        assert_eq!(e.rule(), "stream-order");

        let mut s = TensorStream::new(&p, Vec::new()).expect("stream");
        s.write(&[1; 4]).expect("part");
        s.write(&[2; 4]).expect("part");
        s.end_tensor().expect("end");
        s.write(&[3; 2]).expect("part");
        let e = s.finish().expect_err("must fail");
        assert_eq!(e.tensor(), Some("b"));
    }

    fn temp_dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "fastst-write-{tag}-{}-{}",
            std::process::id(),
            TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        fs::create_dir_all(&d).expect("mkdir");
        d
    }

    fn entries(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(dir)
            .expect("read_dir")
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn file_write_replaces_atomically() {
        let dir = temp_dir("atomic");
        let path = dir.join("model.safetensors");
        fs::write(&path, b"old contents").expect("write old");
        let p = plan(vec![NewTensor::new("a", Dtype::U8, vec![4])], None).expect("plan");

        // A failing stream leaves the old file and no temporary file.
        let e = write_file(&p, &[&[1, 2, 3]], &path, false).expect_err("must fail");
        assert_eq!(e.rule(), "data-length");
        assert_eq!(fs::read(&path).expect("read"), b"old contents");
        assert_eq!(entries(&dir), vec!["model.safetensors"]);

        // Dropping an uncommitted file removes it.
        let mut a = AtomicFile::create(&path).expect("create");
        assert!(a.replaces_existing());
        assert!(!AtomicFile::create(&dir.join("new.safetensors"))
            .expect("create")
            .replaces_existing());
        a.file()
            .expect("file")
            .write_all(b"partial")
            .expect("write");
        let temp = a.temp_path().to_path_buf();
        assert!(temp.exists());
        drop(a);
        assert!(!temp.exists());

        write_file(&p, &[&[1, 2, 3, 4]], &path, true).expect("write");
        let bytes = fs::read(&path).expect("read");
        assert_eq!(&bytes[bytes.len() - 4..], &[1, 2, 3, 4]);
        assert_eq!(bytes, serialize(&p, &[&[1, 2, 3, 4]]).expect("ser"));
        assert_eq!(entries(&dir), vec!["model.safetensors"]);
        fs::remove_dir_all(&dir).expect("cleanup");
    }

    #[cfg(unix)]
    #[test]
    fn permissions_follow_umask_or_the_replaced_file() {
        use std::os::unix::fs::PermissionsExt;
        let dir = temp_dir("perm");
        let p = plan(vec![], None).expect("plan");
        let fresh = dir.join("fresh.safetensors");
        write_file(&p, &[], &fresh, false).expect("write");
        let mode = fs::metadata(&fresh).expect("meta").permissions().mode() & 0o777;
        // Same mode as any file the process creates (0o666 less the umask).
        let probe = dir.join("probe");
        File::create(&probe).expect("probe");
        let probe_mode = fs::metadata(&probe).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode, probe_mode);
        assert_ne!(mode, 0o600);

        let kept = dir.join("kept.safetensors");
        fs::write(&kept, b"x").expect("write");
        fs::set_permissions(&kept, fs::Permissions::from_mode(0o640)).expect("chmod");
        write_file(&p, &[], &kept, false).expect("write");
        assert_eq!(
            fs::metadata(&kept).expect("meta").permissions().mode() & 0o777,
            0o640
        );
        fs::remove_dir_all(&dir).expect("cleanup");
    }

    #[cfg(unix)]
    #[test]
    fn symlinked_target_is_replaced_through_the_link() {
        let dir = temp_dir("link");
        let real = dir.join("real.safetensors");
        fs::write(&real, b"old").expect("write");
        let link = dir.join("link.safetensors");
        std::os::unix::fs::symlink(&real, &link).expect("symlink");
        let p = plan(vec![], None).expect("plan");
        write_file(&p, &[], &link, false).expect("write");
        assert!(fs::symlink_metadata(&link)
            .expect("meta")
            .file_type()
            .is_symlink());
        assert_eq!(fs::read(&real).expect("read"), p.header());
        fs::remove_dir_all(&dir).expect("cleanup");
    }

    #[test]
    fn missing_folder_is_an_io_error() {
        let dir = temp_dir("missing");
        let p = plan(vec![], None).expect("plan");
        let e = write_file(&p, &[], &dir.join("no/such/dir/x.safetensors"), false)
            .expect_err("must fail");
        assert_eq!(e.rule(), "io");
        fs::remove_dir_all(&dir).expect("cleanup");
    }
}
