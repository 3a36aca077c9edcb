"""Byte-level BPE: training (fast and reference), the Tokenizer, save/load/export; pretrained
Hugging Face tokenizer directories (:func:`open_tokenizer` opens either kind)."""

from __future__ import annotations

from seqpack.tokenizer.hf_tokenizer import HFTokenizer, open_tokenizer
from seqpack.tokenizer.tokenizer import Tokenizer
from seqpack.tokenizer.train import BPEConfig, BPEResult, train_bpe, train_bpe_corpus

__all__ = ["BPEConfig", "BPEResult", "HFTokenizer", "Tokenizer", "open_tokenizer", "train_bpe", "train_bpe_corpus"]
