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
//! 1. [`MappedFile::open`] opens the file ([`io::open`]: regular files only,
//!    never blocking) and hands it, as a [`Source`], to
//!    [`MappedFile::from_source`] (which opens any source the same way). The
//!    length prefix and the header are read through the source
//!    ([`source::read_header`], [`header::check_prefix`]) and parsed
//!    strictly with [`Header::parse`]: [`header`] types the JSON,
//!    [`validate`] applies the entry and layout rules, and the result is a
//!    table of [`TensorInfo`] ([`table`]) plus the metadata.
//! 2. Tensor bytes come out as private copy-on-write mappings or copies
//!    ([`MappedFile::tensor_data`], [`MappedFile::copy_tensor_into`]),
//!    converted on the way where asked ([`convert`]); [`load`] fills many
//!    caller-owned destinations in one call, [`prefetch`] reads pages ahead
//!    of a consumer.
//! 3. Anything wrong is an [`Error`]: one variant per rule of the catalogue
//!    ([`rules`]), which also gives the Python exception family.
//!
//! Writing goes the other way: a [`WritePlan`] orders the tensors and
//! renders the header ([`write`](mod@write)), a [`TensorStream`] checks each
//! tensor gets exactly its bytes, and [`AtomicFile`] replaces the target
//! only once the new file is complete.
//!
//! The modules, one job each:
//!
//! - [`dtype`]: the element types and the one byte-size rule.
//! - [`table`]: [`TensorInfo`], one entry of the tensor table.
//! - [`header`]: the length prefix and the strict JSON reading of a header.
//! - [`validate`]: the entry and layout rules, fail-fast for the reader,
//!   collect-all for `fastst verify`.
//! - [`rules`]: the catalogue of every rule id, family, severity, summary.
//! - [`error`]: [`Error`], each variant mapped to one rule.
//! - [`io`]: the one file opener, positioned reads, mappings (the only
//!   `unsafe` code).
//! - [`source`]: the one seam for every input ([`Source`]; the local file is
//!   one) and the header read of every source.
//! - [`read`]: [`MappedFile`], an open file's header and tensor bytes.
//! - [`slice`]: the parts of a tensor a basic index selects, read with few
//!   requests.
//! - [`convert`]: dtype conversion kernels and the allowed pairs.
//! - [`load`]: whole loads of many tensors into caller-owned memory.
//! - [`prefetch`]: reading a file's pages ahead of their consumer.
//! - [`write`](mod@write): plans, the tensor stream, atomic replacement,
//!   write-back.
//! - [`identify`]: what a file that is not safetensors is, from its first
//!   bytes (the reader's errors say it).
//! - [`json`]: JSON text helpers (escaping, numbers, leading whitespace).
//! - [`parallel`]: the thread policy.
//! - [`progress`]: progress callbacks and the one stderr renderer.
//!
//! # Example
//!
//! Write a file with two tensors, open it and read one back:
//!
//! ```
//! use fastst_core::write::write_file;
//! use fastst_core::{Dtype, MappedFile, NewTensor, OpenOptions, WritePlan, DEFAULT_HEADER_CAP};
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

pub mod convert;
pub mod dtype;
pub mod error;
pub mod header;
pub mod identify;
pub mod io;
pub mod json;
pub mod load;
pub mod parallel;
pub mod prefetch;
pub mod progress;
pub mod read;
pub mod rules;
pub mod slice;
pub mod source;
pub mod table;
#[cfg(test)]
pub(crate) mod testfs;
pub mod validate;
pub mod write;

pub use dtype::Dtype;
pub use error::{Error, Result};
pub use header::{parse_file_bytes, Header, ParseNotes, DEFAULT_HEADER_CAP};
pub use read::{Backend, MappedFile, OpenOptions, OwnedBytes, TensorData};
pub use rules::{Family, RuleId, Severity};
pub use source::Source;
pub use table::TensorInfo;
pub use write::{AtomicFile, NewTensor, PlannedTensor, TensorStream, WritePlan};
