"""Small manners of the `fastst` command: `--sort` and `--filter` list the
tensors without `--tensors`; a mistyped subcommand or option gets a "did
you mean"; every subcommand's help describes it and ends with examples that
parse; help texts read alike."""

from __future__ import annotations

import shlex
from pathlib import Path

import fastst.numpy
import numpy as np
import pytest
from fastst.cli.parser import build_parser, check_conflicts
from helpers.cli_files import run


@pytest.fixture()
def model(tmp_path: Path) -> Path:
    path = tmp_path / "m.safetensors"
    fastst.numpy.save_file(
        {"a.weight": np.zeros(4, np.float32), "b.weight": np.zeros(8, np.float32)}, path
    )
    return path


def test_sort_and_filter_list_the_tensors(model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for option in (["--sort", "size"], ["--filter", "b*"], ["--sort", "offset"]):
        code, out, _ = run(["inspect", *option, str(model)], capsys)
        assert code == 0 and "  name " in out and "b.weight" in out, option
    _, out, _ = run(["inspect", "--filter", "b*", str(model)], capsys)
    assert "a.weight" not in out and "(1 of 2 tensors match 'b*')" in out
    _, out, _ = run(["inspect", str(model)], capsys)
    assert "  name " not in out


@pytest.mark.parametrize(
    "argv,hint",
    [
        (["inspct", "x"], "unknown command 'inspct'; did you mean inspect?"),
        (["verfy", "x"], "did you mean verify?"),
        (["inspect", "--tensor5", "x"], "did you mean --tensor or --tensors?"),
        (["hash", "--chek", "x"], "did you mean --check?"),
        (["meta", "--unsett=k", "x"], "did you mean --unset or --set?"),
    ],
)
def test_did_you_mean(argv: list, hint: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(argv, capsys)
    assert code == 2 and out == ""
    assert err.splitlines()[-1].endswith(hint), err


def test_no_guess_for_nonsense(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["zzzzzz", "x"], capsys)
    assert code == 2 and "unknown command 'zzzzzz'" in err and "did you mean" not in err
    code, _, err = run(["inspect", "--\x1b[2J", "x"], capsys)
    assert code == 2 and "\x1b" not in err


def test_every_subcommand_explains_itself_with_examples() -> None:
    parser = build_parser()
    (action,) = [a for a in parser._actions if a.dest == "command"]
    for name, sub in action.choices.items():  # type: ignore[union-attr]
        assert sub.description, name
        text = sub.format_help()
        tail = text.rstrip("\n").split("\n\n")[-1].splitlines()
        assert tail[0] == "examples:", name
        assert 2 <= len(tail) - 1 <= 3, name
        for line in tail[1:]:
            words = shlex.split(line.split("  #")[0].split(">")[0], comments=False)
            assert words[:2] == ["fastst", name], line
            args = parser.parse_args(words[1:])
            check_conflicts(parser, args)
        for a in sub._actions:
            if a.help and a.option_strings != ["-h", "--help"]:
                assert not a.help.rstrip().endswith("."), (name, a.help)
                assert a.help[0].islower() or a.help.split()[0].isupper(), (name, a.help)
