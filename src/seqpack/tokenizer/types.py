"""`AnyTokenizer`: what the pipeline and the tasks take as a tokenizer (for type checking only).

seqpack's own `Tokenizer` and `HFTokenizer` (a ``tokenizers`` / transformers tokenizer) answer the
same calls: ``encode``, ``encode_batch``, ``encode_batch_flat``, ``vocab_size``, the special-token lookups
and the ``fingerprint`` a resume keys its work on. A function that takes either says ``AnyTokenizer``.
"""

from __future__ import annotations

from typing import TypeAlias

from seqpack.tokenizer.hf_tokenizer import HFTokenizer
from seqpack.tokenizer.tokenizer import Tokenizer

AnyTokenizer: TypeAlias = Tokenizer | HFTokenizer

__all__ = ["AnyTokenizer"]
