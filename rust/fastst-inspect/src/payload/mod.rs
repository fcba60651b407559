//! Other formats' files hidden in bytes that should hold numbers or text:
//! pickle programs, zip archives (PyTorch checkpoints), ELF, PE and Mach-O
//! executables and scripts, recognised by their structure and never run.
//!
//! A magic number alone is not enough in tensor data: two bytes such as
//! `MZ` turn up by chance every 64 KiB of random weights. Each format is
//! taken only when its header holds together: a pickle must walk as a
//! program that imports or calls ([`pickle::walk`]); a zip entry needs a
//! known compression method and a printable name; an ELF header its class,
//! byte order and version; a PE file the `PE\0\0` signature where its DOS
//! header points; a Mach-O file a known CPU type; a `#!` line an
//! interpreter's path. Random bytes, floating-point weights and text pass
//! none of these (the tests scan megabytes of them).
//!
//! [`at_start`] says what a region (a tensor's bytes, a metadata value)
//! starts with ([`text_script`]: a tensor's bytes that are a script's
//! text); [`scan`] looks at every offset of a window, which callers
//! slide over a region with an overlap of [`OVERLAP`] bytes so that a file
//! starting near a window's end is still seen whole enough. Both are
//! linear in the bytes given (a pickle walk that ran long is not walked
//! again from inside).

pub(crate) mod pickle;
pub(crate) mod text;

use self::pickle::{walk, Outcome};

/// Bytes a window carries past the part scanned, so that the header of a
/// file starting there can be checked (a pickle walked this far).
pub(crate) const OVERLAP: usize = 64 << 10;

/// Bytes of a region's start that [`at_start`] looks at.
pub(crate) const HEAD: usize = 4 << 10;

/// A pickle walk this long is not tried again from inside it.
const LONG_WALK: usize = 256;

/// Another format's file found in some bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Payload {
    /// Where it starts, from the start of the bytes given.
    pub at: usize,
    /// Its length, where known (a pickle program's).
    pub len: Option<usize>,
    /// What it is, e.g. `"a pickle program (protocol 4, 120 bytes) that
    /// imports builtins.eval"`.
    pub what: String,
}

/// The first file [`scan`] found, and how many it found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Found {
    /// The first one.
    pub first: Option<Payload>,
    /// How many places hold one.
    pub count: u64,
}

impl Found {
    /// Adds `other`, found at `shift` bytes after this one's start.
    pub fn add(&mut self, other: Found, shift: usize) {
        if self.first.is_none() {
            self.first = other.first.map(|p| Payload {
                at: p.at + shift,
                ..p
            });
        }
        self.count += other.count;
    }
}

/// What `bytes` (the first bytes of a region of `region` bytes) start
/// with, when it is another format's file: any of [`scan`]'s formats, or a
/// pickle of any protocol.
pub(crate) fn at_start(bytes: &[u8], region: u64) -> Option<Payload> {
    let head = &bytes[..bytes.len().min(OVERLAP)];
    let w = walk(head, region);
    if let Some(what) = describe(&w) {
        let len = (w.outcome == Outcome::Program).then_some(w.len);
        return Some(Payload { at: 0, len, what });
    }
    format_here(head).map(|what| Payload {
        at: 0,
        len: None,
        what,
    })
}

/// A script in bytes meant to hold numbers: they start with text (at
/// least 32 printable bytes, tabs and line ends, within the first [`HEAD`])
/// that calls code ([`text::code`]).
pub(crate) fn text_script(bytes: &[u8]) -> Option<Payload> {
    let start = &bytes[..bytes.len().min(HEAD)];
    let n = start
        .iter()
        .position(|&c| !text::printable(c))
        .unwrap_or(start.len());
    if n < 32 {
        return None;
    }
    let code = text::code(&String::from_utf8_lossy(&start[..n]))?;
    Some(Payload {
        at: 0,
        len: Some(n),
        what: format!("a script (text that calls code: {code})"),
    })
}

/// Every offset of `window[from..scan_end]` where another format's file
/// starts (a pickle program of protocol 2 to 5 or one starting with
/// `GLOBAL`, a zip entry, an ELF, PE or Mach-O header, a `#!` line);
/// `region` is the bytes of the region from the window's start (at least
/// its length). Also returns where scanning should go on: past
/// `scan_end` when a file found (or a long walk) runs beyond it, so that
/// the caller's next window does not look inside it again.
pub(crate) fn scan(window: &[u8], from: usize, scan_end: usize, region: u64) -> (Found, usize) {
    let mut found = Found::default();
    let end = scan_end.min(window.len());
    let mut i = from;
    while i < end {
        let b = window[i];
        if !CANDIDATE[b as usize] {
            i += 1;
            continue;
        }
        let rest = &window[i..];
        let left = region.saturating_sub(i as u64);
        let mut next = i + 1;
        let hit = if starts_pickle(rest) {
            let w = walk(rest, left);
            let what = describe(&w);
            if what.is_some() || w.len >= LONG_WALK {
                next = i + w.len.max(1);
            }
            what.map(|what| (what, (w.outcome == Outcome::Program).then_some(w.len)))
        } else {
            format_here(rest).map(|what| (what, None))
        };
        if let Some((what, len)) = hit {
            found.count += 1;
            found.first.get_or_insert(Payload { at: i, len, what });
        }
        i = next;
    }
    (found, i)
}

/// First bytes worth a closer look.
static CANDIDATE: [bool; 256] = {
    let mut t = [false; 256];
    let firsts: [u8; 10] = [0x80, b'c', b'P', 0x7f, b'M', 0xfe, 0xce, 0xcf, 0xca, b'#'];
    let mut k = 0;
    while k < firsts.len() {
        t[firsts[k] as usize] = true;
        k += 1;
    }
    t
};

/// A pickle of protocol 2 to 5 (`PROTO`) or one that opens with `GLOBAL`
/// of a name: where [`scan`] walks.
fn starts_pickle(b: &[u8]) -> bool {
    match b {
        [0x80, 2..=5, ..] => true,
        [b'c', first, ..] => first.is_ascii_alphabetic() || *first == b'_',
        _ => false,
    }
}

/// The description of a walk that counts as a pickle: a whole program
/// that imports a name, or a long one (32 opcodes, 256 bytes); a program
/// cut off by the end of the bytes read counts when it has already
/// imported a name after 4 opcodes.
fn describe(w: &pickle::Walk) -> Option<String> {
    let long = w.ops >= 32 && w.len >= LONG_WALK;
    let counts = match w.outcome {
        Outcome::Program => w.code || long,
        Outcome::Unfinished => w.code && w.ops >= 4,
        Outcome::Invalid => false,
    };
    if !counts {
        return None;
    }
    let proto = w.proto.map_or(0, u8::from);
    let size = match w.outcome {
        Outcome::Program => format!("protocol {proto}, {} bytes", w.len),
        _ => format!("protocol {proto}, {}+ bytes", w.len),
    };
    let does = match (&w.import, w.code) {
        (Some(name), _) => format!(" that imports {name}"),
        (None, true) => " that imports code".to_owned(),
        (None, false) => String::new(),
    };
    Some(format!("a pickle program ({size}){does}"))
}

/// The executable or archive formats whose header `b` starts with.
fn format_here(b: &[u8]) -> Option<String> {
    zip(b)
        .or_else(|| elf(b))
        .or_else(|| pe(b))
        .or_else(|| macho(b))
        .or_else(|| shebang(b))
}

fn u16_le(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize, big: bool) -> Option<u32> {
    let raw: [u8; 4] = b.get(at..at + 4)?.try_into().ok()?;
    Some(if big {
        u32::from_be_bytes(raw)
    } else {
        u32::from_le_bytes(raw)
    })
}

/// A zip local file header: a known method and a printable name
/// (`archive/data.pkl` makes it a PyTorch checkpoint).
fn zip(b: &[u8]) -> Option<String> {
    if !b.starts_with(b"PK\x03\x04") {
        return None;
    }
    let version = u16_le(b, 4)?;
    let method = u16_le(b, 8)?;
    let name_len = usize::from(u16_le(b, 26)?);
    let name = b.get(30..30 + name_len)?;
    let printable = name.iter().all(|&c| (0x20..0x7f).contains(&c));
    if version > 100
        || !matches!(method, 0 | 8 | 9 | 12 | 14 | 93 | 95 | 98)
        || name_len == 0
        || name_len > 1024
        || !printable
    {
        return None;
    }
    let shown = String::from_utf8_lossy(&name[..name.len().min(64)]);
    Some(if name.ends_with(b".pkl") || name.ends_with(b"/data/0") {
        format!("a zip archive holding pickles (a PyTorch checkpoint; first member {shown:?})")
    } else {
        format!("a zip archive (first member {shown:?})")
    })
}

/// An ELF header: class, byte order, version and a known file type.
fn elf(b: &[u8]) -> Option<String> {
    if !b.starts_with(b"\x7fELF") || b.len() < 20 {
        return None;
    }
    let (class, order, version) = (b[4], b[5], b[6]);
    if !matches!(class, 1 | 2) || !matches!(order, 1 | 2) || version != 1 {
        return None;
    }
    let kind = if order == 1 {
        u16::from_le_bytes([b[16], b[17]])
    } else {
        u16::from_be_bytes([b[16], b[17]])
    };
    let kind = match kind {
        1 => "object file",
        2 => "executable",
        3 => "shared library",
        4 => "core dump",
        _ => return None,
    };
    let bits = if class == 1 { 32 } else { 64 };
    Some(format!("an ELF {kind} ({bits}-bit)"))
}

/// A DOS header whose `e_lfanew` points at the `PE\0\0` signature.
fn pe(b: &[u8]) -> Option<String> {
    if !b.starts_with(b"MZ") {
        return None;
    }
    let at = usize::try_from(u32_at(b, 0x3c, false)?).ok()?;
    if !(0x40..=4096).contains(&at) || b.get(at..at + 4)? != b"PE\0\0" {
        return None;
    }
    Some("a Windows executable (PE)".to_owned())
}

/// A Mach-O header with a known CPU type and file type, or a universal
/// binary with a plausible number of architectures.
fn macho(b: &[u8]) -> Option<String> {
    let magic = u32_at(b, 0, true)?;
    if magic == 0xcafe_babe {
        // Java class files share the magic: their version makes the count
        // of architectures 45 or more.
        let n = u32_at(b, 4, true)?;
        let cpu = u32_at(b, 8, true)?;
        return ((1..=20).contains(&n) && known_cpu(cpu))
            .then(|| "a Mach-O universal binary".to_owned());
    }
    let big = match magic {
        0xfeed_face | 0xfeed_facf => true,
        0xcefa_edfe | 0xcffa_edfe => false,
        _ => return None,
    };
    let cpu = u32_at(b, 4, big)?;
    let kind = u32_at(b, 12, big)?;
    (known_cpu(cpu) && (1..=12).contains(&kind)).then(|| "a Mach-O executable".to_owned())
}

fn known_cpu(cpu: u32) -> bool {
    matches!(
        cpu,
        7 | 12 | 18 | 0x0100_0007 | 0x0100_000c | 0x0100_0012 | 0x0200_000c
    )
}

/// A `#!` line naming an interpreter by its absolute path.
fn shebang(b: &[u8]) -> Option<String> {
    let rest = b.strip_prefix(b"#!")?;
    let rest = rest.strip_prefix(b" ").unwrap_or(rest);
    if rest.first() != Some(&b'/') {
        return None;
    }
    let line_end = rest.iter().take(128).position(|&c| c == b'\n')?;
    let line = &rest[..line_end];
    if !line.iter().all(|&c| (0x20..0x7f).contains(&c)) {
        return None;
    }
    let line = String::from_utf8_lossy(line);
    let interpreters = ["sh", "bash", "zsh", "python", "perl", "ruby", "node", "env"];
    let program = line.split([' ', '/']).filter(|p| !p.is_empty());
    let named = program
        .clone()
        .any(|p| interpreters.iter().any(|i| p.starts_with(i)));
    named.then(|| format!("a script (#!{line})"))
}

#[cfg(test)]
mod tests;
