"""Byte-level BPE: training (fast, and its oracle), the Tokenizer, save/load/export; pretrained
Hugging Face tokenizer directories (`open_tokenizer` opens either kind).

The names load on first use (PEP 562): ``from seqpack.tokenizer import train_bpe`` imports the
trainer alone, which needs neither numpy nor the Hugging Face side, so a training run starts fast.
"""

from __future__ import annotations

from seqpack._lazy import keep, listing

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (a cost in every start-up)
if TYPE_CHECKING:
    from types import ModuleType
    from typing import Any

    from seqpack.tokenizer.hf_tokenizer import HFTokenizer, open_tokenizer
    from seqpack.tokenizer.tokenizer import Tokenizer
    from seqpack.tokenizer.train import (
        BPEConfig,
        BPEResult,
        train_bpe,
        train_bpe_corpus,
    )

__all__ = ["BPEConfig", "BPEResult", "HFTokenizer", "Tokenizer", "open_tokenizer", "train_bpe", "train_bpe_corpus"]


def __getattr__(name: str) -> Any:
    module: ModuleType
    if name in ("BPEConfig", "BPEResult", "train_bpe", "train_bpe_corpus"):
        from seqpack.tokenizer import train as module
    elif name == "Tokenizer":
        from seqpack.tokenizer import tokenizer as module
    elif name in ("HFTokenizer", "open_tokenizer"):
        from seqpack.tokenizer import hf_tokenizer as module
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return keep(globals(), module, name)


def __dir__() -> list[str]:
    return listing(globals(), __all__)
