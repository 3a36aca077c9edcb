"""Names of a package loaded on first use (PEP 562): the package's ``__getattr__`` imports the
module that defines a name, then `keep` stores it, so later lookups are plain reads.

    >>> ns = {"__name__": "pkg"}
    >>> import math
    >>> keep(ns, math, "pi") == math.pi, "pi" in ns
    (True, True)
    >>> listing(ns, ["pi", "tau"])
    ['__name__', 'pi', 'tau']
"""

from __future__ import annotations

from collections.abc import Iterable
from types import ModuleType

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (~3 ms of a training run's start-up)
if TYPE_CHECKING:
    from typing import Any


def keep(namespace: dict[str, Any], module: ModuleType, name: str) -> Any:
    """``module.name``, stored in the package's ``namespace`` (its ``globals()``)."""
    value = getattr(module, name)
    namespace[name] = value
    return value


def listing(namespace: dict[str, Any], names: Iterable[str]) -> list[str]:
    """What the package's ``__dir__`` returns: what it holds and the names it loads on use."""
    return sorted({*namespace, *names})


def renamed(package: str, old: str, new: str, value: Any) -> Any:
    """``value`` (``package.new``), reached by its old name ``old`` with a `DeprecationWarning`: a
    name kept for one release after a rename (its package's ``__getattr__`` calls this)."""
    import warnings

    warnings.warn(
        f"{package}.{old} is renamed {package}.{new}; the old name goes in the next release",
        DeprecationWarning,
        stacklevel=3,
    )
    return value


def renamed_names(namespace: dict[str, Any], names: dict[str, str]) -> Any:
    """A module's ``__getattr__`` for names renamed within it (``old -> new``): an old name gives the
    new one's value with `renamed`'s warning; any other is an ``AttributeError``.

        __getattr__ = renamed_names(globals(), {"cp_layout": "cp_placement"})
    """

    def __getattr__(name: str) -> Any:
        if name in names:
            return renamed(namespace["__name__"], name, names[name], namespace[names[name]])
        raise AttributeError(f"module {namespace['__name__']!r} has no attribute {name!r}")

    return __getattr__


__all__ = ["keep", "listing", "renamed", "renamed_names"]
