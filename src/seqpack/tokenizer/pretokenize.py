"""Pre-tokenization: the GPT-2 "words" of a text (the ``regex`` oracle) and chunking.

Byte-level BPE never merges across a pre-token boundary, so training only needs
``{word: count}``. This module holds the oracle pre-tokenizer and counter (the
compiled scanner in ``csrc/pretokenize.h`` is tested equal to it) and cuts corpora
into chunks that can be counted independently (`seqpack.tokenizer.counts`).

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

import contextlib
import functools
import mmap
import os
import re
from collections import Counter
from collections.abc import Generator, Iterable, Iterator, Sequence
from dataclasses import dataclass

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (a cost in every start-up)
if TYPE_CHECKING:
    from typing import Any

#: The GPT-2 pre-tokenization pattern.
GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


@functools.cache
def _word_re() -> Any:
    """The GPT-2 pattern compiled by the ``regex`` module (imported on first use: an import the
    compiled paths never need)."""
    import regex

    return regex.compile(GPT2_PATTERN)


#: A cut after ``\n`` is safe when printable ASCII stands on both sides of it (a match ends at the cut).
_SAFE_NEWLINE = re.compile(rb"[\x21-\x7e]\n(?=[\x21-\x7e])")
#: So is a cut before the space of ``"a b"`` (ASCII letters around it): the letters end one
#: pre-token, the space starts the next (text whose only newlines are blank lines still splits).
_SAFE_SPACE = re.compile(rb"[A-Za-z](?= [A-Za-z])")
#: How far past the target point a cut is looked for before the window grows
_PROBE_BYTES = 1 << 16

Errors = str  # "strict" | "replace"


def special_pattern(special_tokens: Sequence[str]) -> re.Pattern[str] | None:
    """Alternation of the special tokens, longest first (so the longest match wins)."""
    if not special_tokens:
        return None
    ordered = sorted(set(special_tokens), key=lambda s: (-len(s), s))
    return re.compile("|".join(re.escape(s) for s in ordered))


def split_specials(text: str, specials: re.Pattern[str] | None) -> list[str]:
    """Pieces of ``text`` between special tokens (the specials themselves dropped)."""
    return [text] if specials is None else specials.split(text)


#: the longest pre-token BPE is given, in UTF-8 bytes: a longer one (a run of one letter, of spaces,
#: of NUL bytes, as no text holds) is cut into pieces of at most this size between characters, so
#: that encoding and training need memory in proportion to it, not to the run (the compiled core's
#: ``kMaxPiece``, csrc/pretokenize.h)
MAX_PIECE_BYTES = 1 << 20


def pieces(word: str, limit: int = MAX_PIECE_BYTES) -> list[str]:
    """``word``, or its pieces of at most ``limit`` UTF-8 bytes, cut between characters.

    >>> pieces("abcdef", 4), pieces("ééé", 3)
    (['abcd', 'ef'], ['é', 'é', 'é'])
    """
    raw = word.encode("utf-8", "surrogatepass")
    if len(raw) <= limit:
        return [word]
    out, a = [], 0
    while len(raw) - a > limit:
        cut = a + limit
        while raw[cut] & 0xC0 == 0x80:  # a continuation byte: back to its character's first byte
            cut -= 1
        out.append(raw[a:cut].decode("utf-8", "surrogatepass"))
        a = cut
    out.append(raw[a:].decode("utf-8", "surrogatepass"))
    return out


def split_words(text: str) -> list[str]:
    """GPT-2 pre-tokens of ``text`` (no special-token handling); one over `MAX_PIECE_BYTES`
    bytes in `pieces`."""
    words: list[str] = _word_re().findall(text)
    if len(text) * 4 > MAX_PIECE_BYTES and any(
        len(w) * 4 > MAX_PIECE_BYTES for w in words
    ):  # at most 4 bytes a character
        words = [p for w in words for p in pieces(w)]
    return words


def count_words(documents: Iterable[str], *, special_tokens: Sequence[str] = ()) -> Counter[str]:
    """Count pre-tokens over ``documents`` in this process (the oracle path)."""
    specials = special_pattern(special_tokens)
    counts: Counter[str] = Counter()
    for doc in documents:
        for piece in split_specials(doc, specials):
            counts.update(split_words(piece))
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


Chunk = FileChunk | DocChunk


def _special_bytes_pattern(special_tokens: Sequence[str]) -> re.Pattern[bytes] | None:
    if not special_tokens:
        return None
    ordered = sorted({s.encode("utf-8") for s in special_tokens}, key=lambda b: (-len(b), b))
    return re.compile(b"|".join(re.escape(s) for s in ordered))


#: the UTF-8 byte-order mark some editors write at the start of a text file
BOM = b"\xef\xbb\xbf"


def file_chunks(
    path: str | os.PathLike[str], target_bytes: int, special_tokens: Sequence[str] = ()
) -> Iterator[FileChunk]:
    """Cut a file into chunks of about ``target_bytes`` at safe boundaries.

    A chunk ends right before a special token when one starts within
    ``target_bytes`` after the target point, else at a safe newline or space (see
    `_SAFE_NEWLINE`, `_SAFE_SPACE`; neither where a special token contains
    that character); if the file has none, the chunk grows until one is found (or to the
    end of the file). A UTF-8 byte-order mark at the start of the file is not text: the first
    chunk starts after it.
    """
    path = os.fspath(path)
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        skip = len(BOM) if f.read(len(BOM)) == BOM else 0
    if size <= skip:
        return
    if size <= target_bytes:
        yield FileChunk(path, skip, size)
        return
    sp = _special_bytes_pattern(special_tokens)
    safe = [r for r, c in ((_SAFE_NEWLINE, "\n"), (_SAFE_SPACE, " ")) if not any(c in s for s in special_tokens)]
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        # ints only: a live match object would pin the mmap's buffer
        longest = max((len(t.encode("utf-8")) for t in special_tokens), default=0)
        literal = special_tokens[0].encode("utf-8") if len(set(special_tokens)) == 1 else None
        starts = _special_starts(mm, size, sp, longest, literal) if sp is not None else None
        try:
            for start, end in _cut_points(mm, size, target_bytes, starts, safe):
                if end > max(start, skip):
                    yield FileChunk(path, max(start, skip), end)
        finally:
            if starts is not None:
                starts.close()
            del starts


#: how much of a file the special-token search maps at a time
_SCAN_BYTES = 16 << 20


def _special_starts(
    mm: mmap.mmap, size: int, sp: re.Pattern[bytes], longest: int, literal: bytes | None = None
) -> Generator[int, None, None]:
    """Where the special tokens start in ``mm``: the matches of ``sp.finditer(mm)``, found a window
    of `_SCAN_BYTES` at a time. Each window is let go of once searched (``MADV_DONTNEED``:
    the page cache keeps the pages, the process no longer holds them), so a file with few or no
    special tokens is not held in memory whole while the next one is looked for. A match that
    starts in a window lies within ``longest - 1`` bytes past it, so the windows find what one
    search would. ``literal``: the one special token, where there is one (``sp`` matches it
    alone): found by ``mmap.find``, several times faster than the regex engine's scan."""
    pos = 0
    while pos < size:
        end = min(size, pos + _SCAN_BYTES)
        after = end
        for start, stop in _matches(mm, sp, literal, pos, min(size, end + longest - 1)):
            if start >= end:
                break
            yield start
            after = max(after, stop)
        _let_go(mm, pos, after)
        pos = after


def _matches(
    mm: mmap.mmap, sp: re.Pattern[bytes], literal: bytes | None, lo: int, hi: int
) -> Iterator[tuple[int, int]]:
    """``(start, end)`` of each match in ``mm[lo:hi]``, left to right, not overlapping."""
    if literal is None:
        for m in sp.finditer(mm, lo, hi):
            yield m.start(), m.end()
        return
    i = mm.find(literal, lo, hi)
    while i >= 0:
        yield i, i + len(literal)
        i = mm.find(literal, i + len(literal), hi)


def _let_go(mm: mmap.mmap, start: int, stop: int) -> None:
    """Drop ``mm``'s pages in ``[start, stop)`` from this process (not from the page cache)."""
    advise = getattr(mmap, "MADV_DONTNEED", None)
    start -= start % mmap.PAGESIZE
    if advise is not None and stop > start:
        mm.madvise(advise, start, stop - start)


def _safe_cut_in(mm: mmap.mmap, start: int, stop: int, safe: Sequence[re.Pattern[bytes]]) -> int | None:
    """The first safe cut in ``[start, stop)``: a kind of cut (``safe``, in order of preference)
    is looked for in the first `_PROBE_BYTES`, then the next kind, then the rest."""
    for lo, hi in ((start, min(stop, start + _PROBE_BYTES)), (start + _PROBE_BYTES, stop)):
        for pattern in safe:
            if lo < hi and (m := pattern.search(mm, lo, hi)) is not None:
                return m.end()  # each pattern's match ends where it cuts
    return None


def _cut_points(
    mm: mmap.mmap, size: int, target: int, starts: Iterator[int] | None, safe: Sequence[re.Pattern[bytes]]
) -> Iterator[tuple[int, int]]:
    """Spans ``[pos, cut)``; see `file_chunks` for where cuts go."""
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
        elif safe:
            stop = min(size, cand + target if pending is None else pending)
            cut = _safe_cut_in(mm, cand, stop, safe)
            while cut is None and pending is None and stop < size:
                cand, stop = stop - 2, min(size, stop + target)
                cut = _safe_cut_in(mm, cand, stop, safe)
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


def read_chunk_bytes(chunk: FileChunk) -> bytes:
    """The bytes of a file chunk."""
    with open(chunk.path, "rb") as f:
        f.seek(chunk.start)
        return f.read(chunk.end - chunk.start)


@contextlib.contextmanager
def chunk_view(chunk: FileChunk) -> Iterator[memoryview | bytes]:
    """The bytes of a file chunk, read in place: a view of the file mapped (the page cache's own
    pages, no copy; a fresh buffer costs a page fault per 4 KB, 2 us each on some VMs), or
    `read_chunk_bytes` where the file cannot be mapped. The view is valid inside the block."""
    if chunk.end <= chunk.start:
        yield b""
        return
    with open(chunk.path, "rb") as f:
        try:
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError):  # not a mappable file
            mm = None
    if mm is None:
        yield read_chunk_bytes(chunk)
        return
    with mm:
        view = memoryview(mm)[chunk.start : chunk.end]
        try:
            yield view
        finally:
            view.release()  # before the map closes
