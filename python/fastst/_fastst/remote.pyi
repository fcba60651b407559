# Type stubs of the compiled module fastst._fastst.remote (checked against
# the module by tests/contracts/test_stubs.py and mypy's stubtest).
# Objects in object stores and behind HTTP(S).
from typing import Any, List, Optional, Tuple, Union

from .read import RawFile
from .write import WritePlan

def is_remote_url(name: object) -> bool: ...
def open_object(
    url: str, display_name: str, options: List[Tuple[str, str]], header_cap: int = ...
) -> RawFile: ...
def read_remote(
    url: str, name: str, options: List[Tuple[str, str]], cap: int
) -> Optional[bytes]: ...
def list_remote(
    url: str, name: str, options: List[Tuple[str, str]], cap: int
) -> Optional[List[str]]: ...
def open_urls(
    urls: List[str],
    names: List[str],
    options: List[Tuple[str, str]],
    header_cap: int,
    concurrency: int = 16,
) -> List[Union[RawFile, None, BaseException]]: ...
def upload_file(
    plan: WritePlan, url: str, name: str, options: List[Tuple[str, str]], sources: Any
) -> None: ...
def put_remote(url: str, name: str, options: List[Tuple[str, str]], data: bytes) -> None: ...
def delete_remote(url: str, name: str, options: List[Tuple[str, str]]) -> None: ...
