"""seqpack: remove padding from transformer training.

raw text -> BPE tokenizer -> token store -> length histogram -> packing plan ->
packed dataset -> packed attention and per-sequence loss -> training.
"""

from __future__ import annotations

from seqpack.tokenizer import BPEConfig, BPEResult, Tokenizer, train_bpe, train_bpe_corpus

__version__ = "0.1.0"

__all__ = ["BPEConfig", "BPEResult", "Tokenizer", "__version__", "train_bpe", "train_bpe_corpus"]
