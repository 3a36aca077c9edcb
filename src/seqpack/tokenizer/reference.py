"""Deprecated: renamed `seqpack.tokenizer.oracle` (the slow twins of fast paths are oracles); kept for one release."""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    import seqpack.tokenizer.oracle as module
    from seqpack._lazy import renamed

    new_name = name.replace("reference", "oracle")
    value = getattr(module, new_name)  # AttributeError for a name it never had
    return renamed("seqpack.tokenizer.reference", name, f"oracle.{new_name}", value)
