//! Every way reading or writing a file can fail, one variant per rule.
//!
//! Here the variants and their messages; `rule.rs` maps each variant to
//! exactly one [`RuleId`](crate::RuleId) of the catalogue ([`Error::rule`],
//! an exhaustive match); its family, and so the Python exception class,
//! follows from the rule ([`Error::kind`]). Messages name the tensor; the caller
//! names the file (the Python glue prefixes it, the CLI prints it first).

use crate::dtype::Dtype;
pub use crate::rules::Family;

mod rule;

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
    /// The operating system failed to open, read or write the file.
    Io {
        /// What was being done.
        context: String,
        #[source]
        /// The operating system error.
        source: std::io::Error,
    },
    #[error("file is {len} bytes long, shorter than the 8-byte header length prefix")]
    /// File is shorter than the 8-byte header length prefix.
    FileTooShort {
        /// The length.
        len: u64,
    },
    #[error("header length prefix is 0; a header holds at least the JSON object `{{}}`")]
    /// Header length prefix is 0.
    HeaderLengthZero,
    #[error("header length prefix says {len} bytes, above the {cap}-byte header size cap")]
    /// Header length prefix is above the header size cap.
    HeaderTooLarge {
        /// The length.
        len: u64,
        /// The cap in force.
        cap: u64,
    },
    #[error("header length prefix says {len} bytes but only {available} bytes follow the prefix")]
    /// Header length prefix points past the end of the file.
    HeaderPastEnd {
        /// The length.
        len: u64,
        /// Bytes actually available.
        available: u64,
    },
    #[error("header is not valid UTF-8 (first invalid byte at header offset {offset})")]
    /// Header is not valid UTF-8.
    HeaderNotUtf8 {
        /// Offset of the byte involved.
        offset: usize,
    },
    #[error("header must start with `{{` (after optional whitespace), found byte 0x{found:02x} at header offset {offset}")]
    /// Header does not start with `{` after optional whitespace.
    HeaderStart {
        /// What was found instead.
        found: u8,
        /// Offset of the byte involved.
        offset: usize,
    },
    #[error("header is not strict JSON: {message}")]
    /// Header is not strict JSON.
    Json {
        /// serde_json's description.
        message: String,
    },
    #[error("header JSON is nested too deeply: {message}")]
    /// Header JSON is nested too deeply.
    JsonTooDeep {
        /// serde_json's description.
        message: String,
    },
    #[error("duplicate tensor name {name:?} in the header")]
    /// A tensor name appears twice; readers disagree on which entry wins.
    DuplicateTensor {
        /// The name involved.
        name: String,
    },
    #[error("duplicate key {key:?} in __metadata__")]
    /// A key appears twice in __metadata__.
    DuplicateMetadataKey {
        /// The metadata key involved.
        key: String,
    },
    #[error("__metadata__ appears twice in the header")]
    /// __metadata__ appears twice.
    DuplicateMetadata,
    #[error("__metadata__ must be an object mapping strings to strings, found {found}")]
    /// __metadata__ is not an object of strings.
    MetadataNotMap {
        /// What was found instead.
        found: String,
    },
    #[error("__metadata__ value for key {key:?} must be a string, found {found}")]
    /// A __metadata__ value is not a string.
    MetadataValueNotString {
        /// The metadata key involved.
        key: String,
        /// What was found instead.
        found: String,
    },
    #[error("tensor {tensor:?}: entry must be an object with dtype, shape and data_offsets, found {found}")]
    /// A tensor entry is not an object.
    EntryNotObject {
        /// The tensor involved (empty when none).
        tensor: String,
        /// What was found instead.
        found: String,
    },
    #[error("tensor {tensor:?}: field {field:?} appears twice")]
    /// A field appears twice in a tensor entry.
    DuplicateField {
        /// The tensor involved (empty when none).
        tensor: String,
        /// The field.
        field: String,
    },
    #[error("tensor {tensor:?}: missing required field {field:?}")]
    /// A tensor entry lacks dtype, shape or data_offsets.
    MissingField {
        /// The tensor involved (empty when none).
        tensor: String,
        /// The field.
        field: &'static str,
    },
    #[error("tensor {tensor:?}: field {field:?} must be {expected}, found {found}")]
    /// A tensor entry field has the wrong JSON type.
    WrongFieldType {
        /// The tensor involved (empty when none).
        tensor: String,
        /// The field.
        field: &'static str,
        /// The value required.
        expected: &'static str,
        /// What was found instead.
        found: String,
    },
    #[error("tensor {tensor:?}: unknown dtype {dtype:?} (dtypes are upper-case, e.g. \"F32\", \"BF16\")")]
    /// A tensor declares a dtype the format does not define.
    UnknownDtype {
        /// The tensor involved (empty when none).
        tensor: String,
        /// The dtype.
        dtype: String,
    },
    #[error("tensor {tensor:?}: shape entry {value} is not a non-negative integer below 2^63")]
    /// A shape entry is not a non-negative integer below 2^63.
    BadShapeEntry {
        /// The tensor involved (empty when none).
        tensor: String,
        /// The offending value, as JSON text.
        value: String,
    },
    #[error("tensor {tensor:?}: shape {shape:?} of {dtype} overflows 64-bit byte arithmetic")]
    /// Shape x dtype size overflows 64-bit arithmetic.
    SizeOverflow {
        /// The tensor involved (empty when none).
        tensor: String,
        /// The shape.
        shape: Vec<u64>,
        /// The dtype.
        dtype: Dtype,
    },
    #[error("tensor {tensor:?}: shape {shape:?} of {dtype} ({bits} bits each) does not fill whole bytes")]
    /// Packed sub-byte elements do not fill whole bytes.
    SubByteNotWhole {
        /// The tensor involved (empty when none).
        tensor: String,
        /// The shape.
        shape: Vec<u64>,
        /// The dtype.
        dtype: Dtype,
        /// Bits per element of the dtype.
        bits: u64,
    },
    #[error("tensor {tensor:?}: data_offsets must be two integers [begin, end], found {found}")]
    /// Data_offsets are not two non-negative integers.
    BadOffsets {
        /// The tensor involved (empty when none).
        tensor: String,
        /// What was found instead.
        found: String,
    },
    #[error("tensor {tensor:?}: data_offsets [{begin}, {end}] are not ordered (begin > end)")]
    /// Data_offsets begin after they end.
    OffsetsReversed {
        /// The tensor involved (empty when none).
        tensor: String,
        /// First byte (`data_offsets[0]`).
        begin: u64,
        /// One past the last byte (`data_offsets[1]`).
        end: u64,
    },
    #[error("tensor {tensor:?}: data_offsets [{begin}, {end}] hold {held} bytes but shape {shape:?} of {dtype} needs {needed}")]
    /// Data_offsets hold a different byte count than shape x dtype.
    ByteLengthMismatch {
        /// The tensor involved (empty when none).
        tensor: String,
        /// First byte (`data_offsets[0]`).
        begin: u64,
        /// One past the last byte (`data_offsets[1]`).
        end: u64,
        /// Bytes the data_offsets hold.
        held: u64,
        /// The shape.
        shape: Vec<u64>,
        /// The dtype.
        dtype: Dtype,
        /// Bytes shape x dtype needs.
        needed: u64,
    },
    #[error("tensor {tensor:?}: data_offsets [{begin}, {end}] leave a hole of {gap} bytes after the previous tensor, which ends at {expected}")]
    /// Bytes between two tensors belong to no tensor.
    Hole {
        /// The tensor involved (empty when none).
        tensor: String,
        /// First byte (`data_offsets[0]`).
        begin: u64,
        /// One past the last byte (`data_offsets[1]`).
        end: u64,
        /// The value required.
        expected: u64,
        /// Length of the hole in bytes.
        gap: u64,
    },
    #[error("tensor {tensor:?}: data_offsets [{begin}, {end}] overlap tensor {other:?}, which ends at {other_end}")]
    /// Two tensors' byte ranges overlap.
    Overlap {
        /// The tensor involved (empty when none).
        tensor: String,
        /// First byte (`data_offsets[0]`).
        begin: u64,
        /// One past the last byte (`data_offsets[1]`).
        end: u64,
        /// The other tensor.
        other: String,
        /// Where the other tensor ends.
        other_end: u64,
    },
    #[error("tensor {tensor:?}: data_offsets end at {end} but the byte buffer is only {available} bytes long")]
    /// A tensor's bytes run past the end of the file.
    DataTooShort {
        /// The tensor involved (empty when none).
        tensor: String,
        /// One past the last byte (`data_offsets[1]`).
        end: u64,
        /// Bytes actually available.
        available: u64,
    },
    #[error("{trailing} trailing bytes after the last tensor (tensors cover {covered} of {available} buffer bytes)")]
    /// Bytes after the last tensor belong to no tensor.
    TrailingBytes {
        /// Number of trailing bytes.
        trailing: u64,
        /// Bytes the tensors cover.
        covered: u64,
        /// Bytes actually available.
        available: u64,
    },
    #[error("the header lists {count} tensors, more than 2^32")]
    /// The header lists 2^32 tensors or more.
    TooManyTensors {
        /// How many there are.
        count: u64,
    },
    #[error("the file does not contain a tensor named {name:?}")]
    /// No tensor of the name asked for is in the file.
    TensorNotFound {
        /// The name involved.
        name: String,
    },

    // --- using an open file (family `Usage`, `Memory`, `Io`) ---
    #[error("tensor {tensor:?}: reading {len} bytes at offset {offset} runs past its end ({tensor_len} bytes)")]
    /// A read asks for bytes past the end of a tensor.
    ReadPastEnd {
        /// The tensor involved (empty when none).
        tensor: String,
        /// Offset of the byte involved.
        offset: u64,
        /// The length.
        len: u64,
        /// The tensor's length in bytes.
        tensor_len: u64,
    },
    #[error("tensor {tensor:?}: the slice {reason}")]
    /// A slice asks for indices outside the tensor (rule `read-past-end`).
    SliceOutside {
        /// The tensor involved.
        tensor: String,
        /// Which, in words.
        reason: String,
    },
    #[error("{}{what} holds {got} bytes but {expected} are needed", tensor_prefix(.tensor))]
    /// A destination buffer's size differs from the bytes to read or convert.
    DestinationSize {
        /// The tensor involved (empty when none).
        tensor: String,
        /// What the buffer is.
        what: &'static str,
        /// The value required.
        expected: u64,
        /// The value given.
        got: u64,
    },
    #[error(
        "{}no conversion from {from} to {to}: {}",
        tensor_prefix(.tensor),
        crate::dtype::conversions_text()
    )]
    /// No dtype conversion exists between the tensor's dtype and the one asked for.
    ConversionNotAllowed {
        /// The tensor involved (empty when none).
        tensor: String,
        /// The tensor's dtype.
        from: Dtype,
        /// The dtype asked for.
        to: Dtype,
    },
    #[error("{}cannot allocate {bytes} bytes (out of memory)", tensor_prefix(.tensor))]
    /// A result is too large to hold in memory.
    OutOfMemory {
        /// The size asked for.
        bytes: u64,
        /// The tensor involved (empty when none).
        tensor: String,
    },
    #[error("{kind} is not a regular file; only regular files are read")]
    /// The path names a FIFO, socket or device, not a regular file.
    NotRegularFile {
        /// What it is, in words.
        kind: &'static str,
    },
    #[error("the file changed since it was opened ({what}); reopen it")]
    /// Another program changed the file after it was opened.
    FileChanged {
        /// What changed, in words.
        what: String,
    },
    #[error("{task} stopped without finishing (a worker thread panicked)")]
    /// A worker thread stopped without finishing its share of the work.
    WorkerFailed {
        /// The work that failed.
        task: &'static str,
    },
    #[error(
        "{context}: not done within its deadline ({seconds} s; FASTST_REMOTE_DEADLINE sets it)"
    )]
    /// A remote open, read, listing or upload did not finish within its deadline.
    RemoteDeadline {
        /// What was being done.
        context: String,
        /// The deadline, in seconds.
        seconds: f64,
    },
    #[error("{context}: the store's answer holds more than {cap} bytes, the most fastst reads of an answer without a byte range")]
    /// A store's answer without a byte range is larger than its cap.
    RemoteAnswerOverCap {
        /// What was being done.
        context: String,
        /// The cap in bytes.
        cap: u64,
    },
    #[error("{reason}")]
    /// An object key that fastst cannot address in its store.
    ObjectKey {
        /// Which part of the key, in words.
        reason: String,
    },
    #[error("a read of the file object called back into the open file it is being read for; such a read would wait on itself, so it is refused")]
    /// A file object's read method read from the very file it is being read for.
    ReentrantRead,

    // --- writer input errors (kind `Write`) ---
    #[error("tensor name {name:?} is reserved for the metadata map and cannot name a tensor")]
    /// A tensor is named __metadata__, the name reserved for the metadata map.
    ReservedName {
        /// The name involved.
        name: String,
    },
    #[error("tensor name {name:?} is given twice")]
    /// Two tensors given to a writer have the same name.
    DuplicateName {
        /// The name involved.
        name: String,
    },
    #[error("metadata key {key:?} is given twice")]
    /// A metadata key given to a writer appears twice.
    DuplicateKey {
        /// The metadata key involved.
        key: String,
    },
    #[error("tensor {tensor:?}: {reason}")]
    /// A tensor's shape x dtype size overflows or does not fill whole bytes.
    BadTensorSize {
        /// The tensor involved (empty when none).
        tensor: String,
        /// Why, in words.
        reason: String,
    },
    #[error("header would be {len} bytes, above the {cap}-byte header size cap (too many tensors or too much metadata)")]
    /// The header to write is above the header size cap.
    HeaderOverCap {
        /// The length.
        len: u64,
        /// The cap in force.
        cap: u64,
    },
    #[error("tensor {tensor:?}: expected {expected} bytes of data, got {got}")]
    /// The bytes given for a tensor differ from its shape x dtype size.
    DataLength {
        /// The tensor involved (empty when none).
        tensor: String,
        /// The value required.
        expected: u64,
        /// The value given.
        got: u64,
    },
    #[error("tensor {tensor:?}: unknown dtype {dtype:?}")]
    /// A tensor's dtype has no safetensors equivalent.
    UnsupportedDtype {
        /// The tensor involved (empty when none).
        tensor: String,
        /// The dtype.
        dtype: String,
    },
    #[error("{reason}")]
    /// The file to write would exceed 2^64 bytes or the address space.
    FileTooLarge {
        /// Why, in words.
        reason: String,
    },
    #[error("{reason}")]
    /// Bytes are given to a writer before or after the tensors they belong to.
    StreamOrder {
        /// Why, in words.
        reason: String,
    },
    #[error("alignment {value} is not a power of two from 1 to {max}")]
    /// An alignment asked of a writer is not a power of two from 1 to 4096.
    BadAlignment {
        /// The alignment asked for.
        value: u64,
        /// The largest alignment allowed.
        max: u64,
    },
    #[error("tensor {name:?} is not in the writer's layout")]
    /// A tensor given to a streaming writer is not in its layout.
    NotInLayout {
        /// The name involved.
        name: String,
    },
    #[error("tensor {name:?} {how}; each tensor of the layout is written once")]
    /// A tensor is given to a streaming writer again after, or while, it is written.
    WrittenTwice {
        /// The name involved.
        name: String,
        /// "was written already" or "is being written by another call".
        how: &'static str,
    },
    #[error("tensor {tensor:?}: the layout declares {expected}, got {got}")]
    /// A tensor given to a streaming writer differs from its layout entry.
    LayoutMismatch {
        /// The tensor involved.
        tensor: String,
        /// Dtype and shape of the layout entry, in words.
        expected: String,
        /// Dtype and shape given, in words.
        got: String,
    },
    #[error("{count} of {total} tensors of the layout were not written completely ({names}); nothing was saved")]
    /// A streaming writer is closed before every tensor of its layout was written.
    TensorsMissing {
        /// The first tensor missing (in the layout's order).
        tensor: String,
        /// How many are missing.
        count: usize,
        /// How many the layout holds.
        total: usize,
        /// The first few missing, quoted and comma-separated.
        names: String,
    },
    #[error("the writer is closed; nothing more can be written")]
    /// The streaming writer was used after it was closed (rule `closed-file`).
    WriterClosed,
}

impl Error {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::RuleId;

    #[test]
    fn messages_name_the_tensor_only_when_there_is_one() {
        let e = Error::DestinationSize {
            tensor: "w".into(),
            what: "the destination",
            expected: 8,
            got: 4,
        };
        assert_eq!(
            e.to_string(),
            "tensor \"w\": the destination holds 4 bytes but 8 are needed"
        );
        assert_eq!(e.tensor(), Some("w"));
        let e = Error::ConversionNotAllowed {
            tensor: String::new(),
            from: Dtype::F32,
            to: Dtype::I8,
        };
        assert_eq!(
            e.to_string(),
            "no conversion from F32 to I8: conversions exist between F64, F32, F16, BF16 \
             (each way), and from F8_E4M3, F8_E5M2, F8_E4M3FNUZ, F8_E5M2FNUZ, F8_E8M0 to \
             each of those"
        );
        assert_eq!(e.tensor(), None);
        let e = Error::OutOfMemory {
            bytes: 3,
            tensor: "\"q\"".into(),
        };
        assert_eq!(
            e.to_string(),
            "tensor \"\\\"q\\\"\": cannot allocate 3 bytes (out of memory)"
        );
        assert_eq!(e.tensor(), Some("\"q\""));
    }

    #[test]
    fn each_error_knows_its_tensor_rule_and_family() {
        let entry = Error::MissingField {
            tensor: "e".into(),
            field: "shape",
        };
        assert_eq!(entry.tensor(), Some("e"));
        assert_eq!(entry.rule(), RuleId::MissingField);
        assert_eq!(entry.kind(), Family::TensorTable);
        let layout = Error::Hole {
            tensor: "h".into(),
            begin: 4,
            end: 8,
            expected: 2,
            gap: 2,
        };
        assert_eq!(
            (layout.tensor(), layout.rule(), layout.kind()),
            (Some("h"), RuleId::Hole, Family::Layout)
        );
        let named = Error::TensorNotFound { name: "n".into() };
        assert_eq!(
            (named.tensor(), named.rule(), named.kind()),
            (Some("n"), RuleId::TensorNotFound, Family::TensorNotFound)
        );
        let none = Error::HeaderLengthZero;
        assert_eq!(
            (none.tensor(), none.rule(), none.kind()),
            (None, RuleId::HeaderLengthZero, Family::HeaderFraming)
        );
        let io = Error::io("reading", std::io::Error::other("boom"));
        assert_eq!(
            (io.tensor(), io.rule(), io.kind()),
            (None, RuleId::Io, Family::Io)
        );
        assert_eq!(io.to_string(), "reading: boom");
        assert!(matches!(io, Error::Io { ref context, .. } if context == "reading"));
    }
}
