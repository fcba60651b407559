//! The rule catalogue: every rule fastst enforces or reports, in one table.
//!
//! A rule has a stable kebab-case identifier (what error messages, `verify`
//! findings, the `rule` attribute of Python exceptions and the documentation
//! show), a [`Family`] (which Python exception class a broken rule raises),
//! a default [`Severity`] (what `fastst verify` reports it at) and a one-line
//! summary. Errors ([`crate::Error`]) and findings (`fastst_inspect::Finding`,
//! in the forensics crate) carry a [`RuleId`], never a string, so a
//! misspelled rule cannot compile. The Python package reads this table
//! through `_fastst.rule_catalogue()`, and `docs/rules.md` is generated from
//! it (`scripts/gen_rules_doc.py`; a test checks that the two agree).
//!
//! To add a rule: add one line to the `catalogue!` invocation below, in the
//! block of its family, then regenerate the documentation table.

use std::fmt;

/// How serious a finding is, from `Info` (worth knowing) to `Critical`
/// (do not load this file).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Severity {
    /// Worth knowing; never a problem by itself.
    Info,
    /// Unusual but harmless to load.
    Low,
    /// Suspicious: may hide something or break some loaders.
    Medium,
    /// The strict reader rejects the file, or readers would disagree on it.
    High,
    /// The file carries content that can execute code (pickle, archives,
    /// executables) or is not a safetensors file at all.
    Critical,
}

impl Severity {
    /// Every severity, lowest first.
    pub const ALL: [Severity; 5] = [
        Severity::Info,
        Severity::Low,
        Severity::Medium,
        Severity::High,
        Severity::Critical,
    ];

    /// Lower-case name: `"info"`, `"low"`, `"medium"`, `"high"`, `"critical"`.
    pub const fn name(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Low => "low",
            Severity::Medium => "medium",
            Severity::High => "high",
            Severity::Critical => "critical",
        }
    }

    /// Parses a lower-case name.
    pub fn from_name(name: &str) -> Option<Severity> {
        Severity::ALL.into_iter().find(|s| s.name() == name)
    }
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Which family a rule belongs to: the Python exception class raised when
/// the rule is broken (see [`Family::python_name`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Family {
    /// The 8-byte length prefix or the header's framing is wrong.
    HeaderFraming,
    /// The header is not the strict JSON object the format requires.
    HeaderJson,
    /// `__metadata__` is not a string-to-string map.
    Metadata,
    /// A tensor entry is malformed (fields, dtype, shape, size).
    TensorTable,
    /// The data offsets do not tile the byte buffer exactly.
    Layout,
    /// A tensor that was asked for is not in the file.
    TensorNotFound,
    /// The file was used after it was closed.
    ClosedFile,
    /// Tensors or metadata given to a writer cannot be written.
    Serialize,
    /// A dtype has no equivalent in the framework asked for.
    UnsupportedDtype,
    /// A sharded checkpoint's index is malformed or disagrees with its shards.
    ShardIndex,
    /// A call's arguments do not fit the tensor (read past its end, a
    /// conversion that does not exist, a destination of the wrong size):
    /// Python's builtin `ValueError`, as the reference raises for misuse.
    Usage,
    /// The file cannot be read safely: it is not a regular file (a FIFO,
    /// socket or device), or another program changed it while it was open.
    FileAccess,
    /// Memory for a result could not be had: Python's `MemoryError`.
    Memory,
    /// The operating system refused or failed (Python's `OSError` family).
    Io,
    /// Loading one checkpoint across the ranks of a `torch.distributed`
    /// group failed (every rank raises it).
    DistributedLoad,
    /// A model folder cannot be used as asked: given as a file, it holds
    /// several checkpoints; scanned, it nests folders too deep to enter.
    Folder,
    /// The drop-in hook cannot serve `safetensors` (the reference is
    /// already imported).
    Hook,
    /// `storage_options` were given for a local path: they configure the
    /// store of a URL only (also a `ValueError`).
    StorageOptions,
    /// An index the reference's slicing refuses, under the `safetensors`
    /// name (the reference raises its root error class for these).
    ReferenceSlice,
    /// A call names a framework, back end, device or dtype that does not
    /// exist: the root class, `SafetensorError`, as the reference raises
    /// for these.
    Argument,
    /// Signing, verifying or describing a model (provenance): findings of a
    /// signature check, raised as `ProvenanceError` when they stop the work.
    Provenance,
    /// A forensic rule of `fastst verify`: reported, never raised.
    Finding,
}

impl Family {
    /// Every family, in catalogue order.
    pub const ALL: [Family; 22] = [
        Family::HeaderFraming,
        Family::HeaderJson,
        Family::Metadata,
        Family::TensorTable,
        Family::Layout,
        Family::TensorNotFound,
        Family::ClosedFile,
        Family::Serialize,
        Family::UnsupportedDtype,
        Family::ShardIndex,
        Family::Usage,
        Family::FileAccess,
        Family::Memory,
        Family::Io,
        Family::DistributedLoad,
        Family::Folder,
        Family::Hook,
        Family::StorageOptions,
        Family::ReferenceSlice,
        Family::Argument,
        Family::Provenance,
        Family::Finding,
    ];

    /// The Python exception class for this family: a class of
    /// `fastst._errors` (e.g. `"LayoutError"`), a builtin (`"ValueError"`,
    /// `"MemoryError"`, `"OSError"`), or `"Finding"` for rules that are
    /// only ever reported by `verify`.
    pub const fn python_name(self) -> &'static str {
        match self {
            Family::HeaderFraming => "HeaderFramingError",
            Family::HeaderJson => "HeaderJsonError",
            Family::Metadata => "MetadataError",
            Family::TensorTable => "TensorTableError",
            Family::Layout => "LayoutError",
            Family::TensorNotFound => "TensorNotFoundError",
            Family::ClosedFile => "ClosedFileError",
            Family::Serialize => "SerializeError",
            Family::UnsupportedDtype => "UnsupportedDtypeError",
            Family::ShardIndex => "ShardIndexError",
            Family::Usage => "ValueError",
            Family::FileAccess => "FileAccessError",
            Family::Memory => "MemoryError",
            Family::Io => "OSError",
            Family::DistributedLoad => "DistributedLoadError",
            Family::Folder => "FolderError",
            Family::Hook => "HookError",
            Family::StorageOptions => "StorageOptionsError",
            Family::ReferenceSlice => "SafetensorError",
            Family::Argument => "SafetensorError",
            Family::Provenance => "ProvenanceError",
            Family::Finding => "Finding",
        }
    }

    /// True for the families of the strict reader's format rules: a file
    /// breaking one is rejected by `safe_open`, and `verify` reports it.
    pub const fn is_format(self) -> bool {
        matches!(
            self,
            Family::HeaderFraming
                | Family::HeaderJson
                | Family::Metadata
                | Family::TensorTable
                | Family::Layout
        )
    }
}

impl fmt::Display for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.python_name())
    }
}

/// Defines [`RuleId`] and its table from one line per rule.
macro_rules! catalogue {
    ($($variant:ident = $id:literal, $family:ident, $severity:ident, $summary:literal;)+) => {
        /// One rule of the catalogue. Its identifier, family, severity and
        /// summary are given by the methods; [`RuleId::ALL`] lists them all.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum RuleId {
            $(
                #[doc = $summary]
                $variant,
            )+
        }

        impl RuleId {
            /// Every rule, in catalogue order (grouped by family).
            pub const ALL: &'static [RuleId] = &[$(RuleId::$variant,)+];

            /// The stable kebab-case identifier, e.g. `"trailing-bytes"`.
            pub const fn id(self) -> &'static str {
                match self { $(RuleId::$variant => $id,)+ }
            }

            /// The family: which Python exception class breaking it raises.
            pub const fn family(self) -> Family {
                match self { $(RuleId::$variant => Family::$family,)+ }
            }

            /// The severity `verify` reports it at by default (a few
            /// findings raise or lower it, e.g. `foreign-content` for
            /// data-only formats).
            pub const fn severity(self) -> Severity {
                match self { $(RuleId::$variant => Severity::$severity,)+ }
            }

            /// One line saying what the rule checks.
            pub const fn summary(self) -> &'static str {
                match self { $(RuleId::$variant => $summary,)+ }
            }
        }
    };
}

catalogue! {
    // --- the reader's format rules: a file breaking one is rejected ---------
    FileTooShort = "file-too-short", HeaderFraming, High,
        "file is shorter than the 8-byte header length prefix";
    HeaderLengthZero = "header-length-zero", HeaderFraming, High,
        "header length prefix is 0";
    HeaderTooLarge = "header-too-large", HeaderFraming, High,
        "header length prefix is above the header size cap";
    HeaderPastEnd = "header-past-end", HeaderFraming, High,
        "header length prefix points past the end of the file";
    HeaderNotUtf8 = "header-not-utf8", HeaderFraming, High,
        "header is not valid UTF-8";
    HeaderStart = "header-start", HeaderFraming, High,
        "header does not start with `{` after optional whitespace";
    JsonSyntax = "json-syntax", HeaderJson, High,
        "header is not strict JSON";
    JsonTooDeep = "json-too-deep", HeaderJson, High,
        "header JSON is nested too deeply";
    DuplicateTensor = "duplicate-tensor", HeaderJson, High,
        "a tensor name appears twice; readers disagree on which entry wins";
    TooManyTensors = "too-many-tensors", HeaderJson, High,
        "the header lists 2^32 tensors or more";
    DuplicateMetadataKey = "duplicate-metadata-key", Metadata, High,
        "a key appears twice in __metadata__";
    DuplicateMetadata = "duplicate-metadata", Metadata, High,
        "__metadata__ appears twice";
    MetadataNotMap = "metadata-not-map", Metadata, High,
        "__metadata__ is not an object of strings";
    MetadataValueNotString = "metadata-value-not-string", Metadata, High,
        "a __metadata__ value is not a string";
    EntryNotObject = "entry-not-object", TensorTable, High,
        "a tensor entry is not an object";
    DuplicateField = "duplicate-field", TensorTable, High,
        "a field appears twice in a tensor entry";
    MissingField = "missing-field", TensorTable, High,
        "a tensor entry lacks dtype, shape or data_offsets";
    WrongFieldType = "wrong-field-type", TensorTable, High,
        "a tensor entry field has the wrong JSON type";
    UnknownDtype = "unknown-dtype", TensorTable, High,
        "a tensor declares a dtype the format does not define";
    BadShapeEntry = "bad-shape-entry", TensorTable, High,
        "a shape entry is not a non-negative integer below 2^63";
    SizeOverflow = "size-overflow", TensorTable, High,
        "shape x dtype size overflows 64-bit arithmetic";
    SubByteNotWhole = "sub-byte-not-whole", TensorTable, High,
        "packed sub-byte elements do not fill whole bytes";
    BadOffsets = "bad-offsets", TensorTable, High,
        "data_offsets are not two non-negative integers";
    ByteLengthMismatch = "byte-length-mismatch", TensorTable, High,
        "data_offsets hold a different byte count than shape x dtype";
    OffsetsReversed = "offsets-reversed", Layout, High,
        "data_offsets begin after they end";
    Hole = "hole", Layout, High,
        "bytes between two tensors belong to no tensor";
    Overlap = "overlap", Layout, High,
        "two tensors' byte ranges overlap";
    DataTooShort = "data-too-short", Layout, High,
        "a tensor's bytes run past the end of the file";
    TrailingBytes = "trailing-bytes", Layout, High,
        "bytes after the last tensor belong to no tensor";

    // --- using an open file ---------------------------------------------------
    TensorNotFound = "tensor-not-found", TensorNotFound, High,
        "no tensor of the name asked for is in the file";
    ClosedFile = "closed-file", ClosedFile, High,
        "the file is used after it was closed";
    ReadPastEnd = "read-past-end", Usage, High,
        "a read asks for bytes past the end of a tensor";
    DestinationSize = "destination-size", Usage, High,
        "a destination buffer's size differs from the bytes to read or convert";
    ConversionNotAllowed = "conversion-not-allowed", Usage, High,
        "no dtype conversion exists between the tensor's dtype and the one asked for";
    // converting a pickle checkpoint (`fastst convert`): refused before torch reads it
    ConvertTorchVersion = "convert-torch-version", Usage, High,
        "convert needs torch 2.6 or newer: older torch.load(weights_only=True) runs TorchScript code";
    ConvertTorchscript = "convert-torchscript", Usage, High,
        "the checkpoint is a TorchScript archive, which holds code";
    ConvertZipLayout = "convert-zip-layout", Usage, High,
        "the checkpoint's zip holds members torch.save does not write, or holds them otherwise";
    ConvertPickleRefused = "convert-pickle-refused", Usage, High,
        "the checkpoint's pickle uses a global or opcode a state dict does not need, or is malformed";
    ConvertPickleSize = "convert-pickle-size", Usage, High,
        "the checkpoint's pickle is larger, or more compressed, than convert's limits";
    ConvertStorageSize = "convert-storage-size", Usage, High,
        "a storage the pickle declares differs from the bytes the checkpoint holds for it";
    ReentrantRead = "reentrant-read", Usage, High,
        "a file object's read method read from the very file it is being read for (refused: it would wait on itself)";
    NotRegularFile = "not-regular-file", FileAccess, High,
        "the path names a FIFO, socket or device, not a regular file (refused without blocking)";
    FileChanged = "file-changed", FileAccess, High,
        "another program changed the file (length, modification time or identity) after it was opened";
    OutOfMemory = "out-of-memory", Memory, High,
        "a result is too large to hold in memory";
    Io = "io", Io, High,
        "the operating system failed to open, read or write the file";
    WorkerFailed = "worker-failed", Io, High,
        "a worker thread stopped without finishing its share of the work";
    RemoteDeadline = "remote-deadline", Io, High,
        "a remote open, read, listing or upload did not finish within its deadline (FASTST_REMOTE_DEADLINE; TimeoutError)";
    RemoteAnswerOverCap = "remote-answer-over-cap", Io, High,
        "a store's answer without a byte range (a listing page, a token) holds more than the cap on such answers (16 MiB)";

    // --- writing --------------------------------------------------------------
    ReservedName = "reserved-name", Serialize, High,
        "a tensor is named __metadata__, the name reserved for the metadata map";
    DuplicateName = "duplicate-name", Serialize, High,
        "two tensors given to a writer have the same name";
    DuplicateKey = "duplicate-key", Serialize, High,
        "a metadata key given to a writer appears twice";
    BadTensorSize = "bad-tensor-size", Serialize, High,
        "a tensor's shape x dtype size overflows or does not fill whole bytes";
    BadShape = "bad-shape", Serialize, High,
        "a tensor's shape is not a sequence of non-negative integers";
    UnsupportedDtype = "unsupported-dtype", Serialize, High,
        "a tensor's dtype has no safetensors equivalent";
    HeaderOverCap = "header-over-cap", Serialize, High,
        "the header to write is above the header size cap";
    FileTooLarge = "file-too-large", Serialize, High,
        "the file to write would exceed 2^64 bytes or the address space";
    DataLength = "data-length", Serialize, High,
        "the bytes given for a tensor differ from its shape x dtype size";
    StreamOrder = "stream-order", Serialize, High,
        "bytes are given to a writer before or after the tensors they belong to";
    RewriteMismatch = "rewrite-mismatch", Serialize, High,
        "a tensor read back after rewriting a file differs from the original";
    BadAlignment = "bad-alignment", Serialize, High,
        "an alignment asked of a writer is not a power of two from 1 to 4096";
    NotInLayout = "tensor-not-in-layout", Serialize, High,
        "a tensor given to a streaming writer is not in the layout it was opened with";
    WrittenTwice = "tensor-written-twice", Serialize, High,
        "a tensor is given to a streaming writer again after, or while, it is written";
    LayoutMismatch = "layout-mismatch", Serialize, High,
        "a tensor given to a streaming writer has another dtype or shape than its layout entry";
    TensorsMissing = "tensors-missing", Serialize, High,
        "a streaming writer is closed before every tensor of its layout was written (nothing is saved)";
    RangeOutsideTensor = "range-outside-tensor", Serialize, High,
        "a range of a file's tensor given to a streaming writer does not lie within that tensor";

    // --- frameworks -----------------------------------------------------------
    FrameworkDtype = "framework-dtype", UnsupportedDtype, High,
        "a tensor's dtype has no equivalent in the framework asked for, or a framework's dtype none in the format";
    UnknownFramework = "unknown-framework", Argument, High,
        "a call names a framework fastst does not know";
    UnknownBackend = "unknown-backend", Argument, High,
        "a call names a read back end other than mmap or pread";
    BadDevice = "bad-device", Argument, High,
        "a call names a device the framework does not have or cannot load to";
    UnknownSpecDtype = "unknown-spec-dtype", Argument, High,
        "a TensorSpec names a dtype the writer does not know";
    PlanInvalid = "plan-invalid", Argument, High,
        "a prefetch plan cannot be loaded: an entry that is not None, a slice or an index, a slice step other than 1, rows out of range, a slice of a 0-d tensor, or no tensor at all";
    LoaderTake = "loader-take", Argument, High,
        "a prefetch loader is asked for a tensor outside its plan, or one it already handed out";

    // --- sharded checkpoints (an index file naming several shards) -------------
    IndexJson = "index-json", ShardIndex, High,
        "the index file is not valid UTF-8 JSON";
    IndexShape = "index-shape", ShardIndex, High,
        "the index is not an object whose weight_map maps tensor names to file names";
    ShardPath = "shard-path", ShardIndex, High,
        "the index names a shard outside its own folder";
    IndexOverCap = "index-over-cap", ShardIndex, High,
        "the index file is larger than the cap on index files (FASTST_INDEX_CAP, 64 MiB by default)";
    ShardMissing = "shard-missing", ShardIndex, High,
        "a shard the index lists does not exist";
    ShardLacksTensor = "shard-lacks-tensor", ShardIndex, High,
        "a shard lacks a tensor the index places in it";
    ShardExtraTensor = "shard-extra-tensor", ShardIndex, High,
        "a shard holds a tensor the index does not place in it";
    ShardDuplicateTensor = "shard-duplicate-tensor", ShardIndex, High,
        "a tensor is stored in two shards of one checkpoint; readers disagree on which wins";
    DcpShardingInfo = "dcp-sharding-info", ShardIndex, High,
        "a distributed checkpoint file's DCP_SHARDING_INFO metadata is missing, malformed or disagrees with its tensors";
    DcpChunks = "dcp-chunks", ShardIndex, High,
        "the chunks of a tensor of a distributed checkpoint overlap, leave a hole or disagree on its dtype";

    // --- loading across processes (fastst.torch.load_distributed, load_tensor_parallel)
    DistNoGroup = "dist-no-group", DistributedLoad, High,
        "no torch.distributed process group, and no rank/world size given";
    DistRankFailed = "dist-rank-failed", DistributedLoad, High,
        "a rank could not open, validate, plan or read its part of the checkpoint";
    DistHeaderMismatch = "dist-header-mismatch", DistributedLoad, High,
        "ranks opened checkpoints whose tensor tables differ";
    DistOptionMismatch = "dist-option-mismatch", DistributedLoad, High,
        "ranks called the loader with different options";
    DistBadPlan = "dist-bad-plan", DistributedLoad, High,
        "a tensor-parallel plan entry cannot be applied to its tensor";

    // --- drop-in use (model folders, the `safetensors` hook) ----------------
    FolderAmbiguous = "folder-ambiguous", Folder, High,
        "a model folder holds several checkpoints, so which one to open is unclear";
    FolderLink = "folder-link", Folder, High,
        "a model folder's checkpoint is a symbolic link leading outside the folder";
    FolderTooDeep = "folder-too-deep", Folder, Medium,
        "a folder scan met folders nested deeper than it enters (256 levels) and left them unexamined";
    FolderOverCap = "folder-over-cap", Folder, High,
        "a prefix in an object store holds more objects than one listing reads (10,000); name the checkpoint's index or file";
    ListingPagesOverCap = "listing-pages-over-cap", Folder, High,
        "a prefix's listing takes more pages than one listing reads (1,000), or a page repeats its token";
    ObjectKey = "object-key", Folder, High,
        "an object key fastst cannot address in its store: an empty segment (//), a . or .. segment, a control character (keys are otherwise taken literally)";
    HookAfterReference = "hook-after-reference", Hook, High,
        "the drop-in hook is turned on after the reference package was imported";
    StorageOptionsLocal = "storage-options-local", StorageOptions, High,
        "storage_options are given for a local path (they configure the store of a URL only)";
    SliceOutOfRange = "slice-out-of-range", ReferenceSlice, High,
        "under the `safetensors` name, a slice index the reference refuses (out of range, bad step)";

    // --- provenance: model signatures (`fastst sign`, `verify --signature`) ----
    SignatureFileChanged = "signature-file-changed", Provenance, Critical,
        "a file covered by the signature has a different digest now";
    SignatureFileAdded = "signature-file-added", Provenance, High,
        "the model holds a file that the signature does not cover";
    SignatureFileMissing = "signature-file-missing", Provenance, High,
        "a file covered by the signature is missing from the model";
    SignatureWrongModel = "signature-wrong-model", Provenance, Critical,
        "the signature was made over a different model: none of its files match";
    SignatureWrongKey = "signature-wrong-key", Provenance, Critical,
        "the signature does not verify with the given key or certificate";
    SignatureInvalid = "signature-invalid", Provenance, Critical,
        "the signature value does not verify although the key matches: the bundle was altered";
    SignatureUntrustedCertificate = "signature-untrusted-certificate", Provenance, Critical,
        "the signing certificate does not chain to the given roots or may not sign";
    SignatureIdentityMismatch = "signature-identity-mismatch", Provenance, Critical,
        "a Sigstore signature was made by another identity or issuer than expected";
    SignatureMalformed = "signature-malformed", Provenance, High,
        "the signature file is not a valid Sigstore bundle of a model signing statement";
    SignatureKeyType = "signature-key-type", Provenance, High,
        "the key is not an elliptic-curve key on P-256, P-384 or P-521";
    SignatureUnsupported = "signature-unsupported", Provenance, High,
        "the signature uses a hash or serialization method fastst cannot check";
    SignatureSymlink = "signature-symlink", Provenance, High,
        "the model folder holds a symbolic link, which the signature format refuses";
    SignatureSpecialFile = "signature-special-file", Provenance, High,
        "the model folder holds something that is not a regular file or a folder, or that cannot be read";
    SignatureSafetensorsRejected = "signature-safetensors-rejected", Provenance, High,
        "a signed .safetensors file is rejected by the strict reader (corrupt or truncated)";
    SignatureMissingShard = "signature-missing-shard", Provenance, High,
        "a sharded checkpoint's index names a shard that the signature does not cover";
    SignatureNotChecked = "signature-not-checked", Provenance, Info,
        "the model folder holds a signature file that was not checked";

    // --- forensic findings of `fastst verify` (reported, never raised) --------
    IndexTotalSize = "index-total-size", Finding, Medium,
        "the index's metadata.total_size differs from the bytes of the shards' tensors";
    ForeignContent = "foreign-content", Finding, Critical,
        "the file is another format (pickle, zip, executable...) under a safetensors name";
    HiddenPayload = "hidden-payload", Finding, Critical,
        "bytes no tensor covers start with the magic number of another format";
    TensorPayload = "tensor-payload", Finding, Critical,
        "a tensor's bytes hold another format's file: a pickle program, a zip (PyTorch) archive, an ELF, PE or Mach-O executable, or a script";
    MetadataPayload = "metadata-payload", Finding, Critical,
        "a __metadata__ value holds another format's file: a pickle program, an executable's header or a script";
    PicklePrefix = "pickle-prefix", Finding, Critical,
        "the file's first bytes, its header-length prefix included, also parse as a pickle program (a polyglot)";
    MetadataCode = "metadata-code", Finding, High,
        "a __metadata__ value holds Python or shell code (exec or eval, os or subprocess calls, a download piped to a shell...)";
    MetadataExecutableLink = "metadata-executable-link", Finding, High,
        "a __metadata__ value links to an executable, a script or a pickle (a URL ending in .exe, .sh, .py, .pkl...)";
    GhostTensor = "ghost-tensor", Finding, High,
        "a tensor's bytes lie entirely past the end of the file";
    AliasedTensor = "aliased-tensor", Finding, High,
        "two tensors read exactly the same bytes";
    HashMismatch = "hash-mismatch", Finding, High,
        "a hash embedded in the metadata does not match the file";
    ControlCharName = "control-char-name", Finding, Medium,
        "a tensor name holds control, bidirectional or invisible characters";
    PathLikeName = "path-like-name", Finding, Medium,
        "a tensor name looks like a file path (absolute, `..`, backslash, `~`)";
    NonFiniteValues = "non-finite-values", Finding, Medium,
        "a floating-point tensor holds NaN or infinite values";
    InvalidBool = "invalid-bool", Finding, Medium,
        "a BOOL tensor holds bytes other than 0 and 1";
    LargeTensor = "large-tensor", Finding, Low,
        "a tensor is 2 GiB or larger (beyond 32-bit byte counts)";
    SuspiciousWeightDtype = "suspicious-weight-dtype", Finding, Low,
        "a weight or bias tensor has an integer, BOOL or complex dtype";
    EmptyName = "empty-name", Finding, Low,
        "a tensor is named by the empty string";
    UnknownField = "unknown-field", Finding, Low,
        "a tensor entry has a field other than dtype, shape and data_offsets";
    LeadingWhitespace = "leading-whitespace", Finding, Low,
        "whitespace precedes the header's opening `{`";
    MetadataNull = "metadata-null", Finding, Low,
        "__metadata__ is null";
    MetadataBlob = "metadata-blob", Finding, Medium,
        "a __metadata__ value holds a long base64 or hexadecimal blob (reported, never decoded)";
    HugeMetadataValue = "huge-metadata-value", Finding, Low,
        "a __metadata__ value is unusually large";
    MalformedMetadataValue = "malformed-metadata-value", Finding, Low,
        "a known __metadata__ key holds a value of the wrong shape";
    StaleTempFile = "stale-temp-file", Finding, Low,
        "a temporary file an interrupted fastst save left behind";
    UnknownMetadataKey = "unknown-metadata-key", Finding, Info,
        "a __metadata__ key follows none of the known conventions";
    NoTensors = "no-tensors", Finding, Info,
        "the file holds no tensor";
    NoEmbeddedHash = "no-embedded-hash", Finding, Info,
        "the metadata holds no hash to check the file against";
}

impl RuleId {
    /// Looks a rule up by its identifier.
    pub fn from_id(id: &str) -> Option<RuleId> {
        RuleId::ALL.iter().copied().find(|r| r.id() == id)
    }

    /// True for the rules `fastst verify` reports: the reader's format rules
    /// and the forensic findings. `too-many-tensors` is left out: 2^32
    /// entries take over 100 GB of header JSON, so no file `verify` can read
    /// breaks it (the reader still checks it, as all arithmetic is checked).
    pub const fn is_verify_rule(self) -> bool {
        let family = self.family();
        (family.is_format() || matches!(family, Family::Finding))
            && !matches!(self, RuleId::TooManyTensors)
    }
}

/// What a `fastst verify` finding says about the file: that it is broken,
/// or that it carries something to look at. The two are kept apart: a
/// malformed file is not evidence of an attack (a download cut short, a
/// buggy writer), so it makes the verdict inconclusive (exit 2), while a
/// red flag at or above `--fail-on` fails it (exit 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Verdict {
    /// The file breaks the format (the strict reader rejects it, the file
    /// is cut short, a checkpoint's index disagrees with its shards).
    Malformed,
    /// Content worth a person's attention, at the finding's severity:
    /// another format's file, code, a misleading name, bad values...
    RedFlag,
}

impl Verdict {
    /// `"malformed"` or `"red-flag"`.
    pub const fn name(self) -> &'static str {
        match self {
            Verdict::Malformed => "malformed",
            Verdict::RedFlag => "red-flag",
        }
    }
}

impl RuleId {
    /// What a finding of this rule says about the file (see [`Verdict`]),
    /// for the rules `fastst verify` reports about files and checkpoints
    /// (the format rules, the forensic findings, a checkpoint's index
    /// rules, a folder too deep to scan); `None` for the others. Malformed:
    /// every format rule, a file cut short between tensors
    /// (`ghost-tensor`), two tensors over the same bytes (the overlap rule
    /// read forensically) and an index disagreeing with its shards, save
    /// one naming a shard outside its folder (`shard-path`, a red flag).
    /// An index whose `total_size` is wrong, which readers accept, is a
    /// red flag.
    pub const fn verdict(self) -> Option<Verdict> {
        let family = self.family();
        if family.is_format() {
            return Some(Verdict::Malformed);
        }
        match (family, self) {
            (_, RuleId::ShardPath) => Some(Verdict::RedFlag),
            (Family::ShardIndex, _) | (_, RuleId::GhostTensor | RuleId::AliasedTensor) => {
                Some(Verdict::Malformed)
            }
            (Family::Finding, _) | (_, RuleId::FolderTooDeep) => Some(Verdict::RedFlag),
            _ => None,
        }
    }
}

impl fmt::Display for RuleId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.id())
    }
}

impl PartialEq<&str> for RuleId {
    fn eq(&self, other: &&str) -> bool {
        self.id() == *other
    }
}

impl PartialEq<str> for RuleId {
    fn eq(&self, other: &str) -> bool {
        self.id() == other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rule_ids_are_unique_and_kebab_case() {
        let mut ids: Vec<&str> = RuleId::ALL.iter().map(|r| r.id()).collect();
        ids.sort_unstable();
        let n = ids.len();
        ids.dedup();
        assert_eq!(ids.len(), n, "duplicate rule ids");
        for id in ids {
            assert!(!id.is_empty() && !id.starts_with('-') && !id.ends_with('-'));
            assert!(!id.contains("--"), "{id}");
            assert!(
                id.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'),
                "{id} is not kebab-case"
            );
        }
    }

    #[test]
    fn ids_round_trip() {
        for &r in RuleId::ALL {
            assert_eq!(RuleId::from_id(r.id()), Some(r));
            assert!(!r.summary().is_empty());
        }
        assert_eq!(RuleId::from_id("no-such-rule"), None);
        assert_eq!(RuleId::from_id("HOLE"), None);
    }

    #[test]
    fn every_reader_rule_is_high() {
        for &r in RuleId::ALL {
            if r.family().is_format() {
                assert_eq!(r.severity(), Severity::High, "{r}");
            }
        }
    }

    #[test]
    fn catalogue_is_grouped_by_family() {
        // Each family's rules are contiguous, so the documentation table
        // reads block by block.
        let mut seen: Vec<Family> = Vec::new();
        for &r in RuleId::ALL {
            let f = r.family();
            if seen.last() != Some(&f) {
                assert!(!seen.contains(&f), "{f:?} rules are not contiguous ({r})");
                seen.push(f);
            }
        }
        for f in Family::ALL {
            assert!(seen.contains(&f), "{f:?} has no rule");
        }
    }

    #[test]
    fn severities_order_and_names() {
        assert!(Severity::Info < Severity::Low);
        assert!(Severity::High < Severity::Critical);
        for s in Severity::ALL {
            assert_eq!(Severity::from_name(s.name()), Some(s));
        }
        assert_eq!(Severity::from_name("HIGH"), None);
    }

    #[test]
    fn families_name_their_python_class() {
        let names: Vec<&str> = Family::ALL.iter().map(|f| f.python_name()).collect();
        assert_eq!(
            names,
            [
                "HeaderFramingError",
                "HeaderJsonError",
                "MetadataError",
                "TensorTableError",
                "LayoutError",
                "TensorNotFoundError",
                "ClosedFileError",
                "SerializeError",
                "UnsupportedDtypeError",
                "ShardIndexError",
                "ValueError",
                "FileAccessError",
                "MemoryError",
                "OSError",
                "DistributedLoadError",
                "FolderError",
                "HookError",
                "StorageOptionsError",
                "SafetensorError",
                "SafetensorError",
                "ProvenanceError",
                "Finding",
            ]
        );
        for f in Family::ALL {
            assert_eq!(f.to_string(), f.python_name());
        }
        let format: Vec<Family> = Family::ALL.into_iter().filter(|f| f.is_format()).collect();
        assert_eq!(
            format,
            [
                Family::HeaderFraming,
                Family::HeaderJson,
                Family::Metadata,
                Family::TensorTable,
                Family::Layout
            ]
        );
    }

    #[test]
    fn verify_rules_are_the_format_rules_and_findings() {
        assert!(RuleId::Hole.is_verify_rule());
        assert!(RuleId::UnknownField.is_verify_rule());
        assert!(!RuleId::TooManyTensors.is_verify_rule());
        assert!(!RuleId::TensorNotFound.is_verify_rule());
        assert!(!RuleId::OutOfMemory.is_verify_rule());
        for &r in RuleId::ALL {
            let f = r.family();
            let expected = (f.is_format() || f == Family::Finding) && r != RuleId::TooManyTensors;
            assert_eq!(r.is_verify_rule(), expected, "{r}");
        }
    }

    #[test]
    fn malformed_and_red_flags_are_kept_apart() {
        for &r in RuleId::ALL {
            let family = r.family();
            if family.is_format() {
                assert_eq!(r.verdict(), Some(Verdict::Malformed), "{r}");
            }
            if family == Family::Finding {
                assert!(r.verdict().is_some(), "{r}");
            }
            if r.verdict().is_none() {
                assert!(!r.is_verify_rule(), "{r}");
            }
        }
        for r in [
            RuleId::ForeignContent,
            RuleId::HiddenPayload,
            RuleId::TensorPayload,
            RuleId::MetadataPayload,
            RuleId::PicklePrefix,
            RuleId::MetadataCode,
            RuleId::ShardPath,
            RuleId::NonFiniteValues,
            RuleId::IndexTotalSize,
        ] {
            assert_eq!(r.verdict(), Some(Verdict::RedFlag), "{r}");
        }
        for r in [
            RuleId::GhostTensor,
            RuleId::AliasedTensor,
            RuleId::ShardMissing,
        ] {
            assert_eq!(r.verdict(), Some(Verdict::Malformed), "{r}");
        }
        assert_eq!(RuleId::FileChanged.verdict(), None);
        assert_eq!(Verdict::RedFlag.name(), "red-flag");
        assert_eq!(Verdict::Malformed.name(), "malformed");
    }

    #[test]
    fn rules_display_and_compare_by_id() {
        assert_eq!(RuleId::Hole.to_string(), "hole");
        assert_eq!(Severity::Medium.to_string(), "medium");
        assert!(RuleId::Hole == "hole");
        assert!(RuleId::Hole != "overlap");
        assert!(*"hole" == *RuleId::Hole.id());
        assert!(RuleId::Hole == *"hole");
        assert!(RuleId::Hole != *"Hole");
        let names: Vec<&str> = Severity::ALL.iter().map(|s| s.name()).collect();
        assert_eq!(names, ["info", "low", "medium", "high", "critical"]);
        assert_eq!(Severity::from_name("low"), Some(Severity::Low));
        assert_eq!(Severity::from_name(""), None);
    }
}
