"""Pre-token counts as flat arrays, and counting over chunks on threads (map/reduce).

Training only needs ``{pre-token: count}``. The compiled counter
(`seqpack.tokenizer.core.CoreBPE.word_counter`) splits at special tokens, pre-tokenizes with the
GPT-2 scanner and counts, with the GIL released. Counting is a map over chunks
(`count_chunk`, a pure function: any engine can run it) and a reduce
(`WordCounts.merge`); memory is bounded by the table of distinct words plus the
chunks in flight, never by the corpus.

    >>> c = count_chunk(DocChunk(("a a<|endoftext|>a",)), special_tokens=("<|endoftext|>",))
    >>> sorted(c.to_dict().items())
    [(' a', 1), ('a', 2)]
    >>> WordCounts.merge([c, c]).to_dict() == {"a": 4, " a": 2}
    True
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from seqpack._parallel import map_threads
from seqpack.corpus.readers import decode_replacing
from seqpack.errors import UserError
from seqpack.tokenizer.pretokenize import Chunk, DocChunk, FileChunk, chunk_view

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (a cost in every start-up)
if TYPE_CHECKING:
    from typing import Any

    import numpy as np

# numpy is imported where arrays are made: training itself (count_into, then the counter's own
# merge loop) runs without it, which keeps the start-up of `seqpack train-tokenizer` short.


@dataclass(frozen=True, eq=False)
class WordCounts:
    """Distinct pre-tokens (UTF-8, concatenated) and their counts.

    ``blob[offsets[i]:offsets[i + 1]]`` is word ``i``; ``counts[i]`` how often it occurs.
    Small to pickle or send between processes (three arrays).
    """

    blob: np.ndarray  # (sum of word bytes,) uint8
    offsets: np.ndarray  # (n + 1,) int64
    counts: np.ndarray  # (n,) int64

    def __len__(self) -> int:
        return int(self.counts.shape[0])

    @property
    def total(self) -> int:
        """Number of pre-tokens counted."""
        return int(self.counts.sum())

    def to_dict(self) -> dict[str, int]:
        data = self.blob.tobytes()
        bounds = self.offsets.tolist()
        return {data[bounds[i] : bounds[i + 1]].decode("utf-8"): c for i, c in enumerate(self.counts.tolist())}

    @classmethod
    def from_dict(cls, counts: Mapping[str, int]) -> WordCounts:
        import numpy as np

        encoded = [w.encode("utf-8") for w in counts]
        offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
        np.cumsum([len(b) for b in encoded], out=offsets[1:])
        blob = np.frombuffer(b"".join(encoded), dtype=np.uint8).copy()
        return cls(blob, offsets, np.fromiter(counts.values(), dtype=np.int64, count=len(encoded)))

    @classmethod
    def merge(cls, parts: Iterable[WordCounts]) -> WordCounts:
        """The reduce step: add up counts of the same word."""
        from seqpack.tokenizer.core import CoreBPE

        total = CoreBPE.word_counter([])
        for p in parts:
            total.add_arrays(p.blob, p.offsets, p.counts)
        return cls(*total.to_arrays())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, WordCounts):
            return NotImplemented
        return self.to_dict() == other.to_dict()


def _counter(special_tokens: Sequence[str]) -> Any:  # the compiled WordCounter
    from seqpack.tokenizer.core import CoreBPE

    return CoreBPE.word_counter(special_tokens)


def _add_chunk(counter: Any, chunk: Chunk, errors: str) -> int:
    """Count one chunk into ``counter``; returns its size (bytes of a file, chars of documents)."""
    if isinstance(chunk, DocChunk):
        counter.add_texts(chunk.documents)
        return sum(len(d) for d in chunk.documents)
    with chunk_view(chunk) as data:
        bad = counter.add_bytes(data)
        if bad >= 0:
            if errors != "replace":
                raise UserError(
                    f"{chunk.path}: invalid UTF-8 at byte offset {chunk.start + bad}; "
                    "pass --errors replace (errors='replace') to substitute U+FFFD"
                )
            text = decode_replacing(bytes(data), name=str(chunk.path), offset=chunk.start)
            counter.add_bytes(text.encode("utf-8"))
    return chunk.end - chunk.start


def count_chunk(chunk: Chunk, *, special_tokens: Sequence[str] = (), errors: str = "strict") -> WordCounts:
    """The map step: the counts of one chunk."""
    counter = _counter(special_tokens)
    _add_chunk(counter, chunk, errors)
    return WordCounts(*counter.to_arrays())


def count_chunks(
    chunks: Iterable[Chunk],
    *,
    special_tokens: Sequence[str] = (),
    workers: int = 1,
    errors: str = "strict",
    on_progress: Callable[[int], None] | None = None,
) -> WordCounts:
    """Count pre-tokens over ``chunks`` on ``workers`` threads; one counter per thread, merged at the end.

    Each thread pulls the next chunk when it is free (``workers`` chunks in flight), so memory
    stays bounded by those chunks plus the tables of distinct words.
    """
    counter = count_into(chunks, special_tokens=special_tokens, workers=workers, errors=errors, on_progress=on_progress)
    return WordCounts(*counter.to_arrays())


def count_into(
    chunks: Iterable[Chunk],
    *,
    special_tokens: Sequence[str] = (),
    workers: int = 1,
    errors: str = "strict",
    on_progress: Callable[[int], None] | None = None,
) -> Any:
    """`count_chunks`, returning the compiled counter itself (``len``, ``total``,
    ``to_arrays``, and ``merges(n)``: the merge loop on it, with no array made)."""
    local = threading.local()
    counters = []
    lock = threading.Lock()

    def work(chunk: Chunk) -> int:
        counter = getattr(local, "counter", None)
        if counter is None:
            counter = local.counter = _counter(special_tokens)
            with lock:
                counters.append(counter)
        return _add_chunk(counter, chunk, errors)

    sizes: Iterator[int] = map(work, chunks) if workers <= 1 else map_threads(work, chunks, workers)
    for n in sizes:
        if on_progress is not None:
            on_progress(n)
    if not counters:
        return _counter(special_tokens)  # nothing counted
    first, *rest = counters
    for other in rest:
        first.merge(other)
    return first


__all__ = ["DocChunk", "FileChunk", "WordCounts", "count_chunk", "count_chunks", "count_into"]
