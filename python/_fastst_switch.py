"""What fastst's drop-in switch (``FASTST_AS_SAFETENSORS``) shares between
its start-up half (``_fastst_boot``, loaded by the ``.pth`` file before
fastst) and fastst's hook (``fastst._dropin.hook``): the variable and its true
values, and who imported the reference package. Standard library only, and
it imports nothing (``os`` and ``sys`` are loaded before any ``.pth`` file).
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
