//! Tests of `verify`: findings on hand-made files, and mutated files on
//! which `verify` never panics and agrees with the strict reader.

#![allow(clippy::unwrap_used)]

mod findings {
    use super::super::*;
    use crate::testfs::{build, raw};

    fn verify(file: &crate::testfs::TempFile, values: bool) -> VerifyReport {
        let options = VerifyOptions {
            values,
            ..VerifyOptions::default()
        };
        verify_path(&file.0, &options, None).unwrap()
    }

    fn rules(report: &VerifyReport) -> Vec<&'static str> {
        report.findings.iter().map(|f| f.rule.id()).collect()
    }

    /// The first finding of `rule` (the test fails when there is none).
    fn finding<'r>(report: &'r VerifyReport, rule: &str) -> &'r Finding {
        let found = report.findings.iter().find(|f| f.rule == rule);
        found.unwrap_or_else(|| panic!("no {rule} in {:?}", rules(report)))
    }

    #[test]
    fn clean_file_has_no_findings() {
        let f = build(
            r#"{"__metadata__":{"format":"pt"},"a.weight":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#,
            &[0; 8],
        );
        let r = verify(&f, true);
        assert!(r.accepted && r.complete);
        assert_eq!(r.findings, []);
        assert_eq!(r.values_checked, Some(1));
        assert_eq!(r.tensors, Some(1));
    }

    #[test]
    fn accepted_file_warnings() {
        let f = build(
            "  {\"__metadata__\":{\"mine\":\"x\"},\"../x\":{\"dtype\":\"I8\",\"shape\":[1],\"data_offsets\":[0,1],\"note\":1},\"l.weight\":{\"dtype\":\"I8\",\"shape\":[1],\"data_offsets\":[1,2]}}",
            &[0; 2],
        );
        let r = verify(&f, false);
        assert!(r.accepted);
        let got = rules(&r);
        for want in [
            "leading-whitespace",
            "unknown-field",
            "unknown-metadata-key",
            "path-like-name",
            "suspicious-weight-dtype",
        ] {
            assert!(got.contains(&want), "{want} not in {got:?}");
        }
        assert_eq!(r.values_checked, None);
    }

    #[test]
    fn every_layout_problem_is_reported() {
        // a: [0,4]; hole [4,8]; b: [8,16]; c overlaps b; d aliases b;
        // e past the end; trailing zip after 16.
        let header = r#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},
            "b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]},
            "c":{"dtype":"F32","shape":[1],"data_offsets":[12,16]},
            "d":{"dtype":"F32","shape":[2],"data_offsets":[8,16]},
            "e":{"dtype":"F32","shape":[1],"data_offsets":[1000,1004]}}"#;
        let mut data = vec![0u8; 16];
        data[4] = 7;
        data.extend_from_slice(b"PK\x03\x04 some zip bytes");
        let f = build(header, &data);
        let r = verify(&f, false);
        assert!(!r.accepted && r.complete);
        let got = rules(&r);
        for want in [
            "hole",
            "overlap",
            "aliased-tensor",
            "ghost-tensor",
            "trailing-bytes",
            "hidden-payload",
        ] {
            assert!(got.contains(&want), "{want} not in {got:?}");
        }
        assert_eq!(r.findings[0].rule, "hidden-payload");
        assert_eq!(r.findings[0].severity, Severity::Critical);
        let hole = finding(&r, "hole");
        assert_eq!(hole.count, Some(1));
        assert_eq!(hole.offset, Some(8 + header.len() as u64 + 4));
        // Every layout finding points at its bytes.
        let start = 8 + header.len() as u64;
        let at = |rule: &str| {
            let f = finding(&r, rule);
            (f.offset.unwrap() - start, f.length.unwrap())
        };
        assert_eq!(at("hole"), (4, 4));
        assert_eq!(at("overlap"), (12, 4));
        assert_eq!(at("aliased-tensor"), (8, 8));
        assert_eq!(at("ghost-tensor"), (1000, 4));
        assert_eq!(at("trailing-bytes"), (16, 19));
        assert!(
            hole.message.contains("(4 bytes at file offset"),
            "{}",
            hole.message
        );
        assert!(
            hole.message.contains("1 of them non-zero"),
            "{}",
            hole.message
        );
        // The strict verdict is not repeated.
        assert_eq!(got.iter().filter(|r| **r == "hole").count(), 1);
        assert!(!got.contains(&"leading-whitespace"), "{got:?}");
        // The same rejected file with its header indented: reported.
        let f = build(&format!("\n  {header}"), &data);
        let got = rules(&verify(&f, false));
        assert!(got.contains(&"leading-whitespace"), "{got:?}");
        assert!(got.contains(&"hole"), "{got:?}");
    }

    /// Tensors of four kinds, each at a non-zero offset but the first:
    /// an I32 (not scanned), an F32 holding one NaN, an I8 `.weight`
    /// (a dtype finding) and an empty F32 (nothing to scan); then a 2 GiB
    /// I32 (a `large-tensor` finding, not scanned) at `big_at`, its bytes a sparse tail
    /// of the file when `sparse`.
    fn scanned_file(big_at: u64, sparse: bool) -> (crate::testfs::TempFile, u64) {
        let big = 1u64 << 31;
        let header = format!(
            r#"{{"i":{{"dtype":"I32","shape":[1],"data_offsets":[0,4]}},"a":{{"dtype":"F32","shape":[2],"data_offsets":[4,12]}},"l.weight":{{"dtype":"I8","shape":[1],"data_offsets":[12,13]}},"e":{{"dtype":"F32","shape":[0],"data_offsets":[13,13]}},"big":{{"dtype":"I32","shape":[{}],"data_offsets":[{big_at},{}]}}}}"#,
            big / 4,
            big_at + big
        );
        let mut data = vec![0x7fu8, 0xc0, 0, 0];
        data.extend_from_slice(&f32::NAN.to_le_bytes());
        data.extend_from_slice(&1.0f32.to_le_bytes());
        data.push(3);
        let f = build(&header, &data);
        let data_start = 8 + header.len() as u64;
        if sparse {
            let file = std::fs::OpenOptions::new().write(true).open(&f.0).unwrap();
            file.set_len(data_start + big_at + big).unwrap();
        }
        (f, data_start)
    }

    fn check_scanned(r: &VerifyReport, data_start: u64, big_at: u64) {
        assert_eq!(r.values_checked, Some(1), "{:?}", rules(r));
        let nf: Vec<_> = r
            .findings
            .iter()
            .filter(|f| f.rule == "non-finite-values")
            .collect();
        assert_eq!(nf.len(), 1, "{:?}", rules(r));
        assert_eq!(nf[0].tensor.as_deref(), Some("a"));
        assert_eq!(nf[0].count, Some(1));
        assert!(rules(r).contains(&"suspicious-weight-dtype"));
        let large = finding(r, "large-tensor");
        assert_eq!(
            (large.offset, large.length),
            (Some(data_start + big_at), Some(1 << 31))
        );
    }

    #[test]
    fn values_and_dtypes_of_accepted_files_are_located() {
        let (f, data_start) = scanned_file(13, true);
        let r = verify(&f, true);
        assert!(r.accepted, "{:?}", rules(&r));
        check_scanned(&r, data_start, 13);
    }

    #[test]
    fn values_and_dtypes_of_rejected_files_are_located() {
        // The large tensor lies past the end of the buffer (not scanned).
        let (f, data_start) = scanned_file(100, false);
        let r = verify(&f, true);
        assert!(!r.accepted && r.complete);
        check_scanned(&r, data_start, 100);
        assert!(rules(&r).contains(&"ghost-tensor"), "{:?}", rules(&r));
    }

    #[test]
    fn tensors_partly_past_the_end_are_no_ghosts() {
        let f = build(
            r#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}"#,
            &[0u8; 8],
        );
        let r = verify(&f, false);
        let got = rules(&r);
        assert!(got.contains(&"data-too-short"), "{got:?}");
        assert!(!got.contains(&"ghost-tensor"), "{got:?}");
        let short = finding(&r, "data-too-short");
        assert_eq!(short.length, Some(8));
        // Nothing at all past the end: an empty tensor lists no bytes there.
        let f = build(
            r#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"z":{"dtype":"F32","shape":[0],"data_offsets":[100,100]}}"#,
            &[0u8; 4],
        );
        let got = rules(&verify(&f, false));
        assert!(!got.contains(&"ghost-tensor"), "{got:?}");
        assert!(!got.is_empty());
    }

    #[test]
    fn empty_tensors_at_one_offset_are_not_aliases() {
        let f = build(
            r#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"x":{"dtype":"F32","shape":[0],"data_offsets":[4,4]},"y":{"dtype":"F32","shape":[0],"data_offsets":[4,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}}"#,
            &[0u8; 12],
        );
        let r = verify(&f, false);
        let got = rules(&r);
        assert!(!got.contains(&"aliased-tensor"), "{got:?}");
        // The hole after them is reported, zero bytes as such.
        let hole = finding(&r, "hole");
        assert!(
            hole.message.contains("all of them zero"),
            "{}",
            hole.message
        );
    }

    #[test]
    fn value_scans_report_progress_up_to_the_total() {
        let data = vec![0u8; 3 << 20];
        let f = build(
            r#"{"a":{"dtype":"F32","shape":[786432],"data_offsets":[0,3145728]}}"#,
            &data,
        );
        let last = std::sync::Mutex::new((0u64, 0u64));
        let report = |done: u64, total: u64| {
            let mut l = last.lock().unwrap();
            assert!(
                done <= total && done >= l.0,
                "{done} of {total} after {l:?}"
            );
            *l = (done, total);
        };
        let options = VerifyOptions {
            values: true,
            ..VerifyOptions::default()
        };
        verify_path(&f.0, &options, Some(&report)).unwrap();
        assert_eq!(*last.lock().unwrap(), (3 << 20, 3 << 20));
    }

    #[test]
    fn metadata_and_names_repeated_in_rejected_files() {
        // Rejected (a hole); one metadata block, a name given twice.
        let one = r#"{"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}}"#;
        let r = verify(&build(one, &[0u8; 12]), false);
        let got = rules(&r);
        assert!(got.contains(&"hole"), "{got:?}");
        assert!(!got.contains(&"duplicate-metadata"), "{got:?}");
        let dup = finding(&r, "duplicate-tensor");
        assert!(
            dup.message.contains("(2 entries; readers disagree"),
            "{}",
            dup.message
        );
        let two = one.replacen(r#""a":"#, r#""__metadata__":{"format":"np"},"a":"#, 1);
        let got = rules(&verify(&build(&two, &[0u8; 12]), false));
        assert!(got.contains(&"duplicate-metadata"), "{got:?}");
        // No metadata at all: nothing to report about it.
        let none = r#"{"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}}"#;
        let got = rules(&verify(&build(none, &[0u8; 12]), false));
        assert!(!got.contains(&"duplicate-metadata"), "{got:?}");
    }

    #[test]
    fn the_strict_verdict_is_kept_beside_unrelated_findings() {
        // JSON after the header's object: only the strict reader sees it;
        // the lenient reading finds an unknown metadata key.
        let f = build(
            r#"{"__metadata__":{"mine":"x"},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}} {"b":1}"#,
            &[0u8; 4],
        );
        let r = verify(&f, false);
        let got = rules(&r);
        assert!(!r.accepted, "{got:?}");
        assert!(got.contains(&"unknown-metadata-key"), "{got:?}");
        assert_eq!(got.len(), 2, "{got:?}");
    }

    #[test]
    fn every_table_problem_is_reported() {
        let header = r#"{"__metadata__":{"k":"v","k":"w","n":3},
            "a":{"dtype":"F33","shape":[1],"data_offsets":[0,4]},
            "a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},
            "b":{"dtype":"F32","dtype":"F32","shape":[-1],"data_offsets":[4,8]},
            "c":[1],
            "d":{"dtype":"F32","shape":[2],"data_offsets":[4]},
            "e":{"dtype":"F32","shape":[3],"data_offsets":[8,12]},
            "f":{"dtype":"F4","shape":[3],"data_offsets":[12,12]},
            "g":{"shape":[1],"data_offsets":[12,13]},
            "h":{"dtype":"F32","shape":[1],"data_offsets":[13,9]}}"#;
        let f = build(header, &[0u8; 13]);
        let r = verify(&f, false);
        let got = rules(&r);
        for want in [
            "duplicate-tensor",
            "duplicate-metadata-key",
            "metadata-value-not-string",
            "unknown-dtype",
            "duplicate-field",
            "bad-shape-entry",
            "entry-not-object",
            "bad-offsets",
            "byte-length-mismatch",
            "sub-byte-not-whole",
            "missing-field",
            "offsets-reversed",
        ] {
            assert!(got.contains(&want), "{want} not in {got:?}");
        }
        let dup = finding(&r, "duplicate-tensor");
        assert_eq!(dup.tensor.as_deref(), Some("a"));
    }

    #[test]
    fn foreign_files_and_bad_prefixes() {
        let pickle = raw(b"\x80\x04\x95\x10\x00\x00\x00\x00\x00\x00\x00}\x94.");
        let r = verify(&pickle, false);
        assert!(!r.complete);
        assert_eq!(r.findings[0].rule, "foreign-content");
        assert_eq!(r.findings[0].severity, Severity::Critical);
        assert!(rules(&r).contains(&"header-too-large") || rules(&r).contains(&"header-past-end"));
        let short = raw(b"abc");
        assert_eq!(rules(&verify(&short, false)), ["file-too-short"]);
        let zero = raw(&[0u8; 8]);
        assert_eq!(rules(&verify(&zero, false)), ["header-length-zero"]);
        let junk = build("{\"a\":", b"");
        let r = verify(&junk, false);
        assert_eq!(rules(&r), ["json-syntax"]);
        assert!(!r.complete);
    }

    #[test]
    fn values_are_counted() {
        let mut data = Vec::new();
        for x in [1.0f32, f32::NAN, f32::INFINITY, 2.0] {
            data.extend_from_slice(&x.to_le_bytes());
        }
        data.extend_from_slice(&[0, 1, 2]);
        let f = build(
            r#"{"x":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"m":{"dtype":"BOOL","shape":[3],"data_offsets":[16,19]}}"#,
            &data,
        );
        let r = verify(&f, true);
        let nf = finding(&r, "non-finite-values");
        assert_eq!(nf.count, Some(2));
        assert_eq!(nf.tensor.as_deref(), Some("x"));
        let b = finding(&r, "invalid-bool");
        assert_eq!(b.count, Some(1));
        assert_eq!(r.values_checked, Some(2));
    }

    /// `pickle.dumps` of a call of `builtins.exec`, protocol 4, by hand.
    fn pickle_exec() -> Vec<u8> {
        let mut p = b"\x80\x04\x95\x28\0\0\0\0\0\0\0".to_vec();
        p.extend_from_slice(b"\x8c\x08builtins\x94\x8c\x04exec\x94\x93\x94");
        p.extend_from_slice(b"\x8c\x0cimport os;id\x94\x85\x94R\x94.");
        p
    }

    fn u8_and_f32(u8s: &[u8], f32s: &[u8]) -> crate::testfs::TempFile {
        let (a, b) = (u8s.len(), u8s.len() + f32s.len());
        let header = format!(
            r#"{{"blob":{{"dtype":"U8","shape":[{a}],"data_offsets":[0,{a}]}},"w":{{"dtype":"F32","shape":[{}],"data_offsets":[{a},{b}]}}}}"#,
            f32s.len() / 4
        );
        build(&header, &[u8s, f32s].concat())
    }

    #[test]
    fn a_tensor_carrying_a_pickle_is_found_where_it_sits() {
        let mut blob = pickle_exec();
        blob.resize(200, 0);
        let f = u8_and_f32(&blob, &[0; 64]);
        for values in [false, true] {
            let r = verify(&f, values);
            assert!(r.accepted);
            assert_eq!(rules(&r), ["tensor-payload"], "values: {values}");
            let p = finding(&r, "tensor-payload");
            let data_start = 8 + r.header_len.unwrap();
            assert_eq!(p.tensor.as_deref(), Some("blob"));
            assert_eq!((p.offset, p.length), (Some(data_start), Some(51)));
            assert_eq!(p.severity, Severity::Critical);
            assert!(p.message.contains("imports builtins.exec"), "{}", p.message);
        }
    }

    #[test]
    fn a_file_deep_in_a_tensor_is_found_by_the_value_scan() {
        // An ELF header 10,000 bytes into a float tensor: past what the
        // quick look at each tensor's start reads, found when every byte
        // is read.
        let mut w = vec![0u8; 1 << 16];
        let elf = b"\x7fELF\x02\x01\x01\0\0\0\0\0\0\0\0\0\x02\0\x3e\0";
        w[10_000..10_000 + elf.len()].copy_from_slice(elf);
        let f = u8_and_f32(&[1, 2, 3, 4], &w);
        assert!(!rules(&verify(&f, false)).contains(&"tensor-payload"));
        let r = verify(&f, true);
        let p = finding(&r, "tensor-payload");
        let data_start = 8 + r.header_len.unwrap();
        assert_eq!(p.tensor.as_deref(), Some("w"));
        assert_eq!(p.offset, Some(data_start + 4 + 10_000));
        assert!(p.message.contains("an ELF executable"), "{}", p.message);
        // Across the boundary of two scan windows too.
        let mut big = vec![0u8; 20 << 20];
        let at = (8 << 20) - 10;
        big[at..at + elf.len()].copy_from_slice(elf);
        let f = u8_and_f32(&[], &big);
        let r = verify(&f, true);
        let p = finding(&r, "tensor-payload");
        assert_eq!(p.offset, Some(8 + r.header_len.unwrap() + at as u64));
        assert_eq!(p.count, Some(1));
    }

    #[test]
    fn a_prefix_that_is_also_a_pickle_is_a_polyglot() {
        // N = 0x2158: the prefix reads `X` (BINUNICODE) of 0x21 bytes,
        // which ends 30 bytes into the header, on `0N.` in a metadata
        // value: POP, NONE, STOP. pickle.loads(file) gives None.
        let mut header = r#"{"__metadata__":{"p":"aaaaaaaa0N."},"t":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}"#.to_owned();
        assert_eq!(header.find("0N."), Some(30));
        header.push_str(&" ".repeat(0x2158 - header.len()));
        let f = build(&header, &[0]);
        let r = verify(&f, false);
        assert!(r.accepted);
        let p = finding(&r, "pickle-prefix");
        assert_eq!(
            (p.offset, p.length, p.severity),
            (Some(0), Some(41), Severity::High)
        );
        // The same file with a header length that is no pickle.
        header.push_str("        ");
        let r = verify(&build(&header, &[0]), false);
        assert!(!rules(&r).contains(&"pickle-prefix"), "{:?}", rules(&r));
    }

    #[test]
    fn random_weights_hold_no_payload() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let f32s: Vec<u8> = (0..1 << 18)
            .flat_map(|_| ((next() % 2000) as f32 / 1000.0 - 1.0).to_le_bytes())
            .collect();
        let noise: Vec<u8> = (0..1 << 16).map(|_| next() as u8).collect();
        let f = u8_and_f32(&noise, &f32s);
        for values in [false, true] {
            assert_eq!(rules(&verify(&f, values)), Vec::<&str>::new());
        }
    }

    #[test]
    fn missing_file_is_an_error() {
        let err = verify_path(
            Path::new("/nonexistent/fastst/x.safetensors"),
            &VerifyOptions::default(),
            None,
        );
        assert!(matches!(err, Err(Error::Io { .. })));
    }
}

mod mutation {
    use super::super::*;
    use crate::testfs::raw;
    use fastst_core::{MappedFile, OpenOptions};

    /// xorshift64*: a small deterministic generator for the mutations.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n.max(1) as u64) as usize
        }
    }

    fn seed() -> Vec<u8> {
        let header = br#"{"__metadata__":{"format":"pt"},"a.weight":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"m":{"dtype":"BOOL","shape":[2],"data_offsets":[8,10]},"z":{"dtype":"F16","shape":[0,3],"data_offsets":[10,10]}}"#;
        let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
        bytes.extend_from_slice(header);
        bytes.extend_from_slice(&1.5f32.to_le_bytes());
        bytes.extend_from_slice(&f32::NAN.to_le_bytes());
        bytes.extend_from_slice(&[1, 0]);
        bytes
    }

    #[test]
    fn mutated_files_never_panic_and_agree_with_the_reader() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let options = VerifyOptions {
            values: true,
            threads: 2,
            ..VerifyOptions::default()
        };
        for _ in 0..500 {
            let mut bytes = seed();
            for _ in 0..1 + rng.below(4) {
                let pos = rng.below(bytes.len());
                match rng.below(4) {
                    0 if !bytes.is_empty() => bytes[pos] = rng.next() as u8,
                    1 => bytes.truncate(pos),
                    2 => bytes.insert(pos.min(bytes.len()), rng.next() as u8),
                    _ if !bytes.is_empty() => {
                        bytes.remove(pos);
                    }
                    _ => {}
                }
            }
            let file = raw(&bytes);
            let report = verify_path(&file.0, &options, None).unwrap();
            let reader = MappedFile::open(&file.0, OpenOptions::default());
            assert_eq!(report.accepted, reader.is_ok(), "{:?}", report.findings);
            let worst = report.findings.iter().map(|f| f.severity).max();
            if report.accepted {
                assert!(
                    worst.is_none_or(|s| s < Severity::High),
                    "{:?}",
                    report.findings
                );
            } else {
                assert!(
                    worst.is_some_and(|s| s >= Severity::High),
                    "{:?}",
                    report.findings
                );
                let err = reader.err().unwrap();
                assert!(
                    report.findings.iter().any(|f| covers(err.rule(), f.rule)),
                    "{} not in {:?}",
                    err.rule(),
                    report.findings
                );
            }
        }
    }
}
