"""The start-up half of fastst's drop-in switch (``FASTST_AS_SAFETENSORS``).

The ``fastst-as-safetensors.pth`` file installed with the wheel imports this
module only when the variable holds a true value (``1``, ``true``, ``yes``,
``on``; any case). It imports nothing (``os`` and ``sys`` are loaded before
any ``.pth`` file), fastst least of all: :func:`start` puts a small finder
first on :data:`sys.meta_path`, and fastst itself (with numpy) is loaded only
when ``safetensors`` is first imported. That finder then hands the import to
``fastst._hook``, or, when fastst cannot be loaded, says so in one line on
stderr and lets the reference package be imported.
"""

import os
import sys

#: The variable that turns the switch on.
ENV_VAR = "FASTST_AS_SAFETENSORS"

#: Its values that turn it on (compared without case and surrounding blanks);
#: any other value leaves it off.
TRUE_VALUES = ("1", "true", "yes", "on")

#: The name served by fastst.
ALIAS = "safetensors"

_MODULE = type(sys)
_CODE = (type, type(len), type(lambda: None))


def enabled(value: "str | None" = None) -> bool:
    """True when ``value`` (by default the variable's) turns the switch on."""
    if value is None:
        value = os.environ.get(ENV_VAR)
    return value is not None and value.strip().lower() in TRUE_VALUES


def _aliased(name: object) -> bool:
    return type(name) is str and (name == ALIAS or name.startswith(ALIAS + "."))


def _from_alias(value: object, own: "set[int]") -> bool:
    """True for ``safetensors`` modules and what they define. (``type()``,
    not ``isinstance``: a proxy's ``__class__`` may run code or warn.)"""
    if issubclass(type(value), _MODULE):
        return _aliased(value.__dict__.get("__name__"))
    if issubclass(type(value), _CODE):
        return id(value) in own or _aliased(getattr(value, "__module__", None))
    return False


def importer() -> "str | None":
    """A module that imported ``safetensors``, the first one where it can be
    told, or None: :data:`sys.modules` lists a module once its import is
    done, and one still running (``__main__``) where it started, so the
    first holder of ``safetensors`` (the module, one of its modules, or a
    class or function of it) listed after it is the one that imported it,
    unless a module imported later by that one imported it too; with none
    after it, the nearest before it. An import inside a function, or by a
    ``.pth`` line itself, leaves no such trace."""
    entries = [(n, m) for n, m in list(sys.modules.items()) if issubclass(type(m), _MODULE)]
    names = [name for name, _ in entries]
    if ALIAS not in names:
        return None
    at = names.index(ALIAS)
    own = {id(v) for v in list(entries[at][1].__dict__.values()) if issubclass(type(v), _CODE)}
    for name, module in entries[at + 1 :] + entries[:at][::-1]:
        if not _aliased(name) and any(
            _from_alias(value, own) for value in list(module.__dict__.values())
        ):
            return name
    return None


def imported_by() -> str:
    """``"by module 'x'"`` naming :func:`importer`, or ``""``."""
    name = importer()
    return "" if name is None else f"by module {name!r}"


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
            from fastst import _hook

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
