//! Tests of whole loads: requests planned, bytes and conversions exact for
//! every split and thread count, progress, stops, failures and direct I/O.

#![allow(clippy::unwrap_used)]

use super::plan::elem_size;
use super::*;
use crate::read::OpenOptions;
use crate::testfs::build;
use crate::Backend;

/// Pseudo-random bytes (xorshift), every bit pattern likely.
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

/// A file with tensors of every byte-sized dtype, odd sizes, empty
/// tensors and runs of small ones; returns it and its data section.
fn sample() -> (crate::testfs::TempFile, Vec<u8>, Vec<(String, Dtype, u64)>) {
    let mut entries = Vec::new();
    let mut specs: Vec<(String, Dtype, u64)> = Vec::new();
    let kinds = [
        Dtype::Bf16,
        Dtype::F16,
        Dtype::F32,
        Dtype::U8,
        Dtype::I64,
        Dtype::F8E4M3,
        Dtype::F8E5M2,
        Dtype::F8E8M0,
        Dtype::C64,
        Dtype::Bool,
    ];
    let counts = [0u64, 1, 3, 7, 1000, 65_537, 300_001, 700_003];
    let mut off = 0u64;
    let mut i = 0;
    for (k, dt) in kinds.iter().enumerate() {
        for (c, &n) in counts.iter().enumerate() {
            if (k + c) % 3 == 2 && n > 1000 || n > 300_001 && k > 2 {
                continue;
            }
            let len = n * (dt.bits() / 8);
            let name = format!("t{i:03}");
            i += 1;
            entries.push(format!(
                r#""{name}":{{"dtype":"{}","shape":[{n}],"data_offsets":[{off},{}]}}"#,
                dt.name(),
                off + len
            ));
            specs.push((name, *dt, n));
            off += len;
        }
    }
    let header = format!("{{{}}}", entries.join(","));
    let data = noise(off as usize, 0x9e37_79b9_7f4a_7c15);
    (build(&header, &data), data, specs)
}

fn open(path: &std::path::Path, backend: Backend) -> MappedFile {
    MappedFile::open(
        path,
        OpenOptions {
            backend,
            ..OpenOptions::default()
        },
    )
    .unwrap()
}

/// What one tensor converted to `to` must be: the kernels over its
/// whole bytes.
fn expected(data: &[u8], info: &TensorInfo, to: Dtype) -> Vec<u8> {
    let src = &data[info.begin as usize..info.end as usize];
    if to == info.dtype {
        return src.to_vec();
    }
    let n = src.len() / (info.dtype.bits() / 8) as usize;
    let mut out = vec![0u8; n * (to.bits() / 8) as usize];
    crate::convert::convert(info.dtype, to, src, &mut out).unwrap();
    out
}

/// The tensors of `specs` in `file`, the dtype each is loaded as (its
/// conversion's target when `convert`), and a buffer of the right length
/// for each, filled with 0xA5.
fn wanted<'f>(
    file: &'f MappedFile,
    specs: &[(String, Dtype, u64)],
    data: &[u8],
    convert: bool,
) -> (Vec<&'f TensorInfo>, Vec<Dtype>, Vec<Vec<u8>>) {
    let infos: Vec<&TensorInfo> = specs
        .iter()
        .map(|(n, _, _)| file.header().require(n).unwrap())
        .collect();
    let tos: Vec<Dtype> = infos
        .iter()
        .map(|t| if convert { target(t.dtype) } else { t.dtype })
        .collect();
    let outs = infos
        .iter()
        .zip(&tos)
        .map(|(t, to)| vec![0xA5u8; expected(data, t, *to).len()])
        .collect();
    (infos, tos, outs)
}

/// The destinations of [`wanted`]'s tensors, in its buffers.
fn destinations<'d>(
    infos: &[&'d TensorInfo],
    tos: &[Dtype],
    outs: &'d mut [Vec<u8>],
) -> Vec<Destination<'d>> {
    infos
        .iter()
        .zip(tos)
        .zip(outs.iter_mut())
        .map(|((info, to), dst)| Destination { info, to: *to, dst })
        .collect()
}

/// The dtype a tensor is loaded as: converted where a conversion
/// exists, copied otherwise.
fn target(dt: Dtype) -> Dtype {
    match dt {
        Dtype::F32 => Dtype::Bf16,
        d if crate::convert::supported(d, Dtype::F32) => Dtype::F32,
        d => d,
    }
}

#[test]
fn batch_loads_are_exact_for_every_split_and_thread_count() {
    let (f, data, specs) = sample();
    for backend in [Backend::Mmap, Backend::Pread] {
        let file = open(&f.0, backend);
        for (threads, piece, direct, convert) in [
            (1, 4096 + 7, false, false),
            (3, 65_536, true, true),
            (8, 1 << 20, true, false),
            (0, 0, true, true),
            (2, 4099, false, true),
        ] {
            for cold in [false, true] {
                if cold {
                    #[cfg(target_os = "linux")]
                    crate::io::drop_cached(file.raw());
                }
                let (infos, tos, mut outs) = wanted(&file, &specs, &data, convert);
                let dests = destinations(&infos, &tos, &mut outs);
                let options = LoadOptions {
                    threads,
                    piece,
                    report_every: 0,
                    direct,
                    huge_pages: if convert {
                        HugePages::Avoid
                    } else {
                        HugePages::Auto
                    },
                    in_order: false,
                    job: 0,
                };
                assert_eq!(
                    load_into(&file, dests, options, None).unwrap(),
                    Outcome::Done
                );
                for ((info, to), out) in infos.iter().zip(&tos).zip(&outs) {
                    assert!(
                        *out == expected(&data, info, *to),
                        "{backend:?} {threads} {piece} {direct} {convert} {cold}: {}",
                        info.name
                    );
                }
            }
        }
    }
}

/// Loads every tensor of `file` as its own dtype into fresh buffers.
fn load_all(
    file: &MappedFile,
    options: LoadOptions,
    report: Option<Reporter<'_>>,
) -> Result<Outcome> {
    let infos = file.header().tensors();
    let mut outs: Vec<Vec<u8>> = infos
        .iter()
        .map(|t| vec![0u8; t.byte_len() as usize])
        .collect();
    let dests = infos
        .iter()
        .zip(outs.iter_mut())
        .map(|(info, dst)| Destination {
            info,
            to: info.dtype,
            dst,
        })
        .collect();
    load_into(file, dests, options, report)
}

/// The huge-page advice of the memory mapping holding `addr`: "hg"
/// (`MADV_HUGEPAGE`), "nh" (`MADV_NOHUGEPAGE`) or "" (none), from its
/// VmFlags in /proc/self/smaps.
#[cfg(target_os = "linux")]
fn advice_at(addr: usize) -> &'static str {
    let flags = crate::io::mmap::tests::smaps_field(addr, "VmFlags:");
    let has = |f: &str| flags.split_whitespace().any(|g| g == f);
    match (has("hg"), has("nh")) {
        (true, false) => "hg",
        (false, true) => "nh",
        (false, false) => "",
        _ => "both",
    }
}

/// Huge pages: `Avoid` advises every large destination against them,
/// `Keep` leaves all alone, `Auto` advises against them for a load under
/// `PROBED` bytes, cold or warm (a larger cold one asks the probe); small
/// destinations are never touched.
#[test]
#[cfg(target_os = "linux")]
fn huge_page_advice_follows_the_choice() {
    let n = 3 << 20; // elements: 6 MiB of BF16, 12 MiB as F32
    let small = 1024;
    let header = format!(
        r#"{{"b":{{"dtype":"BF16","shape":[{n}],"data_offsets":[0,{}]}},"s":{{"dtype":"BF16","shape":[{small}],"data_offsets":[{},{}]}}}}"#,
        2 * n,
        2 * n,
        2 * n + 2 * small
    );
    let data = noise(2 * n + 2 * small, 11);
    let f = build(&header, &data);
    let file = open(&f.0, Backend::Pread);
    let b = file.header().require("b").unwrap();
    let sm = file.header().require("s").unwrap();
    // Each case: (choice, convert, cold) -> advice.
    for (how, convert, cold, advised) in [
        (HugePages::Keep, true, true, ""),
        (HugePages::Avoid, false, false, "nh"),
        (HugePages::Avoid, false, true, "nh"),
        (HugePages::Auto, true, false, "nh"),
        (HugePages::Auto, true, true, "nh"),
        (HugePages::Auto, false, false, "nh"),
        (HugePages::Auto, false, true, "nh"),
    ] {
        let to = if convert { Dtype::F32 } else { Dtype::Bf16 };
        let width = if convert { 4 } else { 2 };
        // Mappings of their own, untouched (the allocator may hand out
        // memory an earlier case advised).
        let mut big = memmap2::MmapMut::map_anon(n * width).unwrap();
        let mut little = memmap2::MmapMut::map_anon(small * width).unwrap();
        let (big_at, little_at) = (big.as_ptr() as usize, little.as_ptr() as usize);
        if cold {
            if !crate::io::drop_cached(file.raw()) {
                continue; // a file system that keeps everything cached
            }
        } else {
            let mut warm = vec![0u8; data.len()];
            file.read_at(file.header().data_start(), &mut warm, "b")
                .unwrap();
        }
        let dests = vec![
            Destination {
                info: b,
                to,
                dst: &mut big,
            },
            Destination {
                info: sm,
                to,
                dst: &mut little,
            },
        ];
        let options = LoadOptions {
            huge_pages: how,
            ..LoadOptions::default()
        };
        assert_eq!(
            load_into(&file, dests, options, None).unwrap(),
            Outcome::Done
        );
        let middle = (big_at + big.len() / 2) / 4096 * 4096;
        assert_eq!(advice_at(middle), advised, "{how:?} {convert} {cold}");
        assert_eq!(
            advice_at(little_at),
            "",
            "{how:?}: a small destination was advised"
        );
        assert!(big[..] == expected(&data, b, to)[..]);
        assert!(little[..] == expected(&data, sm, to)[..]);
    }
}

/// `Auto` probes only loads that read around the page cache into at least
/// `PROBED` bytes; the others take 4 KiB pages.
#[test]
fn only_large_cold_loads_may_take_huge_pages() {
    assert!(super::huge_page_trial(super::PROBED - 1, 0, true).is_none());
    assert!(super::huge_page_trial(u64::MAX, 0, false).is_none());
    assert!(super::huge_page_trial(0, 0, true).is_none());
    assert!(super::huge_page_trial(1 << 20, super::PROBED - 1, true).is_none());
    assert!(super::huge_page_trial(1 << 20, u64::MAX, false).is_none());
}

/// A file of tensors `(name, dtype, bytes)` laid out back to back.
fn layout(tensors: &[(&str, Dtype, usize)]) -> (crate::testfs::TempFile, Vec<u8>) {
    let mut entries = Vec::new();
    let mut off = 0usize;
    for (name, dt, len) in tensors {
        let n = len / (dt.bits() / 8) as usize;
        entries.push(format!(
            r#""{name}":{{"dtype":"{}","shape":[{n}],"data_offsets":[{off},{}]}}"#,
            dt.name(),
            off + len
        ));
        off += len;
    }
    let data = noise(off, 5);
    (build(&format!("{{{}}}", entries.join(",")), &data), data)
}

/// One planned request: its start, its source bytes, and its members
/// as `(tensor, source bytes, destination bytes)`.
type Request = (u64, usize, Vec<(String, usize, usize)>);

/// The requests `plan` makes for tensors `names` of `file` (converted
/// to `to` where given): `(begin, source bytes, members)` each.
fn requests(file: &MappedFile, names: &[&str], to: Option<Dtype>, piece: usize) -> Vec<Request> {
    let infos: Vec<&TensorInfo> = names
        .iter()
        .map(|n| file.header().require(n).unwrap())
        .collect();
    let mut outs: Vec<Vec<u8>> = infos
        .iter()
        .map(|t| {
            let to = to.unwrap_or(t.dtype);
            vec![0u8; t.byte_len() as usize / elem_size(t.dtype) * elem_size(to)]
        })
        .collect();
    let dests = infos
        .iter()
        .zip(outs.iter_mut())
        .map(|(info, dst)| Destination {
            info,
            to: to.unwrap_or(info.dtype),
            dst,
        })
        .collect();
    plan(dests, piece, piece, file.header().data_start())
        .into_iter()
        .map(|p| {
            let members = p
                .members
                .iter()
                .map(|m| (m.info.name.clone(), m.len, m.dst.len()))
                .collect();
            (p.begin, p.len, members)
        })
        .collect()
}

fn m(name: &str, len: usize, dst: usize) -> (String, usize, usize) {
    (name.to_owned(), len, dst)
}

/// Small tensors that follow each other are one request, up to `piece`
/// bytes exactly; a gap or a full request starts another; tensors of
/// 1 MiB or more are requests of their own, split in whole elements.
#[test]
fn plan_runs_small_neighbours_and_splits_large_tensors() {
    let mib = 1 << 20;
    let (f, _) = layout(&[
        ("a", Dtype::U8, 100),
        ("b", Dtype::U8, 200),
        ("c", Dtype::U8, 700),
        ("d", Dtype::U8, mib - 1),
        ("e", Dtype::U8, mib),
        ("g", Dtype::F16, 3 * mib + 2),
    ]);
    let file = open(&f.0, Backend::Pread);
    // a + b fill a 300-byte request exactly; c does not fit in it.
    assert_eq!(
        requests(&file, &["c", "a", "b"], None, 300),
        vec![
            (0, 300, vec![m("a", 100, 100), m("b", 200, 200)]),
            (300, 700, vec![m("c", 700, 700)]),
        ]
    );
    // Without b, a and c are not neighbours.
    assert_eq!(
        requests(&file, &["a", "c"], None, 1 << 30),
        vec![
            (0, 100, vec![m("a", 100, 100)]),
            (300, 700, vec![m("c", 700, 700)])
        ]
    );
    // Just under 1 MiB joins the run; exactly 1 MiB is a request of its own.
    let d = file.header().require("d").unwrap().begin;
    assert_eq!(
        requests(&file, &["c", "d", "e"], None, 4 * mib),
        vec![
            (
                300,
                700 + mib - 1,
                vec![m("c", 700, 700), m("d", mib - 1, mib - 1)]
            ),
            (d + mib as u64 - 1, mib, vec![m("e", mib, mib)]),
        ]
    );
    // A large F16 tensor converted to F32: pieces of whole elements (a
    // 7-byte piece reads 6 bytes), each destination twice as long.
    let g = file.header().require("g").unwrap().begin;
    let parts = requests(&file, &["g"], Some(Dtype::F32), mib + 1);
    assert_eq!(parts.len(), 4);
    for (i, (begin, len, members)) in parts.iter().enumerate() {
        let want = if i < 3 { mib } else { 2 };
        assert_eq!((*begin, *len), (g + (i * mib) as u64, want), "{i}");
        assert_eq!(members, &vec![m("g", want, 2 * want)], "{i}");
    }
    let odd = requests(&file, &["g"], Some(Dtype::F32), 7);
    assert_eq!(odd[0], (g, 6, vec![m("g", 6, 12)]));
    assert_eq!(odd.iter().map(|p| p.1).sum::<usize>(), 3 * mib + 2);
    // Copied, it is cut on the file's 4096-byte blocks instead: every
    // request but the first starts on one, none is longer than `piece`.
    let start = file.header().data_start();
    let copies = requests(&file, &["g"], None, mib + 1);
    assert_eq!(copies.iter().map(|p| p.1).sum::<usize>(), 3 * mib + 2);
    assert_eq!(copies.len(), 4);
    for (begin, len, _) in &copies[1..] {
        assert_eq!((start + begin) % 4096, 0);
        assert!(*len <= mib + 1);
    }
}

/// The first request of a copy into a destination of 2 MiB or more
/// carries that whole destination (for the huge-page trial), no other one
/// does: not its later requests, not a smaller copy, not a conversion.
#[test]
fn the_first_request_of_a_large_copy_spans_its_destination() {
    let mib = 1 << 20;
    let (f, _) = layout(&[
        ("a", Dtype::U8, 100),
        ("b", Dtype::U8, mib + 5),
        ("g", Dtype::F16, 3 * mib + 2),
    ]);
    let file = open(&f.0, Backend::Pread);
    let infos: Vec<&TensorInfo> = ["a", "b", "g"]
        .iter()
        .map(|n| file.header().require(n).unwrap())
        .collect();
    for convert in [false, true] {
        let mut outs: Vec<Vec<u8>> = infos
            .iter()
            .map(|t| {
                let wide = convert && t.dtype == Dtype::F16;
                vec![0u8; t.byte_len() as usize * if wide { 2 } else { 1 }]
            })
            .collect();
        let g_at = (outs[2].as_ptr() as usize, outs[2].len());
        let dests = infos
            .iter()
            .zip(outs.iter_mut())
            .map(|(info, dst)| Destination {
                info,
                to: if convert && info.dtype == Dtype::F16 {
                    Dtype::F32
                } else {
                    info.dtype
                },
                dst,
            })
            .collect();
        let parts = plan(dests, mib, mib, file.header().data_start());
        let spans: Vec<_> = parts
            .iter()
            .filter_map(|p| p.span.map(|s| (p.begin, s.addr, s.len, s.end)))
            .collect();
        assert!(parts.iter().all(|p| !p.huge));
        let g = file.header().require("g").unwrap();
        if convert {
            assert!(spans.is_empty());
        } else {
            assert_eq!(spans, vec![(g.begin, g_at.0, g_at.1, g.end)]);
        }
    }
}

/// The cold/warm choice (direct reads) looks at the pages of the tensors
/// loaded, not at the rest of the file.
#[test]
#[cfg(target_os = "linux")]
fn the_cold_choice_looks_at_the_loaded_tensors_pages() {
    let big = 4 << 20;
    let (f, data) = layout(&[("a", Dtype::U8, big), ("b", Dtype::U8, big)]);
    let file = open(&f.0, Backend::Pread);
    let start = file.header().data_start();
    for (cached, load, cold) in [("a", "b", true), ("a", "a", false), ("b", "a", true)] {
        if !crate::io::drop_cached(file.raw()) {
            return; // a file system that keeps everything cached
        }
        // Read-ahead off: only the cached tensor's pages come in.
        crate::io::advise_random(file.raw());
        let info = file.header().require(cached).unwrap();
        let mut warm = vec![0u8; big];
        file.read_at(start + info.begin, &mut warm, cached).unwrap();
        let info = file.header().require(load).unwrap();
        let mut dst = memmap2::MmapMut::map_anon(big).unwrap();
        let dests = vec![Destination {
            info,
            to: info.dtype,
            dst: &mut dst,
        }];
        assert_eq!(mostly_uncached(&file, &dests), cold, "{cached} {load}");
        assert_eq!(
            load_into(&file, dests, LoadOptions::default(), None).unwrap(),
            Outcome::Done
        );
        assert!(dst[..] == data[info.begin as usize..info.end as usize]);
    }
}

/// Exactly half of the loaded range cached counts as cached: the load
/// reads through the page cache and leaves the destinations' advice
/// alone.
#[test]
#[cfg(target_os = "linux")]
fn half_cached_counts_as_cached() {
    let big = 4 << 20;
    let mut header = format!(
        r#"{{"a":{{"dtype":"U8","shape":[{big}],"data_offsets":[0,{big}]}},"b":{{"dtype":"U8","shape":[{big}],"data_offsets":[{big},{}]}}}}"#,
        2 * big
    );
    // Page-aligned data: the tensors cover whole pages.
    header.push_str(&" ".repeat(4096 - 8 - header.len()));
    let data = noise(2 * big, 3);
    let f = build(&header, &data);
    let file = open(&f.0, Backend::Pread);
    assert_eq!(file.header().data_start(), 4096);
    // a read with read-ahead off, after dropping everything: a cached,
    // b not.
    if !crate::io::drop_cached(file.raw()) {
        return; // a file system that keeps everything cached
    }
    crate::io::advise_random(file.raw());
    let mut first = vec![0u8; big];
    file.read_at(4096, &mut first, "a").unwrap();
    let infos = [
        file.header().require("a").unwrap(),
        file.header().require("b").unwrap(),
    ];
    let mut outs = [
        memmap2::MmapMut::map_anon(big).unwrap(),
        memmap2::MmapMut::map_anon(big).unwrap(),
    ];
    let at: Vec<usize> = outs.iter().map(|o| o.as_ptr() as usize + big / 2).collect();
    let dests = infos
        .iter()
        .zip(outs.iter_mut())
        .map(|(info, dst)| Destination {
            info,
            to: info.dtype,
            dst: &mut dst[..],
        })
        .collect();
    assert_eq!(
        load_into(&file, dests, LoadOptions::default(), None).unwrap(),
        Outcome::Done
    );
    for (i, at) in at.iter().enumerate() {
        assert_eq!(advice_at(at / 4096 * 4096), "nh", "destination {i}");
    }
    assert!(outs[0][..] == data[..big] && outs[1][..] == data[big..]);
}

/// Direct reads (asked for, and the load at least 1 MiB) leave the
/// page cache alone; buffered reads fill it.
#[test]
#[cfg(target_os = "linux")]
fn direct_loads_bypass_the_page_cache_and_buffered_ones_fill_it() {
    let n = 8 << 20;
    // The tensor starts past the file's first pages, at no page boundary.
    let (f, data) = layout(&[("pad", Dtype::U8, (1 << 20) + 100), ("w", Dtype::U8, n)]);
    let file = open(&f.0, Backend::Pread);
    let start = file.header().data_start() + (1 << 20) + 100;
    let data = &data[(1 << 20) + 100..];
    for direct in [true, false] {
        if !crate::io::drop_cached(file.raw()) {
            return; // a file system that keeps everything cached
        }
        let info = file.header().require("w").unwrap();
        let mut dst = vec![0u8; n];
        let dests = vec![Destination {
            info,
            to: info.dtype,
            dst: &mut dst,
        }];
        let options = LoadOptions {
            direct,
            huge_pages: HugePages::Keep,
            ..LoadOptions::default()
        };
        assert_eq!(
            load_into(&file, dests, options, None).unwrap(),
            Outcome::Done
        );
        assert!(dst[..] == data[..]);
        let (cached, pages) = crate::io::cached_pages(file.raw(), start, n as u64).unwrap();
        if direct {
            assert!(
                cached * 4 < pages,
                "direct: {cached} of {pages} pages cached"
            );
        } else {
            assert!(
                cached * 4 > pages * 3,
                "buffered: {cached} of {pages} pages cached"
            );
        }
    }
}

fn one_big(n: usize) -> (crate::testfs::TempFile, Vec<u8>) {
    let header = format!(r#"{{"w":{{"dtype":"U8","shape":[{n}],"data_offsets":[0,{n}]}}}}"#);
    let data = noise(n, 7);
    (build(&header, &data), data)
}

/// A worker leaves once every request is handed out, even when the
/// bytes issued have reached the limit: the caller raises the limit
/// only while reports are due, and the last bytes are never due (they
/// were a hang when the last report set the limit to the total).
#[test]
fn a_worker_leaves_when_nothing_is_left_whatever_the_limit() {
    let (f, _) = one_big(1 << 10);
    let file = open(&f.0, Backend::Pread);
    for (queued, issued, limit) in [(0, 3, 3), (0, 5, 3), (0, 0, 0)] {
        let shared = Mutex::new(Shared {
            queue: Vec::with_capacity(queued).into_iter(),
            issued,
            limit,
            stop: false,
            error: None,
            running: 1,
            finished: Vec::new(),
            huge_until: 0,
            front: 0,
            ahead: usize::MAX,
            read_turn: None,
        });
        let (wake_workers, done) = (Condvar::new(), AtomicU64::new(0));
        let caller = std::thread::current();
        let worker = cached_worker(&file, &shared, &wake_workers, &done, &caller);
        let (tx, rx) = std::sync::mpsc::channel();
        let waited = std::thread::scope(|s| {
            s.spawn(|| tx.send(worker.next().is_none()).unwrap());
            let got = rx.recv_timeout(Duration::from_secs(20));
            if got.is_err() {
                // Let a waiting worker go, so the test fails, not hangs.
                shared.lock().unwrap().stop = true;
                wake_workers.notify_all();
            }
            got
        });
        assert_eq!(waited, Ok(true), "issued {issued}, limit {limit}");
    }
}

/// One reading thread's view of a load of `file` through the page cache
/// (no direct reads, no huge-page trial), for tests that drive it by hand.
fn cached_worker<'s, 'a>(
    file: &'s MappedFile,
    shared: &'s Mutex<Shared<'a>>,
    wake_workers: &'s Condvar,
    done: &'s AtomicU64,
    caller: &'s std::thread::Thread,
) -> Worker<'s, 'a> {
    Worker {
        reader: Reader {
            file,
            direct: None,
            trial: None,
        },
        shared,
        wake_workers,
        done,
        caller,
    }
}

/// A streaming load hands requests out at most `ahead` places past the
/// first one not read: a worker waits there (a disk's scheduler serves
/// requests by their place on the disk, so one that arrived behind the
/// others would wait while more keep arriving ahead of it), and goes on
/// once that request is read.
#[test]
fn requests_are_handed_out_within_reach_of_the_first_not_read() {
    let (f, _) = one_big(4 << 20);
    let file = open(&f.0, Backend::Pread);
    let info = file.header().require("w").unwrap();
    let mut out = vec![0u8; 4 << 20];
    let dests = vec![Destination {
        info,
        to: info.dtype,
        dst: &mut out,
    }];
    let parts = plan(dests, 1 << 20, 1 << 20, file.header().data_start());
    let count = parts.len();
    assert!(count >= 4, "{count} requests");
    let shared = Mutex::new(Shared {
        queue: parts.into_iter(),
        issued: 0,
        limit: u64::MAX,
        stop: false,
        error: None,
        running: 1,
        finished: vec![false; count],
        huge_until: 0,
        front: 0,
        ahead: 2,
        read_turn: None,
    });
    let (wake_workers, done) = (Condvar::new(), AtomicU64::new(0));
    let caller = std::thread::current();
    let worker = cached_worker(&file, &shared, &wake_workers, &done, &caller);
    assert_eq!(worker.next().map(|(at, _)| at), Some(0));
    assert_eq!(worker.next().map(|(at, _)| at), Some(1));
    {
        let g = shared.lock().unwrap();
        assert!(!g.within_reach(2) && g.within_reach(1));
    }
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::scope(|s| {
        s.spawn(|| tx.send(worker.next().map(|(at, _)| at)).unwrap());
        // Out of reach while request 0 is not read; request 1 read first
        // does not move the first not read.
        assert!(rx.recv_timeout(Duration::from_millis(200)).is_err());
        assert!(!shared.lock().unwrap().read(1));
        wake_workers.notify_all();
        assert!(rx.recv_timeout(Duration::from_millis(200)).is_err());
        let moved = shared.lock().unwrap().read(0);
        assert!(moved);
        wake_workers.notify_all();
        let got = rx.recv_timeout(Duration::from_secs(20));
        if got.is_err() {
            shared.lock().unwrap().stop = true;
            wake_workers.notify_all();
        }
        assert_eq!(got, Ok(Some(2)));
    });
    let g = shared.lock().unwrap();
    assert_eq!(g.front, 2);
    assert!(g.within_reach(3));
}

#[test]
fn a_report_is_due_each_whole_step_until_the_end() {
    // Steps of 100 bytes, of 1000.
    assert!(!report_due(99, 0, 100, 1000));
    assert!(report_due(100, 0, 100, 1000));
    assert!(!report_due(199, 100, 100, 1000));
    assert!(report_due(200, 100, 100, 1000));
    assert!(report_due(999, 800, 100, 1000));
    // The end is `finish`'s to report, once.
    assert!(!report_due(1000, 900, 100, 1000));
    assert!(!report_due(1000, 0, 100, 1000));
    // No overflow near the top of the range.
    assert!(!report_due(u64::MAX - 1, u64::MAX - 10, 100, u64::MAX));
}

#[test]
fn a_load_that_failed_or_was_stopped_is_halted() {
    let shared = |stop, error: Option<(usize, Error)>| Shared {
        queue: Vec::new().into_iter(),
        issued: 0,
        limit: 0,
        stop,
        error,
        running: 1,
        finished: Vec::new(),
        huge_until: 0,
        front: 0,
        ahead: usize::MAX,
        read_turn: None,
    };
    assert!(!shared(false, None).halted());
    assert!(shared(true, None).halted());
    let failed = Error::WorkerFailed { task: "a test" };
    assert!(shared(false, Some((0, failed))).halted());
}

/// The `(done, total)` reports of a complete 3 MiB load in pieces of
/// 64 KiB on two threads, reporting every `report_every` bytes.
fn reports_of_a_3_mib_load(report_every: u64) -> Vec<(u64, u64)> {
    let (f, _) = one_big(3 << 20);
    let file = open(&f.0, Backend::Pread);
    let mut calls = Vec::new();
    let mut report = |d: u64, t: u64| {
        calls.push((d, t));
        ControlFlow::Continue(())
    };
    let options = LoadOptions {
        threads: 2,
        piece: 64 << 10,
        report_every,
        direct: false,
        huge_pages: HugePages::Keep,
        in_order: false,
        job: 0,
    };
    let outcome = load_all(&file, options, Some(&mut report)).unwrap();
    assert_eq!(outcome, Outcome::Done);
    calls
}

/// A load with the default interval (64 MiB) reports a 3 MiB file once,
/// at the end.
#[test]
fn the_default_interval_reports_a_small_load_at_the_end_only() {
    let calls = reports_of_a_3_mib_load(0);
    assert_eq!(calls, vec![(3 << 20, 3 << 20)]);
}

#[test]
fn reports_are_due_a_step_after_the_step_the_last_one_came_in() {
    assert_eq!(step_start(0, 100), 0);
    assert_eq!(step_start(99, 100), 0);
    assert_eq!(step_start(100, 100), 100);
    assert_eq!(step_start(250, 100), 200);
    assert_eq!(step_start(7, 1), 7);
    assert_eq!(step_start(u64::MAX, 1 << 20), u64::MAX - ((1 << 20) - 1));
}

#[test]
fn progress_is_reported_in_steps_and_at_the_end() {
    let calls = reports_of_a_3_mib_load(1 << 20);
    let total = 3u64 << 20;
    assert_eq!(calls.last(), Some(&(total, total)));
    // Workers wait two steps (plus one request) ahead of the last report,
    // so a report comes before the end however late this thread runs.
    assert!(calls.len() >= 2 && calls.len() <= 4, "{calls:?}");
    let mut last = 0;
    for (i, &(d, _)) in calls.iter().enumerate() {
        assert!(d > last && d - last <= (2 << 20) + (64 << 10), "{calls:?}");
        // At most one report per step crossed.
        if i + 1 < calls.len() {
            assert!(d >> 20 > last >> 20, "{calls:?}");
        }
        last = d;
    }
    assert!(calls.iter().all(|&(_, t)| t == total));
}

#[test]
fn a_reporter_stops_the_load_within_two_intervals() {
    let (f, _) = one_big(8 << 20);
    let file = open(&f.0, Backend::Pread);
    let mut calls = 0;
    let mut report = |_: u64, _: u64| {
        calls += 1;
        ControlFlow::Break(())
    };
    let options = LoadOptions {
        threads: 3,
        piece: 64 << 10,
        report_every: 256 << 10,
        direct: false,
        huge_pages: HugePages::Keep,
        in_order: false,
        job: 0,
    };
    let outcome = load_all(&file, options, Some(&mut report)).unwrap();
    assert_eq!(outcome, Outcome::Stopped);
    assert_eq!(calls, 1);
    // Requests as large as a step: the ones in flight when the reporter
    // says stop end past the next step, and still nothing is reported.
    let mut calls = 0;
    let mut report = |_: u64, _: u64| {
        calls += 1;
        ControlFlow::Break(())
    };
    let options = LoadOptions {
        piece: 256 << 10,
        ..options
    };
    // From the disk: the requests are still in flight at the report.
    #[cfg(target_os = "linux")]
    crate::io::drop_cached(file.raw());
    let outcome = load_all(&file, options, Some(&mut report)).unwrap();
    assert_eq!(outcome, Outcome::Stopped);
    assert_eq!(calls, 1);
    // Stopping at the end of a complete load also stops it.
    let (g, _) = one_big(1000);
    let small = open(&g.0, Backend::Pread);
    let mut report = |_: u64, _: u64| ControlFlow::Break(());
    let outcome = load_all(&small, LoadOptions::default(), Some(&mut report)).unwrap();
    assert_eq!(outcome, Outcome::Stopped);
}

/// Truncated between two requests, on every path: through the page
/// cache (cached, or direct reads not allowed) and around it (cold).
#[test]
fn a_file_truncated_during_a_load_is_reported() {
    for (backend, direct, cold) in [
        (Backend::Mmap, true, false),
        (Backend::Pread, false, false),
        (Backend::Pread, true, true),
        (Backend::Mmap, true, true),
    ] {
        let (f, _) = one_big(4 << 20);
        let file = open(&f.0, backend);
        if cold {
            #[cfg(target_os = "linux")]
            crate::io::drop_cached(file.raw());
        }
        let path = f.0.clone();
        let mut report = |_: u64, _: u64| {
            std::fs::OpenOptions::new()
                .write(true)
                .open(&path)
                .unwrap()
                .set_len(100)
                .unwrap();
            ControlFlow::Continue(())
        };
        let options = LoadOptions {
            threads: 2,
            piece: 64 << 10,
            report_every: 256 << 10,
            direct,
            huge_pages: HugePages::Keep,
            in_order: false,
            job: 0,
        };
        let err = load_all(&file, options, Some(&mut report)).unwrap_err();
        assert_eq!(err.rule(), "file-changed", "{err}");
    }
}

#[test]
fn destinations_are_checked_before_reading() {
    let (f, _) = one_big(1000);
    let file = open(&f.0, Backend::Pread);
    let info = file.header().require("w").unwrap();
    let mut short = vec![0u8; 999];
    let err = load_into(
        &file,
        vec![Destination {
            info,
            to: info.dtype,
            dst: &mut short,
        }],
        LoadOptions::default(),
        None,
    )
    .unwrap_err();
    assert_eq!(err.rule(), "destination-size");
    let mut wide = vec![0u8; 4000];
    let err = load_into(
        &file,
        vec![Destination {
            info,
            to: Dtype::F32,
            dst: &mut wide,
        }],
        LoadOptions::default(),
        None,
    )
    .unwrap_err();
    assert_eq!(err.rule(), "conversion-not-allowed");
    assert_eq!(err.tensor(), Some("w"));
}

/// A file on tmpfs (its pages are the page cache; older kernels refuse
/// `O_DIRECT` there) loads exactly, with direct reads allowed, whole and
/// at odd offsets.
#[test]
#[cfg(target_os = "linux")]
fn files_of_memory_file_systems_load_exactly() {
    let shm = std::path::Path::new("/dev/shm");
    if !shm.is_dir() {
        return;
    }
    let (f, data, specs) = sample();
    let copy = crate::testfs::TempFile(shm.join(format!("fastst-load-{}", std::process::id())));
    std::fs::copy(&f.0, &copy.0).unwrap();
    let file = open(&copy.0, Backend::Pread);
    let infos: Vec<&TensorInfo> = specs
        .iter()
        .map(|(n, _, _)| file.header().require(n).unwrap())
        .collect();
    let mut outs: Vec<Vec<u8>> = infos
        .iter()
        .map(|t| vec![0u8; t.byte_len() as usize])
        .collect();
    let dests = infos
        .iter()
        .zip(outs.iter_mut())
        .map(|(info, dst)| Destination {
            info,
            to: info.dtype,
            dst,
        })
        .collect();
    let options = LoadOptions {
        threads: 3,
        piece: 65_537,
        ..LoadOptions::default()
    };
    assert_eq!(
        load_into(&file, dests, options, None).unwrap(),
        Outcome::Done
    );
    for (info, out) in infos.iter().zip(&outs) {
        assert!(*out == expected(&data, info, info.dtype), "{}", info.name);
    }
}

/// A cold load with the defaults reads around the page cache (it stays
/// empty) into destinations of every kind of memory the advice may not
/// apply to (heap, shared, private anonymous), exactly, tensors at odd
/// offsets and of odd sizes included.
#[test]
#[cfg(target_os = "linux")]
fn cold_loads_read_around_the_cache_into_any_memory() {
    let (f, data) = layout(&[
        ("odd", Dtype::U8, 3 + (3 << 20)),
        ("empty", Dtype::U8, 0),
        ("tiny", Dtype::U8, 5),
        ("big", Dtype::Bf16, (5 << 20) + 2),
        ("last", Dtype::U8, 4097),
    ]);
    let file = open(&f.0, Backend::Pread);
    if !crate::io::drop_cached(file.raw()) {
        return; // a file system that keeps everything cached
    }
    let names = ["odd", "empty", "tiny", "big", "last"];
    let infos: Vec<&TensorInfo> = names
        .iter()
        .map(|n| file.header().require(n).unwrap())
        .collect();
    let mut heap = vec![0u8; infos[0].byte_len() as usize];
    let (mut empty, mut tiny) = (Vec::new(), vec![0u8; 5]);
    let mut private = memmap2::MmapMut::map_anon(infos[3].byte_len() as usize).unwrap();
    let mut shared = memmap2::MmapOptions::new().len(4097).map_anon().unwrap();
    let dsts: [&mut [u8]; 5] = [&mut heap, &mut empty, &mut tiny, &mut private, &mut shared];
    let dests = infos
        .iter()
        .zip(dsts)
        .map(|(info, dst)| Destination {
            info,
            to: info.dtype,
            dst,
        })
        .collect();
    assert_eq!(
        load_into(&file, dests, LoadOptions::default(), None).unwrap(),
        Outcome::Done
    );
    let want = |i: usize| &data[infos[i].begin as usize..infos[i].end as usize];
    assert!(heap[..] == *want(0) && tiny[..] == *want(2));
    assert!(private[..] == *want(3) && shared[..] == *want(4));
    let start = file.header().data_start();
    let (cached, pages) = crate::io::cached_pages(file.raw(), start, data.len() as u64).unwrap();
    assert!(cached * 4 < pages, "{cached} of {pages} pages cached");
}

/// A cold load of copies reads them straight into their destinations,
/// whether placed at their file offset modulo 4096 or 64-byte aligned
/// elsewhere (the blocks shifted into place): exact (odd offsets and
/// sizes, an empty tensor, the end of the file), and no request goes
/// through a bounce buffer.
#[test]
#[cfg(target_os = "linux")]
fn cold_copies_into_any_destination_need_no_bounce_buffer() {
    let (f, data) = layout(&[
        ("odd", Dtype::U8, 3 + (3 << 20)),
        ("empty", Dtype::U8, 0),
        ("big", Dtype::Bf16, (5 << 20) + 2),
        ("last", Dtype::U8, (1 << 20) + 4097),
    ]);
    let file = open(&f.0, Backend::Pread);
    let direct = crate::io::open_direct(file.raw());
    let start = file.header().data_start();
    let infos = file.header().tensors();
    let placed = |info: &TensorInfo| ((start + info.begin) % 4096) as usize;
    let aligned = |info: &TensorInfo| if placed(info) == 64 { 128 } else { 64 };
    assert!(infos.iter().any(|t| placed(t) % 64 != 0));
    for place in [&placed as &dyn Fn(&TensorInfo) -> usize, &aligned] {
        if !crate::io::drop_cached(file.raw()) || direct.is_none() {
            return; // a file system that keeps everything cached
        }
        let mut maps: Vec<memmap2::MmapMut> = infos
            .iter()
            .map(|t| memmap2::MmapMut::map_anon(t.byte_len() as usize + 4096).unwrap())
            .collect();
        let dests: Vec<Destination<'_>> = infos
            .iter()
            .zip(maps.iter_mut())
            .map(|(info, map)| Destination {
                info,
                to: info.dtype,
                dst: &mut map[place(info)..place(info) + info.byte_len() as usize],
            })
            .collect();
        let reader = Reader {
            file: &file,
            direct: direct.as_ref(),
            trial: None,
        };
        let mut buffers = Buffers::default();
        let parts = plan(dests, 1 << 20, 1 << 20, start);
        assert!(parts.len() > 8);
        for part in parts {
            reader.read(part, &mut buffers, || ()).unwrap();
        }
        assert!(!buffers.bounced());
        for (info, map) in infos.iter().zip(&maps) {
            let got = &map[place(info)..place(info) + info.byte_len() as usize];
            assert!(
                got == &data[info.begin as usize..info.end as usize],
                "{}",
                info.name
            );
        }
        let (cached, pages) =
            crate::io::cached_pages(file.raw(), start, data.len() as u64).unwrap();
        assert!(cached * 4 < pages, "{cached} of {pages} pages cached");
    }
}

/// Sixteen 256 KiB tensors, loaded in 64 KiB pieces by three threads
/// with `load_streaming`, reporting every 64 KiB (so that the workers
/// wait for the reports: the load cannot end before the first), the file
/// truncated at the first report when asked: the outcome and the reports.
fn streamed(truncate_at_first: bool) -> (Result<Outcome>, Vec<LoadProgress>) {
    let tensors: Vec<(String, Dtype, usize)> = (0..16)
        .map(|i| (format!("t{i:02}"), Dtype::U8, 256 << 10))
        .collect();
    let specs: Vec<(&str, Dtype, usize)> = tensors
        .iter()
        .map(|(n, d, l)| (n.as_str(), *d, *l))
        .collect();
    let (f, _) = layout(&specs);
    let file = open(&f.0, Backend::Pread);
    let infos = file.header().tensors();
    let mut outs: Vec<Vec<u8>> = infos
        .iter()
        .map(|t| vec![0; t.byte_len() as usize])
        .collect();
    let dests = infos
        .iter()
        .zip(outs.iter_mut())
        .map(|(info, dst)| Destination {
            info,
            to: info.dtype,
            dst,
        })
        .collect();
    let options = LoadOptions {
        threads: 3,
        piece: 64 << 10,
        report_every: 64 << 10,
        direct: false,
        huge_pages: HugePages::Keep,
        in_order: false,
        job: 0,
    };
    let mut calls = Vec::new();
    let path = f.0.clone();
    let mut report = |p: LoadProgress| {
        if truncate_at_first && calls.is_empty() {
            let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
            file.set_len(100).unwrap();
        }
        calls.push(p);
        ControlFlow::Continue(u64::MAX)
    };
    let outcome = load_streaming(&file, dests, options, &mut report);
    (outcome, calls)
}

/// Filled destinations are reported as requests finish: growing, on
/// request boundaries, never past what is done, completely once, at the end.
#[test]
fn streaming_loads_report_what_is_filled_as_it_is() {
    let (outcome, calls) = streamed(false);
    assert_eq!(outcome.unwrap(), Outcome::Done);
    let (last, before) = calls.split_last().unwrap();
    assert_eq!((last.done, last.filled), (4 << 20, u64::MAX));
    assert!(before.iter().any(|p| p.filled > 0), "{calls:?}");
    for w in calls.windows(2) {
        assert!(w[0].filled <= w[1].filled, "{calls:?}");
    }
    for p in before {
        assert!(p.filled % (64 << 10) == 0 && p.filled <= p.done, "{p:?}");
    }
}

/// A streaming reporter's answer bounds the reads: the first report comes
/// before any read, and a request starts only below the bound (so at
/// most one request's bytes past it are read), however long the reporter
/// takes.
#[test]
fn a_streaming_reporter_bounds_the_reads() {
    const TENSOR: usize = 256 << 10;
    const PIECE: usize = 64 << 10;
    let specs: Vec<(String, Dtype, u64)> = (0..12)
        .map(|i| (format!("t{i:02}"), Dtype::U8, TENSOR as u64))
        .collect();
    let shapes: Vec<(&str, Dtype, usize)> = specs
        .iter()
        .map(|(n, d, _)| (n.as_str(), *d, TENSOR))
        .collect();
    let (f, data) = layout(&shapes);
    let file = open(&f.0, Backend::Pread);
    let (infos, tos, mut outs) = wanted(&file, &specs, &data, false);
    let dests = destinations(&infos, &tos, &mut outs);
    let options = LoadOptions {
        threads: 3,
        piece: PIECE,
        report_every: PIECE as u64,
        direct: false,
        huge_pages: HugePages::Keep,
        ..LoadOptions::default()
    };
    // The first tensor's bytes; once they are read, a slow answer (the
    // workers would run on, unbounded) that stops the load.
    let bound = TENSOR as u64;
    let mut first = None;
    let mut report = |p: LoadProgress| {
        first.get_or_insert(p.done);
        if p.done < bound {
            return ControlFlow::Continue(bound);
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
        ControlFlow::Break(())
    };
    let outcome = load_streaming(&file, dests, options, &mut report);
    assert_eq!(outcome.unwrap(), Outcome::Stopped);
    assert_eq!(first, Some(0), "the first report comes before any read");
    assert!(outs[0] == expected(&data, infos[0], tos[0]));
    let past: Vec<u8> = outs.concat().split_off(TENSOR + PIECE);
    assert!(past.iter().all(|&b| b == 0xA5), "read past the bound");
}

/// A failed read ends the load with its error, after one more report of
/// what was filled before it (never past the failed request).
#[test]
fn a_failed_streaming_load_reports_what_was_read_before_the_failure() {
    let (outcome, calls) = streamed(true);
    assert_eq!(outcome.unwrap_err().rule(), "file-changed");
    assert!(calls.len() >= 2, "{calls:?}");
    let last = calls.last().unwrap();
    assert!(
        last.filled < 4 << 20 && last.filled >= calls[0].filled,
        "{calls:?}"
    );
}

/// A source over bytes in memory that asks for its own request shape, as
/// a remote object does: its loads follow `plan_requests` and come through
/// `read_request`, whose requests it records as `(offset, bytes, buffers)`.
#[derive(Debug)]
struct Networked {
    bytes: Vec<u8>,
    hint: crate::source::LoadHint,
    requests: Requests,
}

/// Requests a [`Networked`] source answered: `(offset, bytes, buffers)`.
type Requests = std::sync::Arc<std::sync::Mutex<Vec<(u64, usize, usize)>>>;

impl crate::source::Source for Networked {
    fn len(&self) -> u64 {
        self.bytes.len() as u64
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let at = offset as usize;
        buf.copy_from_slice(&self.bytes[at..at + buf.len()]);
        Ok(())
    }

    fn load_hint(&self) -> Option<crate::source::LoadHint> {
        Some(self.hint)
    }

    fn read_request(&self, offset: u64, bufs: &mut [&mut [u8]]) -> Result<()> {
        let len = bufs.iter().map(|b| b.len()).sum();
        self.requests
            .lock()
            .unwrap()
            .push((offset, len, bufs.len()));
        let mut at = offset as usize;
        for buf in bufs.iter_mut() {
            buf.copy_from_slice(&self.bytes[at..at + buf.len()]);
            at += buf.len();
        }
        Ok(())
    }
}

/// A whole load from a networked source: one stream of requests across
/// tensors, each ending on a multiple of the source's part in the object
/// (or `max_piece` bytes on), larger ones for a large load, the hint's
/// piece for a streaming one; conversions and runs go through buffers of
/// the hint's piece; every byte exact.
#[test]
fn loads_from_a_network_source_span_tensors_and_end_on_its_parts() {
    let (f, data, specs) = sample();
    let bytes = std::fs::read(&f.0).unwrap();
    let hint = crate::source::LoadHint {
        threads: 2,
        piece: 64 << 10,
        max_piece: 256 << 10,
    };
    for (convert, stream) in [(false, false), (true, false), (false, true)] {
        let seen = Requests::default();
        let source = Networked {
            bytes: bytes.clone(),
            hint,
            requests: seen.clone(),
        };
        let file = MappedFile::from_source(source, OpenOptions::default()).unwrap();
        let start = file.header().data_start();
        let (infos, tos, mut outs) = wanted(&file, &specs, &data, convert);
        let dests = destinations(&infos, &tos, &mut outs);
        let done = if stream {
            load_streaming(&file, dests, LoadOptions::default(), &mut |_| {
                ControlFlow::Continue(u64::MAX)
            })
        } else {
            load_into(&file, dests, LoadOptions::default(), None)
        };
        assert_eq!(done.unwrap(), Outcome::Done);
        for ((info, to), out) in infos.iter().zip(&tos).zip(&outs) {
            assert!(
                *out == expected(&data, info, *to),
                "{convert}: {}",
                info.name
            );
        }
        let mut requests = seen.lock().unwrap().clone();
        requests.sort_unstable();
        let total: u64 = infos.iter().map(|t| t.byte_len()).sum();
        let most = if stream { hint.piece } else { hint.max_piece };
        let read: usize = requests.iter().map(|r| r.1).sum();
        assert_eq!(read as u64, total, "{convert} {stream}");
        if convert {
            // Conversions through a buffer, one request each (the dtypes
            // without a conversion are copies, several to a request).
            assert!(requests.iter().filter(|r| r.2 == 1).count() > 1);
            continue;
        }
        // The data section as one stream: requests follow each other, none
        // longer than allowed, all but the last end on a part of the
        // object, and some fill several destinations.
        let mut at = start;
        for (i, &(offset, len, _)) in requests.iter().enumerate() {
            assert_eq!(offset, at, "{i}");
            assert!(len <= most, "{i}: {len}");
            at += len as u64;
            if i + 1 < requests.len() {
                assert_eq!(at % hint.piece as u64, 0, "{i}");
            }
        }
        assert_eq!(at, start + total);
        assert!(requests.iter().any(|r| r.2 > 1));
        assert!(requests.iter().any(|r| r.1 > hint.piece) != stream);
    }
}

/// A source that serves one read at a time (a lock around its reads), as
/// a Python file object is read. Its first read of the data section is
/// slow to reach the lock, as a thread descheduled between taking its
/// request and reading would be. `order`: the offsets of the data
/// section's reads, in the order the lock took them.
#[derive(Debug)]
struct OneAtATime {
    bytes: Vec<u8>,
    data_start: u64,
    first: std::sync::atomic::AtomicBool,
    lock: std::sync::Mutex<()>,
    order: std::sync::Arc<std::sync::Mutex<Vec<u64>>>,
}

impl crate::source::Source for OneAtATime {
    fn len(&self) -> u64 {
        self.bytes.len() as u64
    }

    fn one_read_at_a_time(&self) -> bool {
        true
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        if offset >= self.data_start && self.first.swap(false, Ordering::AcqRel) {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let _serialised = self.lock.lock().unwrap();
        if offset >= self.data_start {
            self.order.lock().unwrap().push(offset);
        }
        let at = offset as usize;
        buf.copy_from_slice(&self.bytes[at..at + buf.len()]);
        Ok(())
    }
}

/// A source serving one read at a time is read in file order by all the
/// load's threads, whichever reaches its lock first, conversions included;
/// every byte exact.
#[test]
fn reads_of_a_source_serving_one_at_a_time_take_turns_in_file_order() {
    let (f, data, specs) = sample();
    let bytes = std::fs::read(&f.0).unwrap();
    for convert in [false, true] {
        let order = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let data_start = bytes.len() as u64 - data.len() as u64;
        let source = OneAtATime {
            bytes: bytes.clone(),
            data_start,
            first: std::sync::atomic::AtomicBool::new(true),
            lock: std::sync::Mutex::new(()),
            order: order.clone(),
        };
        let file = MappedFile::from_source(source, OpenOptions::default()).unwrap();
        let (infos, tos, mut outs) = wanted(&file, &specs, &data, convert);
        let dests = destinations(&infos, &tos, &mut outs);
        let options = LoadOptions {
            threads: 4,
            piece: 64 << 10,
            ..LoadOptions::default()
        };
        let done = load_streaming(&file, dests, options, &mut |_| {
            ControlFlow::Continue(u64::MAX)
        });
        assert_eq!(done.unwrap(), Outcome::Done);
        for ((info, to), out) in infos.iter().zip(&tos).zip(&outs) {
            assert!(
                *out == expected(&data, info, *to),
                "{convert}: {}",
                info.name
            );
        }
        let order = order.lock().unwrap().clone();
        assert!(order.len() > 8, "{convert}: {}", order.len());
        assert!(
            order.windows(2).all(|w| w[0] < w[1]),
            "{convert}: {order:?}"
        );
    }
}

/// A plan's slice of a file that is not cached is read around the page
/// cache (no page of the file comes in, so the kernel's read-ahead cannot
/// bring in the rows around it); of a cached file, through the cache.
/// Either way the bytes are the selection's, at any offset.
#[test]
#[cfg(target_os = "linux")]
fn cold_slices_read_around_the_cache_and_warm_ones_through_it() {
    use crate::slice::Dim;
    let big = 4 << 20;
    let (f, data) = layout(&[("a", Dtype::U8, big)]);
    let file = open(&f.0, Backend::Pread);
    let info = file.header().require("a").unwrap();
    let len = file.file_len();
    for (start, count) in [(1 << 20, 1 << 20), (12_345, 700_001), (0, big as u64)] {
        let dims = [Dim {
            start,
            count,
            step: 1,
        }];
        let want = &data[start as usize..(start + count) as usize];
        if !crate::io::drop_cached(file.raw()) {
            return; // a file system that keeps everything cached
        }
        let mut out = vec![0u8; count as usize];
        file.read_slice_around_cache(info, &dims, &mut out).unwrap();
        assert!(out == want, "{start} {count}");
        let (cached, _pages) = crate::io::cached_pages(file.raw(), 0, len).unwrap();
        assert_eq!(cached, 0, "a cold slice came in through the page cache");
        // Warm: the same bytes, through the cache (now filled).
        let mut warm = vec![0u8; count as usize];
        file.read_slice_into(info, &dims, &mut warm).unwrap();
        let mut again = vec![0u8; count as usize];
        file.read_slice_around_cache(info, &dims, &mut again)
            .unwrap();
        assert!(warm == want && again == want, "{start} {count}");
    }
}

/// The loads of a job (a prefetch plan's batches) share one probe and one
/// trial: the second gets the first's trial, not a probe of its own.
#[test]
#[cfg(target_os = "linux")]
fn the_loads_of_a_job_share_one_trial() {
    let first = super::huge_page_trial(1 << 20, u64::MAX, true);
    let second = super::huge_page_trial(1 << 20, u64::MAX, true);
    match (first, second) {
        (Some(a), Some(b)) => assert!(Arc::ptr_eq(&a, &b)),
        // No trial (huge pages not cheaper here, or dear lately): none for
        // the job's next load either, without a new probe.
        (None, b) => assert!(b.is_none()),
        // The shared trial ended (dear) in between.
        (Some(a), None) => assert!(!a.on()),
    }
}
