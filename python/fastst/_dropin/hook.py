"""The opt-in drop-in backend: ``import safetensors`` served by fastst.

:func:`install` puts an import finder first on :data:`sys.meta_path` that
answers for ``safetensors`` and its framework modules:

=====================================  ==========================================
``safetensors``                        ``fastst._dropin.facade`` (the reference's
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
two. :func:`uninstall` makes the finder inert (it stays on
:data:`sys.meta_path`, and answers again on the next :func:`install`) and
removes every ``safetensors`` entry it made; an ``import safetensors``
after that gets the reference package again (if installed). Objects
already imported through the hook stay fastst's.

Zero-code switches (no change to the calling program):

- ``FASTST_AS_SAFETENSORS=1 python script.py`` (``1``, ``true``, ``yes`` or
  ``on``, any case; every other value leaves it off and imports nothing): a
  ``.pth`` file installed with the wheel imports the small stdlib-only
  ``_fastst_boot`` module at start-up, whose finder loads fastst only when
  ``safetensors`` is first imported; then :func:`take_over` installs the
  hook and warns (:class:`fastst.DropinWarning`), so that a forgotten
  variable is seen;
- ``python -m fastst run script.py [args]`` / ``python -m fastst run -m
  module [args]`` (or ``fastst run ...``): runs a script or module with the
  hook installed, and sets ``FASTST_AS_SAFETENSORS=1`` for the processes it
  starts, so that ``spawn``/``forkserver`` children (multiprocessing pools,
  DataLoader workers) get fastst too through the ``.pth`` file.

How files are read while the hook is on: ``FASTST_READ=pread`` (see
:func:`fastst._settings.read_backend`) reads with positioned reads into memory of its own
where a loader asks for the memory map, for file systems where mapping is
slow or unsafe (network file systems); ``mmap`` (or unset) keeps the map.
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
from typing import Any, Dict, List, Optional, Sequence

import _fastst_switch as _switch

from .._errors import DropinWarning, HookError, rule_error
from .._settings import READ_ENV, set_dropin_active
from .._settings import READ_MODES as READ_MODES  # its values, for callers that ask here

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
FACADE = "fastst._dropin.facade"

#: The package, loaded whole before the facade (see :meth:`_FacadeLoader.exec_module`).
PACKAGE = "fastst"

#: Environment variable read at start-up by the ``.pth`` file.
ENV_VAR = _switch.ENV_VAR

#: Environment variable choosing how files are read while the hook is on,
#: and its values (``safe_open``'s back ends; unset or empty: ``mmap``).
READ_VAR = READ_ENV

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
    :data:`sys.modules` (the import system then returns that module).

    The import system lists the module object :meth:`create_module` makes
    in :data:`sys.modules` before :meth:`exec_module` runs, and another
    thread importing the same name meanwhile waits for the import to end,
    then keeps that object (not what :data:`sys.modules` holds by then). So
    the fastst module is imported first, in :meth:`create_module`, and the
    object made there answers every name from it: a thread holding it gets
    what it asked for (``from safetensors.torch import save``), never an
    empty module."""

    def __init__(self, target: str) -> None:
        self.target = target

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Optional[ModuleType]:
        target = importlib.import_module(self.target)
        stand_in = ModuleType(spec.name, target.__doc__)

        def __getattr__(name: str) -> Any:
            return getattr(target, name)

        def __dir__() -> List[str]:
            return dir(target)

        # A module's own __getattr__ answers the names it lacks (PEP 562).
        vars(stand_in).update(__getattr__=__getattr__, __dir__=__dir__)
        return stand_in

    def exec_module(self, module: ModuleType) -> None:
        sys.modules[module.__name__] = importlib.import_module(self.target)


class _FacadeLoader(importlib.abc.Loader):
    """Loads ``safetensors`` itself: a package whose namespace is the
    reference's top-level names (``fastst._dropin.facade``)."""

    def __init__(self, announce: bool) -> None:
        self.announce = announce

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Optional[ModuleType]:
        return None

    def exec_module(self, module: ModuleType) -> None:
        # fastst whole first, as its public modules (fastst.numpy, fastst.torch,
        # ...) also do. While another thread runs fastst/__init__.py, Python
        # lets this thread load fastst's submodules without waiting for it;
        # both then take the same submodules' import locks in different orders,
        # and one of them fails with _DeadlockError (the other with
        # KeyError('fastst')). Loading the package first waits for its
        # __init__ to finish, holding no fastst lock.
        importlib.import_module(PACKAGE)
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
        #: False once uninstalled: the finder stays on ``sys.meta_path``
        #: (for the reason ``_fastst_boot.stop`` gives) and answers nothing.
        self.active = True

    def find_spec(
        self,
        fullname: str,
        path: Optional[Sequence[str]] = None,
        target: Optional[ModuleType] = None,
    ) -> Optional[importlib.machinery.ModuleSpec]:
        if not self.active:
            return None
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


def _boot() -> Any:
    """The start-up half of the switch (``_fastst_boot``) when the ``.pth``
    file loaded it in this interpreter, else None. (Looked up, not imported:
    it is the launcher that loads fastst, not a part of it.)"""
    return sys.modules.get("_fastst_boot")


def _boot_pending() -> bool:
    boot = _boot()
    return boot is not None and bool(boot.pending())


def installed() -> bool:
    """True while the hook is installed (``import safetensors`` gives fastst),
    the start-up finder of ``FASTST_AS_SAFETENSORS`` waiting included."""
    return (_finder is not None and _finder.active and _finder in sys.meta_path) or _boot_pending()


def _answers_first(finder: _Finder) -> bool:
    """Whether ``finder`` is on ``sys.meta_path`` ahead of the path finder
    (which would find the reference package)."""
    finders = list(sys.meta_path)
    at = next((i for i, f in enumerate(finders) if f is finder), None)
    path = next((i for i, f in enumerate(finders) if f is importlib.machinery.PathFinder), None)
    return at is not None and (path is None or at < path)


def _refusal(foreign: List[str], advice: str) -> BaseException:
    """The HookError for ``safetensors`` modules already imported that are
    not fastst's, naming where they come from and who imported them."""
    where = getattr(sys.modules[foreign[0]], "__file__", None) or "?"
    by = _switch.imported_by()
    return rule_error(
        "hook-after-reference",
        "",
        f"cannot serve {ALIAS!r} with fastst: the reference package is already imported "
        f"({', '.join(foreign)} from {where}{', imported ' + by if by else ''}); {advice}",
    )


def _advice() -> str:
    """What to do about a reference imported too early, as far as the
    variable and the start-up file tell."""
    if not _switch.enabled():
        return (
            f"install the hook before anything imports {ALIAS} (call fastst.install() first, "
            f"set {ENV_VAR}=1, or run the program with 'python -m fastst run')"
        )
    if _boot() is not None and _boot().started:
        return (
            f"{ENV_VAR} is set, but {ALIAS} was imported during start-up, before fastst's .pth ran"
        )
    return (
        f"{ENV_VAR} is set, but fastst's .pth file did not run in this interpreter (editable "
        "installs and 'python -S' lack it): call fastst.install() before anything imports "
        f"{ALIAS}, or run the program with 'python -m fastst run'"
    )


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
            raise _refusal(foreign, _advice())
        if _finder is not None and _answers_first(_finder):
            # The finder an uninstall left inert: answering again, the list unchanged.
            _finder.announce = announce
            _finder.active = True
        else:
            _finder = _Finder(announce)
            sys.meta_path.insert(0, _finder)
        set_dropin_active(True)
        # Drop cached "not found" answers for the names now served.
        importlib.invalidate_caches()
        return _Installation(owner=True)


def uninstall() -> None:
    """Removes the hook: the finder answers nothing more, and every
    ``safetensors`` entry of :data:`sys.modules` it made is removed. Does
    nothing when not installed."""
    with _lock:
        boot = _boot()
        if boot is not None:
            boot.stop()
        if _finder is not None:
            _finder.active = False  # left on sys.meta_path, as the start-up finder is
        set_dropin_active(False)
        for name, module in list(sys.modules.items()):
            if _aliased(name) and module is not None and _ours(module):
                del sys.modules[name]


def install_from_environment() -> None:
    """Installs the hook, announcing it, when ``FASTST_AS_SAFETENSORS`` holds
    a true value (``1``, ``true``, ``yes``, ``on``, any case). An error is
    reported on stderr, never raised."""
    if _switch.enabled():
        _install_announced()


def _install_announced() -> bool:
    try:
        install(announce=True)
    except HookError as exc:
        sys.stderr.write(f"fastst: {exc}\n")
        return False
    return True


def take_over(
    fullname: str, path: Any = None, target: Any = None
) -> Optional[importlib.machinery.ModuleSpec]:
    """Called by the start-up finder (``_fastst_boot``) when ``safetensors``
    is first imported with ``FASTST_AS_SAFETENSORS`` set: installs the hook,
    announcing it, and answers that import (``None``, so the reference is
    imported, when the hook cannot be installed)."""
    if not _install_announced() or _finder is None:
        return None
    return _finder.find_spec(fullname, path, target)


def run(argv: Sequence[str]) -> int:
    """``python -m fastst run [-m module | script] [args...]``: runs the
    program with the hook installed, as ``python`` would run it."""
    import runpy

    args = list(argv)
    usage = "usage: python -m fastst run (script.py | -m module) [args...]"
    if not args or args[0] in ("-h", "--help"):
        sys.stderr.write(usage + "\n")
        return 0 if args else 2
    foreign = _foreign()
    if foreign:
        refusal = _refusal(foreign, "it was imported during start-up, before the program ran")
        sys.stderr.write(f"fastst run: {refusal}\n")
        return 2
    install()
    # Children started with spawn/forkserver are new interpreters: the
    # variable has the .pth file turn the hook on in them too.
    os.environ[ENV_VAR] = "1"
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


__all__ = [
    "install",
    "uninstall",
    "installed",
    "install_from_environment",
    "take_over",
    "run",
    "DropinWarning",
]
