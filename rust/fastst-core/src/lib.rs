//! fastst-core: reading, validating and writing `.safetensors` files.
//!
//! Pure Rust (no Python): the `fastst` Python package and command are thin
//! layers over this crate.
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
pub mod source;
pub mod table;
#[cfg(test)]
pub(crate) mod testfs;
pub mod validate;
pub mod write;

pub use dtype::Dtype;
pub use error::{Error, Result};
pub use header::{parse_file_bytes, Header, ParseNotes, DEFAULT_HEADER_CAP};
pub use read::{Backend, MappedFile, OpenOptions, TensorData};
pub use rules::{Family, RuleId, Severity};
pub use source::Source;
pub use table::TensorInfo;
pub use write::{AtomicFile, NewTensor, PlannedTensor, TensorStream, WritePlan};
