"""The start-up half of fastst's drop-in switch (``FASTST_AS_SAFETENSORS``).

The ``fastst-as-safetensors.pth`` file installed with the wheel imports this
module only when the variable holds a true value (``1``, ``true``, ``yes``,
``on``; any case). It imports only ``_fastst_switch`` (standard library only,
shared with fastst's hook), fastst least of all: :func:`start` puts a small finder
first on :data:`sys.meta_path`, and fastst itself (with numpy) is loaded only
when ``safetensors`` is first imported. That finder then hands the import to
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
        self.active = False
        try:
            from fastst._dropin import hook as _hook

            spec = _hook.take_over(fullname, path, target)
        except Exception as exc:
            sys.stderr.write(
                f"fastst: {ENV_VAR} is set but fastst could not be loaded "
                f"({type(exc).__name__}); '{ALIAS}' is the reference package\n"
            )
            return None
        if spec is not None:
            stop()  # the search ends with this answer
        return spec


def pending() -> bool:
    """True while a :class:`Finder` waits for ``safetensors``."""
    return any(isinstance(f, Finder) and f.active for f in sys.meta_path)


def stop() -> None:
    """Takes every :class:`Finder` off :data:`sys.meta_path`."""
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, Finder)]


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
