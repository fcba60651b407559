//! The `Header` API beyond the rules: accessors, look-ups, the length
//! prefix at its boundaries, and whole files parsed from memory.

use fastst_core::{check_prefix, parse_file_bytes, prefix_value, Dtype, Error, Header, TensorInfo};

const TWO: &str = concat!(
    r#"{"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]},"#,
    r#""a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"#,
    r#""c":{"dtype":"I16","shape":[],"data_offsets":[12,14]}}"#
);

#[test]
fn accessors_report_the_parsed_header() {
    let h = Header::parse(TWO.as_bytes(), 14).expect("valid");
    assert_eq!(h.len(), 3);
    assert!(!h.is_empty());
    assert_eq!(h.header_len(), TWO.len() as u64);
    assert_eq!(h.data_start(), 8 + TWO.len() as u64);
    assert_eq!(h.buffer_len(), 14);
    let b = h.get("b").expect("b");
    assert_eq!(
        b,
        &TensorInfo {
            name: "b".into(),
            dtype: Dtype::F32,
            shape: vec![2],
            begin: 4,
            end: 12
        }
    );
    assert_eq!(b.byte_len(), 8);
    assert_eq!(b.nelements(), 2);
    let c = h.require("c").expect("c");
    assert_eq!((c.nelements(), c.byte_len(), c.begin), (1, 2, 12));
    for name in ["a", "b", "c"] {
        assert_eq!(h.get(name).map(|t| t.name.as_str()), Some(name));
    }
    for absent in ["", "A", "aa", "d", "bb", "\u{0}"] {
        assert!(h.get(absent).is_none(), "{absent:?}");
        let e = h.require(absent).err();
        assert!(
            matches!(e, Some(Error::TensorNotFound { ref name }) if name == absent),
            "{e:?}"
        );
    }
    assert!(h.metadata().is_none());
    assert_eq!(h.notes(), &fastst_core::ParseNotes::default());

    let empty = Header::parse(b"{}", 0).expect("empty");
    assert!(empty.is_empty());
    assert_eq!(empty.len(), 0);
    assert!(empty.get("a").is_none());
}

#[test]
fn element_counts() {
    let t = |shape: Vec<u64>| TensorInfo {
        name: "t".into(),
        dtype: Dtype::U8,
        shape,
        begin: 3,
        end: 10,
    };
    assert_eq!(t(vec![]).nelements(), 1);
    assert_eq!(t(vec![2, 3, 4]).nelements(), 24);
    assert_eq!(t(vec![5, 0]).nelements(), 0);
    assert_eq!(t(vec![1 << 40, 1 << 40]).nelements(), u64::MAX);
    assert_eq!(t(vec![]).byte_len(), 7);
}

#[test]
fn the_prefix_at_its_boundaries() {
    assert_eq!(prefix_value(&[1, 2, 3, 4, 5, 6, 7]), None);
    assert_eq!(prefix_value(&[1, 2, 0, 0, 0, 0, 0, 0, 9]), Some(0x0201));
    assert_eq!(prefix_value(&u64::MAX.to_le_bytes()), Some(u64::MAX));
    // n == cap is allowed, n == cap + 1 is not.
    assert_eq!(
        check_prefix(&100u64.to_le_bytes(), 1000, 100).ok(),
        Some(100)
    );
    let e = check_prefix(&101u64.to_le_bytes(), 1000, 100).err();
    assert!(
        matches!(e, Some(Error::HeaderTooLarge { len: 101, cap: 100 })),
        "{e:?}"
    );
    // n == file length - 8 is allowed, one more is past the end.
    assert_eq!(check_prefix(&10u64.to_le_bytes(), 18, 100).ok(), Some(10));
    let e = check_prefix(&11u64.to_le_bytes(), 18, 100).err();
    assert!(
        matches!(
            e,
            Some(Error::HeaderPastEnd {
                len: 11,
                available: 10
            })
        ),
        "{e:?}"
    );
    let e = check_prefix(&[9, 0, 0], 3, 100).err();
    assert!(matches!(e, Some(Error::FileTooShort { len: 3 })), "{e:?}");
    let e = check_prefix(&1u64.to_le_bytes(), 4, 100).err();
    assert!(
        matches!(
            e,
            Some(Error::HeaderPastEnd {
                len: 1,
                available: 0
            })
        ),
        "{e:?}"
    );
    assert_eq!(check_prefix(&1u64.to_le_bytes(), 9, 1).ok(), Some(1));
}

#[test]
fn whole_files_from_memory() {
    let json = r#"{"x":{"dtype":"U8","shape":[3],"data_offsets":[0,3]}}  "#;
    let mut file = (json.len() as u64).to_le_bytes().to_vec();
    file.extend_from_slice(json.as_bytes());
    file.extend_from_slice(&[7, 8, 9]);
    let h = parse_file_bytes(&file, 1000).expect("valid");
    assert_eq!(h.header_len(), json.len() as u64);
    assert_eq!(h.buffer_len(), 3);
    assert_eq!(h.data_start(), 8 + json.len() as u64);
    assert_eq!(h.get("x").map(|t| (t.begin, t.end)), Some((0, 3)));

    // One byte of data missing, one byte too many.
    let e = parse_file_bytes(&file[..file.len() - 1], 1000).err();
    assert!(
        matches!(e, Some(Error::DataTooShort { ref tensor, end: 3, available: 2 }) if tensor == "x"),
        "{e:?}"
    );
    let mut longer = file.clone();
    longer.push(0);
    let e = parse_file_bytes(&longer, 1000).err();
    assert!(
        matches!(
            e,
            Some(Error::TrailingBytes {
                trailing: 1,
                covered: 3,
                available: 4
            })
        ),
        "{e:?}"
    );
    // The cap applies, and the prefix may not claim more than the file holds.
    let e = parse_file_bytes(&file, json.len() as u64 - 1).err();
    assert!(matches!(e, Some(Error::HeaderTooLarge { .. })), "{e:?}");
    let e = parse_file_bytes(&file[..8 + json.len() - 1], 1000).err();
    assert!(matches!(e, Some(Error::HeaderPastEnd { .. })), "{e:?}");
    let e = parse_file_bytes(&file[..5], 1000).err();
    assert!(matches!(e, Some(Error::FileTooShort { len: 5 })), "{e:?}");
}

fn parse_err(json: &str, buffer_len: u64) -> Error {
    match Header::parse(json.as_bytes(), buffer_len) {
        Ok(_) => panic!("accepted: {json}"),
        Err(e) => e,
    }
}

#[test]
fn offsets_name_what_they_hold() {
    let cases = [
        ("[0,4,8]", "a list of 3 values"),
        ("[0]", "a list of 1 values"),
        ("[]", "a list of 0 values"),
        ("[[0],4]", "a value that is not a non-negative integer"),
        (
            "[0,{\"a\":[1]}]",
            "a value that is not a non-negative integer",
        ),
        (
            "[0,4,[1,[2]]]",
            "a value that is not a non-negative integer",
        ),
        ("[0,4,{}]", "a value that is not a non-negative integer"),
        ("[-1,4]", "a value that is not a non-negative integer"),
        ("[true,4]", "a value that is not a non-negative integer"),
        ("[null,4]", "a value that is not a non-negative integer"),
        ("[\"0\",4]", "a value that is not a non-negative integer"),
        ("true", "the boolean true"),
        ("7", "the number 7"),
        ("-7", "the number -7"),
        ("0.5", "the number 0.5"),
        ("\"x\"", "the string \"x\""),
        ("null", "null"),
        ("{}", "an object"),
    ];
    for (offsets, what) in cases {
        let j = format!(r#"{{"t":{{"dtype":"U8","shape":[4],"data_offsets":{offsets}}}}}"#);
        let e = parse_err(&j, 4);
        assert!(
            matches!(e, Error::BadOffsets { ref tensor, ref found } if tensor == "t" && found == what),
            "{offsets}: {e:?}"
        );
    }
    // The first two of more values are not taken as the offsets.
    let h = Header::parse(
        br#"{"t":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}}"#,
        4,
    )
    .expect("valid");
    assert_eq!(h.get("t").map(|t| (t.begin, t.end)), Some((0, 4)));
}

#[test]
fn entries_and_fields_name_what_they_hold() {
    for (entry, what) in [
        ("[]", "a list"),
        ("1", "the number 1"),
        ("\"s\"", "the string \"s\""),
        ("null", "null"),
        ("false", "the boolean false"),
    ] {
        let e = parse_err(&format!(r#"{{"t":{entry}}}"#), 0);
        assert!(
            matches!(e, Error::EntryNotObject { ref tensor, ref found } if tensor == "t" && found == what),
            "{entry}: {e:?}"
        );
    }
    for (dtype, what) in [
        ("1", "the number 1"),
        ("-1", "the number -1"),
        ("1.5", "the number 1.5"),
        ("true", "the boolean true"),
        ("null", "null"),
        ("[]", "a list"),
        ("{}", "an object"),
    ] {
        let j = format!(r#"{{"t":{{"dtype":{dtype},"shape":[],"data_offsets":[0,1]}}}}"#);
        let e = parse_err(&j, 1);
        assert!(
            matches!(e, Error::WrongFieldType { ref tensor, field: "dtype", ref found, .. } if tensor == "t" && found == what),
            "{dtype}: {e:?}"
        );
    }
    for (shape, what) in [
        ("1", "the number 1"),
        ("\"2\"", "the string \"2\""),
        ("null", "null"),
        ("false", "the boolean false"),
        ("{}", "an object"),
    ] {
        let j = format!(r#"{{"t":{{"dtype":"U8","shape":{shape},"data_offsets":[0,1]}}}}"#);
        let e = parse_err(&j, 1);
        assert!(
            matches!(e, Error::WrongFieldType { ref tensor, field: "shape", ref found, .. } if tensor == "t" && found == what),
            "{shape}: {e:?}"
        );
    }
    for (entry, value) in [
        ("-1", "-1"),
        ("1.5", "1.5"),
        ("true", "true"),
        ("null", "null"),
        ("\"3\"", "\"3\""),
        ("[1]", "a list"),
        ("{}", "an object"),
        ("9223372036854775808", "9223372036854775808"),
    ] {
        let j = format!(r#"{{"t":{{"dtype":"U8","shape":[{entry}],"data_offsets":[0,1]}}}}"#);
        let e = parse_err(&j, 1);
        assert!(
            matches!(e, Error::BadShapeEntry { ref tensor, .. } if tensor == "t"),
            "{entry}: {e:?}"
        );
        assert!(e.to_string().contains(value), "{entry}: {e}");
    }
}

#[test]
fn unknown_fields_of_every_kind_are_skipped_and_noted() {
    let j = concat!(
        r#"{"t":{"n":null,"b":true,"i":-1,"u":1,"f":0.5,"s":"x","#,
        r#""l":[1,[2,{"k":[]}],{"a":null}],"m":{"x":{"y":[[]]}},"#,
        r#""dtype":"U8","shape":[1],"data_offsets":[0,1]}}"#
    );
    let h = Header::parse(j.as_bytes(), 1).expect("valid");
    let fields: Vec<&str> = h
        .notes()
        .unknown_fields
        .iter()
        .map(|(t, f)| {
            assert_eq!(t, "t");
            f.as_str()
        })
        .collect();
    assert_eq!(fields, ["n", "b", "i", "u", "f", "s", "l", "m"]);
    assert_eq!(h.get("t").map(|t| (t.dtype, t.end)), Some((Dtype::U8, 1)));
    // Each field, known or not, may appear once.
    let e = parse_err(
        r#"{"t":{"l":[1],"dtype":"U8","shape":[1],"data_offsets":[0,1],"l":{}}}"#,
        1,
    );
    assert!(
        matches!(e, Error::DuplicateField { ref tensor, ref field } if tensor == "t" && field == "l"),
        "{e:?}"
    );
    for field in ["dtype", "shape", "data_offsets"] {
        let j = r#"{"t":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}"#.replace(
            "}}",
            &format!(
                r#","{field}":{}}}}}"#,
                match field {
                    "dtype" => "\"U8\"",
                    "shape" => "[1]",
                    _ => "[0,1]",
                }
            ),
        );
        let e = parse_err(&j, 1);
        assert!(
            matches!(e, Error::DuplicateField { field: ref f, .. } if f == field),
            "{j}: {e:?}"
        );
        assert!(e.to_string().contains(field), "{e}");
    }
    let e = parse_err(r#"{"t":{"dtype":"U8","shape":[1]}}"#, 1);
    assert!(
        matches!(e, Error::MissingField { ref tensor, field: "data_offsets" } if tensor == "t"),
        "{e:?}"
    );
}

#[test]
fn metadata_forms() {
    let h = Header::parse(br#"{"__metadata__":null}"#, 0).expect("null metadata");
    assert!(h.notes().metadata_null);
    assert!(h.metadata().is_none());
    let h = Header::parse(br#"{"__metadata__":{}}"#, 0).expect("empty metadata");
    assert!(!h.notes().metadata_null);
    assert_eq!(h.metadata(), Some(&[][..]));
    let h = Header::parse(br#"{"__metadata__":{"k":"v\u0000\"w"}}"#, 0).expect("escapes");
    assert_eq!(
        h.metadata(),
        Some(&[("k".to_owned(), "v\u{0}\"w".to_owned())][..])
    );
    for (m, what) in [
        ("[]", "a list"),
        ("\"s\"", "the string \"s\""),
        ("true", "the boolean true"),
        ("2", "the number 2"),
        ("-2", "the number -2"),
        ("0.5", "the number 0.5"),
    ] {
        let e = parse_err(&format!(r#"{{"__metadata__":{m}}}"#), 0);
        assert!(
            matches!(e, Error::MetadataNotMap { ref found } if found == what),
            "{m}: {e:?}"
        );
    }
    for (v, what) in [
        ("null", "null"),
        ("{}", "an object"),
        ("[\"a\"]", "a list"),
        ("true", "the boolean true"),
        ("-3", "the number -3"),
        ("3", "the number 3"),
        ("2.5", "the number 2.5"),
    ] {
        let e = parse_err(&format!(r#"{{"__metadata__":{{"k":"v","q":{v}}}}}"#), 0);
        assert!(
            matches!(e, Error::MetadataValueNotString { ref key, ref found } if key == "q" && found == what),
            "{v}: {e:?}"
        );
    }
    let e = parse_err(r#"{"__metadata__":{"a":"1","b":"2","a":"3"}}"#, 0);
    assert!(
        matches!(e, Error::DuplicateMetadataKey { ref key } if key == "a"),
        "{e:?}"
    );
    let e = parse_err(r#"{"__metadata__":{},"__metadata__":null}"#, 0);
    assert!(matches!(e, Error::DuplicateMetadata), "{e:?}");
}

#[test]
fn framing_errors_carry_their_position() {
    let e = parse_err("  \t[1]", 0);
    assert!(
        matches!(
            e,
            Error::HeaderStart {
                found: b'[',
                offset: 3
            }
        ),
        "{e:?}"
    );
    let e = match Header::parse(b"{\"a\":\"\xc3\"}", 0) {
        Err(e) => e,
        Ok(_) => panic!("accepted"),
    };
    assert!(matches!(e, Error::HeaderNotUtf8 { offset: 6 }), "{e:?}");
    let e = parse_err(" \n ", 0);
    assert!(
        matches!(e, Error::Json { ref message } if message == "header holds only whitespace"),
        "{e:?}"
    );
    let e = parse_err("{\"a\":}", 0);
    assert!(matches!(e, Error::Json { .. }), "{e:?}");
    let h = Header::parse(b"\r\n\t {}", 0).expect("leading whitespace");
    assert_eq!(h.notes().leading_whitespace, 4);
}
