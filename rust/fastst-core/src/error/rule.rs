//! What each error means to the catalogue: its rule (one per variant, an
//! exhaustive match, so a new variant cannot compile without one), the
//! rule's family, and the tensor it names.

use super::{Error, Family};
use crate::rules::RuleId;

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
            ReadPastEnd { .. } | SliceOutside { .. } => RuleId::ReadPastEnd,
            DestinationSize { .. } => RuleId::DestinationSize,
            ConversionNotAllowed { .. } => RuleId::ConversionNotAllowed,
            OutOfMemory { .. } => RuleId::OutOfMemory,
            NotRegularFile { .. } => RuleId::NotRegularFile,
            FileChanged { .. } => RuleId::FileChanged,
            WorkerFailed { .. } => RuleId::WorkerFailed,
            RemoteDeadline { .. } => RuleId::RemoteDeadline,
            RemoteAnswerOverCap { .. } => RuleId::RemoteAnswerOverCap,
            ObjectKey { .. } => RuleId::ObjectKey,
            ReentrantRead => RuleId::ReentrantRead,
            ReservedName { .. } => RuleId::ReservedName,
            DuplicateName { .. } => RuleId::DuplicateName,
            DuplicateKey { .. } => RuleId::DuplicateKey,
            BadTensorSize { .. } => RuleId::BadTensorSize,
            HeaderOverCap { .. } => RuleId::HeaderOverCap,
            DataLength { .. } => RuleId::DataLength,
            UnsupportedDtype { .. } => RuleId::UnsupportedDtype,
            FileTooLarge { .. } => RuleId::FileTooLarge,
            StreamOrder { .. } => RuleId::StreamOrder,
            BadAlignment { .. } => RuleId::BadAlignment,
            NotInLayout { .. } => RuleId::NotInLayout,
            WrittenTwice { .. } => RuleId::WrittenTwice,
            LayoutMismatch { .. } => RuleId::LayoutMismatch,
            TensorsMissing { .. } => RuleId::TensorsMissing,
            WriterClosed => RuleId::ClosedFile,
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
            | SliceOutside { tensor, .. }
            | BadTensorSize { tensor, .. }
            | UnsupportedDtype { tensor, .. }
            | DataLength { tensor, .. }
            | LayoutMismatch { tensor, .. }
            | TensorsMissing { tensor, .. } => Some(tensor),
            DestinationSize { tensor, .. }
            | ConversionNotAllowed { tensor, .. }
            | OutOfMemory { tensor, .. }
                if !tensor.is_empty() =>
            {
                Some(tensor)
            }
            DuplicateTensor { name }
            | TensorNotFound { name }
            | ReservedName { name }
            | DuplicateName { name }
            | NotInLayout { name }
            | WrittenTwice { name, .. } => Some(name),
            _ => None,
        }
    }
}
