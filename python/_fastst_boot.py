"""The start-up half of fastst's drop-in switch (``FASTST_AS_SAFETENSORS``).

The ``fastst-as-safetensors.pth`` file installed with the wheel imports this
module only when the variable holds a true value (``1``, ``true``, ``yes``,
``on``; any case). It imports only ``_fastst_switch`` (standard library only,
shared with fastst's hook), fastst least of all: :func:`start` puts a small finder
first on :data:`sys.meta_path`, and fastst itself (with numpy) is loaded only
when ``safetensors`` is first imported. That finder answers with a loader that,
under the module's own import lock, hands the import to
``fastst._dropin.hook``, or, when fastst cannot be loaded, says so in one line on
stderr and lets the reference package be imported.
"""

import sys

from _fastst_switch import ALIAS, ENV_VAR, _aliased, imported_by


class Finder:
    """First on :data:`sys.meta_path` until ``safetensors`` is imported;
    then it hands that import to fastst's hook and leaves."""

    active = True

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> object:
        if not self.active or not _aliased(fullname):
            return None
        # Inert, not removed: the import system is iterating sys.meta_path.
        # Nothing is imported here: find_spec runs under the global import
        # lock, and importing fastst under it deadlocks with any thread that
        # holds a module lock fastst needs. The loader imports fastst.
        self.active = False
        from importlib.machinery import ModuleSpec

        return ModuleSpec(fullname, _Loader(path, target), is_package=fullname == ALIAS)


class _Loader:
    """Loads the first ``safetensors`` import with fastst's hook (or, when
    fastst cannot be loaded, the reference), under that module's own lock."""

    def __init__(self, path: object, target: object) -> None:
        self.path, self.target = path, target

    def _choose(self, fullname: str) -> object:
        try:
            from fastst._dropin import hook as _hook

            spec = _hook.take_over(fullname, self.path, self.target)
        except Exception as exc:
            sys.stderr.write(
                f"fastst: {ENV_VAR} is set but fastst could not be loaded "
                f"({type(exc).__name__}); '{ALIAS}' is the reference package\n"
            )
            spec = None
        stop()
        if spec is None:
            from importlib.machinery import PathFinder

            spec = PathFinder.find_spec(fullname, self.path)
            if spec is None:
                raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
        return spec

    def create_module(self, spec: object) -> object:
        real = self._choose(spec.name)  # type: ignore[attr-defined]
        # The import system reads spec.loader again after this call: the
        # chosen loader runs exec_module itself (no frame of this one between
        # the importing line and the hook's warning), and the module's
        # __spec__/__loader__ are the chosen ones (uninstall knows them).
        for attr in ("loader", "origin", "submodule_search_locations", "loader_state"):
            setattr(spec, attr, getattr(real, attr))
        spec.has_location = real.has_location  # type: ignore[attr-defined]
        create = getattr(real.loader, "create_module", None)  # type: ignore[attr-defined]
        return create(spec) if create is not None else None

    def exec_module(self, module: object) -> None:  # pragma: no cover - see create_module
        raise ImportError("fastst's start-up loader runs only through create_module")


def pending() -> bool:
    """True while a :class:`Finder` waits for ``safetensors``."""
    return any(isinstance(f, Finder) and f.active for f in sys.meta_path)


def stop() -> None:
    """Makes every :class:`Finder` inert. They stay on :data:`sys.meta_path`:
    taking one off while another thread's import walks the list makes that
    import skip the finder after it (then a module that exists is not found)."""
    for finder in list(sys.meta_path):
        if isinstance(finder, Finder):
            finder.active = False


#: True once :func:`start` ran (the ``.pth`` file is installed and active).
started = False


def start() -> None:
    """Called by the ``.pth`` file at start-up: installs the :class:`Finder`,
    or, when a start-up file imported the reference package before the
    ``.pth`` file ran, says so (naming the importer) on stderr."""
    global started
    started = True
    if any(_aliased(name) for name in list(sys.modules)):
        by = imported_by() or "by a .pth file"
        sys.stderr.write(
            f"fastst: {ENV_VAR} is set, but '{ALIAS}' (the reference package) was imported "
            f"{by} during start-up, before fastst's .pth file ran: this process uses "
            "the reference package\n"
        )
    elif not pending():
        sys.meta_path.insert(0, Finder())
