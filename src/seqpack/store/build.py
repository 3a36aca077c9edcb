"""Corpus -> token store, with the parallel fast encoder and bounded memory."""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from seqpack.store.store import StoreWriter, TokenStore

if TYPE_CHECKING:
    from seqpack.tokenizer.types import AnyTokenizer


def build_store(
    documents: Iterable[str],
    tokenizer: AnyTokenizer,
    out: str | os.PathLike[str],
    *,
    workers: int | None = None,
    overwrite: bool = False,
    source: str = "",
    batch_chars: int = 1 << 19,
    extra: dict[str, Any] | None = None,
) -> TokenStore:
    """Encode ``documents`` with ``tokenizer`` and write a store at ``out``.

    Documents stream through `seqpack.tokenizer.fast.encode_batches`
    (the compiled encoder on ``workers`` threads, one batch of about ``batch_chars``
    characters at a time), and each batch's ids go straight to disk, so memory stays
    bounded whatever the corpus size.
    ``meta.json`` records the input bytes and the encode time (``mb_per_s``).

    Args:
        documents: the texts, one per document.
        tokenizer: a `Tokenizer` or `HFTokenizer`.
        out: the store's directory.
        workers: encoding threads (`None`: the cores this process may use).
        overwrite: replace a store already at `out` (otherwise refused).
        source: what the documents came from, recorded in `meta.json`.
        batch_chars: the characters encoded per batch.
        extra: more fields for `meta.json`.

    Returns:
        The store, open.

    Raises:
        FileExistsError: a store already at `out` without `overwrite`, or a folder seqpack did not make.
    """
    from seqpack.tokenizer.fast import encode_batches

    counted = _CountingIter(documents)
    t0 = time.perf_counter()
    with StoreWriter(
        out, vocab_size=tokenizer.vocab_size, tokenizer_hash=tokenizer.fingerprint(), overwrite=overwrite
    ) as w:
        for ids, offsets in encode_batches(tokenizer, counted, workers=workers, batch_chars=batch_chars):
            w.add_batch(ids, offsets)
        seconds = time.perf_counter() - t0
        w.extra.update(_stats(counted.chars, counted.bytes, seconds, source))
        w.extra.update(extra or {})
    return TokenStore(out)


class _CountingIter:
    """Pass documents through, counting characters and UTF-8 bytes."""

    def __init__(self, documents: Iterable[str]) -> None:
        from seqpack import _native

        self._it = iter(documents)
        self._utf8_size = _native.utf8_size  # the UTF-8 CPython keeps on the str: made once, for the encoder too
        self.chars = 0
        self.bytes = 0

    def __iter__(self) -> _CountingIter:
        return self

    def __next__(self) -> str:
        d = next(self._it)
        if not isinstance(d, str):
            raise TypeError(f"documents must be str, got {type(d).__name__}")
        self.chars += len(d)
        self.bytes += len(d) if d.isascii() else self._utf8_size(d)
        return d


def _stats(chars: int, nbytes: int, seconds: float, source: str) -> dict[str, Any]:
    return {
        "source": source,
        "input_chars": chars,
        "input_bytes": nbytes,
        "encode_seconds": round(seconds, 3),
        "mb_per_s": round(nbytes / 1e6 / max(seconds, 1e-9), 2),
    }
