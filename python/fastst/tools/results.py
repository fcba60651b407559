"""The shapes of what the wing returns and ``--json`` prints, as ``TypedDict`` classes.

One place says which keys a result has, which may be missing, and what
their values are.

The command's JSON Schema (``fastst/cli/output.schema.json``) is generated
from these classes by :mod:`fastst.cli.schema`, so a change here is a change
of the command's output: regenerate the schema with
``python -m fastst.cli.schema``. A class ending in ``Report`` (and each
``*Envelope``) is what the command prints; the others are what the wing's
functions return (the command adds a few keys: ``kind``, ``fails``...).

Keys that may be missing sit in a ``total=False`` subclass (the way that
works on Python 3.9). ``Annotated[..., Schema(...)]`` adds JSON Schema
keywords (bounds, patterns) that a Python type cannot say.
"""

from typing import (
    Annotated,
    Any,
    Dict,
    List,
    Literal,
    Optional,
    Tuple,
    TypedDict,
    Union,
    get_args,
)

from .. import _fastst


class Schema:
    """JSON Schema keywords for a type, as ``Annotated[int, Schema(minimum=0)]``."""

    def __init__(self, **keywords: Any) -> None:
        self.keywords = keywords


Count = Annotated[int, Schema(minimum=0)]
Sha256 = Annotated[str, Schema(pattern="^[0-9a-f]{64}$")]
Severity = Literal["info", "low", "medium", "high", "critical"]
#: What a ``verify`` finding says about the file: ``malformed``, it breaks
#: the format (the verdict is then inconclusive: broken is not malicious);
#: ``red-flag``, it carries something worth a look, counted against
#: ``--fail-on``.
Verdict = Literal["malformed", "red-flag"]
#: Severities, lowest first.
SEVERITIES: Tuple[str, ...] = get_args(Severity)
#: An input as a whole: one ``.safetensors`` file, or a sharded checkpoint
#: (an ``*.index.json`` and its shards).
Kind = Literal["file", "checkpoint"]


class Producer(TypedDict):
    """Who wrote the document."""

    version: str  # fastst's version
    schema: Literal[2]  # version of this shape; raised when a field changes meaning or goes away


class ErrorEntry(TypedDict):
    """An input that could not be read."""

    path: str
    message: str  # one line, starting with the path
    rule: Optional[str]  # the rule broken, when there is one
    format: Optional[str]  # what the file is instead, when recognised (html, pickle...)


class _Finding(TypedDict):
    rule: str  # a rule id of the catalogue (docs/rules.md)
    severity: Severity
    verdict: Verdict  # malformed (inconclusive) or red-flag (counted against --fail-on)
    message: str
    tensor: Optional[str]  # the tensor it is about
    key: Optional[str]  # the __metadata__ key it is about
    offset: Optional[Count]  # absolute offset in the file
    length: Optional[Count]  # bytes from offset
    count: Optional[Count]  # how many things (NaN values, tensors...) it counts


class Finding(_Finding, total=False):
    """One thing verification found."""

    shard: Optional[str]  # in a checkpoint: the shard file it is about


_UNPLACED = dict.fromkeys(_Finding.__annotations__)


_SEVERITY: Dict[str, Tuple[str, str]] = {}  # rule id -> (severity, verdict), filled on first use


def _severity(rule: str) -> Tuple[str, str]:
    if not _SEVERITY:
        # A rule verify does not classify (an error that stopped a check)
        # leaves the verdict inconclusive, as a malformed file does.
        _SEVERITY.update(
            (r["id"], (str(r["severity"]), str(r["verdict"] or "malformed")))
            for r in _fastst.catalogue.rule_catalogue()
        )
    try:
        return _SEVERITY[rule]
    except KeyError:
        raise ValueError(f"no rule {rule!r} in the catalogue") from None


def finding(rule: str, message: str, **where: Any) -> Dict[str, Any]:
    """A :class:`Finding` of ``rule`` at its catalogue severity and
    verdict; ``where`` sets the other keys (``tensor``, ``key``,
    ``offset``, ``count``, ``shard``, or another ``severity``)."""
    severity, said = _severity(rule)
    return {
        **_UNPLACED,
        "rule": rule,
        "severity": severity,
        "verdict": said,
        "message": message,
        **where,
    }


# inspect -------------------------------------------------------------------------


class DtypeTotals(TypedDict):
    dtype: str
    tensors: Count
    parameters: Count
    bytes: Count


#: ``(name, dtype, shape, begin, end)``: offsets relative to the data buffer.
TableRow = Tuple[str, str, Tuple[int, ...], int, int]
#: A checkpoint's row: the shard file as a sixth item.
ShardTableRow = Tuple[str, str, Tuple[int, ...], int, int, str]


class _Summary(TypedDict):
    path: str
    file_len: Count  # bytes on disk (a checkpoint: its index and every shard)
    tensors: Count
    parameters: Count  # elements of all tensors
    header_len: Optional[Count]  # None for a checkpoint
    data_start: Optional[Count]  # absolute offset of the data buffer; None for a checkpoint
    # the largest power of two up to 4096 dividing data_start; None for a checkpoint
    data_alignment: Optional[Count]
    data_len: Count
    by_dtype: List[DtypeTotals]  # most bytes first
    metadata: Optional[Dict[str, str]]  # __metadata__ (a checkpoint: its first shard's)


class FileSummary(_Summary, total=False):
    """:func:`fastst.tools.inspect.inspect_file`."""

    table: List[TableRow]  # tensors=True: every tensor, in file order


class ShardSummary(TypedDict):
    file: str  # name in the index's folder
    file_len: Count
    tensors: Count
    parameters: Count


class _CheckpointSummary(_Summary):
    kind: Literal["checkpoint"]
    index_metadata: Dict[str, Any]  # the index's own "metadata" object
    shards: List[ShardSummary]


class CheckpointSummary(_CheckpointSummary, total=False):
    """:func:`fastst.tools.inspect.inspect_checkpoint`."""

    table: List[ShardTableRow]


class _TensorRow(TypedDict):
    name: str
    dtype: str
    shape: List[Count]
    begin: Count  # offsets relative to the data buffer
    end: Count


class TensorRow(_TensorRow, total=False):
    shard: str


class TensorValues(TypedDict):
    """``inspect --tensor NAME``: its values (narrow floats as float32)."""

    name: str
    dtype: str
    shape: List[Count]
    values: Any  # nested lists of numbers (a number for a scalar)


class LayerBlock(TypedDict):
    """A block repeated in a checkpoint (:func:`fastst.tools.layers.layer_view`)."""

    pattern: str  # "model.layers.{0-31}"
    prefix: str  # what comes before the number: "model.layers."
    indices: List[Count]  # the numbers of the repeats, ascending
    repeats: Count
    tensors: Count  # in one repeat
    parameters: Count  # over all repeats
    bytes: Count  # over all repeats
    dtypes: List[str]
    suffixes: List[str]  # the tensors of one repeat, named by what follows the number


class LayerTensor(TypedDict):
    """A tensor that is part of no repeated block."""

    name: str
    dtype: str
    shape: List[Count]
    parameters: Count
    bytes: Count


class LayerView(TypedDict):
    """:func:`fastst.tools.layers.layer_view`: blocks, then the other tensors,
    each in the order its first tensor comes in the file."""

    blocks: List[LayerBlock]
    single: List[LayerTensor]


class ModelConfig(TypedDict):
    """:func:`fastst.tools.config.read_config`: the ``config.json`` beside
    the weights (transformers or diffusers), read as data."""

    path: str
    problem: Optional[str]  # why it could not be read (the facts are then empty)
    class_name: Optional[str]  # diffusers "_class_name"
    architectures: List[str]
    model_type: Optional[str]
    hidden_size: Optional[int]  # hidden_size, n_embd or d_model
    num_hidden_layers: Optional[int]  # num_hidden_layers, n_layer or num_layers
    dtype: Optional[str]  # torch_dtype or dtype, as declared
    notes: List[str]  # values left out (wrong types)
    mismatches: List[str]  # where the weights disagree with it


class _InspectReport(_Summary):
    kind: Kind
    layers: LayerView  # tensors grouped by repeated structure
    config: Optional[ModelConfig]  # config.json beside the weights, if any


class InspectReport(_InspectReport, total=False):
    """An input of ``fastst inspect``."""

    index_metadata: Dict[str, Any]
    shards: List[ShardSummary]
    table: List[TensorRow]  # --tensors, filtered and sorted as asked
    tensor: TensorValues


# verify --------------------------------------------------------------------------


class FileVerification(TypedDict):
    """:func:`fastst.tools.inspect.verify_file`."""

    path: str
    file_len: Count
    header_len: Optional[Count]  # None when the length prefix cannot be read
    tensors: Optional[Count]  # None when the tensor table cannot be read
    accepted: bool  # safe_open accepts it
    complete: bool  # the tensor table could be examined at all
    values_checked: Optional[Count]  # tensors whose values were read (values=True), else None
    findings: List[Finding]  # most severe first


class ShardVerification(TypedDict):
    file: str
    accepted: bool
    complete: bool
    findings: Count  # how many


class CheckpointVerification(FileVerification):
    """:func:`fastst.tools.inspect.verify_checkpoint`: ``file_len`` and
    ``tensors`` summed over the shards, each finding tagged with its
    ``shard``."""

    kind: Literal["checkpoint"]
    shards: List[ShardVerification]


class _VerifyReport(FileVerification):
    kind: Annotated[
        Literal["file", "checkpoint", "folder"],
        Schema(
            description="folder: a folder nested too deep to scan, with its folder-too-deep finding"
        ),
    ]
    fails: bool  # a red-flag finding at or above --fail-on (exit 1)
    malformed: bool  # a finding says the input breaks the format
    inconclusive: bool  # malformed or not complete, and not failing (exit 2)


class VerifyReport(_VerifyReport, total=False):
    """An input of ``fastst verify``."""

    shards: List[ShardVerification]


class SignatureNote(TypedDict):
    rule: Literal["signature-not-checked"]
    severity: Severity
    model: str  # the input the signature file was found with
    path: str  # the signature file
    checked: Literal[False]
    message: str


class StaleTempNote(TypedDict):
    rule: Literal["stale-temp-file"]
    severity: Severity
    path: str
    message: str


# hash ----------------------------------------------------------------------------


class FileHashes(TypedDict):
    """:func:`fastst.tools.inspect.hash_file`."""

    path: str
    file_len: Count
    sha256: Sha256  # of the whole file
    autov1: Annotated[str, Schema(pattern="^[0-9a-f]{0,8}$")]  # 0x10000 bytes at 0x100000
    autov2: Annotated[str, Schema(pattern="^[0-9a-f]{10}$")]  # sha256's first 10 digits
    autov3: Optional[Sha256]  # bytes after the header; None when the prefix points past the end
    header_len: Optional[Count]
    header_sha256: Optional[Sha256]  # of the canonical header; None when it cannot be parsed
    tensors: Optional[Dict[str, Sha256]]  # tensors=True: per tensor, in file order
    header_problem: Optional[Finding]  # why the header could not be hashed


class _ShardHashes(FileHashes):
    file: str


class ShardHashes(_ShardHashes, total=False):
    check: List[Finding]  # hash --check: embedded hashes compared


class CheckpointHashes(TypedDict):
    """:func:`fastst.tools.inspect.hash_checkpoint` (and its report)."""

    path: str
    kind: Literal["checkpoint"]
    checkpoint_sha256: Sha256  # of the sha256sum listing of the index and every shard
    index_sha256: Sha256
    shards: List[ShardHashes]
    tensors: Optional[Dict[str, Sha256]]


class _FileHashReport(FileHashes):
    kind: Literal["file"]


class FileHashReport(_FileHashReport, total=False):
    check: List[Finding]  # hash --check: embedded hashes compared


#: An input of ``fastst hash``.
HashReport = Union[FileHashReport, CheckpointHashes]


# meta ----------------------------------------------------------------------------


class DreamboothToken(TypedDict):
    token: str  # from a "<repeats>_<token>" folder name or a subset's class_tokens
    repeats: int


class Network(TypedDict):
    type: Optional[str]  # LoRA, LyCORIS (algo)...
    module: Optional[str]  # ss_network_module
    dim: Optional[float]
    alpha: Optional[float]
    args: Optional[Dict[str, Any]]


class Training(TypedDict):
    started: Optional[str]  # UTC, ISO 8601
    finished: Optional[str]
    duration_s: Optional[float]
    steps: Optional[float]
    max_train_steps: Optional[float]
    epochs: Optional[float]
    images: Optional[float]
    optimizer: Optional[str]
    learning_rate: Optional[float]


class Thumbnail(TypedDict):
    mime: str
    bytes: Count  # decoded size


class MetadataCard(TypedDict):
    """:func:`fastst.tools.inspect.metadata_card`: the facts a person wants
    from a file's ``__metadata__``."""

    title: Optional[str]
    name: Optional[str]
    description: Optional[str]
    author: Optional[str]
    license: Optional[str]
    date: Optional[str]
    format: Optional[str]  # Hugging Face "format" (pt, tf, flax, np...)
    trigger_words: List[str]  # trigger phrase, keywords and DreamBooth tokens merged
    trigger_phrase: Optional[str]
    keywords: List[str]
    dreambooth_tokens: List[DreamboothToken]
    top_tags: List[Annotated[List[Union[str, int]], Schema(minItems=2, maxItems=2)]]  # [tag, n]
    base_model: Optional[str]
    sd_model_name: Optional[str]
    architecture: Optional[str]
    resolution: Optional[str]
    network: Optional[Network]
    training: Optional[Training]
    source_url: Optional[str]
    civitai_model_id: Optional[int]
    civitai_version_id: Optional[int]
    thumbnail: Optional[Thumbnail]
    cover_images: Count
    embedded_hashes: Dict[str, str]  # sshs_model_hash, sshs_legacy_hash, modelspec.hash_sha256
    merged_from: Optional[str]
    notes: List[str]  # "key: problem" for each value the card could not use


class MetadataWritten(TypedDict):
    source: str  # the file edited (the report's path is where it was written)
    set: List[str]
    removed: List[str]
    tensors: Count
    data_unchanged: bool


class _MetaReport(TypedDict):
    path: str
    kind: Kind
    card: MetadataCard
    metadata: Dict[str, Any]  # __metadata__, values holding JSON decoded


class MetaReport(_MetaReport, total=False):
    """An input of ``fastst meta``."""

    index_metadata: Dict[str, Any]
    written: MetadataWritten  # meta --set/--unset
    config: ModelConfig  # config.json beside the weights, when there is one


# diff ----------------------------------------------------------------------------


#: The largest difference: None when compared bit for bit (BOOL, complex,
#: 8/6/4-bit floats); the command writes an infinite one as "inf".
Difference = Optional[Union[float, Literal["inf"]]]


class _DtypeChange(TypedDict):
    name: str
    a: str
    b: str


class DtypeChange(_DtypeChange, total=False):
    """A dtype change; of the same shape, with the values compared as float64."""

    differing: Count
    max_abs: Difference
    rel_l2: Optional[float]
    cosine: Optional[float]


class ShapeChange(TypedDict):
    name: str
    a: List[Count]
    b: List[Count]


class TensorDifference(TypedDict):
    name: str
    dtype: str
    shape: List[Count]
    elements: Count
    differing: Count  # elements whose values differ
    max_abs: Difference
    max_rel: Difference  # |a-b| / max(|a|, |b|)
    rel_l2: Optional[float]  # ||a-b|| / ||a|| over the finite pairs; None when ||a|| is 0
    cosine: Optional[float]  # a.b / (||a|| ||b||); None when a norm is 0


class LayerChange(TypedDict):
    """One numbered block (``model.layers.N``) of a diff."""

    layer: str
    tensors: Count  # names both hold
    changed: Count  # of them, differing in values, dtype or shape
    max_rel_l2: Optional[float]  # the largest rel_l2 among them


class MetadataDiff(TypedDict):
    only_in_a: Dict[str, str]
    only_in_b: Dict[str, str]
    changed: Dict[str, Annotated[List[str], Schema(minItems=2, maxItems=2)]]  # [a, b]


class DiffReport(TypedDict):
    """:func:`fastst.tools.inspect.diff` (and its report)."""

    a: str
    b: str
    identical: bool  # nothing below differs (the layouts may)
    tensors: Count  # names both hold
    only_in_a: List[str]
    only_in_b: List[str]
    dtype_changed: List[DtypeChange]
    shape_changed: List[ShapeChange]
    identical_tensors: Count  # same dtype and shape, byte-identical data
    different: List[TensorDifference]
    layers: List[LayerChange]
    metadata: MetadataDiff
    values_compared: bool  # False with --no-values: headers and metadata only


# stats ---------------------------------------------------------------------------


#: A value: an int for the integer dtypes and BOOL, a float otherwise.
Value = Union[int, float]


class Histogram(TypedDict):
    """Equal-width bins over the finite values, numpy's rule: ``[min, max]``
    (``[v - 0.5, v + 0.5]`` when every value is ``v``), the last bin closed."""

    lo: float  # left edge of the first bin
    hi: float  # right edge of the last bin
    counts: List[Count]
    # False for 32/64-bit dtypes: binned by the value as F32 cut to 8 significant
    # bits, so a value within about 0.4% of an edge may land in the next bin
    exact: bool


class TensorStats(TypedDict):
    """What one tensor's values look like (:func:`fastst.tools.stats.tensor_stats`).

    BOOL reads as 0/1 (any non-zero byte is true), the F8/F6/F4 kinds as
    ml_dtypes decodes them; C64 is described as its real and imaginary parts
    together (``values`` is twice the elements). Min, max, mean and std are
    over the finite values; std is the population std (numpy's ``ddof=0``)."""

    name: str
    dtype: str
    shape: List[Count]
    shard: Optional[str]  # the file holding it in a checkpoint (None for a single file)
    values: Count  # values described (C64: 2 per element)
    finite: Count  # neither NaN nor infinite
    nan: Count
    inf: Count  # +Inf and -Inf
    zero: Count  # equal to 0 (-0.0 too; BOOL: false)
    min: Optional[Value]  # None without finite values
    max: Optional[Value]
    abs_max: Optional[Value]
    mean: Optional[float]  # None without finite values, or when it overflows
    std: Optional[float]
    histogram: Optional[Histogram]


class StatsReport(TypedDict):
    """An input of ``fastst stats``: a file or a checkpoint, its tensors."""

    path: str
    kind: Kind
    tensors: List[TensorStats]


# convert -------------------------------------------------------------------------


class ConvertReport(TypedDict):
    """:func:`fastst.tools.convert.convert_pickle` (and its report)."""

    source: str
    output: str  # the file written, or the index of a sharded checkpoint
    format: Literal["pytorch-zip", "pickle", "zip"]  # what the source was
    picked: Optional[str]  # the key the state dict was found under
    tensors: Count
    parameters: Count
    bytes: Count
    removed_shared: Dict[str, str]  # dropped name -> the name kept for the same storage
    skipped: List[str]  # entries of the state dict that are not tensors
    dtype: Optional[str]  # the floating-point dtype asked for (a torch name)
    converted: Count  # tensors converted to it
    files: Annotated[List[str], Schema(minItems=1)]  # every file written
    verified: Literal[True]  # every tensor read back equal


# provenance ----------------------------------------------------------------------


class ProvenanceFinding(TypedDict):
    rule: str  # a signature-* rule id
    severity: Severity
    message: str
    path: Optional[str]  # the model's file it is about (POSIX, relative), or None


class SignedFile(TypedDict):
    name: str
    digest: str
    algorithm: str


class SignReport(TypedDict):
    """``fastst sign`` (:class:`fastst.tools.provenance.SignResult`)."""

    model: str
    signature: str  # the file written
    model_name: str
    method: Literal["key", "certificate"]
    serialization: Dict[str, Any]
    files: List[SignedFile]
    root_digest: str
    findings: List[ProvenanceFinding]
    seconds: float


class SignatureReport(TypedDict):
    """``fastst verify --signature`` (:class:`fastst.tools.provenance.VerifyResult`)."""

    model: str
    signature: str
    method: Literal["key", "certificate", "sigstore"]
    verified: bool  # authentic, every file matches, no finding above info
    signature_valid: bool
    signed_model_name: Optional[str]
    serialization: Optional[Dict[str, Any]]
    files_checked: Count
    findings: List[ProvenanceFinding]
    seconds: float


# the envelope --------------------------------------------------------------------


class _Envelope(TypedDict):
    fastst: Producer
    errors: List[ErrorEntry]


class InspectEnvelope(_Envelope):
    command: Literal["inspect"]
    results: List[InspectReport]


class _VerifyEnvelope(_Envelope):
    command: Literal["verify"]
    results: List[VerifyReport]
    fail_on: Severity


class VerifyEnvelope(_VerifyEnvelope, total=False):
    signatures: Annotated[
        List[SignatureNote],
        Schema(
            description="signature files found beside the inputs that plain verify does not "
            "check (rule signature-not-checked)"
        ),
    ]
    stale_temp_files: Annotated[
        List[StaleTempNote],
        Schema(
            description="temporary files an interrupted fastst save left in the folders "
            "verified or beside the files verified (rule stale-temp-file); reported, not "
            "counted against fail_on"
        ),
    ]


class HashEnvelope(_Envelope):
    command: Literal["hash"]
    results: List[HashReport]


class MetaEnvelope(_Envelope):
    command: Literal["meta"]
    results: List[MetaReport]


class DiffEnvelope(_Envelope):
    command: Literal["diff"]
    results: Annotated[List[DiffReport], Schema(maxItems=1)]


class StatsEnvelope(_Envelope):
    command: Literal["stats"]
    results: List[StatsReport]


class ConvertEnvelope(_Envelope):
    command: Literal["convert"]
    results: Annotated[List[ConvertReport], Schema(maxItems=1)]


class SignEnvelope(_Envelope):
    command: Literal["sign"]
    results: Annotated[List[SignReport], Schema(maxItems=1)]


class SignatureEnvelope(_Envelope):
    command: Literal["verify-signature"]
    results: Annotated[List[SignatureReport], Schema(maxItems=1)]
    fail_on: Severity


#: Every ``fastst SUBCOMMAND --json`` document.
Envelope = Union[
    InspectEnvelope,
    VerifyEnvelope,
    HashEnvelope,
    MetaEnvelope,
    DiffEnvelope,
    StatsEnvelope,
    ConvertEnvelope,
    SignEnvelope,
    SignatureEnvelope,
]
