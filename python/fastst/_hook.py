"""The opt-in drop-in backend: ``import safetensors`` served by fastst.

:func:`install` puts an import finder first on :data:`sys.meta_path` that
answers for ``safetensors`` and its framework modules:

=====================================  ==========================================
``safetensors``                        ``fastst._as_safetensors`` (the reference's
                                       top-level names, backed by fastst)
``safetensors.torch`` / ``.numpy`` /   ``fastst.torch`` / ``fastst.numpy`` / ...
``.flax`` / ``.tensorflow`` /          (the very same module objects)
``.paddle`` / ``.mlx``
``safetensors._safetensors_rust``      the ``safetensors`` module above
=====================================  ==========================================

Either every one of those names resolves to fastst or none does: installing
refuses (:class:`fastst.HookError`, nothing changed) when the reference
package, or any ``safetensors.*`` module that is not fastst's, is already
imported, because code holding the reference's classes would then mix the
two. :func:`uninstall` removes the finder and every ``safetensors`` entry
it made; an ``import safetensors`` after that gets the reference package
again (if installed). Objects already imported through the hook stay
fastst's.

Zero-code switches (no change to the calling program):

- ``FASTST_AS_SAFETENSORS=1 python script.py``: a ``.pth`` file installed
  with the wheel calls :func:`install_from_environment` at start-up, which
  installs the hook and warns (:class:`fastst.DropinWarning`) the first time
  ``safetensors`` is imported through it, so that a forgotten variable is
  seen;
- ``python -m fastst run script.py [args]`` / ``python -m fastst run -m
  module [args]``: runs a script or module with the hook installed.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import threading
import warnings
from types import ModuleType
from typing import Dict, List, Optional, Sequence

from ._errors import DropinWarning, HookError, rule_error

#: The name fastst can stand in for.
ALIAS = "safetensors"

#: ``safetensors.<name>`` -> the fastst module served for it.
SUBMODULES: Dict[str, str] = {
    "torch": "fastst.torch",
    "numpy": "fastst.numpy",
    "flax": "fastst.flax",
    "tensorflow": "fastst.tensorflow",
    "paddle": "fastst.paddle",
    "mlx": "fastst.mlx",
}

#: The module that plays the reference's top-level package.
FACADE = "fastst._as_safetensors"

#: Environment variable read at start-up by the ``.pth`` file.
ENV_VAR = "FASTST_AS_SAFETENSORS"

_lock = threading.RLock()


def _ours(module: object) -> bool:
    """True for the modules the hook serves: fastst's own, and the
    ``safetensors`` package it builds."""
    name = getattr(module, "__name__", "")
    if isinstance(name, str) and (name == "fastst" or name.startswith("fastst.")):
        return True
    loader = getattr(getattr(module, "__spec__", None), "loader", None)
    return isinstance(loader, (_FacadeLoader, _AliasLoader))


def _aliased(name: str) -> bool:
    return name == ALIAS or name.startswith(ALIAS + ".")


class _AliasLoader(importlib.abc.Loader):
    """Loads ``safetensors.<x>`` by putting the fastst module in its place in
    :data:`sys.modules` (the import system then returns that module)."""

    def __init__(self, target: str) -> None:
        self.target = target

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Optional[ModuleType]:
        return None  # a placeholder, replaced in exec_module

    def exec_module(self, module: ModuleType) -> None:
        sys.modules[module.__name__] = importlib.import_module(self.target)


class _FacadeLoader(importlib.abc.Loader):
    """Loads ``safetensors`` itself: a package whose namespace is the
    reference's top-level names (``fastst._as_safetensors``)."""

    def __init__(self, announce: bool) -> None:
        self.announce = announce

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Optional[ModuleType]:
        return None

    def exec_module(self, module: ModuleType) -> None:
        facade = importlib.import_module(FACADE)
        for key in (*facade.__all__, "__all__", "__doc__", "__fastst_version__"):
            setattr(module, key, getattr(facade, key))
        if self.announce:
            warnings.warn(
                f"'import {ALIAS}' is served by fastst {facade.__fastst_version__} "
                f"({ENV_VAR} is set)",
                DropinWarning,
                stacklevel=2,
            )


class _Finder(importlib.abc.MetaPathFinder):
    """Answers for ``safetensors`` and the names in :data:`SUBMODULES`."""

    def __init__(self, announce: bool) -> None:
        self.announce = announce

    def find_spec(
        self,
        fullname: str,
        path: Optional[Sequence[str]] = None,
        target: Optional[ModuleType] = None,
    ) -> Optional[importlib.machinery.ModuleSpec]:
        if fullname == ALIAS:
            spec = importlib.util.find_spec(FACADE)
            origin = spec.origin if spec is not None else None
            facade = importlib.machinery.ModuleSpec(
                ALIAS, _FacadeLoader(self.announce), origin=origin, is_package=True
            )
            facade.has_location = origin is not None
            return facade
        if not fullname.startswith(ALIAS + "."):
            return None
        rest = fullname[len(ALIAS) + 1 :]
        if rest == "_safetensors_rust":
            return importlib.machinery.ModuleSpec(fullname, _AliasLoader(ALIAS))
        module = SUBMODULES.get(rest)
        if module is None:
            return None  # not a module of the reference: ModuleNotFoundError
        return importlib.machinery.ModuleSpec(fullname, _AliasLoader(module))


_finder: Optional[_Finder] = None


def _foreign() -> List[str]:
    """``safetensors`` modules already imported that are not fastst's."""
    return sorted(
        name
        for name, module in list(sys.modules.items())
        if _aliased(name) and module is not None and not _ours(module)
    )


def installed() -> bool:
    """True while the hook is installed (``import safetensors`` gives fastst)."""
    return _finder is not None and _finder in sys.meta_path


class _Installation:
    """What :func:`install` returns: usable as a context manager that undoes
    the installation on exit (only if this call installed the hook)."""

    def __init__(self, owner: bool) -> None:
        self.owner = owner

    def __enter__(self) -> _Installation:
        return self

    def __exit__(self, *_exc: object) -> None:
        if self.owner:
            uninstall()

    def __repr__(self) -> str:
        return f"<fastst drop-in hook for {ALIAS!r}: {'on' if installed() else 'off'}>"


def install(*, announce: bool = False) -> _Installation:
    """Makes ``import safetensors`` (and ``safetensors.torch``, ``.numpy``,
    ``.flax``, ``.tensorflow``, ``.paddle``, ``.mlx``) resolve to fastst.

    Raises :class:`fastst.HookError`, changing nothing, when the reference
    package (or any ``safetensors.*`` module not served by fastst) is
    already imported. Calling it again while installed does nothing. The
    result is a context manager: ``with fastst.install(): ...`` uninstalls
    on exit. ``announce=True`` warns (:class:`DropinWarning`) when
    ``safetensors`` is first imported through the hook.
    """
    global _finder
    with _lock:
        if installed():
            return _Installation(owner=False)
        foreign = _foreign()
        if foreign:
            first = sys.modules[foreign[0]]
            where = getattr(first, "__file__", None) or "?"
            raise rule_error(
                "hook-after-reference",
                "",
                f"cannot serve {ALIAS!r} with fastst: the reference package is already imported "
                f"({', '.join(foreign)} from {where}); install the hook before anything imports "
                f"{ALIAS} (call fastst.install() first, set {ENV_VAR}=1, or run the program with "
                "'python -m fastst run')",
            )
        finder = _Finder(announce)
        sys.meta_path.insert(0, finder)
        _finder = finder
        # Drop cached "not found" answers for the names now served.
        importlib.invalidate_caches()
        return _Installation(owner=True)


def uninstall() -> None:
    """Removes the hook: the finder and every ``safetensors`` entry of
    :data:`sys.modules` it made. Does nothing when not installed."""
    global _finder
    with _lock:
        finder, _finder = _finder, None
        if finder is not None and finder in sys.meta_path:
            sys.meta_path.remove(finder)
        for name, module in list(sys.modules.items()):
            if _aliased(name) and module is not None and _ours(module):
                del sys.modules[name]


def _enabled(value: Optional[str]) -> bool:
    return value is not None and value.strip().lower() not in ("", "0", "false", "no", "off")


def install_from_environment() -> None:
    """Called at interpreter start-up by the ``fastst-dropin.pth`` file:
    installs the hook (announcing it) when ``FASTST_AS_SAFETENSORS`` is set
    to a true value. An error is reported on stderr, never raised: a
    ``.pth`` file must not stop the interpreter from starting."""
    if not _enabled(os.environ.get(ENV_VAR)):
        return
    try:
        install(announce=True)
    except HookError as exc:  # pragma: no cover - the reference imported by a .pth
        sys.stderr.write(f"fastst: {exc}\n")


def run(argv: Sequence[str]) -> int:
    """``python -m fastst run [-m module | script] [args...]``: runs the
    program with the hook installed, as ``python`` would run it."""
    import runpy

    args = list(argv)
    usage = "usage: python -m fastst run (script.py | -m module) [args...]"
    if not args or args[0] in ("-h", "--help"):
        sys.stderr.write(usage + "\n")
        return 0 if args else 2
    install()
    if args[0] == "-m":
        if len(args) < 2:
            sys.stderr.write(usage + "\n")
            return 2
        sys.argv = args[1:]
        runpy.run_module(args[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = args
        sys.path.insert(0, os.path.dirname(os.path.abspath(args[0])))
        runpy.run_path(args[0], run_name="__main__")
    return 0


__all__ = ["install", "uninstall", "installed", "install_from_environment", "run", "DropinWarning"]
