//! The `Header` API beyond the rules: accessors, look-ups, the length
//! prefix at its boundaries, and whole files parsed from memory.

use fastst_core::header::{check_prefix, prefix_value};
use fastst_core::{parse_file_bytes, Dtype, Error, Header, TensorInfo};

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
