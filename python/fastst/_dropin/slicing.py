"""The reference's slicing rules, for ``safetensors.safe_open`` served through the drop-in hook.

fastst's own :class:`fastst.SafeSlice` follows numpy (out-of-range slice
bounds clamp, negative steps and ``None`` work). The reference refuses some
of those with :class:`SafetensorError` and messages callers and its own
tests match on; under the ``safetensors`` name fastst raises the same
errors, then reads the slice as usual:

- a list index: the empty list selects nothing along the first dimension;
  any other list is refused ("Non empty lists are not implemented");
- more than one ``...``;
- a slice step that is not positive;
- a negative int below ``-size``: "Invalid index -6 for dimension 1 of
  size 5";
- more indexes than dimensions, an int past the end, a slice whose start
  is at or past the end or whose stop is past it: "Error during slicing
  [2:, 20] with shape [10, 5]: index 20 out of bounds for tensor dimension
  #1 of size 5" (the highest dimension at fault is named).

What the reference cannot do at all (negative slice bounds, ``None``) keeps
fastst's numpy behaviour.

Files are opened with the back end ``FASTST_READ`` picks
(:func:`fastst._settings.read_backend`).
"""

from __future__ import annotations

from typing import Any, List, Mapping, Optional, Sequence, Tuple

from .._errors import closed_file_error, rule_error
from .._read.loader import PrefetchLoader, plan_error
from .._read.safe_open import SafeSlice, safe_open
from .._settings import read_backend

#: (start, stop, step, is_select) with None for an unbounded start/stop.
_Indexer = Tuple[Optional[int], Optional[int], int, bool]


def _error(message: str) -> BaseException:
    return rule_error("slice-out-of-range", "", message)


def _show(indexers: Sequence[_Indexer]) -> str:
    parts: List[str] = []
    for start, stop, step, select in indexers:
        if select:
            parts.append(str(start))
            continue
        text = f"{'' if start is None else start}:{'' if stop is None else stop}"
        parts.append(text if step == 1 else f"{text}:{step}")
    return "[" + ", ".join(parts) + "]"


def check(index: Any, shape: Sequence[int]) -> Any:
    """Raises the reference's error for ``index`` on a tensor of ``shape``,
    or returns the index to apply (an empty list becomes ``slice(0, 0)``)."""
    dims = [int(d) for d in shape]
    if isinstance(index, list):
        if index:
            raise _error("Non empty lists are not implemented")
        indexers: List[_Indexer] = [(0, 0, 1, False)]
        _check_bounds(indexers, dims)
        return slice(0, 0)
    items = index if isinstance(index, tuple) else (index,)
    ellipses = sum(1 for item in items if item is Ellipsis)
    if ellipses > 1:
        raise _error("Only one ellipsis (...) is allowed in slice index")
    expansion = max(len(dims) - (len(items) - ellipses), 0)
    indexers = []
    for item in items:
        position = len(indexers)
        if item is Ellipsis:
            indexers.extend((None, None, 1, False) for _ in range(expansion))
        elif isinstance(item, slice):
            step = 1 if item.step is None else item.step
            if isinstance(step, int) and step <= 0:
                raise _error(f"Slice step must be a positive integer, got {step}")
            if not all(
                bound is None or (isinstance(bound, int) and bound >= 0)
                for bound in (item.start, item.stop)
            ):
                return index  # outside the reference's rules: numpy's
            indexers.append((item.start, item.stop, int(step), False))
        elif isinstance(item, int) and not isinstance(item, bool):
            size = dims[position] if position < len(dims) else 0
            resolved = item
            if item < 0:
                resolved = size + item
                if resolved < 0:
                    raise _error(f"Invalid index {item} for dimension {position} of size {size}")
            indexers.append((resolved, resolved + 1, 1, True))
        else:
            return index  # None and other kinds: numpy's rules
    _check_bounds(indexers, dims)
    return index


def _check_bounds(indexers: Sequence[_Indexer], dims: Sequence[int]) -> None:
    where = f"Error during slicing {_show(indexers)} with shape {list(dims)}"
    if len(indexers) > len(dims):
        raise _error(f"{where}: more slicing indexes than dimensions in tensor")
    for i in reversed(range(len(indexers))):
        start, stop, _step, _select = indexers[i]
        dim = dims[i]
        first = 0 if start is None else start
        end = dim if stop is None else stop
        if first >= dim or end > dim:
            asked = first if first >= dim else max(end - 1, 0)
            raise _error(
                f"{where}: index {asked} out of bounds for tensor dimension #{i} of size {dim}"
            )


class ReferenceSlice(SafeSlice):
    """A :class:`fastst.SafeSlice` that refuses what the reference refuses,
    with its messages."""

    def __getitem__(self, index: Any) -> Any:
        return super().__getitem__(check(index, self._shape))


class reference_safe_open(safe_open):  # noqa: N801 - stands for the reference's class
    """:class:`fastst.safe_open` whose slices follow the reference's rules
    (served as ``safetensors.safe_open`` by the drop-in hook), opening files
    with the back end ``FASTST_READ`` picks."""

    def __init__(
        self,
        filename: Any,
        framework: str,
        device: Any = "cpu",
        *,
        backend: str = "mmap",
        **options: Any,
    ) -> None:
        super().__init__(filename, framework, device, backend=read_backend(backend), **options)

    _slice = ReferenceSlice

    def prefetch(  # type: ignore[override]
        self,
        plan: Optional[Mapping[str, Optional[slice]]] = None,
        *,
        device: Any = None,
        threads: int = 8,
        budget: Optional[int] = None,
    ) -> PrefetchLoader:
        """safetensors 0.9's ``prefetch``: torch tensors on a CUDA device
        (the reference refuses the CPU, and so does this name; fastst's own
        ``safe_open.prefetch`` loads to the CPU too), a plan of names to
        None or a step-1 first-dimension slice."""
        if self.closed:
            raise closed_file_error(self._raw.name)
        if self._framework != "torch":
            raise rule_error(
                "bad-device",
                self._raw.name,
                f'prefetch loads torch tensors: open the file with framework="pt", '
                f"not {self._framework!r}",
            )
        target = self._device if device is None else self._backend.device(device)
        if getattr(target, "is_cpu", False):
            raise rule_error(
                "bad-device",
                self._raw.name,
                "prefetch loads to cuda devices, not cpu "
                "(fastst.safe_open.prefetch loads to the CPU too)",
            )
        for name, rows in (plan or {}).items():
            if rows is not None and not isinstance(rows, slice):
                raise plan_error(
                    self._raw.name,
                    f"tensor {name!r}: a plan's entry is None or a slice, not {rows!r}",
                    name,
                )
        return super().prefetch(plan, device=device, threads=threads, budget=budget)


reference_safe_open.__name__ = reference_safe_open.__qualname__ = "safe_open"
