//! The writer from the outside: plans (order, offsets, the rendered header
//! and its cap), the tensor stream's checks, and whole files in memory and
//! on disk, read back by the strict parser.

use std::path::PathBuf;

use fastst_core::{
    parse_file_bytes, serialize, write_file, AtomicFile, Dtype, Error, NewTensor, TensorStream,
    WritePlan,
};

const CAP: u64 = 100_000_000;

fn meta(pairs: &[(&str, &str)]) -> Option<Vec<(String, String)>> {
    Some(
        pairs
            .iter()
            .map(|&(k, v)| (k.to_owned(), v.to_owned()))
            .collect(),
    )
}

fn json(plan: &WritePlan) -> &str {
    std::str::from_utf8(&plan.header()[8..]).expect("utf-8")
}

#[test]
fn plans_lay_out_and_render_the_header() {
    let plan = WritePlan::new(
        vec![
            NewTensor::new("w", Dtype::F16, vec![2, 2]),
            NewTensor::new("b", Dtype::U8, vec![3]),
            NewTensor::new("q", Dtype::F64, vec![]),
        ],
        meta(&[("z", "1"), ("a", "\"x\"\n")]),
        CAP,
    )
    .expect("plan");
    let text = concat!(
        r#"{"__metadata__":{"a":"\"x\"\n","z":"1"},"#,
        r#""q":{"dtype":"F64","shape":[],"data_offsets":[0,8]},"#,
        r#""w":{"dtype":"F16","shape":[2,2],"data_offsets":[8,16]},"#,
        r#""b":{"dtype":"U8","shape":[3],"data_offsets":[16,19]}}"#
    );
    let padded = text.len().div_ceil(8) * 8;
    assert_eq!(json(&plan), format!("{text:<padded$}"));
    assert_eq!(plan.header_len(), padded as u64);
    assert_eq!(plan.header().len(), 8 + padded);
    assert_eq!(plan.header()[..8], (padded as u64).to_le_bytes());
    assert_eq!(plan.data_len(), 19);
    assert_eq!(plan.total_len(), 8 + padded as u64 + 19);
    let layout: Vec<_> = plan
        .tensors()
        .iter()
        .map(|t| (t.name.as_str(), t.index, t.begin, t.end, t.byte_len()))
        .collect();
    assert_eq!(
        layout,
        [("q", 2, 0, 8, 8), ("w", 0, 8, 16, 8), ("b", 1, 16, 19, 3)]
    );

    // No metadata, no tensors: "{}" padded to 8.
    let empty = WritePlan::new(vec![], None, CAP).expect("empty");
    assert_eq!(json(&empty), "{}      ");
    assert_eq!(
        (empty.header_len(), empty.data_len(), empty.total_len()),
        (8, 0, 16)
    );
    // Empty metadata is written as an empty map.
    let p = WritePlan::new(vec![], meta(&[]), CAP).expect("plan");
    assert_eq!(json(&p).trim_end(), r#"{"__metadata__":{}}"#);
}

#[test]
fn header_lengths_already_a_multiple_of_eight_get_no_padding() {
    // `{"abcde":{"dtype":"U8","shape":[],"data_offsets":[0,1]}}` is 56 bytes.
    let p =
        WritePlan::new(vec![NewTensor::new("abcde", Dtype::U8, vec![])], None, CAP).expect("plan");
    assert_eq!(
        json(&p),
        r#"{"abcde":{"dtype":"U8","shape":[],"data_offsets":[0,1]}}"#
    );
    assert_eq!(p.header_len(), 56);
}

#[test]
fn the_header_cap_is_enforced_exactly() {
    let tensors = || vec![NewTensor::new("t", Dtype::U8, vec![1])];
    let full = WritePlan::new(tensors(), None, CAP).expect("plan");
    let n = full.header_len();
    // A cap of exactly the padded length is enough; one less is not.
    assert!(WritePlan::new(tensors(), None, n).is_ok());
    let e = WritePlan::new(tensors(), None, n - 1).err();
    assert!(
        matches!(e, Some(Error::HeaderOverCap { len, cap }) if len == n && cap == n - 1),
        "{e:?}"
    );
    // While rendering, the JSON so far is compared with the cap after each
    // tensor: `{` + the first entry, before the closing brace.
    let entry = r#"{"t":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}"#.len() as u64;
    let e = WritePlan::new(tensors(), None, entry).err();
    assert!(
        matches!(e, Some(Error::HeaderOverCap { len, cap }) if len == n && cap == entry),
        "{e:?}"
    );
    let two = vec![
        NewTensor::new("t", Dtype::U8, vec![1]),
        NewTensor::new("u", Dtype::U8, vec![1]),
    ];
    let e = WritePlan::new(two, None, 10).err();
    assert!(
        matches!(e, Some(Error::HeaderOverCap { len, cap: 10 }) if len == entry),
        "{e:?}"
    );
}

#[test]
fn plans_refuse_what_the_format_cannot_hold() {
    let e = WritePlan::new(
        vec![NewTensor::new("__metadata__", Dtype::U8, vec![1])],
        None,
        CAP,
    )
    .err();
    assert!(
        matches!(e, Some(Error::ReservedName { ref name }) if name == "__metadata__"),
        "{e:?}"
    );
    let e = WritePlan::new(
        vec![
            NewTensor::new("x", Dtype::U8, vec![1]),
            NewTensor::new("y", Dtype::U8, vec![1]),
            NewTensor::new("x", Dtype::F32, vec![1]),
        ],
        None,
        CAP,
    )
    .err();
    assert!(
        matches!(e, Some(Error::DuplicateName { ref name }) if name == "x"),
        "{e:?}"
    );
    let e = WritePlan::new(vec![], meta(&[("k", "1"), ("j", "2"), ("k", "3")]), CAP).err();
    assert!(
        matches!(e, Some(Error::DuplicateKey { ref key }) if key == "k"),
        "{e:?}"
    );
    let e = WritePlan::new(vec![NewTensor::new("f", Dtype::F4, vec![3])], None, CAP).err();
    assert!(
        matches!(e, Some(Error::BadTensorSize { ref tensor, ref reason }) if tensor == "f"
            && reason == "shape [3] holds 3 elements of F4 (4 bits each), which do not fill whole bytes"),
        "{e:?}"
    );
    let e = WritePlan::new(
        vec![NewTensor::new("o", Dtype::F64, vec![1 << 62])],
        None,
        CAP,
    )
    .err();
    assert!(
        matches!(e, Some(Error::BadTensorSize { ref tensor, ref reason }) if tensor == "o"
            && reason == "shape [4611686018427387904] of F64 overflows 64-bit byte arithmetic"),
        "{e:?}"
    );
    // The largest byte size a shape can have is under 2^61 (its bit count
    // must fit 64 bits): nine such tensors overflow the file's offsets, and
    // eight leave no room for the header.
    let huge = |n: usize| {
        (0..n)
            .map(|i| NewTensor::new(format!("t{i}"), Dtype::I64, vec![(1 << 58) - 1]))
            .collect::<Vec<_>>()
    };
    let e = WritePlan::new(huge(9), None, CAP).err();
    assert!(
        matches!(e, Some(Error::BadTensorSize { ref tensor, ref reason }) if tensor == "t8"
            && reason == "the file's data would exceed 2^64 bytes"),
        "{e:?}"
    );
    let e = WritePlan::new(huge(8), None, CAP).err();
    assert!(
        matches!(e, Some(Error::FileTooLarge { ref reason }) if reason == "the file would exceed 2^64 bytes"),
        "{e:?}"
    );
    let p = WritePlan::new(huge(7), None, CAP).expect("seven fit");
    assert_eq!(p.data_len(), 7 * ((1u64 << 61) - 8));
}

#[test]
fn the_stream_checks_every_tensor_gets_exactly_its_bytes() {
    let plan = WritePlan::new(
        vec![
            NewTensor::new("a", Dtype::U16, vec![2]),
            NewTensor::new("e", Dtype::U8, vec![0]),
            NewTensor::new("b", Dtype::U8, vec![3]),
        ],
        None,
        CAP,
    )
    .expect("plan");
    let names = |s: &TensorStream<'_, Vec<u8>>| s.current().map(|t| t.name.clone());
    let mut s = TensorStream::new(&plan, Vec::new()).expect("stream");
    assert_eq!(names(&s).as_deref(), Some("a"));
    s.write(&[1, 2]).expect("part");
    s.write(&[]).expect("nothing");
    let e = s.write(&[3, 4, 5]).err();
    assert!(
        matches!(e, Some(Error::DataLength { ref tensor, expected: 4, got: 5 }) if tensor == "a"),
        "{e:?}"
    );
    let e = s.end_tensor().err();
    assert!(
        matches!(e, Some(Error::DataLength { ref tensor, expected: 4, got: 2 }) if tensor == "a"),
        "{e:?}"
    );
    s.write(&[3, 4]).expect("exactly to the end");
    s.end_tensor().expect("a complete");
    assert_eq!(names(&s).as_deref(), Some("b"));
    s.write(&[6]).expect("b");
    s.write(&[7, 8]).expect("b");
    s.end_tensor().expect("b complete");
    assert_eq!(names(&s).as_deref(), Some("e"));
    s.end_tensor().expect("e is empty");
    assert_eq!(names(&s), None);
    s.write(&[]).expect("nothing after the end");
    let e = s.write(&[9]).err();
    assert!(
        matches!(e, Some(Error::StreamOrder { ref reason }) if reason == "1 bytes given after the last tensor"),
        "{e:?}"
    );
    let e = s.end_tensor().err();
    assert!(
        matches!(e, Some(Error::StreamOrder { ref reason }) if reason == "no tensor left to end"),
        "{e:?}"
    );
    let out = s.finish().expect("finish");
    let mut want = plan.header().to_vec();
    want.extend_from_slice(&[1, 2, 3, 4, 6, 7, 8]);
    assert_eq!(out, want);

    let mut s = TensorStream::new(&plan, Vec::new()).expect("stream");
    s.write(&[1]).expect("part");
    let e = s.finish().err();
    assert!(
        matches!(e, Some(Error::DataLength { ref tensor, expected: 4, got: 1 }) if tensor == "a"),
        "{e:?}"
    );
}

fn two_tensor_plan() -> WritePlan {
    WritePlan::new(
        vec![
            NewTensor::new("small", Dtype::U8, vec![3]),
            NewTensor::new("wide", Dtype::F32, vec![2]),
        ],
        meta(&[("format", "pt")]),
        CAP,
    )
    .expect("plan")
}

#[test]
fn files_in_memory_read_back_exactly() {
    let plan = two_tensor_plan();
    let small = [1u8, 2, 3];
    let wide: Vec<u8> = [1.5f32, -2.0]
        .iter()
        .flat_map(|f| f.to_le_bytes())
        .collect();
    let bytes = serialize(&plan, &[&small, &wide]).expect("serialize");
    assert_eq!(bytes.len() as u64, plan.total_len());
    assert!(bytes.starts_with(plan.header()));
    assert_eq!(
        bytes[plan.header().len()..],
        [&wide[..], &small[..]].concat()
    );
    let h = parse_file_bytes(&bytes, CAP).expect("parse");
    assert_eq!(
        h.metadata(),
        Some(&[("format".to_owned(), "pt".to_owned())][..])
    );
    let w = h.get("wide").expect("wide");
    assert_eq!((w.dtype, w.begin, w.end), (Dtype::F32, 0, 8));

    let e = serialize(&plan, &[&small]).err();
    assert!(
        matches!(e, Some(Error::StreamOrder { ref reason }) if reason == "no data given for tensor \"wide\""),
        "{e:?}"
    );
    let e = serialize(&plan, &[&small, &wide[..7]]).err();
    assert!(matches!(e, Some(Error::DataLength { got: 7, .. })), "{e:?}");
}

/// A path in the temporary folder, removed when dropped.
struct Target(PathBuf);

impl Drop for Target {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn files_on_disk_are_the_serialised_bytes() {
    let plan = two_tensor_plan();
    let small = [9u8, 8, 7];
    let wide = [0u8, 0, 128, 63, 0, 0, 0, 64];
    let target = Target(std::env::temp_dir().join(format!(
        "fastst-write-api-{}.safetensors",
        std::process::id()
    )));
    for durable in [false, true] {
        write_file(&plan, &[&small, &wide], &target.0, durable).expect("write");
        let on_disk = std::fs::read(&target.0).expect("read");
        assert_eq!(
            on_disk,
            serialize(&plan, &[&small, &wide]).expect("serialize")
        );
    }
    // A failed write leaves the old file as it was.
    let before = std::fs::read(&target.0).expect("read");
    let e = write_file(&plan, &[&small, &wide[..4]], &target.0, false).err();
    assert!(matches!(e, Some(Error::DataLength { got: 4, .. })), "{e:?}");
    assert_eq!(std::fs::read(&target.0).expect("read"), before);

    let a = AtomicFile::create(&target.0).expect("create");
    assert!(a.replaces_existing());
    assert!(a.durable_by_default());
    assert_eq!(a.target(), target.0.as_path());
    drop(a);
    let fresh = Target(target.0.with_extension("fresh"));
    let a = AtomicFile::create(&fresh.0).expect("create");
    assert!(!a.replaces_existing());
    assert!(!a.durable_by_default());
    drop(a);
    assert!(!fresh.0.exists());
}
