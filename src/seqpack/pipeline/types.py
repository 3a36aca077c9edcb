"""`PackTokenizer`: what the pack job takes as a tokenizer (for type checking only).

A seqpack or transformers tokenizer (`seqpack.tokenizer.types.AnyTokenizer`), or the processor of an
image-text model (`seqpack.tasks.vision.processor.ProcessorTokenizer`, what ``--tokenizer`` opens for
``--task vision``). The job itself asks it only for its ``fingerprint()`` and ``vocab_size``; the
task's sequence builder uses the rest.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

if TYPE_CHECKING:
    from seqpack.tasks.vision.processor import ProcessorTokenizer
    from seqpack.tokenizer.types import AnyTokenizer

PackTokenizer: TypeAlias = "AnyTokenizer | ProcessorTokenizer"

__all__ = ["PackTokenizer"]
