# Type stubs of the compiled module fastst._fastst.write (checked against
# the module by tests/contracts/test_stubs.py and mypy's stubtest).
# The writers (a plan written at once, a layout written in any order) and
# the atomic file operations.
from typing import List, Optional, Sequence, Tuple, final

from .read import _Path

MAX_ALIGN: int

@final
class WritePlan:
    """The layout of a file to write: tensors ordered as the reference
    writer orders them, offsets, and the rendered header."""

    def __new__(
        cls,
        tensors: List[Tuple[str, str, List[int]]],
        metadata: Optional[List[Tuple[str, str]]],
        display_name: str,
        header_cap: int = ...,
        align: int = ...,
    ) -> WritePlan: ...
    WRITEBACK_WINDOW: int
    @property
    def data_start(self) -> int: ...
    @property
    def order(self) -> List[int]: ...
    def tensors(self) -> List[Tuple[str, str, Tuple[int, ...], int, int]]: ...
    def header(self) -> bytes: ...
    @property
    def header_len(self) -> int: ...
    @property
    def data_len(self) -> int: ...
    @property
    def total_len(self) -> int: ...
    def write_file(
        self,
        path: _Path,
        display_name: str,
        sources: Sequence[object],
        durable: Optional[bool] = None,
    ) -> None: ...
    def to_bytes(self, display_name: str, sources: Sequence[object]) -> bytes: ...

@final
class LayoutWriter:
    """A file (or, made by ``to_url``, an object of a cloud store) written
    from its layout: tensors at their offsets, in any order, from any
    thread; saved by ``commit`` once all are complete."""

    def __new__(
        cls,
        path: _Path,
        display_name: str,
        tensors: List[Tuple[str, str, List[int]]],
        metadata: Optional[List[Tuple[str, str]]],
        header_cap: int = ...,
        align: int = ...,
        durable: Optional[bool] = None,
    ) -> LayoutWriter: ...
    @staticmethod
    def to_url(
        url: str,
        display_name: str,
        tensors: List[Tuple[str, str, List[int]]],
        metadata: Optional[List[Tuple[str, str]]],
        options: List[Tuple[str, str]],
        header_cap: int = ...,
        align: int = ...,
    ) -> LayoutWriter: ...
    def write(self, name: str, dtype: str, shape: List[int], data: object) -> None: ...
    def commit(self) -> None: ...
    def abort(self) -> None: ...
    def missing(self) -> List[str]: ...
    @property
    def closed(self) -> bool: ...
    @property
    def durable(self) -> bool: ...
    @property
    def data_start(self) -> int: ...
    @property
    def total_len(self) -> int: ...
    def tensors(self) -> List[Tuple[str, str, Tuple[int, ...], int, int]]: ...

def data_alignment(offset: int) -> int: ...
def link_file(
    staged: object, target: object, display_name: str, durable: bool = False
) -> ReplacedFile: ...

@final
class ReplacedFile:
    def release(self) -> None: ...

def replace_file(path: object, display_name: str, data: bytes, durable: bool = True) -> None: ...
