//! fastst-core: reading, validating and writing `.safetensors` files.
//!
//! Pure Rust (no Python): the `fastst` Python package and command are thin
//! layers over this crate.
#![deny(unsafe_op_in_unsafe_fn)]

pub mod convert;
pub mod dtype;
pub mod error;
pub mod header;
pub mod inspect;
pub mod rules;
pub mod storage;
pub mod write;

pub use dtype::Dtype;
pub use error::{Error, Result};
pub use header::{parse_file_bytes, Header, ParseNotes, TensorInfo, DEFAULT_HEADER_CAP};
pub use rules::{Family, RuleId, Severity};
pub use storage::{Backend, MappedFile, OpenOptions, TensorData};
pub use write::{AtomicFile, NewTensor, PlannedTensor, TensorStream, WritePlan};
