//! `MappedFile` from the outside: every way of getting a tensor's bytes,
//! under both back ends, at the size thresholds where the strategy changes
//! (private mapping at 64 KiB, parallel positioned reads at 1 MiB,
//! multi-threaded and chunked conversion), with tensors at unaligned file
//! offsets, and the errors each access reports.

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

use fastst_core::{
    bf16_to_f32, f32_to_f16, Backend, Dtype, Error, MappedFile, OpenOptions, DEFAULT_HEADER_CAP,
    PRIVATE_MAP_THRESHOLD,
};

/// A file removed when dropped.
struct TempFile(PathBuf);

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Writes a file whose tensors are `(name, dtype, shape)` laid out in this
/// order, and returns it with its byte buffer (byte `i` is `i * 7 % 251`).
fn build(tensors: &[(&str, Dtype, &[u64])]) -> (TempFile, Vec<u8>) {
    static COUNT: AtomicUsize = AtomicUsize::new(0);
    let mut json = String::from("{");
    let mut at = 0u64;
    for (i, (name, dtype, shape)) in tensors.iter().enumerate() {
        let len = dtype.byte_len(shape).expect("size");
        let dims: Vec<String> = shape.iter().map(u64::to_string).collect();
        if i > 0 {
            json.push(',');
        }
        json.push_str(&format!(
            r#""{name}":{{"dtype":"{dtype}","shape":[{}],"data_offsets":[{at},{}]}}"#,
            dims.join(","),
            at + len
        ));
        at += len;
    }
    json.push('}');
    // An odd header length, so that tensors start at unaligned file offsets.
    if json.len() % 2 == 0 {
        json.push(' ');
    }
    let data: Vec<u8> = (0..at).map(|i| (i * 7 % 251) as u8).collect();
    let path = std::env::temp_dir().join(format!(
        "fastst-read-api-{}-{}.safetensors",
        std::process::id(),
        COUNT.fetch_add(1, Ordering::Relaxed)
    ));
    let mut f = std::fs::File::create(&path).expect("create");
    f.write_all(&(json.len() as u64).to_le_bytes())
        .expect("write");
    f.write_all(json.as_bytes()).expect("write");
    f.write_all(&data).expect("write");
    (TempFile(path), data)
}

fn open(path: &TempFile, backend: Backend) -> MappedFile {
    let options = OpenOptions {
        backend,
        ..OpenOptions::default()
    };
    MappedFile::open(&path.0, options).expect("open")
}

const T: u64 = PRIVATE_MAP_THRESHOLD;

#[test]
fn options_and_accessors() {
    assert_eq!(Backend::from_name("mmap"), Some(Backend::Mmap));
    assert_eq!(Backend::from_name("pread"), Some(Backend::Pread));
    assert_eq!(Backend::from_name("MMAP"), None);
    assert_eq!(Backend::from_name(""), None);
    let o = OpenOptions::default();
    assert_eq!(
        (o.header_cap, o.backend),
        (DEFAULT_HEADER_CAP, Backend::Mmap)
    );
    assert_eq!(Backend::default(), Backend::Mmap);
    assert_eq!(T, 65536);

    let (f, data) = build(&[("a", Dtype::U8, &[5]), ("b", Dtype::F32, &[2])]);
    for backend in [Backend::Mmap, Backend::Pread] {
        let m = open(&f, backend);
        assert_eq!(m.backend(), backend);
        assert_eq!(m.path(), Some(f.0.as_path()));
        let len = std::fs::metadata(&f.0).expect("stat").len();
        assert_eq!(m.file_len(), len);
        assert_eq!(m.header().len(), 2);
        assert_eq!(m.header().buffer_len(), data.len() as u64);
        assert_eq!(m.header().data_start() + data.len() as u64, len);
        assert!(m.check_unchanged().is_ok());
        m.advise_sequential();
    }
    // The header cap applies.
    let header_len = std::fs::metadata(&f.0).expect("stat").len() - 8 - data.len() as u64;
    let tight = OpenOptions {
        header_cap: header_len - 1,
        backend: Backend::Mmap,
    };
    let e = MappedFile::open(&f.0, tight).err();
    assert!(
        matches!(e, Some(Error::HeaderTooLarge { len, cap }) if len == header_len && cap == header_len - 1),
        "{e:?}"
    );
    let exact = OpenOptions {
        header_cap: header_len,
        backend: Backend::Pread,
    };
    assert!(MappedFile::open(&f.0, exact).is_ok());
}

#[test]
fn tensor_data_at_the_mapping_threshold() {
    let (f, data) = build(&[
        ("empty", Dtype::U8, &[0]),
        ("small", Dtype::U8, &[T - 1]),
        ("edge", Dtype::U8, &[T]),
        ("odd", Dtype::U8, &[3 * T + 5]),
        ("tail", Dtype::U8, &[3]),
    ]);
    for backend in [Backend::Mmap, Backend::Pread] {
        let m = open(&f, backend);
        for (name, mapped) in [
            ("empty", false),
            ("small", false),
            ("edge", backend == Backend::Mmap),
            ("odd", backend == Backend::Mmap),
            ("tail", false),
        ] {
            let info = m.header().require(name).expect("tensor");
            let want = &data[info.begin as usize..info.end as usize];
            let mut got = m.tensor_data(info).expect("data");
            assert_eq!(got.is_mapped(), mapped, "{backend:?} {name}");
            assert!(got.as_slice() == want, "{backend:?} {name}");
            // Writable, private, and independent of a second copy.
            if let Some(b) = got.as_mut_slice().first_mut() {
                *b ^= 0xff;
            }
            let again = m.tensor_data(info).expect("data");
            assert!(again.as_slice() == want, "{backend:?} {name}");
            assert_eq!(again.as_slice().len(), want.len());
        }
    }
    let on_disk = std::fs::read(&f.0).expect("read");
    assert!(on_disk.ends_with(&data));
}

#[test]
fn positioned_reads_and_their_bounds() {
    let (f, data) = build(&[("a", Dtype::U8, &[10]), ("b", Dtype::I32, &[6])]);
    for backend in [Backend::Mmap, Backend::Pread] {
        let m = open(&f, backend);
        let b = m.header().require("b").expect("b");
        let mut buf = [0u8; 5];
        m.read_tensor_into(b, 19, &mut buf)
            .expect("read to the end");
        assert_eq!(buf[..], data[29..34]);
        m.read_tensor_into(b, 3, &mut buf).expect("read");
        assert_eq!(buf[..], data[13..18]);
        m.read_tensor_into(b, 24, &mut [])
            .expect("empty read at the end");
        let e = m.read_tensor_into(b, 20, &mut buf).err();
        assert!(
            matches!(e, Some(Error::ReadPastEnd { ref tensor, offset: 20, len: 5, tensor_len: 24 }) if tensor == "b"),
            "{e:?}"
        );
        let e = m.read_tensor_into(b, u64::MAX, &mut buf).err();
        assert!(matches!(e, Some(Error::ReadPastEnd { .. })), "{e:?}");

        let mut dst = vec![0u8; 24];
        m.copy_tensor_into(b, &mut dst).expect("copy");
        assert_eq!(dst[..], data[10..34]);
        let e = m.copy_tensor_into(b, &mut dst[..23]).err();
        assert!(
            matches!(e, Some(Error::DestinationSize { ref tensor, what: "the destination", expected: 24, got: 23 }) if tensor == "b"),
            "{e:?}"
        );
    }
}

#[test]
fn large_copies_split_across_threads_are_exact() {
    let mib = 1u64 << 20;
    let (f, data) = build(&[
        ("under", Dtype::U8, &[mib - 1]),
        ("at", Dtype::U8, &[mib]),
        ("big", Dtype::U8, &[5 * mib + 3]),
    ]);
    for backend in [Backend::Mmap, Backend::Pread] {
        let m = open(&f, backend);
        for name in ["under", "at", "big"] {
            let info = m.header().require(name).expect("tensor");
            let mut dst = vec![0xAAu8; info.byte_len() as usize];
            m.copy_tensor_into(info, &mut dst).expect("copy");
            assert!(
                dst[..] == data[info.begin as usize..info.end as usize],
                "{backend:?} {name}"
            );
        }
    }
}

#[test]
fn conversions_while_reading_are_exact() {
    // Sizes around the parallel threshold (2^20 elements) and the read
    // chunk (512 KiB), at an unaligned offset after a 3-byte tensor.
    let n = (1u64 << 20) + 12_345;
    let (f, data) = build(&[
        ("pad", Dtype::U8, &[3]),
        ("few", Dtype::Bf16, &[7]),
        ("chunked", Dtype::Bf16, &[300_001]),
        ("many", Dtype::Bf16, &[n]),
        ("same", Dtype::F32, &[5]),
    ]);
    for backend in [Backend::Mmap, Backend::Pread] {
        let m = open(&f, backend);
        for name in ["few", "chunked", "many"] {
            let info = m.header().require(name).expect("tensor");
            let src = &data[info.begin as usize..info.end as usize];
            let mut dst = vec![0xAAu8; src.len() * 2];
            m.convert_tensor_into(info, Dtype::F32, &mut dst)
                .expect("convert");
            for (i, (s, d)) in src.chunks_exact(2).zip(dst.chunks_exact(4)).enumerate() {
                let want = bf16_to_f32(u16::from_le_bytes([s[0], s[1]])).to_bits();
                assert_eq!(
                    u32::from_le_bytes([d[0], d[1], d[2], d[3]]),
                    want,
                    "{backend:?} {name} element {i}"
                );
            }
        }
        let same = m.header().require("same").expect("same");
        let mut dst = [0u8; 20];
        m.convert_tensor_into(same, Dtype::F32, &mut dst)
            .expect("same kind");
        assert_eq!(dst[..], data[same.begin as usize..same.end as usize]);
        let mut half = [0u8; 10];
        m.convert_tensor_into(same, Dtype::F16, &mut half)
            .expect("narrow");
        let src = &data[same.begin as usize..same.end as usize];
        for (s, d) in src.chunks_exact(4).zip(half.chunks_exact(2)) {
            let want = f32_to_f16(f32::from_le_bytes([s[0], s[1], s[2], s[3]]));
            assert_eq!(u16::from_le_bytes([d[0], d[1]]), want);
        }
        let few = m.header().require("few").expect("few");
        let e = m.convert_tensor_into(few, Dtype::F32, &mut dst[..20]).err();
        assert!(
            matches!(e, Some(Error::DestinationSize { ref tensor, expected: 28, got: 20, .. }) if tensor == "few"),
            "{e:?}"
        );
        let e = m.convert_tensor_into(few, Dtype::I32, &mut dst[..]).err();
        assert!(
            matches!(e, Some(Error::ConversionNotAllowed { ref tensor, from: Dtype::Bf16, to: Dtype::I32 }) if tensor == "few"),
            "{e:?}"
        );
    }
}

#[test]
fn a_changed_file_is_noticed_by_every_access() {
    let (f, _) = build(&[("a", Dtype::U8, &[4 * T])]);
    for backend in [Backend::Mmap, Backend::Pread] {
        let m = open(&f, backend);
        let info = m.header().require("a").expect("a").clone();
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&f.0)
            .expect("reopen");
        file.write_all(b"x").expect("append");
        let rule = |r: Result<(), Error>| r.err().map(|e| e.rule().id());
        assert_eq!(rule(m.check_unchanged()), Some("file-changed"));
        assert_eq!(rule(m.tensor_data(&info).map(|_| ())), Some("file-changed"));
        let mut buf = vec![0u8; 4 * T as usize];
        assert_eq!(
            rule(m.copy_tensor_into(&info, &mut buf)),
            Some("file-changed")
        );
        assert_eq!(
            rule(m.read_tensor_into(&info, 0, &mut buf[..4])),
            Some("file-changed")
        );
        let mut wide = vec![0u8; 4 * T as usize];
        assert_eq!(
            rule(m.convert_tensor_into(&info, Dtype::U8, &mut wide)),
            Some("file-changed")
        );
        // Restore the length for the next back end.
        file.set_len(8 + m.header().header_len() + 4 * T)
            .expect("truncate");
    }
}
