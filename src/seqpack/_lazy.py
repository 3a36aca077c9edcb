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

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (a cost in every start-up)
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


__all__ = ["keep", "listing"]
