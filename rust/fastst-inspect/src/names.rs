//! Checks on tensor names and dtypes that the reader accepts but that
//! deserve a second look.

use fastst_core::Dtype;

use crate::{Finding, RuleId};

/// True for characters that render as nothing or reorder text: C0/C1
/// controls, DEL, bidirectional overrides and isolates, zero-width
/// characters and the byte-order mark.
pub(crate) fn is_suspicious_char(c: char) -> bool {
    matches!(c,
        '\u{0}'..='\u{1f}'
        | '\u{7f}'..='\u{9f}'
        | '\u{200b}'..='\u{200f}'
        | '\u{202a}'..='\u{202e}'
        | '\u{2066}'..='\u{2069}'
        | '\u{feff}')
}

/// Why a name looks like a file path, if it does.
fn path_like(name: &str) -> Option<&'static str> {
    if name.starts_with('/') {
        return Some("starts with `/` (an absolute path)");
    }
    if name.contains('\\') {
        return Some("contains a backslash");
    }
    if name.starts_with('~') {
        return Some("starts with `~` (a home directory)");
    }
    let b = name.as_bytes();
    if b.len() >= 2 && b[0].is_ascii_alphabetic() && b[1] == b':' && (b.len() == 2 || b[2] == b'/')
    {
        return Some("starts with a drive letter");
    }
    if name.split('/').any(|part| part == "..") {
        return Some("has a `..` path component");
    }
    None
}

/// The last component of a dotted or slashed tensor name.
fn leaf(name: &str) -> &str {
    name.rsplit(['.', '/']).next().unwrap_or(name)
}

/// Findings about one tensor's name.
pub(crate) fn name_findings(name: &str, out: &mut Vec<Finding>) {
    if name.is_empty() {
        out.push(
            Finding::new(RuleId::EmptyName, "a tensor is named by the empty string").tensor(name),
        );
    }
    if let Some(c) = name.chars().find(|&c| is_suspicious_char(c)) {
        out.push(
            Finding::new(
                RuleId::ControlCharName,
                format!(
                    "tensor {name:?}: name holds the invisible or control character U+{:04X}",
                    u32::from(c)
                ),
            )
            .tensor(name),
        );
    }
    if let Some(why) = path_like(name) {
        out.push(
            Finding::new(
                RuleId::PathLikeName,
                format!("tensor {name:?}: name looks like a file path: it {why}"),
            )
            .tensor(name),
        );
    }
}

/// Findings about one tensor's dtype and size (`abs_begin` is the absolute
/// file offset of its data).
pub(crate) fn dtype_findings(
    name: &str,
    dtype: Dtype,
    abs_begin: u64,
    len: u64,
    out: &mut Vec<Finding>,
) {
    if len >= 1 << 31 {
        out.push(
            Finding::new(RuleId::LargeTensor,
                format!(
                    "tensor {name:?}: {len} bytes ({:.2} GiB), beyond what 32-bit byte counts can address",
                    len as f64 / (1u64 << 30) as f64
                ),
            )
            .tensor(name)
            .at(abs_begin, len),
        );
    }
    let leaf = leaf(name);
    if matches!(leaf, "weight" | "bias" | "kernel") && (!dtype.is_float() || dtype == Dtype::C64) {
        out.push(
            Finding::new(RuleId::SuspiciousWeightDtype,
                format!("tensor {name:?}: a {leaf} stored as {dtype}, unusual unless the model is quantized"),
            )
            .tensor(name),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(name: &str, dtype: Dtype, len: u64) -> Vec<&'static str> {
        let mut out = Vec::new();
        name_findings(name, &mut out);
        dtype_findings(name, dtype, 0, len, &mut out);
        out.into_iter().map(|f| f.rule.id()).collect()
    }

    #[test]
    fn clean_names_pass() {
        assert!(rules("model.layers.0.mlp.weight", Dtype::Bf16, 16).is_empty());
        assert!(rules("dense/kernel:0", Dtype::F32, 16).is_empty());
        assert!(rules("embed.идентификатор", Dtype::F32, 16).is_empty());
        assert!(rules("model.qweight", Dtype::I32, 16).is_empty());
        assert!(rules("position_ids", Dtype::I64, 16).is_empty());
    }

    #[test]
    fn suspicious_names() {
        assert_eq!(rules("a\u{202e}b", Dtype::F32, 4), ["control-char-name"]);
        assert_eq!(rules("a\nb", Dtype::F32, 4), ["control-char-name"]);
        assert_eq!(rules("../../etc/passwd", Dtype::F32, 4), ["path-like-name"]);
        assert_eq!(rules("/etc/passwd", Dtype::F32, 4), ["path-like-name"]);
        assert_eq!(rules("C:/x", Dtype::F32, 4), ["path-like-name"]);
        assert_eq!(rules("a\\b", Dtype::F32, 4), ["path-like-name"]);
        assert_eq!(rules("", Dtype::F32, 4), ["empty-name"]);
    }

    #[test]
    fn drive_letters_only_with_a_path_after_them() {
        assert_eq!(rules("C:", Dtype::F32, 4), ["path-like-name"]);
        assert_eq!(rules("d:/weights", Dtype::F32, 4), ["path-like-name"]);
        // TensorFlow's output names: `x:0` is no drive.
        assert!(rules("x:0", Dtype::F32, 4).is_empty());
        assert!(rules("1:/a", Dtype::F32, 4).is_empty());
    }

    #[test]
    fn dtype_and_size() {
        assert_eq!(rules("l.weight", Dtype::I8, 4), ["suspicious-weight-dtype"]);
        assert_eq!(rules("l.bias", Dtype::Bool, 4), ["suspicious-weight-dtype"]);
        assert_eq!(
            rules("l.weight", Dtype::C64, 8),
            ["suspicious-weight-dtype"]
        );
        assert!(rules("l.weight", Dtype::F8E4M3, 4).is_empty());
        assert_eq!(rules("big", Dtype::F32, 1 << 31), ["large-tensor"]);
        assert!(rules("big", Dtype::F32, (1 << 31) - 4).is_empty());
    }
}
