//! Whether bytes are a pickle program: a walk over its opcodes (every
//! protocol, 0 to 5) with their arguments and the depth of the stack they
//! leave, as the unpickler would take them, without building a single
//! object, importing a name or calling anything.
//!
//! A walk ends at `STOP` with one object on the stack and no mark open (a
//! [`Outcome::Program`]), at an opcode or argument no unpickler accepts
//! ([`Outcome::Invalid`]), or where the bytes given end
//! ([`Outcome::Unfinished`]). It notes whether the program imports a name
//! (`GLOBAL`, `INST`, or `STACK_GLOBAL` of two text strings: the only ways
//! a pickle reaches code; `REDUCE` and the like call only what was
//! imported) and the first name imported. Its cost is linear in the bytes
//! walked; marks nest at most [`MAX_MARKS`] deep.

use std::ops::Range;

/// How a walk ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// `STOP` with exactly one object on the stack and no mark open.
    Program,
    /// The bytes ended (or an argument runs past them) before `STOP`.
    Unfinished,
    /// An opcode, argument or stack state no unpickler accepts.
    Invalid,
}

/// What a walk found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Walk {
    /// How it ended.
    pub outcome: Outcome,
    /// Bytes walked: the program's length when it is one.
    pub len: usize,
    /// Opcodes walked.
    pub ops: usize,
    /// The protocol a `PROTO` opcode declared, if any.
    pub proto: Option<u8>,
    /// True once a name was imported (`GLOBAL`, `INST`, `STACK_GLOBAL`
    /// of two text strings): what a pickle needs to run code.
    pub code: bool,
    /// The first name imported (`module.name`), as far as it can be told.
    pub import: Option<String>,
}

/// The deepest nesting of marks walked before the bytes count as no
/// pickle (real pickles nest a few levels).
pub(crate) const MAX_MARKS: usize = 4096;

/// The longest text line an opcode argument may have.
const MAX_LINE: usize = 4096;

/// Longest module or name shown in a message.
const MAX_NAME: usize = 64;

struct Walker<'a> {
    bytes: &'a [u8],
    /// Bytes of the region from the walk's start (at least `bytes.len()`):
    /// an argument longer than that is invalid, one past `bytes` only
    /// unfinished.
    region: u64,
    pos: usize,
    /// Objects above each open mark (`[0]`: below every mark).
    frames: Vec<u32>,
    /// The last two short text strings pushed (for `STACK_GLOBAL`).
    texts: [Option<(usize, usize)>; 2],
    walk: Walk,
}

enum Step {
    Go,
    End(Outcome),
}

/// Walks `bytes` (the first bytes of a region of `region` bytes) as a
/// pickle program from its first byte.
pub(crate) fn walk(bytes: &[u8], region: u64) -> Walk {
    let mut w = Walker {
        bytes,
        region: region.max(bytes.len() as u64),
        pos: 0,
        frames: vec![0],
        texts: [None, None],
        walk: Walk {
            outcome: Outcome::Invalid,
            len: 0,
            ops: 0,
            proto: None,
            code: false,
            import: None,
        },
    };
    let outcome = loop {
        match w.step() {
            Step::Go => w.walk.ops += 1,
            Step::End(o) => break o,
        }
    };
    w.walk.outcome = outcome;
    w.walk.len = w.pos;
    w.walk
}

impl Walker<'_> {
    fn step(&mut self) -> Step {
        let Some(&op) = self.bytes.get(self.pos) else {
            return Step::End(Outcome::Unfinished);
        };
        self.pos += 1;
        let ok = match op {
            b'.' => {
                return Step::End(if self.frames == [1] {
                    Outcome::Program
                } else {
                    Outcome::Invalid
                });
            }
            b'(' => {
                if self.frames.len() > MAX_MARKS {
                    return Step::End(Outcome::Invalid);
                }
                self.frames.push(0);
                Ok(())
            }
            b'0' => {
                // POP takes the top object, or the mark when none is above it.
                if self.top() > 0 {
                    self.pop(1)
                } else {
                    self.pop_mark().map(|_| ())
                }
            }
            b'1' => self.pop_mark().map(|_| ()),
            b'2' => self.need(1).and_then(|_| self.push()),
            0x94 | 0x98 => self.need(1),
            b'p' => self.line(is_digits).and_then(|_| self.need(1)),
            b'F' => self.line(is_float_text).and_then(|_| self.push()),
            b'I' => self.line(is_int_text).and_then(|_| self.push()),
            b'L' => self.line(is_long_text).and_then(|_| self.push()),
            b'g' => self.line(is_digits).and_then(|_| self.push()),
            b'P' => self.line(|_| true).and_then(|_| self.push()),
            b'S' => self.line(is_quoted).and_then(|_| self.push()),
            b'V' => self.line(|_| true).and_then(|_| self.push()),
            b'J' | b'j' => self.skip(4).and_then(|_| self.push()),
            b'K' | b'h' => self.skip(1).and_then(|_| self.push()),
            b'M' => self.skip(2).and_then(|_| self.push()),
            // The extension registry (empty unless a program registers).
            0x82..=0x84 => self.skip(1 << (op - 0x82)).and_then(|_| self.push()),
            b'G' => self.skip(8).and_then(|_| self.push()),
            b'N' | b'}' | b']' | b')' | 0x88 | 0x89 | 0x8f | 0x97 => self.push(),
            b'q' => self.skip(1).and_then(|_| self.need(1)),
            b'r' => self.skip(4).and_then(|_| self.need(1)),
            b'Q' | 0x85 => self.pop(1).and_then(|_| self.push()),
            b'R' | b'b' | 0x81 | 0x93 | 0x86 | b'a' => {
                if op == 0x93 {
                    self.stack_global();
                }
                self.pop(2).and_then(|_| self.push())
            }
            0x87 | 0x92 => self.pop(3).and_then(|_| self.push()),
            b's' => self.need(3).and_then(|_| self.pop(2)),
            b'T' | b'X' | b'B' => self.counted(4, op == b'X'),
            b'U' | b'C' | 0x8c => self.counted(1, op == 0x8c),
            0x8a => self.counted(1, false),
            0x8b => self.counted(4, false),
            0x8d | 0x8e | 0x96 => self.counted(8, false),
            b'c' => self.names().and_then(|_| self.push()),
            b'i' => self
                .names()
                .and_then(|_| self.pop_mark())
                .and_then(|_| self.push()),
            b'd' | b'l' | b't' | 0x91 => self.pop_mark().and_then(|_| self.push()),
            b'o' => match self.pop_mark() {
                Ok(n) if n >= 1 => self.push(),
                _ => Err(Outcome::Invalid),
            },
            b'e' | 0x90 => self.pop_mark().and_then(|_| self.need(1)),
            b'u' => match self.pop_mark() {
                Ok(n) if n % 2 == 0 => self.need(1),
                _ => Err(Outcome::Invalid),
            },
            0x80 => match self.bytes.get(self.pos) {
                Some(&p) if p <= 5 => {
                    self.pos += 1;
                    self.walk.proto.get_or_insert(p);
                    Ok(())
                }
                Some(_) => Err(Outcome::Invalid),
                None => Err(Outcome::Unfinished),
            },
            0x95 => self.frame(),
            _ => Err(Outcome::Invalid),
        };
        match ok {
            Ok(()) => Step::Go,
            Err(o) => Step::End(o),
        }
    }

    fn top(&self) -> u32 {
        self.frames.last().copied().unwrap_or(0)
    }

    fn push(&mut self) -> Result<(), Outcome> {
        if let Some(top) = self.frames.last_mut() {
            *top = top.saturating_add(1);
        }
        Ok(())
    }

    fn need(&self, n: u32) -> Result<(), Outcome> {
        if self.top() >= n {
            Ok(())
        } else {
            Err(Outcome::Invalid)
        }
    }

    fn pop(&mut self, n: u32) -> Result<(), Outcome> {
        self.need(n)?;
        if let Some(top) = self.frames.last_mut() {
            *top -= n;
        }
        Ok(())
    }

    /// Closes the innermost mark: the objects above it.
    fn pop_mark(&mut self) -> Result<u32, Outcome> {
        if self.frames.len() < 2 {
            return Err(Outcome::Invalid);
        }
        Ok(self.frames.pop().unwrap_or(0))
    }

    /// Skips `n` argument bytes.
    fn skip(&mut self, n: usize) -> Result<(), Outcome> {
        match self.pos.checked_add(n) {
            Some(end) if end <= self.bytes.len() => {
                self.pos = end;
                Ok(())
            }
            _ => Err(Outcome::Unfinished),
        }
    }

    /// A little-endian length of `width` bytes, then that many bytes (text
    /// when `text`: kept for `STACK_GLOBAL`); pushes one object.
    fn counted(&mut self, width: usize, text: bool) -> Result<(), Outcome> {
        let start = self.pos;
        self.skip(width)?;
        let mut raw = [0u8; 8];
        raw[..width].copy_from_slice(&self.bytes[start..self.pos]);
        let n = u64::from_le_bytes(raw);
        let left = self.region - self.pos as u64;
        if n > left {
            return Err(Outcome::Invalid);
        }
        let at = self.pos;
        self.skip(usize::try_from(n).map_err(|_| Outcome::Invalid)?)?;
        if text {
            self.texts = [self.texts[1], Some((at, self.pos))];
        }
        self.push()
    }

    /// `FRAME`: an 8-byte length the rest of the region must hold.
    fn frame(&mut self) -> Result<(), Outcome> {
        let start = self.pos;
        self.skip(8)?;
        let mut raw = [0u8; 8];
        raw.copy_from_slice(&self.bytes[start..self.pos]);
        if u64::from_le_bytes(raw) > self.region - self.pos as u64 {
            return Err(Outcome::Invalid);
        }
        Ok(())
    }

    /// A text argument ending in `\n`, checked by `valid`: where it lies.
    fn line(&mut self, valid: impl Fn(&[u8]) -> bool) -> Result<(usize, usize), Outcome> {
        let rest = &self.bytes[self.pos..];
        let Some(n) = rest.iter().take(MAX_LINE + 1).position(|&b| b == b'\n') else {
            return Err(if rest.len() <= MAX_LINE {
                Outcome::Unfinished
            } else {
                Outcome::Invalid
            });
        };
        if !valid(&rest[..n]) {
            return Err(Outcome::Invalid);
        }
        let at = self.pos;
        self.pos += n + 1;
        Ok((at, at + n))
    }

    /// The names of `GLOBAL` and `INST`: a module and a name, each a
    /// dotted identifier on its own line.
    fn names(&mut self) -> Result<(), Outcome> {
        let (a, b) = self.line(is_dotted_name)?;
        let (c, d) = self.line(is_dotted_name)?;
        self.walk.code = true;
        self.note_import(a..b, c..d);
        Ok(())
    }

    fn stack_global(&mut self) {
        if let [Some((a, b)), Some((c, d))] = self.texts {
            let name = |r: (usize, usize)| is_dotted_name(&self.bytes[r.0..r.1]);
            if name((a, b)) && name((c, d)) {
                self.walk.code = true;
                self.note_import(a..b, c..d);
            }
        }
    }

    fn note_import(&mut self, module: Range<usize>, name: Range<usize>) {
        if self.walk.import.is_none() {
            let bytes = self.bytes;
            let part = |r: Range<usize>| {
                let b = &bytes[r];
                String::from_utf8_lossy(&b[..b.len().min(MAX_NAME)]).into_owned()
            };
            self.walk.import = Some(format!("{}.{}", part(module), part(name)));
        }
    }
}

fn is_digits(t: &[u8]) -> bool {
    !t.is_empty() && t.iter().all(u8::is_ascii_digit)
}

fn is_int_text(t: &[u8]) -> bool {
    let t = t.strip_prefix(b"-").unwrap_or(t);
    is_digits(t)
}

fn is_long_text(t: &[u8]) -> bool {
    is_int_text(t.strip_suffix(b"L").unwrap_or(t))
}

fn is_float_text(t: &[u8]) -> bool {
    !t.is_empty()
        && t.iter().any(u8::is_ascii_digit)
        && t.iter()
            .all(|&b| b.is_ascii_digit() || matches!(b, b'.' | b'-' | b'+' | b'e' | b'E'))
        || matches!(t, b"nan" | b"inf" | b"-inf")
}

fn is_quoted(t: &[u8]) -> bool {
    t.len() >= 2 && matches!(t[0], b'\'' | b'"') && t[t.len() - 1] == t[0]
}

fn is_dotted_name(t: &[u8]) -> bool {
    !t.is_empty()
        && t.len() <= 256
        && !t[0].is_ascii_digit()
        && t.iter()
            .all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.'))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn full(bytes: &[u8]) -> Walk {
        walk(bytes, bytes.len() as u64)
    }

    #[test]
    fn protocol_0_reduce_is_a_program_that_imports() {
        let w = full(b"cos\nsystem\n(S'echo hi'\ntR.");
        assert_eq!(w.outcome, Outcome::Program);
        assert!(w.code);
        assert_eq!(w.import.as_deref(), Some("os.system"));
        assert_eq!(w.len, 26);
        // What follows the program is not walked.
        assert_eq!(full(b"cos\nsystem\n(S'x'\ntR.trailing").len, 20);
    }

    #[test]
    fn protocol_4_stack_global_is_a_program_that_imports() {
        // Built as pickle.dumps(eval-call) would be, by hand.
        let mut p = b"\x80\x04\x95\x26\0\0\0\0\0\0\0".to_vec();
        p.extend_from_slice(b"\x8c\x08builtins\x94\x8c\x04eval\x94\x93\x94");
        p.extend_from_slice(b"\x8c\x0aprint(123)\x94\x85\x94R\x94.");
        let w = full(&p);
        assert_eq!(w.outcome, Outcome::Program, "{w:?}");
        assert_eq!((w.proto, w.code), (Some(4), true));
        assert_eq!(w.import.as_deref(), Some("builtins.eval"));
    }

    #[test]
    fn plain_data_pickles_are_programs_without_code() {
        // pickle.dumps({"a": [1, 2]}, protocol=2)
        let w = full(b"\x80\x02}q\x00X\x01\x00\x00\x00aq\x01]q\x02(K\x01K\x02es.");
        assert_eq!((w.outcome, w.code), (Outcome::Program, false));
        let w = full(b"(dp0\nVa\np1\n(lp2\nI1\naI2\nas.");
        assert_eq!((w.outcome, w.code), (Outcome::Program, false));
        // INST: a class called on the objects above a mark.
        let w = full(b"(S'ls'\nios\nsystem\n.");
        assert_eq!((w.outcome, w.code), (Outcome::Program, true));
        assert_eq!(w.import.as_deref(), Some("os.system"));
    }

    #[test]
    fn broken_programs_are_invalid_or_unfinished() {
        // STOP with an empty stack, two objects, or a mark open.
        assert_eq!(full(b".").outcome, Outcome::Invalid);
        assert_eq!(full(b"NN.").outcome, Outcome::Invalid);
        assert_eq!(full(b"(N.").outcome, Outcome::Invalid);
        // Opcodes that need objects the stack does not hold.
        assert_eq!(full(b"R.").outcome, Outcome::Invalid);
        assert_eq!(full(b"1").outcome, Outcome::Invalid);
        // No such opcode, no such protocol, a name that is no identifier.
        assert_eq!(full(b"\x80\x02\xff").outcome, Outcome::Invalid);
        assert_eq!(full(b"\x80\x09N.").outcome, Outcome::Invalid);
        assert_eq!(full(b"c1os\nsystem\n").outcome, Outcome::Invalid);
        // A length longer than the region is invalid; longer than the
        // bytes given, only unfinished.
        assert_eq!(full(b"X\xff\0\0\0ab").outcome, Outcome::Invalid);
        let cut = walk(b"X\x10\0\0\0ab", 100);
        assert_eq!(cut.outcome, Outcome::Unfinished);
        assert_eq!(
            full(b"\x80\x04\x95\xff\xff\xff\xff\0\0\0\0N.").outcome,
            Outcome::Invalid
        );
        assert_eq!(full(b"cos\nsys").outcome, Outcome::Unfinished);
    }

    #[test]
    fn marks_nest_only_so_deep() {
        let deep = vec![b'('; MAX_MARKS + 10];
        assert_eq!(full(&deep).outcome, Outcome::Invalid);
        let mut ok = vec![b'('; 100];
        ok.extend(std::iter::repeat_n(b't', 100));
        ok.truncate(199); // 100 marks, 99 tuples: one mark left open
        ok.extend_from_slice(b"t.");
        assert_eq!(full(&ok).outcome, Outcome::Program);
    }

    #[test]
    fn random_bytes_are_no_program() {
        // A fixed xorshift stream: no STOP-terminated program with code.
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let bytes: Vec<u8> = (0..1 << 16)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        for start in 0..bytes.len() {
            let w = walk(&bytes[start..], (bytes.len() - start) as u64);
            assert!(!(w.outcome == Outcome::Program && w.code), "{start}: {w:?}");
        }
    }
}
