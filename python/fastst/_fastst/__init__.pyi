# Type stubs of the compiled module fastst._fastst: its version and one
# submodule per job, each with its stub here (checked against the module by
# tests/contracts/test_stubs.py and mypy's stubtest).
from . import catalogue as catalogue
from . import inspect as inspect
from . import read as read
from . import remote as remote
from . import text as text
from . import write as write

__version__: str
