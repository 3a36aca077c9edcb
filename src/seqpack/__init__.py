"""seqpack: remove padding from transformer training.

raw text -> BPE tokenizer -> token store -> length histogram -> packing plan ->
packed dataset -> packed attention and per-sequence loss -> training.
"""

from __future__ import annotations

from seqpack._lazy import keep, listing
from seqpack._version import __version__

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (a cost in every start-up)
if TYPE_CHECKING:
    from typing import Any

    from seqpack.tokenizer import (
        BPEConfig,
        BPEResult,
        Tokenizer,
        train_bpe,
        train_bpe_corpus,
    )

__all__ = ["BPEConfig", "BPEResult", "Tokenizer", "__version__", "train_bpe", "train_bpe_corpus"]


def __getattr__(name: str) -> Any:
    """The tokenizer's names, loaded on first use (see `seqpack.tokenizer`)."""
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from seqpack import tokenizer

    return keep(globals(), tokenizer, name)


def __dir__() -> list[str]:
    return listing(globals(), __all__)
