# Type stubs of the compiled module fastst._fastst.inspect (checked against
# the module by tests/contracts/test_stubs.py and mypy's stubtest).
# Forensics and hashes (the fastst command), what a file that is not
# safetensors is, two tensors' values compared, each tensor's values.
from typing import Any, Dict, List, Optional, Tuple

from .read import _Path

def verify_file(
    path: _Path,
    values: bool = False,
    header_cap: int = ...,
    threads: int = 0,
    progress: Optional[str] = None,
) -> Dict[str, Any]: ...
def hash_file(
    path: _Path,
    tensors: bool = False,
    header_cap: int = ...,
    threads: int = 0,
    progress: Optional[str] = None,
) -> Dict[str, Any]: ...
def inspect_file(path: _Path, table: bool = False, header_cap: int = ...) -> Dict[str, Any]: ...
def read_metadata(path: _Path, header_cap: int = ...) -> Optional[List[Tuple[str, str]]]: ...
def verify_rules() -> List[Dict[str, str]]: ...

# --- what a file that is not safetensors is ------------------------------------

IDENTIFY_LEN: int

def identify(head: bytes, file_len: int) -> Optional[Dict[str, Any]]: ...

# --- the values of two tensors compared (fastst diff) and each tensor's (stats) --

def diff_buffers(
    a: Any,
    b: Any,
    dtype: str,
    threads: int = 0,
    dtype_b: Optional[str] = None,
    profile: bool = False,
) -> Dict[str, Any]: ...
def stats_file(
    path: _Path,
    names: Optional[List[str]] = None,
    bins: int = 32,
    threads: int = 0,
    header_cap: int = ...,
    progress: Optional[str] = None,
) -> List[Dict[str, Any]]: ...
