"""Command-line wiring of provenance: signing, SBOMs and checking a model's signature.

``fastst sign``, ``fastst sbom`` and ``fastst verify MODEL --signature SIG
--public-key KEY``.

The main ``fastst`` parser calls :func:`add_sign_parser`,
:func:`add_sbom_parser` and :func:`add_verify_signature_args`; the
``run_*`` handlers take the parsed arguments and an output object with
``print(text)`` (stdout) and ``stderr``, and return the exit code: 0 clean,
1 findings at or above ``--fail-on``, 2 an error. What they print is
shaped in :mod:`fastst.cli.provenance_render` and :mod:`fastst.cli.sarif`. Only the standard library
is imported here; the signing libraries load when a command runs.
"""

from __future__ import annotations

import argparse
import os
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .._fastst.read import DEFAULT_HEADER_CAP
from .argtypes import non_negative, positive
from .exits import EXIT_ERROR, EXIT_FINDINGS, EXIT_OK
from .provenance_render import _print_findings, _print_verify, _rank, clean, print_unchecked
from .render import envelope, one_line, paragraph, plural
from .sarif import signature_sarif_log

__all__ = [
    "EXIT_OK",
    "EXIT_FINDINGS",
    "EXIT_ERROR",
    "JSON_VERSION",
    "clean",
    "add_sign_parser",
    "run_sign",
    "add_sbom_parser",
    "run_sbom",
    "add_verify_signature_args",
    "SIGNATURE_OPTIONS",
    "signature_options",
    "wants_signature_check",
    "signature_usage_error",
    "run_verify_signature",
    "unchecked_signatures",
    "print_unchecked",
]


#: Version of the JSON documents these commands print.
JSON_VERSION = 1


def _err(out: Any, message: str) -> None:
    """One escaped line on stderr, recorded among the command's errors."""
    no_path = ""
    out.error(no_path, message)


def _dump(out: Any, data: Any) -> None:
    out.json(data)


# sign -----------------------------------------------------------------------------


def add_sign_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Adds ``fastst sign`` to the main parser's subparsers."""
    p = subparsers.add_parser(
        "sign",
        help="sign a model (OpenSSF model signing format, verifiable by model_signing)",
        description="Sign a .safetensors file, a model folder or a sharded checkpoint "
        "(its *.safetensors.index.json) with an elliptic-curve private key. The signature "
        "is a Sigstore bundle that `model_signing verify key` (or `certificate`) accepts.",
    )
    p.add_argument("model", metavar="MODEL", help="file, folder or *.safetensors.index.json")
    p.add_argument("--key", required=True, metavar="PRIVATE_KEY", help="PEM private key (EC)")
    p.add_argument(
        "--signature",
        metavar="OUT",
        help="signature file to write (default: FOLDER/model.sig, or FILE.sig)",
    )
    p.add_argument("--certificate", metavar="PEM", help="signing certificate for the key")
    p.add_argument(
        "--certificate-chain",
        action="append",
        default=[],
        metavar="PEM",
        help="intermediate certificates to include (repeatable)",
    )
    p.add_argument(
        "--password-file", metavar="FILE", help="file holding the private key's password"
    )
    _add_model_options(p)
    p.add_argument(
        "--shard-size",
        type=positive,
        metavar="BYTES",
        help="use the 'shards' serialization (files hashed in pieces of BYTES, in parallel)",
    )
    p.add_argument("--json", action="store_true", help="machine-readable JSON on stdout")
    p.set_defaults(run=run_sign)
    return p


def _add_model_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--ignore-path",
        action="append",
        default=[],
        metavar="PATH",
        help="file or folder of the model to leave out (repeatable)",
    )
    p.add_argument(
        "--no-ignore-git-paths",
        dest="ignore_git_paths",
        action="store_false",
        help="also cover .git, .gitattributes, .github, .gitignore",
    )
    p.add_argument(
        "--allow-symlinks",
        action="store_true",
        help="read links to files inside the model as files instead of refusing them "
        "(links to folders are left out, as model_signing does)",
    )
    if not any(a.dest == "threads" for a in p._actions):
        p.add_argument(
            "--threads",
            type=non_negative,
            default=0,
            metavar="N",
            help="hashing threads (default: one per core)",
        )


def run_sign(args: argparse.Namespace, out: Any) -> int:
    """Handler of ``fastst sign``."""
    from ..tools.provenance.findings import ProvenanceError
    from ..tools.provenance.signing import sign

    password = None
    try:
        if args.password_file:
            with open(args.password_file, "rb") as f:
                password = f.read().rstrip(b"\r\n")
        result = sign(
            args.model,
            args.key,
            signature=args.signature,
            certificate=args.certificate,
            certificate_chain=args.certificate_chain,
            password=password,
            ignore_paths=args.ignore_path,
            ignore_git_paths=args.ignore_git_paths,
            allow_symlinks=args.allow_symlinks,
            shard_size=args.shard_size,
            threads=args.threads,
        )
    except (ProvenanceError, OSError, ValueError) as exc:
        message = one_line(exc)
        _err(out, message)
        if args.json:
            _dump(out, envelope("sign", [], out))
        return EXIT_ERROR
    findings = [f.to_dict() for f in result.findings]
    if args.json:
        _dump(out, envelope("sign", [result.to_dict()], out))
    else:
        n = len({f.name.rsplit(":", 2)[0] if ":" in f.name else f.name for f in result.files})
        paragraph(
            out,
            "",
            f"{clean(result.model)}: signed {n} file{'s' if n != 1 else ''} with a "
            f"{result.method} -> {clean(result.signature)} ({result.seconds:.2f} s)",
            2,
        )
        if findings:
            out.print(f"  but {len(findings)} finding{'s' if len(findings) != 1 else ''}:")
            _print_findings(out, findings)
    return EXIT_FINDINGS if findings else EXIT_OK


# sbom -----------------------------------------------------------------------------


def add_sbom_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Adds ``fastst sbom`` to the main parser's subparsers."""
    p = subparsers.add_parser(
        "sbom",
        help="CycloneDX 1.6 ML-BOM of a model (JSON)",
        description="Write a CycloneDX 1.6 machine-learning BOM of a .safetensors file, a "
        "model folder or a sharded checkpoint: one machine-learning-model component per "
        "checkpoint with file hashes, model card facts, tensor and parameter counts.",
    )
    p.add_argument("model", metavar="MODEL", help="file, folder or *.safetensors.index.json")
    p.add_argument("--output", "-o", metavar="FILE", help="write here instead of stdout")
    p.add_argument(
        "--threads",
        type=non_negative,
        default=0,
        metavar="N",
        help="hashing threads (default: one per core)",
    )
    p.set_defaults(run=run_sbom)
    return p


def run_sbom(args: argparse.Namespace, out: Any) -> int:
    """Handler of ``fastst sbom``."""
    from .._errors import SafetensorError
    from ..tools.provenance.sbom import sbom

    try:
        result = sbom(args.model, output=args.output, threads=args.threads)
    except (SafetensorError, OSError, ValueError) as exc:
        _err(out, one_line(exc))
        return EXIT_ERROR
    if args.output:
        out.stderr.write(
            f"fastst: {clean(args.output)}: CycloneDX 1.6 BOM of "
            f"{plural(result.checkpoints, 'checkpoint')}, {plural(result.files, 'file')}\n"
        )
    else:
        out.stdout.write(result.text)
    return EXIT_OK


# verify --signature -------------------------------------------------------------------


def add_verify_signature_args(p: argparse.ArgumentParser) -> None:
    """Adds the signature options to the ``fastst verify`` parser."""
    g = p.add_argument_group(
        "signature",
        "check a model signature (OpenSSF model signing format); MODEL is then one file, "
        "folder or *.safetensors.index.json",
    )
    g.add_argument("--signature", metavar="SIG", help="signature file (Sigstore bundle)")
    g.add_argument("--public-key", metavar="KEY", help="PEM public key (EC) of the signer")
    g.add_argument(
        "--certificate-chain",
        action="append",
        default=[],
        metavar="PEM",
        help="trusted root/intermediate certificates, for certificate signatures (repeatable)",
    )
    g.add_argument(
        "--trust-root",
        metavar="JSON",
        help="the Sigstore trusted root (or client trust config) file, for keyless signatures",
    )
    g.add_argument("--identity", help="expected signer identity (Sigstore)")
    g.add_argument("--issuer", help="expected OIDC issuer of the identity (Sigstore)")
    g.add_argument(
        "--ignore-path",
        action="append",
        default=[],
        metavar="PATH",
        help="file or folder of the model to leave out (repeatable)",
    )
    g.add_argument(
        "--no-ignore-git-paths",
        dest="ignore_git_paths",
        action="store_false",
        help="do not leave out .git, .gitattributes, .github, .gitignore",
    )
    g.add_argument(
        "--allow-symlinks",
        action="store_true",
        help="read links to files inside the model as files instead of reporting them "
        "(links to folders are left out, as model_signing does)",
    )


#: The signature options of ``fastst verify``: destination -> (flag, value
#: when not given).
SIGNATURE_OPTIONS: Dict[str, Tuple[str, Any]] = {
    "signature": ("--signature", None),
    "public_key": ("--public-key", None),
    "certificate_chain": ("--certificate-chain", []),
    "trust_root": ("--trust-root", None),
    "identity": ("--identity", None),
    "issuer": ("--issuer", None),
    "ignore_path": ("--ignore-path", []),
    "ignore_git_paths": ("--no-ignore-git-paths", True),
    "allow_symlinks": ("--allow-symlinks", False),
}

#: Findings that mean the signature could not be judged (exit 2, not 1).
INCONCLUSIVE = frozenset({"signature-unsupported"})


def signature_options(args: argparse.Namespace) -> List[str]:
    """The signature options given to ``fastst verify`` (an empty string is
    given too)."""
    return [
        flag
        for dest, (flag, unset) in SIGNATURE_OPTIONS.items()
        if getattr(args, dest, unset) != unset
    ]


def wants_signature_check(args: argparse.Namespace) -> bool:
    """Whether ``fastst verify`` was given any signature option: then it
    checks a signature or fails, never falls back to the plain check."""
    return bool(signature_options(args))


def signature_usage_error(args: argparse.Namespace) -> Optional[str]:
    """Why the signature options of ``fastst verify`` cannot all be honoured
    (a usage error), or None: exactly one kind of trust, ``--identity`` and
    ``--issuer`` with ``--trust-root`` and only there, one MODEL, and no
    option of the plain check that a signature check would drop."""
    given = signature_options(args)
    if not given:
        return None
    trust = [f for f in ("--public-key", "--certificate-chain", "--trust-root") if f in given]
    who = [f for f in ("--identity", "--issuer") if f in given]
    if not trust:
        return (
            f"{', '.join(given)}: a signature check needs --public-key, --certificate-chain "
            "or --trust-root"
        )
    if len(trust) > 1:
        return f"{' and '.join(trust)} conflict: give one kind of trust"
    if trust == ["--trust-root"] and len(who) != 2:
        return "--trust-root needs --identity and --issuer"
    if trust != ["--trust-root"] and who:
        verb = "apply" if len(who) > 1 else "applies"
        return f"{' and '.join(who)} {verb} to --trust-root (Sigstore bundles) only"
    if len(getattr(args, "files", None) or []) != 1:
        return "checking a signature takes exactly one MODEL (file, folder or index)"
    if getattr(args, "values", False):
        return "--values belongs to the plain check; a signature check does not scan values"
    if getattr(args, "header_cap", DEFAULT_HEADER_CAP) != DEFAULT_HEADER_CAP:
        return "--header-cap belongs to the plain check; a signature check uses the default"
    return None


def _fail_on(args: argparse.Namespace) -> str:
    return getattr(args, "fail_on", None) or "low"


def run_verify_signature(args: argparse.Namespace, out: Any) -> int:
    """``fastst verify MODEL --signature SIG (--public-key KEY |
    --certificate-chain PEM | --trust-root JSON --identity I --issuer O)``."""
    from ..tools.provenance.findings import ProvenanceError
    from ..tools.provenance.verifying import verify_signature

    fmt = "json" if getattr(args, "json", False) else getattr(args, "format", "text")
    files = list(getattr(args, "files", None) or [getattr(args, "model", None)])
    error = None
    result = None
    if len(files) != 1 or files[0] is None:
        error = "checking a signature takes exactly one MODEL (file, folder or index)"
    else:
        try:
            result = verify_signature(
                files[0],
                args.signature,
                public_key=args.public_key,
                certificate_chain=args.certificate_chain,
                trust_root=args.trust_root,
                identity=args.identity,
                issuer=args.issuer,
                ignore_paths=args.ignore_path,
                ignore_git_paths=args.ignore_git_paths,
                allow_symlinks=args.allow_symlinks,
                threads=getattr(args, "threads", 0) or 0,
            )
        except (ProvenanceError, OSError, ValueError) as exc:
            error = one_line(exc)
    threshold = _rank(_fail_on(args))
    data = result.to_dict() if result is not None else None
    fails = data is not None and any(_rank(f["severity"]) >= threshold for f in data["findings"])
    if error:
        _err(out, error)
    if fmt == "json":
        results = [data] if data is not None else []
        _dump(out, envelope("verify-signature", results, out, fail_on=_fail_on(args)))
    elif fmt == "sarif":
        _dump(out, signature_sarif_log(data, files[0] if files else "", error))
    elif data is not None:
        _print_verify(out, data)
    if error or data is None:  # no result means the check could not run
        return EXIT_ERROR
    if data["verified"]:
        return EXIT_FINDINGS if fails else EXIT_OK
    judged = [f for f in data["findings"] if f["severity"] != "info"]
    if judged and all(f["rule"] in INCONCLUSIVE for f in judged):
        return EXIT_ERROR
    return EXIT_FINDINGS


# plain `fastst verify FOLDER`: notice signature files ----------------------------------


def unchecked_signatures(paths: Sequence[str]) -> List[Dict[str, Any]]:
    """Signature files found at the top of the folders in ``paths`` (and
    next to single files, as ``FILE.sig``) that plain ``fastst verify`` does
    not check: dicts with ``rule`` (``signature-not-checked``), ``severity``,
    ``path``, ``model``, ``checked`` (False) and ``message``."""
    from ..tools.provenance.bundle import find_signature_files
    from ..tools.provenance.findings import RULES

    notes = []
    for p in paths:
        if os.path.isdir(p):
            sigs = find_signature_files(p)
        elif os.path.isfile(p + ".sig"):
            sigs = [p + ".sig"]
        else:
            sigs = []
        for s in sigs:
            notes.append(
                {
                    "rule": "signature-not-checked",
                    "severity": RULES["signature-not-checked"][0],
                    "model": p,
                    "path": s,
                    "checked": False,
                    "message": f"{s}: signature file found but not checked; check it with "
                    f"fastst verify {p} --signature {s} --public-key KEY "
                    "(or --certificate-chain / --trust-root)",
                }
            )
    return notes
