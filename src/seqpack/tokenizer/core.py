"""The compiled core's tokenizer API behind one thin class (as tiktoken's ``core.py`` wraps its
Rust ``CoreBPE``): the rest of ``tokenizer/`` calls `CoreBPE` and never imports
``seqpack._native`` itself.

    >>> core = CoreBPE(list(range(256)), [(97, 98, 256)])          # one merge: a + b -> 256
    >>> core.encode("abc")
    [256, 99]
    >>> counter = CoreBPE.word_counter([])
    >>> counter.add_texts(["ab ab"]); len(counter)                  # "ab", " ab"
    2

Long texts and batches release the GIL (the batch calls spread over threads inside C++).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import seqpack._native as _native

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (a cost in every start-up)
if TYPE_CHECKING:  # the compiled module makes its arrays itself; training needs no numpy
    from typing import Any

    import numpy as np


class CoreBPE:
    """Byte-level BPE encoding in C++: the GPT-2 pre-tokenizer, merges by rank, special tokens.

    ``byte_ids[b]`` is the id of byte ``b``; ``merges`` are ``(left id, right id, merged id)``
    in rank order; ``specials`` pairs each special token's bytes with its id.

    The hot calls are the C++ methods themselves (bound in ``__init__``: no Python frame per call):

    - ``encode(text) -> list[int]``: ids of one text (special tokens recognised);
    - ``encode_batch(documents, threads) -> (ids, offsets)``: many documents, flat (CSR), on up to
      ``threads``, one for each ``thread_bytes`` (keyword; default 32 KB) of text: below that a thread
      costs more than it gives (0: one per document, as tests need to reach every thread);
    - ``encode_lists(documents, threads) -> list[list[int]]``: the same as one list of ids per document.

    Texts up to 4 KB encode with the GIL held (releasing it costs more than the work); longer ones
    and batches release it. Lists of ids share one Python int per token id, made once per process
    and never freed (their reference counts raised by 2^40: a list takes no reference to its items).
    """

    encode: Callable[[str], list[int]]
    encode_batch: Callable[..., tuple[np.ndarray, np.ndarray]]
    encode_lists: Callable[..., list[list[int]]]

    def __init__(
        self,
        byte_ids: Sequence[int],
        merges: Sequence[tuple[int, int, int]],
        specials: Sequence[tuple[bytes, int]] = (),
    ) -> None:
        left, right, merged = (list(c) for c in zip(*merges)) if len(merges) else ([], [], [])
        self._bind(byte_ids, left, right, merged, specials)

    @classmethod
    def from_columns(
        cls,
        byte_ids: Sequence[int],
        left: list[int],
        right: list[int],
        merged: list[int],
        specials: Sequence[tuple[bytes, int]] = (),
    ) -> CoreBPE:
        """The same encoder from the merges as three columns in rank order (no triple a merge: a
        large tokenizer is built sooner).

        >>> CoreBPE.from_columns(list(range(256)), [97], [98], [256]).encode("abc")
        [256, 99]
        """
        core = cls.__new__(cls)
        core._bind(byte_ids, left, right, merged, specials)
        return core

    def _bind(
        self,
        byte_ids: Sequence[int],
        left: list[int],
        right: list[int],
        merged: list[int],
        specials: Sequence[tuple[bytes, int]],
    ) -> None:
        self._enc = _native.Encoder(
            list(byte_ids), left, right, merged, [s for s, _ in specials], [i for _, i in specials]
        )
        self.encode = self._enc.encode
        self.encode_batch = self._enc.encode_batch
        self.encode_lists = self._enc.encode_lists

    def fast_encode(self, fallback: Callable[[str], list[int]], max_chars: int) -> Callable[[str], list[int]]:
        """``encode`` as a plain C function (no binding layer a call, the cost that dominates short
        texts), checking the type itself; texts over ``max_chars`` characters go to ``fallback``."""
        return self._enc.fast_encode(fallback, max_chars)  # type: ignore[return-value]  # pybind11 types it py::object

    def bpe_with(self, word: bytes, heap: bool) -> list[int]:
        """One pre-tokenized word by the heap rule (long words) or the scan rule (tests compare them)."""
        return self._enc.bpe_with(word, heap)

    def plan(self, documents: Sequence[str], threads: int, thread_bytes: int | None = None) -> tuple[int, int, int]:
        """``(threads, blocks, pieces)`` that ``encode_batch``/``encode_lists`` would run ``documents``
        on (``thread_bytes`` as there; None: its default).

        >>> CoreBPE.from_columns(list(range(256)), [], [], []).plan(["ab"] * 100, 2)
        (1, 1, 100)
        """
        if thread_bytes is None:
            return self._enc.plan(documents, threads)
        return self._enc.plan(documents, threads, thread_bytes)

    def cut_point(self, text: bytes, lo: int, hi: int) -> int:
        """Where ``encode_batch``/``encode_lists`` may cut a long UTF-8 ``text`` to spread it over
        threads, in ``[lo, hi]`` (the last one: after the newline of ``x\\ny``, else before the space
        of ``a b``; never inside a special token), 0 if none (tests check the ids do not change)."""
        return self._enc.cut_point(text, lo, hi)

    def clear_cache(self) -> None:
        """Forget the per-thread word caches (cold-cache measurements)."""
        self._enc.clear_cache()

    @staticmethod
    def fingerprint_stream(ids: list[int], tokens: list[bytes], merges: list[tuple[bytes, bytes]]) -> bytes:
        """The bytes a tokenizer's fingerprint hashes, less its special tokens: per token (in ``ids``'
        order) its id (8 bytes, little-endian), length (4) and bytes; per merge each side's length (4)
        and bytes (``Tokenizer._fingerprint_oracle`` makes them field by field).

        >>> CoreBPE.fingerprint_stream([1], [b"a"], [(b"a", b"a")]).hex()
        '0100000000000000010000006101000000610100000061'
        """
        return _native.fingerprint_stream(ids, tokens, merges)

    @staticmethod
    def tokenizer_texts(
        ids: list[int], tokens: list[bytes], merges: list[tuple[bytes, bytes]], special: list[tuple[int, str]]
    ) -> tuple[bytes, bytes, bytes, bytes]:
        """``vocab.json``, ``merges.txt`` and ``tokenizer.json``'s vocab and merges, as UTF-8 bytes, from
        the tokens (``ids`` ascending, ``tokens`` their bytes), the merges in rank order, and
        ``special``: ``(index into ids, JSON string literal)`` of the tokens that ``tokenizer.json``
        writes as their own text (``seqpack.tokenizer.files`` makes the same bytes in Python).

        >>> texts = CoreBPE.tokenizer_texts([0, 1], [b" a", b"b"], [(b" ", b"a")], [(1, '"Q"')])
        >>> [t.decode() for t in texts[2:]]
        ['{"Ġa":0,"Q":1}', '[["Ġ","a"]]']
        """
        return _native.tokenizer_texts(ids, tokens, merges, special)

    # ---- training ---------------------------------------------------------------------------
    @staticmethod
    def word_counter(special_tokens: Sequence[str]) -> Any:
        """A C++ word counter that splits at ``special_tokens`` and pre-tokenizes
        (``add_texts``, ``add_bytes``, ``add_arrays``, ``merge``, ``to_arrays``, ``len``, ``total``,
        and ``merges(num_merges, specials=0)``: the merge loop on the counts, no array made, giving
        ``(pairs, tokens, left, right)``: the merges as ``(left, right)`` bytes, the tokens they make,
        and each merge's left and right ids in the vocab the trainer builds, whose ``specials``
        special tokens come after the 256 bytes)."""
        return _native.WordCounter([s.encode("utf-8") for s in special_tokens])

    @staticmethod
    def merge_loop(blob: np.ndarray, offsets: np.ndarray, counts: np.ndarray, num_merges: int) -> Any:
        """The BPE merge loop over counted words (CS336 byte-order tie-break)."""
        return _native.merge_loop(blob, offsets, counts, num_merges)
