//! What a file that is not a safetensors file is: the one place that turns
//! the first bytes of a file into a sentence such as "a PyTorch checkpoint
//! (zip with pickles)". Used by the Python library to explain why the reader
//! rejects a file, and by the command line for every subcommand. Nothing is
//! parsed beyond a few fixed fields, nothing is executed.
//!
//! [`sniff`] (magic numbers alone) is the part `fastst verify` also runs on
//! a file's start and on bytes no tensor covers.

mod magic;

pub use magic::{sniff, Magic, SNIFF_LEN};

/// Bytes [`identify`] wants to see (fewer are fine).
pub const IDENTIFY_LEN: usize = SNIFF_LEN;

/// A file recognised as something other than safetensors.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identified {
    /// A stable short name: `pytorch-zip`, `pickle`, `zip`, `npz`, `npy`,
    /// `gguf`, `hdf5`, `onnx`, `git-lfs-pointer`, `html`, `json`, `text`,
    /// `empty`, or `other` (any other format [`sniff`] knows).
    pub kind: &'static str,
    /// What it is, to complete "this is ... , not a safetensors file".
    pub description: String,
    /// Whether the format can carry code that runs when loaded.
    pub executable: bool,
}

fn found(kind: &'static str, description: impl Into<String>, executable: bool) -> Identified {
    Identified {
        kind,
        description: description.into(),
        executable,
    }
}

/// Whether `head` (the first bytes of a file of `file_len` bytes) starts
/// like a safetensors file: a length prefix that fits in the file, then
/// optional whitespace and `{`.
pub fn looks_like_safetensors(head: &[u8], file_len: u64) -> bool {
    let Some(prefix) = head.get(..8) else {
        return false;
    };
    let mut le = [0u8; 8];
    le.copy_from_slice(prefix);
    let n = u64::from_le_bytes(le);
    if n == 0 || n > file_len.saturating_sub(8) {
        return false;
    }
    match head[8..]
        .iter()
        .find(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
    {
        Some(b) => *b == b'{',
        // Only whitespace seen so far: the header may still start later.
        None => true,
    }
}

/// The name of the first member of a zip archive (its local file header).
fn first_zip_member(head: &[u8]) -> Option<&[u8]> {
    let len = usize::from(u16::from_le_bytes([*head.get(26)?, *head.get(27)?]));
    head.get(30..30 + len)
}

fn is_onnx(head: &[u8]) -> bool {
    // An ONNX ModelProto starts with field 1 (ir_version, a small varint),
    // then another field of the message (producer_name, graph, opset...).
    matches!(
        head,
        [
            0x08,
            1..=30,
            0x12 | 0x1a | 0x22 | 0x28 | 0x32 | 0x3a | 0x42,
            ..
        ]
    )
}

fn text_kind(head: &[u8]) -> Option<Identified> {
    // Text: valid UTF-8 (allowing a character cut at the end of `head`)
    // without controls other than tab, newline and carriage return.
    let text = match std::str::from_utf8(head) {
        Ok(t) => t,
        Err(e) if e.error_len().is_none() => std::str::from_utf8(&head[..e.valid_up_to()]).ok()?,
        Err(_) => return None,
    };
    if text.is_empty()
        || text
            .chars()
            .any(|c| c.is_control() && !matches!(c, '\t' | '\n' | '\r'))
    {
        return None;
    }
    let start = text.trim_start_matches('\u{feff}').trim_start();
    let lower: String = start
        .chars()
        .take(256)
        .collect::<String>()
        .to_ascii_lowercase();
    if lower.starts_with("version https://git-lfs") {
        return Some(found(
            "git-lfs-pointer",
            "a Git LFS pointer file (the model itself was not downloaded)",
            false,
        ));
    }
    if lower.starts_with("<!doctype html") || lower.starts_with("<html") || lower.contains("<html")
    {
        return Some(found(
            "html",
            "an HTML page (perhaps an error or login page saved as a model)",
            false,
        ));
    }
    if lower.starts_with('{') || lower.starts_with('[') {
        return Some(found("json", "a JSON text file", false));
    }
    Some(found("text", "a text file", false))
}

/// What `head`, the first bytes (up to [`IDENTIFY_LEN`]) of a file of
/// `file_len` bytes, is when it is not a safetensors file; None when it
/// looks like one (its header may still be broken: the reader and `verify`
/// say how).
pub fn identify(head: &[u8], file_len: u64) -> Option<Identified> {
    if file_len == 0 {
        return Some(found("empty", "an empty file", false));
    }
    if looks_like_safetensors(head, file_len) {
        return None;
    }
    if let Some(magic) = sniff(head) {
        if head.starts_with(b"PK\x03\x04") {
            let member = first_zip_member(head).unwrap_or_default();
            if member.ends_with(b".npy") {
                return Some(found("npz", "a NumPy .npz archive", false));
            }
            let torch = member.ends_with(b"data.pkl")
                || member.ends_with(b"/version")
                || member.ends_with(b".data/version")
                || member.windows(6).any(|w| w == b"/data/");
            if torch {
                return Some(found(
                    "pytorch-zip",
                    "a PyTorch checkpoint (zip with pickles)",
                    true,
                ));
            }
            return Some(found(
                "zip",
                "a zip archive (perhaps a PyTorch checkpoint holding pickles)",
                true,
            ));
        }
        let kind = match magic.name {
            n if n.starts_with("pickle") => {
                return Some(found(
                    "pickle",
                    format!(
                        "a raw {}, as in a PyTorch checkpoint of the legacy format",
                        magic.name
                    ),
                    true,
                ));
            }
            "GGUF model" => "gguf",
            "NumPy .npy array" => "npy",
            "HDF5 file" => "hdf5",
            _ => "other",
        };
        let article = match magic.name.as_bytes().first() {
            Some(b'A' | b'E' | b'I' | b'O' | b'U' | b'a' | b'e' | b'i' | b'o' | b'u') => "an",
            _ => "a",
        };
        return Some(found(
            kind,
            format!("{article} {}", magic.name),
            magic.executable,
        ));
    }
    if is_onnx(head) {
        return Some(found("onnx", "an ONNX model (protobuf)", false));
    }
    text_kind(head)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(head: &[u8]) -> Option<&'static str> {
        identify(head, head.len() as u64).map(|i| i.kind)
    }

    fn zip(member: &str) -> Vec<u8> {
        let mut v = b"PK\x03\x04".to_vec();
        v.resize(26, 0);
        v.extend_from_slice(&(member.len() as u16).to_le_bytes());
        v.extend_from_slice(&[0, 0]);
        v.extend_from_slice(member.as_bytes());
        v.resize(200, 0);
        v
    }

    #[test]
    fn safetensors_is_not_identified() {
        let mut file = 2u64.to_le_bytes().to_vec();
        file.extend_from_slice(b"{}");
        assert_eq!(identify(&file, 10), None);
        let mut ws = 4u64.to_le_bytes().to_vec();
        ws.extend_from_slice(b"  {}");
        assert_eq!(identify(&ws, 12), None);
        // A prefix that looks like "MZ" but is a plausible safetensors length.
        let mut mz = 0x5a4du64.to_le_bytes().to_vec();
        mz.push(b'{');
        assert_eq!(identify(&mz, 0x5a4d + 8), None);
        assert_eq!(kind(&mz), Some("other"));
    }

    #[test]
    fn formats() {
        assert_eq!(kind(&zip("archive/data.pkl")), Some("pytorch-zip"));
        assert_eq!(kind(&zip("model/version")), Some("pytorch-zip"));
        assert_eq!(kind(&zip("arr_0.npy")), Some("npz"));
        assert_eq!(kind(&zip("readme.txt")), Some("zip"));
        assert_eq!(kind(b"\x80\x02}q\x00(X"), Some("pickle"));
        assert_eq!(kind(b"GGUF\x03\x00\x00\x00"), Some("gguf"));
        assert_eq!(kind(b"\x93NUMPY\x01\x00"), Some("npy"));
        assert_eq!(kind(b"\x89HDF\r\n\x1a\n\0\0"), Some("hdf5"));
        assert_eq!(kind(b"\x08\x07\x12\x07pytorch"), Some("onnx"));
        assert_eq!(kind(b"<!DOCTYPE html><html>"), Some("html"));
        assert_eq!(kind(b"\n  <HTML><body>404"), Some("html"));
        // An HTML page with something before its <html> tag.
        assert_eq!(kind(b"<?xml version=\"1.0\"?>\n<html><body>"), Some("html"));
        assert_eq!(
            kind(b"version https://git-lfs.github.com/spec/v1\noid sha256:ab"),
            Some("git-lfs-pointer")
        );
        assert_eq!(kind(b"{\"weight_map\": {}}"), Some("json"));
        assert_eq!(kind("Internal Server Error é".as_bytes()), Some("text"));
        assert_eq!(kind(b""), Some("empty"));
        assert_eq!(kind(b"\x00\x01\x02\xff\xfe"), None);
        let e = identify(b"\x7fELF\x02\x01\x01", 7).expect("a result");
        assert_eq!(e.description, "an ELF executable");
        assert!(e.executable);
    }

    #[test]
    fn cut_utf8_at_the_end_is_still_text() {
        let mut t = "Fehler: Datei nicht gefunden ".as_bytes().to_vec();
        t.extend_from_slice(&"ü".as_bytes()[..1]);
        assert_eq!(kind(&t), Some("text"));
    }
}
