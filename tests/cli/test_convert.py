"""`fastst convert IN OUT`: PyTorch checkpoints to safetensors with torch's
restricted unpickler only: code in a pickle is refused (and never runs),
shared tensors stored once as the hub's converter does, nested state dicts,
--dtype, --max-shard-size, a bit-for-bit check of what was written. Before
torch sees a checkpoint: TorchScript archives, zips other than torch.save's,
pickles naming anything a state dict does not need, storages that disagree
with the file, oversized or over-compressed pickles and torch older than 2.6
are refused, and torch.load is never called for them."""

from __future__ import annotations

import os
import shlex
import tracemalloc
import warnings
import zipfile
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

import fastst.numpy
import pytest
from helpers.cli_files import run, run_envelope

torch = pytest.importorskip("torch")

import fastst  # noqa: E402
import fastst.torch as ft  # noqa: E402
from fastst.tools.convert import convert_pickle  # noqa: E402


def _state() -> Dict[str, Any]:
    g = torch.Generator().manual_seed(0)
    emb = torch.randn(16, 8, generator=g)
    return {
        "model.embed_tokens.weight": emb,
        "lm_head.weight": emb,  # tied: one storage
        "layer.weight": torch.randn(8, 8, generator=g).to(torch.bfloat16),
        "layer.bias": torch.tensor([float("nan"), -0.0, 1.0]),
        "ids": torch.arange(5),
        "t": torch.randn(4, 6, generator=g).t(),  # not contiguous
    }


def _same(a: Any, b: Any) -> bool:
    return (
        a.dtype == b.dtype
        and a.shape == b.shape
        and torch.equal(
            a.contiguous().reshape(-1).view(torch.uint8),
            b.contiguous().reshape(-1).view(torch.uint8),
        )
    )


@pytest.mark.parametrize("legacy", [False, True])
def test_convert_plain_and_legacy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], legacy: bool
) -> None:
    src = tmp_path / "model.bin"
    torch.save(_state(), src, _use_new_zipfile_serialization=not legacy)
    out = tmp_path / "model.safetensors"
    code, doc, err = run_envelope(["convert", "--json", str(src), str(out)], capsys)
    assert code == 0, err
    (c,) = doc["results"]
    assert c["format"] == ("pickle" if legacy else "pytorch-zip")
    assert c["picked"] is None and c["tensors"] == 5 and c["verified"]
    assert c["removed_shared"] == {"model.embed_tokens.weight": "lm_head.weight"}
    loaded = ft.load_file(out)
    state = _state()
    for name, tensor in loaded.items():
        assert _same(tensor, state[name]), name
    with fastst.safe_open(out, "pt") as f:
        assert f.metadata() == {"format": "pt", "model.embed_tokens.weight": "lm_head.weight"}
    # The reference reads it too.
    import safetensors.torch

    assert set(safetensors.torch.load_file(str(out))) == set(loaded)


def test_nested_state_dicts_and_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "trainer.ckpt"
    state = {"w": torch.ones(2), "step": 7}
    torch.save({"state_dict": state, "epoch": 3, "optimizer": {"lr": 0.1}}, src)
    code, doc, _ = run_envelope(
        ["convert", "--json", str(src), str(tmp_path / "a.safetensors")], capsys
    )
    (c,) = doc["results"]
    assert code == 0 and c["picked"] == "state_dict" and c["skipped"] == ["step"]
    both = tmp_path / "both.pt"
    torch.save({"student": {"w": torch.ones(2)}, "teacher": {"w": torch.zeros(2)}}, both)
    code, _, err = run(["convert", str(both), str(tmp_path / "b.safetensors")], capsys)
    assert code == 2 and "--key" in err and "'student'" in err
    code, doc, _ = run_envelope(
        ["convert", "--json", "--key", "teacher", str(both), str(tmp_path / "b.safetensors")],
        capsys,
    )
    assert code == 0 and doc["results"][0]["picked"] == "teacher"
    assert torch.equal(ft.load_file(tmp_path / "b.safetensors")["w"], torch.zeros(2))
    code, _, err = run(
        ["convert", "--key", "nope", str(both), str(tmp_path / "c.safetensors")], capsys
    )
    assert code == 2 and "no entry 'nope'" in err


class _Payload:
    """Runs ``touch MARKER`` when unpickled by a loader that runs code."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> Any:
        return (os.system, (f"touch {shlex.quote(str(self.marker))}",))


def test_code_in_a_pickle_is_refused_and_never_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    marker = tmp_path / "pwned"
    src = tmp_path / "evil.pt"
    torch.save({"w": torch.zeros(2), "payload": _Payload(marker)}, src)
    out = tmp_path / "evil.safetensors"
    code, text, err = run(["convert", str(src), str(out)], capsys)
    assert code == 2 and text == "" and err.count("\n") == 1
    assert "GLOBAL posix.system" in err and "[convert-pickle-refused]" in err
    assert not marker.exists() and not out.exists()


def test_dtype_and_shards(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "model.pt"
    torch.save(_state(), src)
    folder = tmp_path / "sharded"
    code, doc, _ = run_envelope(
        ["convert", "--json", "--dtype", "bf16", "--max-shard-size", "300", str(src), str(folder)],
        capsys,
    )
    assert code == 0
    (c,) = doc["results"]
    assert c["dtype"] == "bfloat16" and c["converted"] == 3  # emb, bias, t (layer is bf16)
    assert len(c["files"]) > 2 and c["output"].endswith(".index.json")
    loaded = ft.load_file(c["output"])
    assert loaded["ids"].dtype == torch.int64
    assert torch.equal(loaded["lm_head.weight"], _state()["lm_head.weight"].to(torch.bfloat16))


def test_refusals(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    st = tmp_path / "x.safetensors"
    fastst.numpy.save_file({"w": __import__("numpy").zeros(2)}, st)
    code, _, err = run(["convert", str(st), str(tmp_path / "y.safetensors")], capsys)
    assert code == 2 and "already a safetensors file" in err
    html = tmp_path / "page.bin"
    html.write_text("<html>nope</html>")
    code, _, err = run(["convert", str(html), str(tmp_path / "y.safetensors")], capsys)
    assert code == 2 and "HTML page" in err and "not a PyTorch checkpoint" in err
    src = tmp_path / "m.pt"
    torch.save({"w": torch.ones(1)}, src)
    code, _, err = run(["convert", str(src), str(st)], capsys)
    assert code == 2 and "--force" in err
    code, _, err = run(
        ["convert", "--dtype", "int3", str(src), str(tmp_path / "z.safetensors")], capsys
    )
    assert code == 2 and "unknown dtype" in err
    code, doc, _ = run_envelope(
        ["convert", "--json", str(tmp_path / "missing.pt"), str(tmp_path / "q")], capsys
    )
    assert code == 2 and doc["results"] == [] and len(doc["errors"]) == 1


# refused before torch sees the checkpoint --------------------------------------


def _refused(src: Path, monkeypatch: pytest.MonkeyPatch, rule: str, **options: Any) -> str:
    """Converts ``src`` with torch.load forbidden: checks that it is refused
    under ``rule``, naming the file and the rule, with nothing written;
    returns the message."""

    def no_load(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("torch.load was called")

    monkeypatch.setattr(torch, "load", no_load)
    out = src.with_name("out.safetensors")
    with pytest.raises(ValueError) as info:
        convert_pickle(src, out, **options)
    message = str(info.value)
    assert getattr(info.value, "rule", None) == rule, message
    assert message.startswith(f"{src}: ") and message.endswith(f"[{rule}]")
    assert not out.exists()
    return message


class _Scripted(torch.nn.Module):
    """Creates the file ``marker`` when torch.jit.load restores it (its
    TorchScript ``__setstate__`` runs then)."""

    def __init__(self, marker: str) -> None:
        super().__init__()
        self.marker = marker

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x

    @torch.jit.export
    def __getstate__(self) -> Tuple[str, bool]:
        return (self.marker, self.training)

    @torch.jit.export
    def __setstate__(self, state: Tuple[str, bool]) -> None:
        self.marker = state[0]
        self.training = torch.from_file(self.marker, True, 1).numel() == 1


@pytest.mark.filterwarnings("ignore::FutureWarning")  # torch.jit is deprecated
def test_torchscript_archive_is_refused_before_torch_loads_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    marker = tmp_path / "pwned"
    src = tmp_path / "model.pt"
    torch.jit.save(torch.jit.script(_Scripted(str(marker))), str(src))
    message = _refused(src, monkeypatch, "convert-torchscript")
    assert "TorchScript archive" in message and not marker.exists()
    code, doc, err = run_envelope(["convert", "--json", str(src), str(tmp_path / "o")], capsys)
    assert code == 2 and doc["errors"][0]["rule"] == "convert-torchscript" and not marker.exists()
    monkeypatch.undo()
    torch.jit.load(str(src))  # what torch.load(weights_only=True) did before torch 2.6
    assert marker.exists()


def test_old_torch_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = tmp_path / "model.pt"
    torch.save({"w": torch.ones(2)}, src)
    monkeypatch.setattr(torch, "__version__", "2.5.1")
    message = _refused(src, monkeypatch, "convert-torch-version")
    assert "torch 2.6 or newer, not 2.5.1" in message


def test_forbidden_global_in_a_legacy_pickle_never_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = tmp_path / "pwned"
    src = tmp_path / "evil.bin"
    state = {"w": torch.zeros(2), "payload": _Payload(marker)}
    torch.save(state, src, _use_new_zipfile_serialization=False)
    message = _refused(src, monkeypatch, "convert-pickle-refused")
    assert "GLOBAL posix.system" in message and not marker.exists()


Member = Tuple[str, bytes, int]
STORED, DEFLATED = zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED


def _rezip(src: Path, dst: Path, edit: Callable[[str, List[Member]], List[Member]]) -> None:
    """Writes to ``dst`` the members of the zip ``src`` as ``edit(folder,
    [(name, bytes, compression)...])`` returns them."""
    with zipfile.ZipFile(src) as zin:
        members = [(i.filename, zin.read(i), STORED) for i in zin.infolist()]
    with zipfile.ZipFile(dst, "w") as zout, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # duplicate names
        for name, data, method in edit(members[0][0].split("/")[0], members):
            zout.writestr(name, data, compress_type=method)


def _changed(suffix: str, data: Optional[bytes] = None, method: int = STORED) -> Any:
    """An edit replacing the member whose name ends with ``suffix``."""
    return lambda root, members: [
        (n, d if data is None else data, method) if n.endswith(suffix) else (n, d, m)
        for n, d, m in members
    ]


ZIP_EDITS = {
    "extra member": (
        lambda root, m: m + [(f"{root}/payload.py", b"import os", STORED)],
        "convert-zip-layout",
        "not one torch.save writes",
    ),
    "member outside the folder": (
        lambda root, m: m + [("../payload", b"", STORED)],
        "convert-zip-layout",
        "outside the archive's one folder",
    ),
    "absolute member names": (
        lambda root, m: [("/" + n.split("/", 1)[1], d, c) for n, d, c in m],
        "convert-zip-layout",
        "outside the archive's one folder",
    ),
    "pickle twice": (
        lambda root, m: m + [(f"{root}/data.pkl", b".", STORED)],
        "convert-zip-layout",
        "appears twice",
    ),
    "storage no tensor uses": (
        lambda root, m: m + [(f"{root}/data/99", b"x", STORED)],
        "convert-zip-layout",
        "data/99 belongs to no storage",
    ),
    "large record": (_changed("/version", b"3" * 2000), "convert-zip-layout", "holds 2,000 bytes"),
    "compressed storage": (
        _changed("/data/0", method=DEFLATED),
        "convert-zip-layout",
        "compressed",
    ),
    "storage of another size": (
        _changed("/data/0", bytes(12)),
        "convert-storage-size",
        "declared as 2 elements of 4 bytes, but the file holds 12 bytes",
    ),
}


@pytest.mark.parametrize("case", sorted(ZIP_EDITS))
def test_zips_other_than_torch_saves_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    edit, rule, words = ZIP_EDITS[case]
    src = tmp_path / "model.pt"
    torch.save({"w": torch.ones(2)}, src)
    plain = tmp_path / "plain.pt"
    _rezip(src, plain, lambda root, members: members)  # the same members convert
    convert_pickle(plain, tmp_path / "plain.safetensors")
    assert torch.equal(ft.load_file(tmp_path / "plain.safetensors")["w"], torch.ones(2))
    edited = tmp_path / "edited.pt"
    _rezip(src, edited, edit)
    assert words in _refused(edited, monkeypatch, rule)


def test_legacy_storages_must_fill_the_file_exactly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = tmp_path / "model.bin"
    torch.save({"w": torch.ones(4)}, src, _use_new_zipfile_serialization=False)
    whole = src.read_bytes()
    src.write_bytes(whole[:-4])  # a storage declared larger than the file holds
    assert "declared as 4 elements of 4 bytes" in _refused(src, monkeypatch, "convert-storage-size")
    src.write_bytes(whole + b"hidden")
    assert "6 bytes follow the last storage" in _refused(src, monkeypatch, "convert-storage-size")


def test_a_zip_bomb_pickle_is_refused_without_inflating_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = tmp_path / "bomb.pt"
    member = zipfile.ZipInfo("bomb/data.pkl")
    member.compress_type = DEFLATED
    with zipfile.ZipFile(src, "w") as zout:
        with zout.open(member, "w") as pickled:
            for _ in range(100):
                pickled.write(bytes(1 << 20))
        zout.writestr("bomb/version", b"3\n")
    assert src.stat().st_size < 1 << 20
    tracemalloc.start()
    try:
        message = _refused(src, monkeypatch, "convert-pickle-size")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "104,857,600 bytes from" in message and "limit of 100:1" in message
    assert peak < 8 << 20


@pytest.mark.parametrize("legacy", [False, True])
def test_pickles_above_the_limit_are_refused(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    legacy: bool,
) -> None:
    src = tmp_path / "model.pt"
    state = {f"layer.{i}.weight": torch.ones(1) for i in range(100)}
    torch.save(state, src, _use_new_zipfile_serialization=not legacy)
    out = tmp_path / "model.safetensors"
    code, _, err = run(["convert", "--max-pickle-size", "1KiB", str(src), str(out)], capsys)
    assert code == 2 and "1,024 bytes" in err and "--max-pickle-size" in err
    assert "[convert-pickle-size]" in err and not out.exists()
    code, _, err = run(["convert", "--max-pickle-size", "1MiB", str(src), str(out)], capsys)
    assert code == 0, err
    _refused(src, monkeypatch, "convert-pickle-size", max_pickle_bytes=1024)


def test_state_dicts_torch_saves_convert(tmp_path: Path) -> None:
    # A module's state dict (an OrderedDict with _metadata), Parameters, and
    # dtypes stored through untyped storages (which torch's legacy loader
    # cannot read back).
    module = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.LayerNorm(2))
    params = {"p": torch.nn.Parameter(torch.ones(2)), "q": torch.nn.Parameter(torch.zeros(1))}
    new = {
        "f8": torch.full((4,), 0.5).to(torch.float8_e4m3fn),
        "u16": torch.tensor([1, 2, 65535], dtype=torch.uint16),
    }
    for legacy in (False, True):
        for name, saved in (("module", module.state_dict()), ("params", params), ("new", new)):
            if legacy and name == "new":
                continue
            src = tmp_path / f"{name}{legacy}.pt"
            torch.save(saved, src, _use_new_zipfile_serialization=not legacy)
            out = src.with_suffix(".safetensors")
            convert_pickle(src, out)
            loaded = ft.load_file(out)
            assert loaded.keys() == saved.keys()
            assert all(_same(loaded[k], saved[k].detach()) for k in loaded)


def test_an_output_symlink_is_replaced_not_followed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "model.pt"
    torch.save({"w": torch.ones(2)}, src)
    victim = tmp_path / "victim"
    victim.write_text("precious")
    out = tmp_path / "out.safetensors"
    out.symlink_to(victim)
    code, _, err = run(["convert", str(src), str(out)], capsys)
    assert code == 2 and "--force" in err
    code, _, err = run(["convert", "--force", str(src), str(out)], capsys)
    assert code == 0, err
    assert not out.is_symlink() and victim.read_text() == "precious"


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="Linux's /proc/self/fd")
def test_torch_reads_the_file_that_was_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = tmp_path / "model.pt"
    torch.save({"w": torch.ones(2)}, src)
    other = tmp_path / "other.pt"
    torch.save({"w": torch.zeros(2)}, other)
    load = torch.load

    def swap_then_load(*args: Any, **kwargs: Any) -> Any:
        if other.exists():
            os.replace(other, src)  # the name now holds a file that was never checked
        return load(*args, **kwargs)

    monkeypatch.setattr(torch, "load", swap_then_load)
    out = tmp_path / "out.safetensors"
    convert_pickle(src, out)
    assert not other.exists() and torch.equal(ft.load_file(out)["w"], torch.ones(2))


@pytest.mark.parametrize(
    "content",
    [torch.ones(3), [torch.ones(2)], {}, {"step": 3, "name": "x"}],
    ids=["tensor", "list", "empty-dict", "no-tensors"],
)
def test_convert_refuses_a_checkpoint_without_a_state_dict(tmp_path, capsys, content):
    """A checkpoint holding no dict of tensors (a bare tensor, a list, an
    empty dict, a dict of plain values) is refused with "no state dict" and
    nothing is written (mutants: ``and`` -> ``or`` in the state-dict test,
    which accepts ``{}`` or fails on ``.values()``; the final raise dropped)."""
    src = tmp_path / "c.pt"
    torch.save(content, src)
    out = tmp_path / "c.safetensors"
    code, _, err = run(["convert", str(src), str(out)], capsys)
    assert code == 2 and "no state dict" in err, err
    assert not out.exists()
