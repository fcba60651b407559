//! Every way reading or writing a file can fail, one variant per rule.
//!
//! Messages name the tensor and the rule; the caller (the Python layer, the
//! CLI) prefixes the file name.

use crate::dtype::Dtype;

/// Which family of rules an error belongs to; the Python layer maps each
/// family to its own exception class.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// Reading the file failed at the OS level.
    Io,
    /// The 8-byte length prefix or the header's framing is wrong.
    HeaderFraming,
    /// The header is not the strict JSON object the format requires.
    Json,
    /// `__metadata__` is not a string-to-string map.
    Metadata,
    /// A tensor entry is malformed (fields, dtype, shape, size).
    TensorTable,
    /// The data offsets do not tile the byte buffer exactly.
    Layout,
    /// A tensor that was asked for is not in the file.
    TensorNotFound,
    /// The input given to a writer is not valid.
    Write,
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
    #[error("no tensor named {name:?} in the file")]
    TensorNotFound { name: String },
    #[error("{message}")]
    InvalidInput { message: String },

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
}

impl Error {
    /// The family of rules this error belongs to.
    pub fn kind(&self) -> ErrorKind {
        use Error::*;
        match self {
            Io { .. } => ErrorKind::Io,
            FileTooShort { .. }
            | HeaderLengthZero
            | HeaderTooLarge { .. }
            | HeaderPastEnd { .. }
            | HeaderNotUtf8 { .. }
            | HeaderStart { .. } => ErrorKind::HeaderFraming,
            Json { .. } | JsonTooDeep { .. } | DuplicateTensor { .. } => ErrorKind::Json,
            DuplicateMetadataKey { .. }
            | DuplicateMetadata
            | MetadataNotMap { .. }
            | MetadataValueNotString { .. } => ErrorKind::Metadata,
            EntryNotObject { .. }
            | DuplicateField { .. }
            | MissingField { .. }
            | WrongFieldType { .. }
            | UnknownDtype { .. }
            | BadShapeEntry { .. }
            | SizeOverflow { .. }
            | SubByteNotWhole { .. }
            | BadOffsets { .. }
            | ByteLengthMismatch { .. } => ErrorKind::TensorTable,
            OffsetsReversed { .. }
            | Hole { .. }
            | Overlap { .. }
            | DataTooShort { .. }
            | TrailingBytes { .. } => ErrorKind::Layout,
            TensorNotFound { .. } => ErrorKind::TensorNotFound,
            InvalidInput { .. }
            | ReservedName { .. }
            | DuplicateName { .. }
            | DuplicateKey { .. }
            | BadTensorSize { .. }
            | HeaderOverCap { .. }
            | DataLength { .. } => ErrorKind::Write,
        }
    }

    /// A short stable identifier of the rule that failed (used by the CLI and
    /// by tests), e.g. `"header-too-large"`.
    pub fn rule(&self) -> &'static str {
        use Error::*;
        match self {
            Io { .. } => "io",
            FileTooShort { .. } => "file-too-short",
            HeaderLengthZero => "header-length-zero",
            HeaderTooLarge { .. } => "header-too-large",
            HeaderPastEnd { .. } => "header-past-end",
            HeaderNotUtf8 { .. } => "header-not-utf8",
            HeaderStart { .. } => "header-start",
            Json { .. } => "json-syntax",
            JsonTooDeep { .. } => "json-too-deep",
            DuplicateTensor { .. } => "duplicate-tensor",
            DuplicateMetadataKey { .. } => "duplicate-metadata-key",
            DuplicateMetadata => "duplicate-metadata",
            MetadataNotMap { .. } => "metadata-not-map",
            MetadataValueNotString { .. } => "metadata-value-not-string",
            EntryNotObject { .. } => "entry-not-object",
            DuplicateField { .. } => "duplicate-field",
            MissingField { .. } => "missing-field",
            WrongFieldType { .. } => "wrong-field-type",
            UnknownDtype { .. } => "unknown-dtype",
            BadShapeEntry { .. } => "bad-shape-entry",
            SizeOverflow { .. } => "size-overflow",
            SubByteNotWhole { .. } => "sub-byte-not-whole",
            BadOffsets { .. } => "bad-offsets",
            OffsetsReversed { .. } => "offsets-reversed",
            ByteLengthMismatch { .. } => "byte-length-mismatch",
            Hole { .. } => "hole",
            Overlap { .. } => "overlap",
            DataTooShort { .. } => "data-too-short",
            TrailingBytes { .. } => "trailing-bytes",
            TensorNotFound { .. } => "tensor-not-found",
            InvalidInput { .. } => "invalid-input",
            ReservedName { .. } => "reserved-name",
            DuplicateName { .. } => "duplicate-name",
            DuplicateKey { .. } => "duplicate-key",
            BadTensorSize { .. } => "bad-tensor-size",
            HeaderOverCap { .. } => "header-over-cap",
            DataLength { .. } => "data-length",
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
            | BadTensorSize { tensor, .. }
            | DataLength { tensor, .. } => Some(tensor),
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
