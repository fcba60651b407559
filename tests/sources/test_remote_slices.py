"""Remote slices (S3 on a real SeaweedFS store and a Range-honouring HTTP server, behind the
counting proxy of ``remote_servers``): ``get_slice(name)[index]`` fetches only the byte ranges
the index selects, nearby ones as one range (bytes between them closer than the coalescing gap),
and equals numpy's slicing of the local file; an object replaced mid-slice is ``file-changed``."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Tuple

import fastst
import fastst.numpy
import numpy as np
import pytest
from fastst import FileAccessError
from helpers.remote_servers import Fault, Site
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

# Real servers (SeaweedFS, HTTP, a proxy) started for these tests: outside the inner loop.
pytestmark = pytest.mark.slow

FIRST = 64 << 10  # the bytes opening fetches (and keeps)
GAP = 1 << 20  # fastst_remote::COALESCE_GAP


def _tensors(shift: float = 0.0) -> Dict[str, np.ndarray]:
    rng = np.random.default_rng(3)
    return {
        # F64 sorts first: every other tensor lies past the bytes opening fetches.
        "0pad": np.zeros(FIRST // 8 + 1, dtype=np.float64),
        "wide": rng.standard_normal((8, 1 << 19), dtype=np.float32) + shift,  # rows of 2 MiB
        "big": rng.standard_normal((512, 4096), dtype=np.float32),  # rows of 16 KiB
        "cube": rng.standard_normal((6, 300, 50)).astype(np.float16),
        "ids": np.arange(3000, dtype=np.int32).reshape(30, 100),
        "bytes": rng.integers(0, 255, (17, 33, 9), dtype=np.uint8),
        "one": np.array(1.5, dtype=np.float32),
        "empty": np.zeros((4, 0, 3), dtype=np.float32),
    }


TENSORS = _tensors()


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("slices") / "model.safetensors"
    fastst.numpy.save_file(TENSORS, str(path))
    return path


@pytest.fixture(scope="module", params=["s3", "http"])
def site(request: pytest.FixtureRequest, make_site: Callable[[str], Site], local: Path) -> Site:
    site = make_site(request.param)
    site.put(site.name, local)
    return site


@pytest.fixture(scope="module")
def opened(site: Site) -> Iterator[Any]:
    """The remote file, open for the whole module."""
    with fastst.safe_open(site.url(site.name), "np", storage_options=site.options) as f:
        yield f


def _expected(f: Any, name: str, index: Any) -> Tuple[int, int]:
    """The bytes the index selects, and the most coalescing may add: the gaps below ``GAP``
    between consecutive byte ranges of the selection."""
    array = TENSORS[name]
    begin = f._raw.data_start + f._raw.info(name)[2]
    assert begin >= FIRST  # no byte of the selection was fetched at open
    offsets = np.arange(array.size, dtype=np.int64).reshape(array.shape)[index]
    starts = np.sort(np.ravel(offsets)) * array.itemsize  # a negative step reads backwards
    if starts.size == 0:
        return 0, 0
    ends = starts + array.itemsize
    gaps = starts[1:] - ends[:-1]
    return int(starts.size * array.itemsize), int(gaps[(gaps > 0) & (gaps <= GAP)].sum())


def _slice(site: Site, f: Any, name: str, index: Any) -> Tuple[Any, int, int]:
    """``f.get_slice(name)[index]``, the body bytes and the GETs it took."""
    site.proxy.reset()
    got = f.get_slice(name)[index]
    gets = [r for r in site.proxy.records if r.method == "GET"]
    return got, site.proxy.body_bytes(), len(gets)


def _check(site: Site, f: Any, name: str, index: Any) -> Tuple[int, int, int]:
    """Slices, compares with numpy's slicing of the array, and checks the bytes fetched are
    those selected, plus at most the gaps coalesced: ``(fetched, needed, GETs)``."""
    got, fetched, gets = _slice(site, f, name, index)
    want = TENSORS[name][index]
    assert got.shape == want.shape and got.dtype == want.dtype
    assert got.tobytes() == want.tobytes()
    needed, slack = _expected(f, name, index)
    assert needed <= fetched <= needed + slack, (index, needed, slack, fetched)
    return fetched, needed, gets


def test_a_column_slice_fetches_each_row_part_alone(site: Site, opened: Any) -> None:
    # Rows 2 MiB apart: 8 ranges of 40 bytes, not 16 MiB.
    fetched, needed, gets = _check(site, opened, "wide", np.s_[:, 10:20])
    assert fetched == needed == 8 * 40 and gets == 8


def test_a_column_slice_of_close_rows_is_coalesced(site: Site, opened: Any) -> None:
    # Rows 16 KiB apart: one range from the first wanted byte to the last, cut at 8 MiB.
    fetched, needed, gets = _check(site, opened, "big", np.s_[:, 100:104])
    assert needed == 512 * 16 and fetched == 511 * 4096 * 4 + 16 and gets <= 2


def test_a_row_slice_is_one_range(site: Site, opened: Any) -> None:
    fetched, needed, gets = _check(site, opened, "wide", np.s_[2:4])
    assert fetched == needed == 2 * (4 << 19) and gets == 1
    fetched, needed, gets = _check(site, opened, "big", np.s_[7, 4000:])
    assert fetched == needed == 96 * 4 and gets == 1


def test_strided_and_scalar_indexes_fetch_what_they_select(site: Site, opened: Any) -> None:
    # Every 3rd row, every 2**17th column: ranges 512 KiB apart coalesce, rows 6 MiB apart don't.
    fetched, needed, gets = _check(site, opened, "wide", np.s_[::3, :: 1 << 17])
    assert needed == 3 * 4 * 4 and gets == 3
    fetched, needed, gets = _check(site, opened, "wide", np.s_[5, -7])
    assert fetched == needed == 4 and gets == 1
    fetched, _, gets = _check(site, opened, "one", ())
    assert fetched == 4 and gets == 1


def test_slices_of_3d_tensors(site: Site, opened: Any) -> None:
    for index in [np.s_[1:4, 10:20, ::7], np.s_[..., 3], np.s_[2], np.s_[:, 5, :], np.s_[::-2]]:
        _check(site, opened, "cube", index)


def test_an_empty_slice_fetches_nothing(site: Site, opened: Any) -> None:
    for name, index in [("wide", np.s_[3:3]), ("big", np.s_[:, 9:2]), ("empty", np.s_[1:])]:
        got, fetched, gets = _slice(site, opened, name, index)
        assert got.shape == TENSORS[name][index].shape and (fetched, gets) == (0, 0)


def _index(shape: Tuple[int, ...]) -> Any:
    """Basic indexes of an array of ``shape``: ints, slices (steps of either sign, bounds past
    the ends), ``None`` and one ``...``."""

    def axis(n: int) -> Any:
        bound = st.none() | st.integers(-n - 3, n + 3)
        step = st.none() | st.integers(-4, 4).filter(lambda s: s != 0)
        return st.integers(-n, n - 1) | st.builds(slice, bound, bound, step)

    items = st.tuples(*(axis(n) for n in shape)).map(list)

    def dress(parts: List[Any], data: Any) -> Any:
        cut = data.draw(st.integers(0, len(parts)))
        if data.draw(st.booleans()):
            parts = parts[:cut] + [...] + parts[cut + data.draw(st.integers(0, len(parts) - cut)) :]
        if data.draw(st.booleans()):
            parts.insert(data.draw(st.integers(0, len(parts))), None)
        return tuple(parts)

    return st.tuples(items, st.data()).map(lambda pair: dress(*pair))


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_slices_equal_numpy_and_fetch_only_their_bytes(site: Site, opened: Any, data: Any) -> None:
    name = data.draw(st.sampled_from(["cube", "ids", "bytes", "big"]))
    index = data.draw(_index(TENSORS[name].shape))
    _check(site, opened, name, index)


#: Indexes refused by numpy's rules, torch's or both: each must fail before any byte is read.
INVALID = [
    np.s_[30],  # past the end
    np.s_[-31],
    np.s_[0, 0, 0],  # more indices than dimensions
    np.s_[::0],
    np.s_[0, ::0],
    np.s_[..., ...],  # numpy's rules only (torch takes it)
    np.s_[None, 2:, 100],
    np.s_[1.5],
    np.s_[0:1.5],
    np.s_["a"],
    np.s_[[1, 2]],
    np.s_[True],
    np.s_[np.array([1, 2])],
    np.s_[::-1],  # torch's rules only (a negative step)
    np.s_[3:, ::-2],
]
#: What each framework takes of those.
TAKEN = {"np": [np.s_[::-1], np.s_[3:, ::-2]], "pt": [np.s_[..., ...]]}


def _failure(f: Any, name: str, index: Any) -> Tuple[type, str]:
    """The error ``f.get_slice(name)[index]`` raises, its message with the file's name cut out;
    ``(type(None), "")`` when it succeeds."""
    try:
        f.get_slice(name)[index]
    except Exception as exc:  # noqa: BLE001 - the error is the result
        return type(exc), str(exc).replace(f._raw.name, "<file>")
    return type(None), ""


@pytest.mark.parametrize("framework", ["np", "pt"])
def test_an_invalid_index_fails_as_on_a_local_file_before_any_byte(
    site: Site, local: Path, framework: str
) -> None:
    taken = []
    with (
        fastst.safe_open(local, framework) as near,
        fastst.safe_open(site.url(site.name), framework, storage_options=site.options) as far,
    ):
        for index in INVALID:
            want = _failure(near, "ids", index)
            site.proxy.reset()
            got = _failure(far, "ids", index)
            assert got == want, index
            if want[0] is type(None):
                taken.append(index)
                continue
            assert want[0] is not IndexError or "<file>: tensor 'ids' of shape" in want[1], want
            assert (site.proxy.body_bytes(), len(site.proxy.records)) == (0, 0), index
    assert taken == TAKEN[framework]


@pytest.mark.parametrize("rank", [0, 1])
def test_a_tensor_parallel_column_shard_fetches_only_its_bytes(
    site: Site, opened: Any, monkeypatch: pytest.MonkeyPatch, rank: int
) -> None:
    # The slice reader of get_slice: each tensor's ranges coalesced and fetched a batch at a
    # time, not one GET per row.
    torch = pytest.importorskip("torch")
    from fastst._distributed import split_bounds
    from fastst.torch import load_tensor_parallel

    for key, value in site.env.items():
        monkeypatch.setenv(key, value)
    url = site.url(site.name)
    site.proxy.reset()
    fastst.safe_open(url, "pt").close()
    opening, opening_gets = site.proxy.body_bytes(), len(site.proxy.records)
    plan = {"wide": "column", "big": "column", "cube": 2}
    site.proxy.reset()
    got = load_tensor_parallel(url, plan, rank=rank, world_size=2, default="skip")
    fetched, gets = site.proxy.body_bytes() - opening, len(site.proxy.records) - opening_gets
    needed = slack = 0
    for name, tensor in got.items():
        n = TENSORS[name].shape[plan[name] if name == "cube" else 1]
        index = (slice(None),) * (2 if name == "cube" else 1) + (slice(*split_bounds(n, rank, 2)),)
        want = TENSORS[name][index]
        assert tensor.dtype == getattr(torch, str(want.dtype)) and tensor.is_contiguous()
        assert tensor.numpy().tobytes() == want.tobytes(), name
        part, gaps = _expected(opened, name, index)
        needed, slack = needed + part, slack + gaps
    assert sorted(got) == sorted(plan)
    assert needed <= fetched <= needed + slack and gets <= 8, (needed, slack, fetched, gets)


def test_an_object_replaced_mid_slice_is_file_changed(site: Site, local: Path) -> None:
    name = "replaced.safetensors"
    url = site.put(name, local)
    site.proxy.reset()
    site.proxy.faults.append(
        Fault("call", skip=3, call=lambda: site.put(name, fastst.numpy.save(_tensors(1.0))))
    )
    with fastst.safe_open(url, "np", storage_options=site.options) as f:
        with pytest.raises(FileAccessError) as info:
            f.get_slice("wide")[:, 3]  # 8 GETs: the object changes after the second
    assert info.value.rule == "file-changed" and name in str(info.value)
    assert site.proxy.faults[0].hits > 3
    site.proxy.reset()
