//! A stable-toolchain stand-in for the fuzz target (`fuzz/`), run by
//! `cargo test`: thousands of mutated headers, each must give Ok or Err
//! without panicking, and accepted ones must satisfy the layout invariants.

use fastst_core::Header;

struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

const SEEDS: &[&str] = &[
    r#"{"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},"b":{"dtype":"BF16","shape":[4],"data_offsets":[16,24]}}"#,
    r#"{"x":{"dtype":"F4","shape":[2,4],"data_offsets":[0,4]},"y":{"dtype":"U8","shape":[],"data_offsets":[4,5]},"e":{"dtype":"I64","shape":[0],"data_offsets":[5,5]}}"#,
    r#"{}"#,
];

const TOKENS: &[&str] = &[
    "{",
    "}",
    "[",
    "]",
    ",",
    ":",
    "\"",
    "\\u0000",
    "-1",
    "1e999",
    "18446744073709551616",
    "null",
    "true",
    "\"__metadata__\"",
    "\"dtype\"",
    "\"F8_E4M3\"",
    "[[[[",
    "0",
    "\u{ffff}",
];

fn check(json: &[u8], buffer_len: u64) {
    if let Ok(h) = Header::parse(json, buffer_len) {
        let mut covered = 0;
        for t in h.tensors() {
            assert_eq!(t.begin, covered);
            assert_eq!(t.dtype.byte_len(&t.shape), Ok(t.byte_len()));
            covered = t.end;
        }
        assert_eq!(covered, buffer_len);
    }
}

#[test]
fn mutated_headers_never_panic() {
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
    for round in 0..20_000 {
        let seed = SEEDS[round % SEEDS.len()];
        let mut bytes = seed.as_bytes().to_vec();
        for _ in 0..=rng.below(4) {
            if bytes.is_empty() {
                bytes.push(b'{');
            }
            let pos = rng.below(bytes.len());
            match rng.below(4) {
                0 => bytes[pos] = (rng.next() & 0xff) as u8,
                1 => {
                    bytes.remove(pos);
                }
                2 => {
                    let tok = TOKENS[rng.below(TOKENS.len())].as_bytes();
                    bytes.splice(pos..pos, tok.iter().copied());
                }
                _ => {
                    let end = (pos + rng.below(8)).min(bytes.len());
                    let dup: Vec<u8> = bytes[pos..end].to_vec();
                    bytes.splice(pos..pos, dup);
                }
            }
        }
        for buffer_len in [0, 5, 24, 1 << 40] {
            check(&bytes, buffer_len);
        }
    }
}
