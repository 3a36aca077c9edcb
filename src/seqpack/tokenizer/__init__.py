"""Byte-level BPE: training (fast and reference), the Tokenizer, save/load/export."""

from __future__ import annotations

from seqpack.tokenizer.tokenizer import Tokenizer
from seqpack.tokenizer.train import BPEConfig, BPEResult, train_bpe, train_bpe_corpus

__all__ = ["BPEConfig", "BPEResult", "Tokenizer", "train_bpe", "train_bpe_corpus"]
