"""Pre-tokenization: split text into GPT-2 "words" and count them, in parallel.

Byte-level BPE never merges across a pre-token boundary, so training only needs
``{word: count}``. This module produces that table from files or documents.

    >>> split_words("Hello, world!  ")
    ['Hello', ',', ' world', '!', '  ']
    >>> sorted(count_words(["a a<|endoftext|>a"], special_tokens=["<|endoftext|>"]).items())
    [(' a', 1), ('a', 2)]

Special tokens split the text first (longest match wins) and are never counted.
Large files are cut into chunks at boundaries that provably do not change the
pre-tokenization (at a special token, or at ``"x\\ny"`` with printable ASCII on
both sides of the newline), so chunks can be counted independently and in
parallel, with memory bounded by the chunk size.
"""

from __future__ import annotations

import mmap
import os
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Union

import regex

from seqpack._parallel import process_pool, windowed_map

#: The GPT-2 pre-tokenization pattern.
GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
_WORD_RE = regex.compile(GPT2_PATTERN)

#: A cut after ``\n`` is safe when printable ASCII stands on both sides of it.
_SAFE_NEWLINE = re.compile(rb"[\x21-\x7e]\n(?=[\x21-\x7e])")

Errors = str  # "strict" | "replace"


def special_pattern(special_tokens: Sequence[str]) -> regex.Pattern[str] | None:
    """Alternation of the special tokens, longest first (so the longest match wins)."""
    if not special_tokens:
        return None
    ordered = sorted(set(special_tokens), key=lambda s: (-len(s), s))
    return regex.compile("|".join(regex.escape(s) for s in ordered))


def split_specials(text: str, specials: regex.Pattern[str] | None) -> list[str]:
    """Pieces of ``text`` between special tokens (the specials themselves dropped)."""
    return [text] if specials is None else specials.split(text)


def split_words(text: str) -> list[str]:
    """GPT-2 pre-tokens of ``text`` (no special-token handling)."""
    return _WORD_RE.findall(text)


def count_words(
    documents: Iterable[str], *, special_tokens: Sequence[str] = ()
) -> Counter[str]:
    """Count pre-tokens over ``documents`` in this process (the reference path)."""
    specials = special_pattern(special_tokens)
    counts: Counter[str] = Counter()
    for doc in documents:
        for piece in split_specials(doc, specials):
            counts.update(_WORD_RE.findall(piece))
    return counts


# --------------------------------------------------------------------------- chunks


@dataclass(frozen=True)
class FileChunk:
    """Bytes ``[start, end)`` of ``path``; both ends are safe pre-token boundaries."""

    path: str
    start: int
    end: int


@dataclass(frozen=True)
class DocChunk:
    """A batch of whole documents."""

    documents: tuple[str, ...]


Chunk = Union[FileChunk, DocChunk]


def _special_bytes_pattern(special_tokens: Sequence[str]) -> re.Pattern[bytes] | None:
    if not special_tokens:
        return None
    ordered = sorted({s.encode("utf-8") for s in special_tokens}, key=lambda b: (-len(b), b))
    return re.compile(b"|".join(re.escape(s) for s in ordered))


def file_chunks(
    path: str | os.PathLike[str], target_bytes: int, special_tokens: Sequence[str] = ()
) -> Iterator[FileChunk]:
    """Cut a file into chunks of about ``target_bytes`` at safe boundaries.

    A chunk ends right before a special token when one starts within
    ``target_bytes`` after the target point, else at a safe newline; if the file
    has neither, the chunk grows until one is found (or to the end of the file).
    """
    path = os.fspath(path)
    size = os.path.getsize(path)
    if size == 0:
        return
    if size <= target_bytes:
        yield FileChunk(path, 0, size)
        return
    sp = _special_bytes_pattern(special_tokens)
    newline_ok = not any("\n" in s for s in special_tokens)
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        # ints only: a live match object would pin the mmap's buffer
        starts = (m.start() for m in sp.finditer(mm)) if sp is not None else None
        try:
            for start, end in _cut_points(mm, size, target_bytes, starts, newline_ok):
                yield FileChunk(path, start, end)
        finally:
            if starts is not None:
                starts.close()
            del starts


def _safe_newline_cut(mm: mmap.mmap, start: int, stop: int) -> int | None:
    m = _SAFE_NEWLINE.search(mm, start, stop)
    return None if m is None else m.start() + 2


def _cut_points(
    mm: mmap.mmap, size: int, target: int, starts: Iterator[int] | None, newline_ok: bool
) -> Iterator[tuple[int, int]]:
    """Spans ``[pos, cut)``; see :func:`file_chunks` for where cuts go."""
    nxt = (lambda: next(starts, None)) if starts is not None else (lambda: None)
    pending = nxt()
    pos = 0
    while size - pos > target:
        cand = pos + target
        while pending is not None and pending < cand:
            pending = nxt()
        cut = None
        if pending is not None and pending - cand <= target:
            cut = pending
        elif newline_ok:
            stop = min(size, cand + target if pending is None else pending)
            cut = _safe_newline_cut(mm, cand, stop)
            while cut is None and pending is None and stop < size:
                cand, stop = stop - 2, min(size, stop + target)
                cut = _safe_newline_cut(mm, cand, stop)
        if cut is None:
            cut = pending if pending is not None else size
        yield pos, cut
        pos = cut
    if pos < size:
        yield pos, size


def doc_chunks(documents: Iterable[str], target_chars: int) -> Iterator[DocChunk]:
    """Batch documents into chunks of about ``target_chars`` characters."""
    batch: list[str] = []
    size = 0
    for doc in documents:
        if not isinstance(doc, str):
            raise TypeError(f"documents must be str, got {type(doc).__name__}")
        batch.append(doc)
        size += len(doc)
        if size >= target_chars:
            yield DocChunk(tuple(batch))
            batch, size = [], 0
    if batch:
        yield DocChunk(tuple(batch))


def read_chunk_text(chunk: FileChunk, errors: Errors = "strict") -> str:
    """Decode a file chunk; invalid UTF-8 names the file and absolute byte offset."""
    with open(chunk.path, "rb") as f:
        f.seek(chunk.start)
        data = f.read(chunk.end - chunk.start)
    try:
        return data.decode("utf-8", errors=errors)
    except UnicodeDecodeError as e:
        raise ValueError(
            f"{chunk.path}: invalid UTF-8 at byte offset {chunk.start + e.start}; "
            "pass --errors replace (errors='replace') to substitute U+FFFD"
        ) from None


def _count_chunk(args: tuple[Chunk, tuple[str, ...], Errors]) -> tuple[dict[str, int], int]:
    chunk, special_tokens, errors = args
    if isinstance(chunk, FileChunk):
        docs: Sequence[str] = [read_chunk_text(chunk, errors)]
        size = chunk.end - chunk.start
    else:
        docs = chunk.documents
        size = sum(len(d) for d in docs)
    return dict(count_words(docs, special_tokens=special_tokens)), size


def count_chunks(
    chunks: Iterable[Chunk],
    *,
    special_tokens: Sequence[str] = (),
    workers: int = 1,
    errors: Errors = "strict",
    on_progress: Callable[[int], None] | None = None,
    on_started: Callable[[], None] | None = None,
) -> Counter[str]:
    """Count pre-tokens over chunks, in ``workers`` processes (1 = in this process).

    Chunks are consumed lazily (``imap_unordered``), so memory stays bounded by
    a few chunks per worker plus the table of distinct words. ``on_started`` is
    called once the workers exist (after the last fork), e.g. to start a thread.
    """
    tasks = ((c, tuple(special_tokens), errors) for c in chunks)
    total: Counter[str] = Counter()

    def absorb(result: tuple[dict[str, int], int]) -> None:
        counts, size = result
        total.update(counts)
        if on_progress is not None:
            on_progress(size)

    if workers <= 1:
        if on_started is not None:
            on_started()
        for t in tasks:
            absorb(_count_chunk(t))
        return total
    with process_pool(workers) as pool:
        if on_started is not None:
            on_started()
        for result in windowed_map(pool, _count_chunk, tasks, window=4 * workers, ordered=False):
            absorb(result)
    return total
