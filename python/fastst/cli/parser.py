"""The ``fastst`` command's arguments: subcommands, options, usage errors and conflicting flags.

Usage errors exit with 2, their messages escaped."""

from __future__ import annotations

import argparse
import difflib
import sys
from typing import Any, Dict, Iterable

from .._fastst import __version__
from .._fastst.read import DEFAULT_HEADER_CAP
from .._paths import readable
from .._sources.remote import is_url
from .._text import escape
from ..tools import inspect as fi
from ..tools.stats import MAX_BINS
from . import provenance as prov
from . import render
from .argtypes import key_value, non_negative, positive
from .exits import EXIT_ERROR

# parser --------------------------------------------------------------------


class _Formatter(argparse.HelpFormatter):
    """argparse's layout, except that an ``examples:`` epilog keeps its lines."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if text.startswith("examples:"):
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


class _Parser(argparse.ArgumentParser):
    """argparse with its messages escaped (arguments are untrusted text too)
    and a "did you mean" for a mistyped subcommand or option."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> Any:  # type: ignore[override]
        self.print_usage(sys.stderr)
        self.exit(EXIT_ERROR, f"{self.prog}: error: {render.escape(message)}\n")

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        words = list(sys.argv[1:] if args is None else args)
        commands = _subcommands(self)
        if commands and words and not words[0].startswith("-") and words[0] not in commands:
            self.error(f"unknown command {words[0]!r}{_did_you_mean(words[0], commands)}")
        parsed, extras = super().parse_known_args(words, namespace)
        if extras and commands:
            chosen = commands.get(getattr(parsed, "command", None) or "", self)
            options = [o for o in chosen._option_string_actions if o not in ("-h", "--help")]
            typos = [w for w in extras if w.startswith("-")]
            hint = _did_you_mean(typos[0].split("=")[0], options) if typos else ""
            self.error(f"unrecognized arguments: {' '.join(extras)}{hint}")
        return parsed, extras


def _subcommands(parser: argparse.ArgumentParser) -> Dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _did_you_mean(word: str, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=2, cutoff=0.6)
    return f"; did you mean {' or '.join(close)}?" if close else ""


def _examples(*lines: str) -> str:
    """A subcommand's epilog: its examples, one command per line."""
    return "examples:\n" + "".join(f"  {line}\n" for line in lines)


#: Two or three examples at the end of each subcommand's help.
EXAMPLES = {
    "inspect": _examples(
        "fastst inspect model.safetensors          # summary and layer view",
        "fastst inspect --sort size ./llama        # every tensor, largest first",
        "fastst inspect --html report.html ./llama  # a page to share",
    ),
    "verify": _examples(
        "fastst verify --values model.safetensors  # rules, findings, NaN/Inf",
        "fastst verify --format sarif ./models > fastst.sarif",
        "fastst verify ./model --signature model.sig --public-key key.pub",
    ),
    "hash": _examples(
        "fastst hash model.safetensors             # SHA-256, AutoV1/V2/V3",
        "fastst hash --tensors --check lora.safetensors",
    ),
    "diff": _examples(
        "fastst diff base.safetensors finetuned.safetensors",
        "fastst diff --html diff.html ./llama-base ./llama-tuned",
        "fastst diff --no-values huge-a.safetensors huge-b.safetensors",
    ),
    "stats": _examples(
        "fastst stats model.safetensors",
        "fastst stats ./llama --tensor '*.mlp.down_proj.weight'",
        "fastst stats --html values.html --tensor lm_head.weight model.safetensors",
    ),
    "convert": _examples(
        "fastst convert pytorch_model.bin model.safetensors",
        "fastst convert --dtype bf16 --max-shard-size 5GB model.ckpt ./out",
    ),
    "consolidate": _examples(
        "fastst consolidate ./ckpt/sharded ./ckpt   # the ranks' files -> index + shards",
        "fastst consolidate --max-shard-size 5GB ./step-1000 ./hf-model",
    ),
    "meta": _examples(
        "fastst meta lora.safetensors              # card and raw metadata",
        "fastst meta --set modelspec.license=MIT --in-place lora.safetensors",
        "fastst meta --unset ss_tag_frequency --output clean.safetensors lora.safetensors",
    ),
    "sign": _examples(
        "fastst sign ./model --key key.pem         # writes ./model/model.sig",
        "fastst sign model.safetensors --key key.pem --signature model.sig",
    ),
    "sbom": _examples(
        "fastst sbom ./model > model.cdx.json",
        "fastst sbom model.safetensors --output model.cdx.json",
    ),
}


def _add_common(p: argparse.ArgumentParser, files: bool = True) -> None:
    if files:
        p.add_argument("files", nargs="+", metavar="FILE", help="files, checkpoints or folders")
    p.add_argument("--json", action="store_true", help="machine-readable JSON on stdout")
    p.add_argument(
        "--header-cap",
        type=non_negative,
        default=DEFAULT_HEADER_CAP,
        metavar="BYTES",
        help=f"largest header accepted (default {DEFAULT_HEADER_CAP:,})",
    )
    _add_look(p)


def _add_look(p: argparse.ArgumentParser) -> None:
    """--no-progress and the text layout options every subcommand takes."""
    p.add_argument("--no-progress", action="store_true", help="never show progress on stderr")
    look = p.add_argument_group("text output")
    look.add_argument(
        "--width",
        type=non_negative,
        metavar="COLUMNS",
        help="lay text out in COLUMNS columns (default: the terminal's width; "
        "no limit when not a terminal; 0: no limit)",
    )
    look.add_argument(
        "--wide",
        "--full",
        dest="full",
        action="store_true",
        help="show everything: no width limit, names never shortened, every difference listed",
    )
    look.add_argument(
        "--color",
        choices=("auto", "always", "never"),
        default="auto",
        help="colour: auto (default: on a terminal, unless NO_COLOR is set), always, never",
    )


def _add_html(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--html",
        metavar="REPORT",
        help="also write the report as one self-contained HTML page (inline CSS and SVG "
        "charts, nothing loaded from anywhere)",
    )


def _add_threads(p: argparse.ArgumentParser, default: str = "one per core") -> None:
    p.add_argument(
        "--threads",
        type=non_negative,
        default=0,
        metavar="N",
        help=f"worker threads (default: {default})",
    )


def _add_ascii(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--ascii", action="store_true", help="draw charts in ASCII instead of Unicode blocks"
    )


def _add_fail_on(p: argparse.ArgumentParser, default: str) -> None:
    p.add_argument(
        "--fail-on",
        choices=fi.SEVERITIES,
        default=default,
        metavar="SEVERITY",
        help=f"exit 1 when a finding is at least this severe: {', '.join(fi.SEVERITIES)} "
        f"(default {default})",
    )


_EPILOG = (
    "exit codes: 0 clean; 1 findings at or above --fail-on; 2 error, unreadable or "
    "non-safetensors input, bad usage (also bare `fastst`), or an inconclusive verification; "
    "130 interrupted; 141 output pipe closed"
)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="fastst",
        description="Inspect, verify, hash and read the metadata of .safetensors files "
        "and sharded checkpoints without running any model code.",
        epilog=_EPILOG,
    )
    parser.add_argument("--version", action="version", version=f"fastst {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    p = sub.add_parser(
        "inspect",
        help="header summary, layer view, tensor table, tensor values",
        description="Summarise files, sharded checkpoints and model folders from their headers: "
        "sizes, dtypes, metadata keys, the config.json beside the weights, and the tensors "
        "grouped by repeated structure (the layer view); --tensors lists every tensor, --tensor "
        "prints one's values. Nothing but the header is read unless values are asked for.",
    )
    _add_common(p)
    p.add_argument(
        "--tensors", action="store_true", help="list every tensor instead of the layer view"
    )
    p.add_argument(
        "--sort",
        choices=("offset", "name", "size"),
        help="list the tensors in this order: offset (file order, the default), name, "
        "size (largest first); implies --tensors",
    )
    p.add_argument(
        "--filter",
        metavar="GLOB",
        help="list only tensors whose name matches GLOB; implies --tensors",
    )
    p.add_argument("--tensor", metavar="NAME", help="print the values of tensor NAME")
    _add_html(p)
    p.add_argument(
        "--max-values",
        type=non_negative,
        default=1000,
        metavar="N",
        help="summarise arrays with more than N values (default 1,000)",
    )

    p = sub.add_parser(
        "verify",
        help="structural rules and forensic findings",
        description="Check files, checkpoints and folders against the reader's rules and report "
        "forensic findings (suspicious names, metadata, holes, appended payloads, pickles; with "
        "--values NaN/Inf and BOOL bytes), most severe first; or, with --signature, check a "
        "model signature. Exit 1 when a finding is at or above --fail-on.",
    )
    _add_common(p)
    _add_threads(p)
    p.add_argument(
        "--format",
        choices=("text", "json", "sarif"),
        default=None,
        help="output format: text (default), json (same as --json) or sarif (SARIF 2.1.0)",
    )
    p.add_argument("--values", action="store_true", help="also scan values (NaN/Inf, BOOL bytes)")
    _add_fail_on(p, "low")
    prov.add_verify_signature_args(p)

    p = sub.add_parser(
        "hash",
        help="SHA-256, AutoV1/V2/V3, header and per-tensor hashes",
        description="Hash files and checkpoints the way the ecosystem names them: SHA-256 of "
        "the file, AutoV1, AutoV2, AutoV3 (the CivitAI hash), the canonical header and, with "
        "--tensors, every tensor; --check compares them with the hashes the metadata embeds.",
    )
    _add_common(p)
    _add_threads(p)
    p.add_argument("--tensors", action="store_true", help="also hash every tensor")
    p.add_argument(
        "--check",
        action="store_true",
        help="compare with sshs_model_hash / modelspec.hash_sha256 in the metadata",
    )
    _add_fail_on(p, "low")

    p = sub.add_parser(
        "diff",
        help="compare two files or checkpoints tensor by tensor",
        description="Compare A and B (files, index files or model folders): tensors only "
        "in one, dtype and shape changes, identical tensors, value differences with the "
        "change profile (max abs, relative L2, cosine) and a per-layer summary, metadata. "
        "Reads both sides' data once (--no-values: headers only). "
        "Exit 0 identical, 1 different, 2 error.",
    )
    p.add_argument("a", metavar="A", help="a file, an index file or a model folder")
    p.add_argument("b", metavar="B", help="a file, an index file or a model folder")
    _add_common(p, files=False)
    _add_threads(p)
    _add_html(p)
    p.add_argument(
        "--no-values",
        action="store_true",
        help="compare names, dtypes, shapes and metadata only: read no tensor data",
    )
    _add_ascii(p)

    p = sub.add_parser(
        "stats",
        help="per tensor min, max, mean, std, NaN/Inf/zero counts and a histogram",
        description="Describe the values of each tensor: min, max, mean and std of the "
        "finite values, abs-max, NaN/Inf/zero counts and a histogram, read in one pass "
        "over the data on every core. Kinds of at most 16 bits are exact; 32/64-bit "
        "kinds are summed in float64 (integers exactly) and binned by their value cut to "
        "8 significant bits. Tensors repeated in numbered blocks (model.layers.N.) get "
        "a per-layer profile; a single tensor gets its histogram as bars.",
    )
    _add_common(p)
    _add_threads(p)
    p.add_argument(
        "--tensor", metavar="PATTERN", help="only tensors whose name matches the glob PATTERN"
    )
    p.add_argument(
        "--bins",
        type=positive,
        default=32,
        metavar="N",
        help=f"histogram bins, at most {MAX_BINS:,} (default 32)",
    )
    _add_ascii(p)
    _add_html(p)

    p = sub.add_parser(
        "convert",
        help="a PyTorch checkpoint to safetensors, never running code from it",
        description="Convert a PyTorch checkpoint (.bin/.pt/.pth/.ckpt) to safetensors. It is "
        "loaded only with torch.load(weights_only=True), which refuses anything but tensors "
        "and plain containers; shared tensors are stored once (dropped names recorded in the "
        "metadata); the written file is read back and compared tensor by tensor.",
    )
    p.add_argument("source", metavar="IN", help="the PyTorch checkpoint")
    p.add_argument(
        "output", metavar="OUT", help="the .safetensors file (a folder with --max-shard-size)"
    )
    _add_common(p, files=False)
    p.add_argument("--key", metavar="KEY", help="entry holding the state dict (dotted: a.b)")
    p.add_argument(
        "--dtype", metavar="DTYPE", help="convert floating-point tensors: bf16, f16, f32, f64"
    )
    p.add_argument(
        "--max-shard-size", metavar="SIZE", help="write shards of at most SIZE (e.g. 5GB) into OUT"
    )
    p.add_argument(
        "--max-pickle-size",
        metavar="SIZE",
        help="refuse a checkpoint whose pickle is larger than SIZE (default 256MiB)",
    )
    p.add_argument("--force", action="store_true", help="replace OUT if it exists")

    p = sub.add_parser(
        "consolidate",
        help="a torch.distributed.checkpoint save's rank files to whole tensors",
        description="Turn the ranks' .safetensors files of a torch.distributed.checkpoint save "
        "in the Hugging Face layout (IN) into the consolidated checkpoint inference loads (OUT: "
        "model-*.safetensors and model.safetensors.index.json), whole or not at all.",
    )
    p.add_argument("source", metavar="IN", help="the folder (or URL prefix) of the ranks' files")
    p.add_argument("output", metavar="OUT", help="the folder to write the checkpoint into")
    p.add_argument(
        "--max-shard-size", metavar="SIZE", help="write shards of at most SIZE (e.g. 5GB)"
    )
    _add_threads(p, "8, whatever the cores: the work waits on the disk")
    _add_look(p)

    p = sub.add_parser(
        "meta",
        help="metadata card and raw metadata; --set/--unset edit it",
        description="Show the __metadata__ of files and checkpoints as a card (the facts the "
        "model's kind has: title, author, trigger words, training...) and as decoded values, "
        "with the config.json beside the weights; --set/--unset rewrite it atomically, the "
        "tensors copied unchanged.",
    )
    _add_common(p)
    p.add_argument("--raw", action="store_true", help="only the raw metadata, no card")
    edit = p.add_argument_group("editing (the tensors are copied unchanged, checked by SHA-256)")
    edit.add_argument(
        "--set",
        action="append",
        type=key_value,
        default=[],
        metavar="KEY=VALUE",
        help="set a metadata key (repeatable)",
    )
    edit.add_argument(
        "--unset", action="append", default=[], metavar="KEY", help="remove a key (repeatable)"
    )
    edit.add_argument("--output", metavar="OUT", help="write the edited file to OUT")
    edit.add_argument("--in-place", action="store_true", help="replace FILE (atomically)")

    _add_look(prov.add_sign_parser(sub))
    sbom_parser = prov.add_sbom_parser(sub)
    _add_look(sbom_parser)
    sbom_parser.set_defaults(json=False)
    for name, sub_parser in sub.choices.items():
        sub_parser.epilog = EXAMPLES.get(name, sub_parser.epilog)
    return parser


def _usage_error(parser: argparse.ArgumentParser, message: str) -> None:
    parser.error(message)


def check_conflicts(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Turns a missing command and flags that contradict each other into a
    usage error (exit 2)."""
    if args.command is None:
        _usage_error(parser, "a command is required")
    if args.command == "inspect" and (args.sort or args.filter is not None):
        args.tensors = True
    if args.command == "verify":
        if args.json and args.format not in (None, "json"):
            _usage_error(parser, f"--json conflicts with --format {args.format}")
        args.format = "json" if args.json else (args.format or "text")
        problem = prov.signature_usage_error(args)
        if problem:
            _usage_error(parser, problem)
    if args.command == "stats" and args.bins > MAX_BINS:
        _usage_error(parser, f"--bins is at most {MAX_BINS:,}")
    if args.command == "meta":
        if args.raw and args.json:
            _usage_error(parser, "--raw shapes the text output only; it conflicts with --json")
        editing = bool(args.set or args.unset)
        if args.output is not None and args.in_place:
            _usage_error(parser, "--output conflicts with --in-place")
        if editing and args.output is None and not args.in_place:
            _usage_error(parser, "--set/--unset need --output OUT or --in-place")
        if not editing and (args.output is not None or args.in_place):
            _usage_error(parser, "--output/--in-place need --set or --unset")
        if editing and args.output is not None and len(args.files) != 1:
            _usage_error(parser, "--output takes exactly one FILE")
        if editing and args.raw:
            _usage_error(parser, "--raw conflicts with --set/--unset")
        urls = [f for f in [*args.files, args.output or ""] if is_url(f)]
        if editing and urls:
            shown = escape(readable(urls[0]))
            _usage_error(parser, f"--set/--unset edit local files; {shown} is a URL (read-only)")
