//! JSON text helpers shared by everything that writes or skims header
//! JSON: the writer's header, the canonical header of `fastst hash`, and
//! the parsers' leading-whitespace rule.

/// Number of JSON whitespace bytes (space, tab, line feed, carriage
/// return) at the start of `bytes`.
pub fn whitespace_len(bytes: &[u8]) -> usize {
    bytes
        .iter()
        .take_while(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
        .count()
}

/// Appends `v` in plain decimal.
pub fn write_u64(out: &mut Vec<u8>, v: u64) {
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

/// Appends `s` as a JSON string, escaping exactly what serde_json escapes:
/// `"`, `\`, and control characters below 0x20 (`\b \t \n \f \r` by name,
/// the others as `\u00xx` with lower-case hex). Everything else, non-ASCII
/// included, is written as UTF-8.
pub fn write_string(out: &mut Vec<u8>, s: &str) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whitespace() {
        assert_eq!(whitespace_len(b" \t\r\n{"), 4);
        assert_eq!(whitespace_len(b"\x0c{"), 0);
        assert_eq!(whitespace_len(b""), 0);
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
            write_string(&mut ours, s);
            let theirs = serde_json::to_string(s).expect("serde_json");
            assert_eq!(ours, theirs.as_bytes(), "{s:?}");
        }
        for b in 0u8..=0x7f {
            let s = String::from(char::from(b));
            let mut ours = Vec::new();
            write_string(&mut ours, &s);
            assert_eq!(ours, serde_json::to_string(&s).expect("json").as_bytes());
        }
    }

    #[test]
    fn numbers_render() {
        for v in [0u64, 7, 10, 99, 1234567890, u64::MAX] {
            let mut out = Vec::new();
            write_u64(&mut out, v);
            assert_eq!(out, v.to_string().as_bytes());
        }
    }
}
