"""Fast, exact byte-level BPE training.

    >>> config = BPEConfig(vocab_size=260, special_tokens=("<|endoftext|>",), workers=1)
    >>> r = train_bpe_corpus(documents=["low low lower newest newest<|endoftext|>widest"], config=config)
    >>> r.merges  # (w,e) (e,s) (s,t) (l,o) (o,w) all occur 3 times: b"w" is greatest
    [(b'w', b'e'), (b's', b't'), (b'l', b'o')]
    >>> r.vocab[256], r.vocab[259]
    (b'<|endoftext|>', b'lo')

Ids: 0..255 are the bytes, then the special tokens in the order given, then one
id per merge in creation order. Semantics are those of the CS336 reference: the
GPT-2 pre-tokenizer, special tokens split the text and are never merged, the most
frequent pair wins and ties go to the lexicographically greater pair of bytes.

Two stages, both in the compiled core (``csrc/train.h``): (1) pre-tokenize and
count distinct words on threads over chunks cut at safe boundaries
(`seqpack.tokenizer.counts`, a map/reduce); (2) the merge loop over distinct
words with an inverted index pair -> words, incremental count updates and a lazily
invalidated max-heap. The plain-Python trainer in `seqpack.tokenizer.oracle`
is the oracle it is tested against.
"""

from __future__ import annotations

import contextlib
import os
import stat
import time
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from seqpack._parallel import default_workers
from seqpack._resources import collector_paused
from seqpack.corpus.readers import DEFAULT_ERRORS
from seqpack.errors import UserError
from seqpack.tokenizer.counts import WordCounts, count_into
from seqpack.tokenizer.pretokenize import doc_chunks, file_chunks

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (a cost in every start-up)
if TYPE_CHECKING:  # training itself runs without numpy (see counts.py); arrays are made on request
    from typing import Any

    import numpy as np

    from seqpack.tokenizer.tokenizer import Tokenizer

PathLike = str | os.PathLike[str]
Vocab = dict[int, bytes]
Merges = list[tuple[bytes, bytes]]

#: Below this many bytes of input, one process beats a pool.
_PARALLEL_MIN_BYTES = 1 << 20


MAX_VOCAB = 2**31 - 1


@dataclass(frozen=True, kw_only=True)
class BPEConfig:
    """Options of a BPE training run (validated on creation).

    Attributes:
        vocab_size: the tokens to reach: 256 bytes, the special tokens, then merges.
        special_tokens: tokens kept whole, never merged across (each a distinct, non-empty string).
        workers: parallel workers counting pre-tokens (`None`: the cores this process may use).
        errors: how bytes that are not UTF-8 are decoded: `strict` (refused) or `replace`.
        chunk_bytes: bytes of input counted at a time (`None`: chosen from the input's size).
        progress: show a progress bar.
    """

    vocab_size: int
    special_tokens: tuple[str, ...] = ()
    workers: int | None = None
    errors: str = DEFAULT_ERRORS
    chunk_bytes: int | None = None
    progress: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.vocab_size, bool) or not isinstance(self.vocab_size, int):
            raise TypeError(f"vocab_size must be an int, got {self.vocab_size!r}")
        specials = tuple(self.special_tokens)
        object.__setattr__(self, "special_tokens", specials)
        for s in specials:
            if not isinstance(s, str) or not s:
                raise UserError(f"special tokens must be non-empty strings, got {s!r}")
        if len(set(specials)) != len(specials):
            raise UserError(f"special tokens must be distinct, got {list(specials)}")
        minimum = 256 + len(specials)
        if self.vocab_size > MAX_VOCAB:
            raise UserError(
                f"vocab_size={self.vocab_size:,} is more than {MAX_VOCAB:,} (token ids are int32); "
                "pass a smaller --vocab-size"
            )
        if self.vocab_size < minimum:
            raise UserError(
                f"vocab_size={self.vocab_size} is too small: the minimum is {minimum} "
                f"(256 bytes + {len(specials)} special tokens)"
            )
        if self.workers is not None and self.workers < 1:
            raise UserError(f"workers must be >= 1, got {self.workers}")
        if self.errors not in ("strict", "replace"):
            raise UserError(f"errors must be 'strict' or 'replace', got {self.errors!r}")
        if self.chunk_bytes is not None and self.chunk_bytes < 1:
            raise UserError(f"chunk_bytes must be >= 1, got {self.chunk_bytes}")


@dataclass(frozen=True)
class BPEResult:
    """What a training run produced, with timings.

    Attributes:
        vocab: id -> the token's bytes.
        merges: the merges, in the order they were made.
        special_tokens: the special tokens, in `vocab` after the merges' tokens.
        num_words: distinct pre-tokens counted.
        num_pretokens: pre-tokens counted, repeats included.
        input_bytes: bytes read.
        pretokenize_seconds: time spent counting pre-tokens.
        merge_seconds: time spent merging.
        stopped_early: whether no pair was left to merge before `requested_vocab_size`.
        requested_vocab_size: the `vocab_size` asked for.
    """

    vocab: Vocab
    merges: Merges
    special_tokens: tuple[str, ...]
    num_words: int
    num_pretokens: int
    input_bytes: int
    pretokenize_seconds: float
    merge_seconds: float
    stopped_early: bool
    requested_vocab_size: int
    extra: dict[str, float] = field(default_factory=dict)
    #: each merge's left, right and made ids in ``vocab`` (what the trainer knows; None: not known)
    merge_ids: tuple[list[int], list[int], list[int]] | None = field(default=None, repr=False, compare=False)

    @property
    def seconds(self) -> float:
        return self.pretokenize_seconds + self.merge_seconds

    def tokenizer(self) -> Tokenizer:
        """The trained tokenizer, ``Tokenizer(vocab, merges, special_tokens)``: built from the ids the
        trainer made, without copying the merges or looking their tokens up again, unless a special
        token is also a byte or a merge's token (its id is then the lower one's: looked up).

        Returns:
            The `Tokenizer`.
        """
        from seqpack.tokenizer.tokenizer import Tokenizer

        specials = list(self.special_tokens)
        if self.merge_ids is None or len(set(self.vocab.values())) < len(self.vocab):
            return Tokenizer(self.vocab, self.merges, specials)
        return Tokenizer._trained(self.vocab, self.merges, specials, self.merge_ids)


def _check_files(paths: Sequence[PathLike]) -> list[str]:
    from seqpack.corpus.readers import readable_file

    return [readable_file(p) for p in paths]


def count_corpus(
    files: Sequence[PathLike] = (),
    documents: Iterable[str] | None = None,
    *,
    config: BPEConfig,
) -> tuple[WordCounts, int]:
    """Pre-tokenize and count: ``(counts, bytes or chars read)``.

    Pipes, FIFOs and ``/dev/stdin`` have no size to plan chunks from: they are first copied to a
    temporary file (disk, not memory), which is then read like any file.
    """
    counter, size = _count_corpus(files, documents, config=config)
    return WordCounts(*counter.to_arrays()), size


def _count_corpus(files: Sequence[PathLike], documents: Iterable[str] | None, *, config: BPEConfig) -> tuple[Any, int]:
    """`count_corpus` with the compiled counter itself (see `count_into`)."""
    with _spooled(_check_files(files)) as paths:
        return _count(paths, documents, config=config)


@contextlib.contextmanager
def _spooled(paths: list[str]) -> Iterator[list[str]]:
    """``paths`` with every non-regular file (a stream) replaced by a temporary copy.

    On Linux the copy is unlinked as soon as it is made and read back through
    ``/proc/self/fd/N``: it disappears with the process however the process ends (a killed
    job leaves nothing in the temp directory)."""
    made: list[str] = []
    fds: list[int] = []
    anonymous = os.path.isdir("/proc/self/fd")
    try:
        out = []
        for p in paths:
            st = os.stat(p)
            if stat.S_ISREG(st.st_mode) and st.st_size > 0:  # /proc files say 0 bytes: read them as a stream
                out.append(p)
                continue
            import shutil  # here: a stream is rare, and these imports slow every trainer's start-up
            import tempfile

            fd, tmp = tempfile.mkstemp(prefix="seqpack-stream-", suffix=".txt")
            fds.append(fd)
            if anonymous:
                os.unlink(tmp)  # before any byte is copied
            else:
                made.append(tmp)
            with open(p, "rb") as src, open(fd, "wb", closefd=False) as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
            out.append(f"/proc/self/fd/{fd}" if anonymous else tmp)
        yield out
    finally:
        for fd in fds:
            os.close(fd)
        for tmp in made:
            os.unlink(tmp)


def _count(paths: list[str], documents: Iterable[str] | None, *, config: BPEConfig) -> tuple[Any, int]:
    total = sum(os.path.getsize(p) for p in paths)
    workers = config.workers or default_workers()
    if documents is None and total < _PARALLEL_MIN_BYTES:
        workers = 1
    target = config.chunk_bytes or max(256 << 10, min(16 << 20, total // (4 * workers) + 1))
    specials = config.special_tokens

    def chunks() -> Iterator[Any]:  # FileChunk and DocChunk
        for p in paths:
            yield from file_chunks(p, target, specials)
        if documents is not None:
            yield from doc_chunks(documents, target)

    seen = 0
    bar = None
    if config.progress:
        from seqpack._progress import progress_bar

        bar = progress_bar(total=total or None, unit="B", unit_scale=True, desc="pre-tokenize", leave=False)

    def on_progress(n: int) -> None:
        nonlocal seen
        seen += n
        if bar is not None:
            bar.update(n)

    try:
        counts = count_into(
            chunks(),
            special_tokens=specials,
            workers=workers,
            errors=config.errors,
            on_progress=on_progress,
        )
    finally:
        if bar is not None:
            bar.close()
    return counts, seen


def merges_from_counts(word_counts: WordCounts | Mapping[str, int], num_merges: int) -> tuple[np.ndarray, np.ndarray]:
    """Run the compiled merge loop; returns (left, right) ids in the loop's numbering.

    Ids 0..255 are the bytes and ``256 + k`` the token made by merge ``k``.
    """
    import numpy as np

    from seqpack.tokenizer.core import CoreBPE

    if not isinstance(word_counts, WordCounts):
        word_counts = WordCounts.from_dict(word_counts)
    if num_merges <= 0 or not len(word_counts):
        return np.empty(0, np.int32), np.empty(0, np.int32)
    return CoreBPE.merge_loop(word_counts.blob, word_counts.offsets, word_counts.counts, num_merges)


def vocab_from_merge_ids(
    left: np.ndarray | Sequence[int], right: np.ndarray | Sequence[int], special_tokens: Sequence[str]
) -> tuple[Vocab, Merges]:
    """Build the vocab and byte merges from the loop's (left, right) ids (arrays or lists)."""
    toks: list[bytes] = [bytes([i]) for i in range(256)]
    merges: Merges = []
    for a, b in zip(_ints(left), _ints(right)):
        pair = (toks[a], toks[b])
        merges.append(pair)
        toks.append(pair[0] + pair[1])
    return _vocab(toks[256:], special_tokens), merges


def _vocab(made: Sequence[bytes], special_tokens: Sequence[str]) -> Vocab:
    """Ids 0..255 the bytes, then the special tokens, then ``made`` (one token per merge).

    >>> v = _vocab([b"ab"], ["<s>"]); v[97], v[256], v[257]
    (b'a', b'<s>', b'ab')
    """
    vocab: Vocab = {i: bytes([i]) for i in range(256)}
    for s in special_tokens:
        vocab[len(vocab)] = s.encode("utf-8")
    vocab.update(enumerate(made, len(vocab)))
    return vocab


def _ints(ids: np.ndarray | Sequence[int]) -> list[int]:
    return ids.tolist() if hasattr(ids, "tolist") else list(ids)


def train_bpe_corpus(
    files: Sequence[PathLike] = (),
    documents: Iterable[str] | None = None,
    *,
    config: BPEConfig,
) -> BPEResult:
    """Train on text files (each read whole, specials split it) and/or documents.

    Args:
        files: text files, each read whole and split at its special tokens.
        documents: more texts, one per document.
        config: the run's options.

    Returns:
        The vocabulary, the merges and the run's figures.

    Raises:
        UserError: a missing or unreadable file.
    """
    t0 = time.perf_counter()
    counts, size = _count_corpus(files, documents, config=config)
    t1 = time.perf_counter()
    if not len(counts):
        raise UserError("the corpus is empty: no text to train on (after removing special tokens)")
    num_merges = config.vocab_size - 256 - len(config.special_tokens)
    with collector_paused():  # the merges' pairs and the vocab: many containers, no cycle
        specials = len(config.special_tokens)
        merges, tokens, left, right = (
            counts.merges(num_merges, specials) if num_merges else ([], [], [], [])
        )  # the compiled loop
        vocab = _vocab(tokens, config.special_tokens)
        made = list(range(256 + specials, 256 + specials + len(merges)))
    t2 = time.perf_counter()
    stopped = len(merges) < num_merges
    if stopped:
        warnings.warn(
            f"vocab_size={config.vocab_size} is beyond what this corpus can reach: stopped after "
            f"{len(merges)} merges (vocab size {len(vocab)}) because no pair of tokens is left",
            stacklevel=2,
        )
    return BPEResult(
        vocab=vocab,
        merges=merges,
        special_tokens=config.special_tokens,
        num_words=len(counts),
        num_pretokens=counts.total,
        input_bytes=size,
        pretokenize_seconds=t1 - t0,
        merge_seconds=t2 - t1,
        merge_ids=(left, right, made),
        stopped_early=stopped,
        requested_vocab_size=config.vocab_size,
    )


def train_bpe(
    input_path: PathLike,
    vocab_size: int,
    special_tokens: Sequence[str] | None = None,
    *,
    workers: int | None = None,
    errors: str = DEFAULT_ERRORS,
) -> tuple[Vocab, Merges]:
    """Train a byte-level BPE on the text file ``input_path`` (the CS336 interface).

    Returns ``(vocab, merges)``: ``vocab[id] = bytes``, ``merges`` in creation order.

    Args:
        input_path: the text file.
        vocab_size: the tokens to reach (256 bytes + special tokens + merges).
        special_tokens: tokens kept whole.
        workers: parallel workers counting pre-tokens (`None`: the cores this process may use).
        errors: how bytes that are not UTF-8 are decoded: `strict` (refused) or `replace`.

    Returns:
        `(vocab, merges)`: `vocab[id]` is the token's bytes, `merges` in creation order.
    """
    config = BPEConfig(
        vocab_size=vocab_size,
        special_tokens=tuple(special_tokens or ()),
        workers=workers,
        errors=errors,
    )
    result = train_bpe_corpus([input_path], config=config)
    return result.vocab, result.merges


def train_bpe_inputs(inputs: Sequence[PathLike], *, config: BPEConfig, text_field: str = "text") -> BPEResult:
    """Train on CLI-style inputs; no inputs means the built-in Python-docs corpus.

    Text files are read whole (special tokens split them, as in `train_bpe`);
    ``.jsonl`` and ``.parquet`` files give one document per record (``text_field``).
    """
    from seqpack.corpus.readers import is_structured, read_documents

    if not inputs:
        from seqpack.corpus import python_docs  # here: the built-in corpus's module is imported only when used

        return train_bpe_corpus(documents=python_docs(), config=config)
    files = [p for p in inputs if not is_structured(p)]
    structured = [p for p in inputs if is_structured(p)]
    _check_files(structured)
    documents = read_documents(structured, text_field=text_field) if structured else None
    return train_bpe_corpus(files, documents, config=config)
