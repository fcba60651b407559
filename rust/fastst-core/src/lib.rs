//! fastst-core: reading, validating and writing `.safetensors` files.
//!
//! Pure Rust, no Python: the `fastst` Python package reaches this crate
//! through the PyO3 glue (`fastst-py`). The forensics of the `fastst`
//! command (verify, hash, metadata and value checks) live in the
//! `fastst-inspect` crate, which builds on this one; this crate never
//! depends on it.
//!
//! # Brief overview
//!
//! A file is an 8-byte little-endian length `N`, `N` bytes of JSON header
//! (the tensor table and an optional `__metadata__` map), then the tensors'
//! bytes. Reading goes down this path:
//!
//! 1. [`MappedFile::open`] opens the file ([`internal::open`]: regular
//!    files only, never blocking) and hands it, as a [`Source`], to
//!    [`MappedFile::from_source`] (which opens any source the same way). The
//!    length prefix and the header are read through the source
//!    ([`read_header`], [`check_prefix`]) and parsed strictly with
//!    [`Header::parse`]: the JSON is typed, the entry and layout rules are
//!    applied, and the result is a table of [`TensorInfo`] plus the
//!    metadata.
//! 2. Tensor bytes come out as private copy-on-write mappings or copies
//!    ([`MappedFile::tensor_data`], [`MappedFile::copy_tensor_into`]),
//!    converted on the way where asked ([`MappedFile::convert_tensor_into`]);
//!    [`load_into`] fills many caller-owned destinations in one call, a
//!    [`Prefetcher`] reads pages ahead of a consumer.
//! 3. Anything wrong is an [`Error`]: one variant per rule of the catalogue
//!    ([`RuleId`]), which also gives the Python exception family
//!    ([`Family`]).
//!
//! Writing goes the other way: a [`WritePlan`] orders the tensors and
//! renders the header, a [`TensorStream`] checks each tensor gets exactly
//! its bytes, and [`AtomicFile`] replaces the target only once the new file
//! is complete. A [`LayoutWriter`] takes the tensors of a plan in any order,
//! from any thread, each written at its offset, and commits when all are;
//! its [`Ledger`] (which tensor stands where, and the rules on what a
//! streaming writer is given) also serves the object-store writer of
//! `fastst-remote`.
//!
//! The modules, one job each (all private: what a caller may use is
//! re-exported at the crate root, and what only fastst's sibling crates may
//! use is gathered in [`internal`]):
//!
//! - `dtype`: the element types ([`Dtype`]) and the one byte-size rule.
//! - `table`: [`TensorInfo`], one entry of the tensor table.
//! - `header`: the length prefix ([`check_prefix`]) and the strict JSON
//!   reading of a header ([`Header::parse`]).
//! - `validate`: the entry and layout rules, fail-fast for the reader,
//!   collect-all for `fastst verify`.
//! - `rules`: the catalogue of every rule id, family, severity, summary
//!   ([`RuleId`], [`Family`], [`Severity`]).
//! - `error`: [`Error`], each variant mapped to one rule.
//! - `io`: the one file opener, positioned reads, mappings (the only
//!   `unsafe` code).
//! - `source`: the one seam for every input ([`Source`]; the local file is
//!   one) and the header read of every source ([`read_header`]).
//! - `read`: [`MappedFile`], an open file's header and tensor bytes.
//! - `slice`: the parts of a tensor a basic index selects ([`Dim`]), read
//!   with few requests.
//! - `convert`: dtype conversion kernels and the allowed pairs
//!   ([`supported`], [`conversions`]).
//! - `load`: whole loads of many tensors into caller-owned memory
//!   ([`load_into`], [`load_streaming`]).
//! - `prefetch`: reading a file's pages ahead of their consumer
//!   ([`Prefetcher`]).
//! - `write`: plans, the tensor stream, atomic replacement, write-back
//!   ([`write_atomic`], [`write_file`], [`serialize`]).
//! - `identify`: what a file that is not safetensors is, from its first
//!   bytes ([`identify()`]; the reader's errors say it).
//! - `json`: JSON text helpers (escaping, numbers, leading whitespace).
//! - `parallel`: the thread policy and the one fan-out of "N workers,
//!   first error wins".
//! - `progress`: progress callbacks ([`Progress`]) and the one stderr
//!   renderer ([`StderrLine`]).
//!
//! # Example
//!
//! Write a file with two tensors, open it and read one back:
//!
//! ```
//! use fastst_core::{
//!     write_file, Dtype, MappedFile, NewTensor, OpenOptions, WritePlan, DEFAULT_HEADER_CAP,
//! };
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = std::env::temp_dir().join(format!("fastst-core-doc-{}", std::process::id()));
//! std::fs::create_dir_all(&dir)?;
//! let path = dir.join("model.safetensors");
//!
//! // Names, dtypes and shapes first: the plan orders the tensors and
//! // renders the header; then each tensor's bytes, little-endian.
//! let plan = WritePlan::new(
//!     vec![
//!         NewTensor::new("weight", Dtype::F32, vec![2]),
//!         NewTensor::new("step", Dtype::U8, vec![]),
//!     ],
//!     Some(vec![("format".to_owned(), "pt".to_owned())]),
//!     DEFAULT_HEADER_CAP,
//! )?;
//! let weight: Vec<u8> = [1.5f32, -2.0].iter().flat_map(|v| v.to_le_bytes()).collect();
//! write_file(&plan, &[&weight, &[7]], &path, false)?;
//!
//! // Open: the header is read and validated before anything else.
//! let file = MappedFile::open(&path, OpenOptions::default())?;
//! let info = file.header().require("weight")?;
//! assert_eq!((info.dtype, info.shape.as_slice()), (Dtype::F32, &[2][..]));
//! let mut bytes = vec![0u8; info.byte_len() as usize];
//! file.copy_tensor_into(info, &mut bytes)?;
//! assert_eq!(bytes, weight);
//! assert_eq!(file.header().metadata(), Some(&[("format".to_owned(), "pt".to_owned())][..]));
//!
//! std::fs::remove_dir_all(&dir)?;
//! # Ok(())
//! # }
//! ```
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(unsafe_code)]
#![deny(missing_docs)]

mod convert;
mod dtype;
mod error;
mod header;
mod identify;
mod io;
mod json;
mod load;
mod parallel;
mod prefetch;
mod progress;
mod read;
mod rules;
mod size;
mod slice;
mod source;
mod table;
#[cfg(any(test, feature = "testfs"))]
// Test support only: a scratch file that cannot be made fails the test.
#[allow(clippy::panic)]
mod testfs;
mod validate;
mod write;

pub use convert::{bf16_to_f32, conversions, f16_to_f32, f32_to_f16, supported};
pub use dtype::{Dtype, SizeError};
pub use error::{Error, Result};
pub use header::{
    check_prefix, parse_file_bytes, prefix_value, Header, ParseNotes, DEFAULT_HEADER_CAP,
};
pub use identify::{identify, Identified, IDENTIFY_LEN};
pub use io::{enter_changes, probe_faults, Changing, FaultProbe};
pub use load::{
    load_into, load_streaming, tensor_into, Destination, HugePages, LoadOptions, LoadProgress,
    Outcome, Reporter, StreamReporter,
};
pub use prefetch::{PrefetchMethod, PrefetchOptions, PrefetchStatus, Prefetcher};
pub use progress::{Progress, StderrLine};
pub use read::{
    Backend, MappedFile, OpenOptions, OwnedBytes, SharedRegion, TensorData, HANDOUT_ALIGN,
    PRIVATE_MAP_THRESHOLD,
};
pub use rules::{Family, RuleId, Severity, Verdict};
pub use size::{parse_size, SizeGrammarError};
pub use slice::{slice_ranges, Dim};
pub use source::{ended_early, read_header, LoadHint, Source};
pub use table::TensorInfo;
pub use write::{
    check_alignment, data_alignment, link_replace, replace_with_bytes, serialize, write_atomic,
    write_file, AtomicFile, Blocking, FileSink, LayoutWriter, Ledger, NewTensor, PlannedTensor,
    Replaced, TensorStream, TensorWrite, WriteFailure, WritePlan, DEFAULT_ALIGN, MAX_ALIGN,
};

/// For fastst's sibling crates only (fastst-inspect, fastst-remote,
/// fastst-py); no stability promise.
///
/// The pieces of the reader that the forensics, remote and Python crates
/// build on but that are not an API of their own: the one file opener and
/// fallible allocation, the entry and layout rules as `fastst verify` runs
/// them collect-all, magic-number sniffing, the small float kinds' values, JSON text helpers, the thread
/// policy and its one fan-out ([`internal::fan_out`]), the write-back window the Python glue reports. With the
/// `testfs` feature, also the scratch files of the tests.
pub mod internal {
    pub use crate::convert::minifloat_to_f32;
    pub use crate::identify::{sniff, Magic, SNIFF_LEN};
    pub use crate::io::{open, zeroed, OpenFile};
    pub use crate::json::{whitespace_len, write_string, write_u64};
    pub use crate::parallel::{fan_out, thread_count};
    pub use crate::validate::{entry, found, layout};
    pub use crate::write::WRITEBACK_WINDOW;

    /// Scratch files and folders on disk for tests, each removed when
    /// dropped (also when its test panics part-way).
    #[cfg(feature = "testfs")]
    pub mod testfs {
        pub use crate::testfs::{build, raw, TempDir, TempFile};
    }
}
