//! Recognising other file formats by their magic numbers, without parsing
//! (let alone running) anything.

/// A format recognised from the first bytes of some content.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Magic {
    /// What the bytes look like, e.g. `"pickle stream (protocol 4)"`.
    pub name: &'static str,
    /// True for formats that can carry or run code (pickles, archives that
    /// hold pickles, executables, scripts); false for data-only formats.
    pub executable: bool,
}

const fn m(name: &'static str, executable: bool) -> Magic {
    Magic { name, executable }
}

/// Bytes [`sniff`] looks at (tar's signature sits at offset 257).
pub const SNIFF_LEN: usize = 512;

/// Recognises the format `head` (the first bytes of some content, up to
/// `SNIFF_LEN`) starts with, if any.
pub fn sniff(head: &[u8]) -> Option<Magic> {
    let starts = |sig: &[u8]| head.starts_with(sig);
    if let [0x80, proto @ 2..=5, next, ..] = head {
        // PROTO opcode then a real opcode (never NUL): pickle protocols 2-5.
        if *next != 0 {
            return Some(m(
                match proto {
                    2 => "pickle stream (protocol 2)",
                    3 => "pickle stream (protocol 3)",
                    4 => "pickle stream (protocol 4)",
                    _ => "pickle stream (protocol 5)",
                },
                true,
            ));
        }
    }
    let table: &[(&[u8], Magic)] = &[
        (
            b"PK\x03\x04",
            m(
                "zip archive (e.g. a PyTorch checkpoint holding pickles)",
                true,
            ),
        ),
        (b"PK\x05\x06", m("zip archive (empty)", true)),
        (b"PK\x07\x08", m("zip archive (spanned)", true)),
        (b"\x7fELF", m("ELF executable", true)),
        (b"MZ", m("Windows executable (PE/MZ)", true)),
        (b"\xfe\xed\xfa\xce", m("Mach-O executable", true)),
        (b"\xfe\xed\xfa\xcf", m("Mach-O executable", true)),
        (b"\xce\xfa\xed\xfe", m("Mach-O executable", true)),
        (b"\xcf\xfa\xed\xfe", m("Mach-O executable", true)),
        (
            b"\xca\xfe\xba\xbe",
            m("Mach-O universal binary or Java class", true),
        ),
        (b"#!", m("script with a #! interpreter line", true)),
        (b"\x1f\x8b", m("gzip stream", true)),
        (b"BZh", m("bzip2 stream", true)),
        (b"\xfd7zXZ\x00", m("xz stream", true)),
        (b"7z\xbc\xaf\x27\x1c", m("7-Zip archive", true)),
        (b"\x28\xb5\x2f\xfd", m("zstd stream", true)),
        (b"Rar!\x1a\x07", m("RAR archive", true)),
        (b"\x00asm", m("WebAssembly module", true)),
        (b"GGUF", m("GGUF model", false)),
        (b"\x93NUMPY", m("NumPy .npy array", false)),
        (b"\x89HDF\r\n\x1a\n", m("HDF5 file", false)),
        (b"\x89PNG\r\n\x1a\n", m("PNG image", false)),
        (b"\xff\xd8\xff", m("JPEG image", false)),
        (b"%PDF-", m("PDF document", false)),
    ];
    for (sig, magic) in table {
        if starts(sig) {
            return Some(*magic);
        }
    }
    if head.len() >= 262 && &head[257..262] == b"ustar" {
        return Some(m("tar archive", true));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognises_pickles_only_with_a_real_opcode() {
        assert_eq!(sniff(b"\x80\x04\x95\x10").map(|m| m.executable), Some(true));
        assert_eq!(
            sniff(b"\x80\x02}q\x00").map(|m| m.name),
            Some("pickle stream (protocol 2)")
        );
        // A safetensors prefix of 640 bytes: 80 02 00 00 00 00 00 00.
        assert_eq!(sniff(b"\x80\x02\x00\x00\x00\x00\x00\x00"), None);
        assert_eq!(sniff(b"\x80\x01}"), None);
    }

    #[test]
    fn names_each_pickle_protocol() {
        for (proto, name) in [
            (2u8, "pickle stream (protocol 2)"),
            (3, "pickle stream (protocol 3)"),
            (4, "pickle stream (protocol 4)"),
            (5, "pickle stream (protocol 5)"),
        ] {
            assert_eq!(sniff(&[0x80, proto, 0x95, 0]).map(|m| m.name), Some(name));
        }
        assert_eq!(sniff(&[0x80, 6, 0x95, 0]), None);
    }

    #[test]
    fn recognises_archives_and_executables() {
        assert!(sniff(b"PK\x03\x04rest").is_some_and(|m| m.executable));
        assert!(sniff(b"\x7fELF\x02\x01").is_some_and(|m| m.executable));
        assert!(sniff(b"GGUF\x03\x00").is_some_and(|m| !m.executable));
        let mut tar = vec![0u8; 512];
        tar[257..262].copy_from_slice(b"ustar");
        assert_eq!(sniff(&tar).map(|m| m.name), Some("tar archive"));
        assert_eq!(sniff(b"{\"a\":1}"), None);
        assert_eq!(sniff(b""), None);
    }
}
