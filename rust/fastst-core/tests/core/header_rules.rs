//! One test per format rule: each malformed header fails with its own rule
//! id, and the valid edge cases are accepted.

use fastst_core::{check_prefix, Dtype, Error, Header, DEFAULT_HEADER_CAP};

fn parse(json: &str, buffer_len: u64) -> Result<Header, Error> {
    Header::parse(json.as_bytes(), buffer_len)
}

fn rule(json: &str, buffer_len: u64) -> &'static str {
    match parse(json, buffer_len) {
        Ok(_) => panic!("accepted: {}", &json[..json.len().min(200)]),
        Err(e) => e.rule().id(),
    }
}

#[test]
fn prefix_rules() {
    assert_eq!(
        check_prefix(&[1, 0, 0], 3, 100).map_err(|e| e.rule().id()),
        Err("file-too-short")
    );
    assert_eq!(
        check_prefix(&[0; 8], 100, 100).map_err(|e| e.rule().id()),
        Err("header-length-zero")
    );
    let big = (DEFAULT_HEADER_CAP + 1).to_le_bytes();
    assert_eq!(
        check_prefix(&big, u64::MAX, DEFAULT_HEADER_CAP).map_err(|e| e.rule().id()),
        Err("header-too-large")
    );
    assert_eq!(
        check_prefix(&u64::MAX.to_le_bytes(), 100, u64::MAX).map_err(|e| e.rule().id()),
        Err("header-past-end")
    );
    assert_eq!(
        check_prefix(&10u64.to_le_bytes(), 17, 100).map_err(|e| e.rule().id()),
        Err("header-past-end")
    );
    assert_eq!(check_prefix(&10u64.to_le_bytes(), 18, 100).ok(), Some(10));
}

#[test]
fn framing_and_json_rules() {
    assert_eq!(
        Header::parse(b"{\"a\xff\":1}", 0)
            .map_err(|e| e.rule().id())
            .err(),
        Some("header-not-utf8")
    );
    assert_eq!(rule("[]", 0), "header-start");
    assert_eq!(rule("\u{feff}{}", 0), "header-start");
    assert_eq!(rule("   ", 0), "json-syntax");
    assert_eq!(rule("{} x", 0), "json-syntax");
    assert_eq!(rule("{}\0\0", 0), "json-syntax");
    assert_eq!(rule("{/* c */}", 0), "json-syntax");
    assert_eq!(rule(r#"{"__metadata__":{"a":"b",}}"#, 0), "json-syntax");
    assert_eq!(
        rule(
            r#"{"t":{"dtype":"F32","shape":[NaN],"data_offsets":[0,0]}}"#,
            0
        ),
        "json-syntax"
    );
    let deep = format!(
        "{{\"t\":{{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4],\"x\":{}{}}}}}",
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    assert_eq!(rule(&deep, 4), "json-too-deep");
}

#[test]
fn duplicate_rules() {
    let e = r#"{"dtype":"F32","shape":[0],"data_offsets":[0,0]}"#;
    assert_eq!(
        rule(&format!(r#"{{"a":{e},"a":{e}}}"#), 0),
        "duplicate-tensor"
    );
    // Duplicates are compared after unescaping.
    assert_eq!(
        rule(&format!(r#"{{"a":{e},"\u0061":{e}}}"#), 0),
        "duplicate-tensor"
    );
    assert_eq!(
        rule(r#"{"__metadata__":{},"__metadata__":{}}"#, 0),
        "duplicate-metadata"
    );
    assert_eq!(
        rule(r#"{"__metadata__":{"k":"1","k":"2"}}"#, 0),
        "duplicate-metadata-key"
    );
    assert_eq!(
        rule(
            r#"{"a":{"dtype":"F32","dtype":"F32","shape":[0],"data_offsets":[0,0]}}"#,
            0
        ),
        "duplicate-field"
    );
    assert_eq!(
        rule(
            r#"{"a":{"dtype":"F32","shape":[0],"data_offsets":[0,0],"x":1,"x":2}}"#,
            0
        ),
        "duplicate-field"
    );
}

#[test]
fn metadata_rules() {
    assert_eq!(rule(r#"{"__metadata__":[]}"#, 0), "metadata-not-map");
    assert_eq!(rule(r#"{"__metadata__":"x"}"#, 0), "metadata-not-map");
    assert_eq!(
        rule(r#"{"__metadata__":{"k":1}}"#, 0),
        "metadata-value-not-string"
    );
    assert_eq!(
        rule(r#"{"__metadata__":{"k":null}}"#, 0),
        "metadata-value-not-string"
    );
    assert_eq!(
        rule(r#"{"__metadata__":{"k":{"n":"v"}}}"#, 0),
        "metadata-value-not-string"
    );
    let h = parse(r#"{"__metadata__":null}"#, 0).expect("null metadata is accepted");
    assert!(h.metadata().is_none());
    assert!(h.notes().metadata_null);
    let h = parse(r#"{"__metadata__":{}}"#, 0).expect("empty metadata");
    assert_eq!(h.metadata().map(<[_]>::len), Some(0));
}

#[test]
fn entry_rules() {
    assert_eq!(rule(r#"{"a":1}"#, 0), "entry-not-object");
    assert_eq!(rule(r#"{"a":[]}"#, 0), "entry-not-object");
    assert_eq!(
        rule(r#"{"a":{"shape":[],"data_offsets":[0,4]}}"#, 4),
        "missing-field"
    );
    assert_eq!(
        rule(r#"{"a":{"dtype":"F32","data_offsets":[0,4]}}"#, 4),
        "missing-field"
    );
    assert_eq!(
        rule(r#"{"a":{"dtype":"F32","shape":[]}}"#, 4),
        "missing-field"
    );
    assert_eq!(
        rule(r#"{"a":{"dtype":1,"shape":[],"data_offsets":[0,4]}}"#, 4),
        "wrong-field-type"
    );
    assert_eq!(
        rule(
            r#"{"a":{"dtype":"F32","shape":{},"data_offsets":[0,4]}}"#,
            4
        ),
        "wrong-field-type"
    );
    assert_eq!(
        rule(
            r#"{"a":{"dtype":"F32","shape":"2","data_offsets":[0,4]}}"#,
            4
        ),
        "wrong-field-type"
    );
    assert_eq!(
        rule(
            r#"{"a":{"dtype":"f32","shape":[],"data_offsets":[0,4]}}"#,
            4
        ),
        "unknown-dtype"
    );
    assert_eq!(
        rule(r#"{"a":{"dtype":"Q4","shape":[],"data_offsets":[0,4]}}"#, 4),
        "unknown-dtype"
    );
    for bad in [
        "-1",
        "1.5",
        "1e3",
        "\"2\"",
        "null",
        "9223372036854775808",
        "18446744073709551616",
        "[1]",
    ] {
        let j = format!(r#"{{"a":{{"dtype":"F32","shape":[{bad}],"data_offsets":[0,4]}}}}"#);
        assert_eq!(rule(&j, 4), "bad-shape-entry", "{bad}");
    }
    for bad in [
        "[0]",
        "[0,4,8]",
        "[-1,4]",
        "[0,4.0]",
        "\"0,4\"",
        "{}",
        "[0,\"4\"]",
        "[]",
    ] {
        let j = format!(r#"{{"a":{{"dtype":"F32","shape":[],"data_offsets":{bad}}}}}"#);
        assert_eq!(rule(&j, 4), "bad-offsets", "{bad}");
    }
}

#[test]
fn size_rules() {
    let big = 1u64 << 62;
    assert_eq!(
        rule(
            &format!(r#"{{"a":{{"dtype":"F32","shape":[{big},{big}],"data_offsets":[0,4]}}}}"#),
            4
        ),
        "size-overflow"
    );
    assert_eq!(
        rule(
            &format!(r#"{{"a":{{"dtype":"F64","shape":[{big}],"data_offsets":[0,4]}}}}"#),
            4
        ),
        "size-overflow"
    );
    assert_eq!(
        rule(
            r#"{"a":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}}"#,
            2
        ),
        "sub-byte-not-whole"
    );
    assert_eq!(
        rule(
            r#"{"a":{"dtype":"F6_E2M3","shape":[2],"data_offsets":[0,2]}}"#,
            2
        ),
        "sub-byte-not-whole"
    );
    assert_eq!(
        rule(
            r#"{"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,12]}}"#,
            12
        ),
        "byte-length-mismatch"
    );
    let h = parse(r#"{"a":{"dtype":"F4","shape":[2,3],"data_offsets":[0,3]},"b":{"dtype":"F6_E3M2","shape":[4],"data_offsets":[3,6]}}"#, 6).expect("packed kinds");
    assert_eq!(h.require("a").map(|t| t.dtype).ok(), Some(Dtype::F4));
}

#[test]
fn layout_rules() {
    let two = |a: &str, b: &str, len: u64| {
        rule(
            &format!(
                r#"{{"a":{{"dtype":"U8","shape":[{}],"data_offsets":{a}}},"b":{{"dtype":"U8","shape":[{}],"data_offsets":{b}}}}}"#,
                4, 4
            ),
            len,
        )
    };
    assert_eq!(two("[0,4]", "[6,10]", 10), "hole");
    assert_eq!(two("[2,6]", "[6,10]", 10), "hole");
    assert_eq!(two("[0,4]", "[2,6]", 6), "overlap");
    assert_eq!(two("[0,4]", "[0,4]", 4), "overlap");
    assert_eq!(two("[0,4]", "[4,8]", 6), "data-too-short");
    assert_eq!(two("[0,4]", "[4,8]", 9), "trailing-bytes");
    assert_eq!(
        rule(
            r#"{"a":{"dtype":"U8","shape":[0],"data_offsets":[4,0]}}"#,
            4
        ),
        "offsets-reversed"
    );
    assert_eq!(rule("{}", 1), "trailing-bytes");
}

#[test]
fn valid_edge_cases() {
    // Leading whitespace, trailing padding, scalars, empty tensors sharing
    // offsets, unaligned offsets, non-ASCII names, any order.
    let json = concat!(
        " \n{\"z\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[1,5]},",
        "\"ünï\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},",
        "\"e1\":{\"dtype\":\"F64\",\"shape\":[0,3],\"data_offsets\":[5,5]},",
        "\"e2\":{\"dtype\":\"BF16\",\"shape\":[2,0],\"data_offsets\":[5,5],\"extra\":{\"x\":[1]}}}   "
    );
    let h = parse(json, 5).expect("valid");
    let names: Vec<&str> = h.tensors().iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["ünï", "z", "e1", "e2"]);
    let sorted: Vec<&str> = h.tensors_by_name().map(|t| t.name.as_str()).collect();
    assert_eq!(sorted, ["e1", "e2", "z", "ünï"]);
    assert_eq!(h.notes().leading_whitespace, 2);
    assert_eq!(
        h.notes().unknown_fields,
        vec![("e2".to_owned(), "extra".to_owned())]
    );
    assert!(h.metadata().is_none());
    assert_eq!(parse("{}", 0).map(|h| h.len()).ok(), Some(0));
    let h = parse(r#"{"__metadata__":{"b":"2","a":"\u00e9"}}"#, 0).expect("metadata");
    assert_eq!(
        h.metadata().map(|m| m.to_vec()),
        Some(vec![("b".into(), "2".into()), ("a".into(), "é".into())])
    );
}

#[test]
fn messages_name_tensor_and_rule() {
    let err = parse(
        r#"{"h.0.w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,12]}}"#,
        12,
    )
    .expect_err("invalid");
    assert_eq!(
        err.to_string(),
        "tensor \"h.0.w\": data_offsets [0, 12] hold 12 bytes but shape [2, 2] of F32 needs 16"
    );
    assert_eq!(err.tensor(), Some("h.0.w"));
}

/// Every JSON scalar kind for `__metadata__` itself, and for a metadata value,
/// is refused with its own rule (each kind is a separate visitor in the parser).
#[test]
fn metadata_scalar_kinds() {
    for m in [
        "1.5",
        "-1",
        "-9223372036854775808",
        "1e5",
        "true",
        "false",
        "0",
    ] {
        let json = format!(r#"{{"__metadata__":{m}}}"#);
        assert_eq!(rule(&json, 0), "metadata-not-map", "{json}");
    }
    for v in [
        "true",
        "false",
        "0",
        "-3",
        "18446744073709551615",
        "2.5",
        "-0.0",
        "[]",
        r#"["a"]"#,
    ] {
        let json = format!(r#"{{"__metadata__":{{"k":{v}}}}}"#);
        assert_eq!(rule(&json, 0), "metadata-value-not-string", "{json}");
    }
}
