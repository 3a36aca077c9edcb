"""seqpack: remove padding from transformer training.

raw text -> BPE tokenizer -> token store -> length histogram -> packing plan ->
packed dataset -> packed attention and per-sequence loss -> training.
"""

from __future__ import annotations

from seqpack._version import __version__
from seqpack.tokenizer import (
    BPEConfig,
    BPEResult,
    Tokenizer,
    train_bpe,
    train_bpe_corpus,
)

__all__ = ["BPEConfig", "BPEResult", "Tokenizer", "__version__", "train_bpe", "train_bpe_corpus"]
