//! Every way reading or writing a file can fail, one variant per rule.
//!
//! Each variant maps to exactly one [`RuleId`] of the catalogue
//! ([`Error::rule`]); its family, and so the Python exception class, follows
//! from the rule ([`Error::kind`]). Messages name the tensor; the caller
//! names the file (the Python glue prefixes it, the CLI prints it first).

use crate::dtype::Dtype;
pub use crate::rules::Family;
use crate::rules::RuleId;

/// `"tensor \"name\": "`, or nothing when no tensor is involved.
fn tensor_prefix(tensor: &str) -> String {
    if tensor.is_empty() {
        String::new()
    } else {
        format!("tensor {tensor:?}: ")
    }
}

/// An error from reading, validating or writing a `.safetensors` file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    #[error("file is {len} bytes long, shorter than the 8-byte header length prefix")]
    FileTooShort { len: u64 },
    #[error("header length prefix is 0; a header holds at least the JSON object `{{}}`")]
    HeaderLengthZero,
    #[error("header length prefix says {len} bytes, above the {cap}-byte header size cap")]
    HeaderTooLarge { len: u64, cap: u64 },
    #[error("header length prefix says {len} bytes but only {available} bytes follow the prefix")]
    HeaderPastEnd { len: u64, available: u64 },
    #[error("header is not valid UTF-8 (first invalid byte at header offset {offset})")]
    HeaderNotUtf8 { offset: usize },
    #[error("header must start with `{{` (after optional whitespace), found byte 0x{found:02x} at header offset {offset}")]
    HeaderStart { found: u8, offset: usize },
    #[error("header is not strict JSON: {message}")]
    Json { message: String },
    #[error("header JSON is nested too deeply: {message}")]
    JsonTooDeep { message: String },
    #[error("duplicate tensor name {name:?} in the header")]
    DuplicateTensor { name: String },
    #[error("duplicate key {key:?} in __metadata__")]
    DuplicateMetadataKey { key: String },
    #[error("__metadata__ appears twice in the header")]
    DuplicateMetadata,
    #[error("__metadata__ must be an object mapping strings to strings, found {found}")]
    MetadataNotMap { found: String },
    #[error("__metadata__ value for key {key:?} must be a string, found {found}")]
    MetadataValueNotString { key: String, found: String },
    #[error("tensor {tensor:?}: entry must be an object with dtype, shape and data_offsets, found {found}")]
    EntryNotObject { tensor: String, found: String },
    #[error("tensor {tensor:?}: field {field:?} appears twice")]
    DuplicateField { tensor: String, field: String },
    #[error("tensor {tensor:?}: missing required field {field:?}")]
    MissingField { tensor: String, field: &'static str },
    #[error("tensor {tensor:?}: field {field:?} must be {expected}, found {found}")]
    WrongFieldType {
        tensor: String,
        field: &'static str,
        expected: &'static str,
        found: String,
    },
    #[error("tensor {tensor:?}: unknown dtype {dtype:?} (dtypes are upper-case, e.g. \"F32\", \"BF16\")")]
    UnknownDtype { tensor: String, dtype: String },
    #[error("tensor {tensor:?}: shape entry {value} is not a non-negative integer below 2^63")]
    BadShapeEntry { tensor: String, value: String },
    #[error("tensor {tensor:?}: shape {shape:?} of {dtype} overflows 64-bit byte arithmetic")]
    SizeOverflow {
        tensor: String,
        shape: Vec<u64>,
        dtype: Dtype,
    },
    #[error("tensor {tensor:?}: shape {shape:?} of {dtype} ({bits} bits each) does not fill whole bytes")]
    SubByteNotWhole {
        tensor: String,
        shape: Vec<u64>,
        dtype: Dtype,
        bits: u64,
    },
    #[error("tensor {tensor:?}: data_offsets must be two integers [begin, end], found {found}")]
    BadOffsets { tensor: String, found: String },
    #[error("tensor {tensor:?}: data_offsets [{begin}, {end}] are not ordered (begin > end)")]
    OffsetsReversed {
        tensor: String,
        begin: u64,
        end: u64,
    },
    #[error("tensor {tensor:?}: data_offsets [{begin}, {end}] hold {held} bytes but shape {shape:?} of {dtype} needs {needed}")]
    ByteLengthMismatch {
        tensor: String,
        begin: u64,
        end: u64,
        held: u64,
        shape: Vec<u64>,
        dtype: Dtype,
        needed: u64,
    },
    #[error("tensor {tensor:?}: data_offsets [{begin}, {end}] leave a hole of {gap} bytes after the previous tensor, which ends at {expected}")]
    Hole {
        tensor: String,
        begin: u64,
        end: u64,
        expected: u64,
        gap: u64,
    },
    #[error("tensor {tensor:?}: data_offsets [{begin}, {end}] overlap tensor {other:?}, which ends at {other_end}")]
    Overlap {
        tensor: String,
        begin: u64,
        end: u64,
        other: String,
        other_end: u64,
    },
    #[error("tensor {tensor:?}: data_offsets end at {end} but the byte buffer is only {available} bytes long")]
    DataTooShort {
        tensor: String,
        end: u64,
        available: u64,
    },
    #[error("{trailing} trailing bytes after the last tensor (tensors cover {covered} of {available} buffer bytes)")]
    TrailingBytes {
        trailing: u64,
        covered: u64,
        available: u64,
    },
    #[error("the header lists {count} tensors, more than 2^32")]
    TooManyTensors { count: u64 },
    #[error("no tensor named {name:?} in the file")]
    TensorNotFound { name: String },

    // --- using an open file (family `Usage`, `Memory`, `Io`) ---
    #[error("tensor {tensor:?}: reading {len} bytes at offset {offset} runs past its end ({tensor_len} bytes)")]
    ReadPastEnd {
        tensor: String,
        offset: u64,
        len: u64,
        tensor_len: u64,
    },
    #[error("{}{what} holds {got} bytes but {expected} are needed", tensor_prefix(.tensor))]
    DestinationSize {
        tensor: String,
        what: &'static str,
        expected: u64,
        got: u64,
    },
    #[error("{}no conversion from {from} to {to}", tensor_prefix(.tensor))]
    ConversionNotAllowed {
        tensor: String,
        from: Dtype,
        to: Dtype,
    },
    #[error("cannot hold {bytes} bytes in memory")]
    OutOfMemory { bytes: u64 },
    #[error("{task} stopped without finishing (a worker thread panicked)")]
    WorkerFailed { task: &'static str },

    // --- writer input errors (kind `Write`) ---
    #[error("tensor name {name:?} is reserved for the metadata map and cannot name a tensor")]
    ReservedName { name: String },
    #[error("tensor name {name:?} is given twice")]
    DuplicateName { name: String },
    #[error("metadata key {key:?} is given twice")]
    DuplicateKey { key: String },
    #[error("tensor {tensor:?}: {reason}")]
    BadTensorSize { tensor: String, reason: String },
    #[error("header would be {len} bytes, above the {cap}-byte header size cap (too many tensors or too much metadata)")]
    HeaderOverCap { len: u64, cap: u64 },
    #[error("tensor {tensor:?}: expected {expected} bytes of data, got {got}")]
    DataLength {
        tensor: String,
        expected: u64,
        got: u64,
    },
    #[error("tensor {tensor:?}: unknown dtype {dtype:?}")]
    UnsupportedDtype { tensor: String, dtype: String },
    #[error("{reason}")]
    FileTooLarge { reason: String },
    #[error("{reason}")]
    StreamOrder { reason: String },
}

impl Error {
    /// The family of rules this error belongs to (from its rule).
    pub fn kind(&self) -> Family {
        self.rule().family()
    }

    /// The catalogue rule that failed, e.g. [`RuleId::HeaderTooLarge`]
    /// (`"header-too-large"`).
    pub fn rule(&self) -> RuleId {
        use Error::*;
        match self {
            Io { .. } => RuleId::Io,
            FileTooShort { .. } => RuleId::FileTooShort,
            HeaderLengthZero => RuleId::HeaderLengthZero,
            HeaderTooLarge { .. } => RuleId::HeaderTooLarge,
            HeaderPastEnd { .. } => RuleId::HeaderPastEnd,
            HeaderNotUtf8 { .. } => RuleId::HeaderNotUtf8,
            HeaderStart { .. } => RuleId::HeaderStart,
            Json { .. } => RuleId::JsonSyntax,
            JsonTooDeep { .. } => RuleId::JsonTooDeep,
            DuplicateTensor { .. } => RuleId::DuplicateTensor,
            TooManyTensors { .. } => RuleId::TooManyTensors,
            DuplicateMetadataKey { .. } => RuleId::DuplicateMetadataKey,
            DuplicateMetadata => RuleId::DuplicateMetadata,
            MetadataNotMap { .. } => RuleId::MetadataNotMap,
            MetadataValueNotString { .. } => RuleId::MetadataValueNotString,
            EntryNotObject { .. } => RuleId::EntryNotObject,
            DuplicateField { .. } => RuleId::DuplicateField,
            MissingField { .. } => RuleId::MissingField,
            WrongFieldType { .. } => RuleId::WrongFieldType,
            UnknownDtype { .. } => RuleId::UnknownDtype,
            BadShapeEntry { .. } => RuleId::BadShapeEntry,
            SizeOverflow { .. } => RuleId::SizeOverflow,
            SubByteNotWhole { .. } => RuleId::SubByteNotWhole,
            BadOffsets { .. } => RuleId::BadOffsets,
            OffsetsReversed { .. } => RuleId::OffsetsReversed,
            ByteLengthMismatch { .. } => RuleId::ByteLengthMismatch,
            Hole { .. } => RuleId::Hole,
            Overlap { .. } => RuleId::Overlap,
            DataTooShort { .. } => RuleId::DataTooShort,
            TrailingBytes { .. } => RuleId::TrailingBytes,
            TensorNotFound { .. } => RuleId::TensorNotFound,
            ReadPastEnd { .. } => RuleId::ReadPastEnd,
            DestinationSize { .. } => RuleId::DestinationSize,
            ConversionNotAllowed { .. } => RuleId::ConversionNotAllowed,
            OutOfMemory { .. } => RuleId::OutOfMemory,
            WorkerFailed { .. } => RuleId::WorkerFailed,
            ReservedName { .. } => RuleId::ReservedName,
            DuplicateName { .. } => RuleId::DuplicateName,
            DuplicateKey { .. } => RuleId::DuplicateKey,
            BadTensorSize { .. } => RuleId::BadTensorSize,
            HeaderOverCap { .. } => RuleId::HeaderOverCap,
            DataLength { .. } => RuleId::DataLength,
            UnsupportedDtype { .. } => RuleId::UnsupportedDtype,
            FileTooLarge { .. } => RuleId::FileTooLarge,
            StreamOrder { .. } => RuleId::StreamOrder,
        }
    }

    /// The tensor an error is about, where there is one.
    pub fn tensor(&self) -> Option<&str> {
        use Error::*;
        match self {
            EntryNotObject { tensor, .. }
            | DuplicateField { tensor, .. }
            | MissingField { tensor, .. }
            | WrongFieldType { tensor, .. }
            | UnknownDtype { tensor, .. }
            | BadShapeEntry { tensor, .. }
            | SizeOverflow { tensor, .. }
            | SubByteNotWhole { tensor, .. }
            | BadOffsets { tensor, .. }
            | OffsetsReversed { tensor, .. }
            | ByteLengthMismatch { tensor, .. }
            | Hole { tensor, .. }
            | Overlap { tensor, .. }
            | DataTooShort { tensor, .. }
            | ReadPastEnd { tensor, .. }
            | BadTensorSize { tensor, .. }
            | UnsupportedDtype { tensor, .. }
            | DataLength { tensor, .. } => Some(tensor),
            DestinationSize { tensor, .. } | ConversionNotAllowed { tensor, .. }
                if !tensor.is_empty() =>
            {
                Some(tensor)
            }
            DuplicateTensor { name }
            | TensorNotFound { name }
            | ReservedName { name }
            | DuplicateName { name } => Some(name),
            _ => None,
        }
    }

    #[cold]
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Error {
        Error::Io {
            context: context.into(),
            source,
        }
    }
}

/// Result alias for the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
