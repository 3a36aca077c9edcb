"""The byte-level BPE ``Tokenizer``: encode, decode, stream, save, load, export.

    >>> vocab = {i: bytes([i]) for i in range(256)} | {256: b"<|eot|>", 257: b"ab", 258: b"abc"}
    >>> tok = Tokenizer(vocab, [(b"a", b"b"), (b"ab", b"c")], special_tokens=["<|eot|>"])
    >>> tok.encode("abc<|eot|>ab")
    [258, 256, 257]
    >>> tok.decode([258, 256, 257])
    'abc<|eot|>ab'

The rule is minbpe's: within each pre-token, merge the adjacent pair with the
lowest merge rank, all occurrences left to right, until no adjacent pair is a
merge. ``encode`` and ``encode_batch`` run it in the compiled core
(`seqpack._native`: a hand-written GPT-2 pre-tokenizer, a word cache per
thread, the GIL released, texts spread over threads); ``encode_oracle`` is the
same rule in plain Python over the ``regex`` pre-tokenizer, and the two are tested
equal. ``encode_batch(backend="hf")`` runs the Hugging Face ``tokenizers`` export
(tested identical).
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import cached_property, partial
from pathlib import Path

from seqpack._parallel import default_workers
from seqpack._resources import collector_paused
from seqpack.errors import UserError
from seqpack.tokenizer.pretokenize import doc_chunks, special_pattern, split_words

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (a cost in every start-up)
if TYPE_CHECKING:
    import os
    import re
    from typing import Any

    import numpy as np
    import tokenizers

    from seqpack.tokenizer.core import CoreBPE

_CACHE_LIMIT = 1 << 18
#: Streaming cuts after "x\ny" (printable ASCII around the newline): such a cut
#: never changes the GPT-2 pre-tokenization (see pretokenize.file_chunks).
_STREAM_FLUSH_CHARS = 1 << 16
#: `Tokenizer.encode` takes a longer text a piece of about this many characters at a time
#: (cut where the pre-tokenization cannot change), so its working memory stays bounded
_PIECE_CHARS = 1 << 20


def _ascii_letter(c: str) -> bool:
    return "a" <= c <= "z" or "A" <= c <= "Z"


def _safe_cut(text: str, start: int) -> int:
    r"""Index of the last safe cut in ``text`` at or after ``start``; -1 if none.

    Two kinds of cut never change the GPT-2 pre-tokenization: after the newline of ``"x\ny"``
    (printable ASCII around it), and before the space of ``"a b"`` (ASCII letters around it: the
    letters end one pre-token, the space starts the next), so a text without newlines (a single
    152 MB line) still streams in bounded memory.

    >>> _safe_cut("ab cd ef", 0), _safe_cut("x\ny z", 0), _safe_cut("a  b", 0)
    (5, 2, -1)
    """
    i = text.rfind("\n", start)
    while i > 0:
        if i + 1 < len(text) and "!" <= text[i - 1] <= "~" and "!" <= text[i + 1] <= "~":
            return i + 1
        i = text.rfind("\n", start, i)
    i = text.rfind(" ", start)
    while i > 0:
        if i + 1 < len(text) and _ascii_letter(text[i - 1]) and _ascii_letter(text[i + 1]):
            return i
        i = text.rfind(" ", start, i)
    return -1


def _straddles_special(text: str, cut: int, specials_re: re.Pattern[str] | None, longest: int) -> bool:
    """Whether ``cut`` falls inside a special token (``specials_re`` matches them; ``longest``
    characters the longest)."""
    if specials_re is None:
        return False
    lo = max(0, cut - longest)
    window = text[lo : cut + longest]
    return any(m.start() < cut - lo < m.end() for m in specials_re.finditer(window))


def _pieces(text: str, size: int, specials_re: re.Pattern[str] | None, longest: int) -> Iterator[str]:
    """``text`` cut where the ids cannot change (`_safe_cut`, never inside a special token)
    into pieces of ``size / 2 .. size`` characters; the rest whole where no such cut is found.

    >>> list(_pieces("ab cd ef gh", 6, None, 0))
    ['ab cd', ' ef gh']
    """
    pos = 0
    while len(text) - pos > size:
        window = text[pos : pos + size + 1]  # the character after a cut decides it too
        cut = _safe_cut(window, size // 2)
        if cut <= 0 or _straddles_special(window, cut, specials_re, longest):
            break
        yield window[:cut]
        pos += cut
    yield text[pos:]


def _encode_pieces(
    encode: Callable[[str], list[int]], specials_re: re.Pattern[str] | None, longest: int, text: str
) -> list[int]:
    """``encode(text)`` a piece of about ``_PIECE_CHARS`` at a time (bounded working memory)."""
    out: list[int] = []
    for piece in _pieces(text, _PIECE_CHARS, specials_re, longest):
        out += encode(piece)
    return out


class _CompiledCall:
    """``tok.encode``: on an instance, the compiled call that `Tokenizer.native` puts in the instance's
    dict (built at the first access; later ones find it there, before this non-data descriptor); on the
    class, the plain function (``Tokenizer.encode(tok, text)``, ``help``)."""

    def __init__(self, func: Callable[[Tokenizer, str], list[int]]) -> None:
        self.func = func
        self.__doc__ = func.__doc__

    def __get__(self, obj: Tokenizer | None, owner: type | None = None) -> Callable[..., list[int]]:
        if obj is None:
            return self.func
        obj.native  # noqa: B018 (builds the compiled encoder and puts its call in obj.__dict__)
        return obj.__dict__["encode"]


class Tokenizer:
    """Byte-level BPE tokenizer from ``vocab`` (id -> bytes) and ordered ``merges``.

    Special tokens not yet in ``vocab`` are appended to it with new ids.

    Args:
        vocab: id -> the token's bytes.
        merges: the merges, in priority order.
        special_tokens: tokens matched whole in a text, never split.
    """

    #: seqpack's own tokenizers carry no chat template (the chat task uses its default, ChatML)
    chat_template: str | None = None

    def __init__(
        self,
        vocab: dict[int, bytes],
        merges: Sequence[tuple[bytes, bytes]],
        special_tokens: Sequence[str] | None = None,
    ) -> None:
        self._setup(dict(vocab), [(bytes(a), bytes(b)) for a, b in merges], special_tokens, None)

    @classmethod
    def _trained(
        cls,
        vocab: dict[int, bytes],
        merges: list[tuple[bytes, bytes]],
        special_tokens: Sequence[str],
        merge_ids: tuple[list[int], list[int], list[int]],
    ) -> Tokenizer:
        """``Tokenizer(vocab, merges, special_tokens)`` from a trainer's own result
        (`seqpack.tokenizer.train.BPEResult.tokenizer`): ``merges`` hold ``bytes`` (kept as they
        are, not copied one by one) and ``merge_ids`` are each merge's left, right and made ids, which
        the trainer knows (not looked up again). Tests build both ways and compare."""
        tok = cls.__new__(cls)
        left, right, made = merge_ids
        tok._setup(dict(vocab), list(merges), special_tokens, (list(left), list(right), list(made)))
        return tok

    @collector_paused()  # its maps and merge pairs hold no cycles
    def _setup(
        self,
        vocab: dict[int, bytes],
        merges: list[tuple[bytes, bytes]],
        special_tokens: Sequence[str] | None,
        merge_ids: tuple[list[int], list[int], list[int]] | None,
    ) -> None:
        self.vocab: dict[int, bytes] = vocab
        self.merges: list[tuple[bytes, bytes]] = merges
        self.special_tokens: list[str] = list(dict.fromkeys(special_tokens or ()))
        down = sorted(self.vocab, reverse=True)  # a token held by two ids: the lower id wins (written last)
        self._id_of: dict[bytes, int] = dict(zip(map(self.vocab.__getitem__, down), down))
        self.special_ids: dict[str, int] = {}
        for s in self.special_tokens:
            b = s.encode("utf-8")
            if b not in self._id_of:
                new = max(self.vocab, default=-1) + 1
                self.vocab[new] = b
                self._id_of[b] = new
            self.special_ids[s] = self._id_of[b]
        missing = [i for i in range(256) if bytes([i]) not in self._id_of]
        if missing:
            raise UserError(
                f"vocab lacks {len(missing)} of the 256 single bytes (e.g. byte {missing[0]}); "
                "a byte-level BPE vocab must contain every byte"
            )
        self._byte_ids = [self._id_of[bytes([i])] for i in range(256)]
        self._merge_ids = merge_ids if merge_ids is not None else self._check_merges()
        self._specials_re = special_pattern(self.special_tokens)
        self._longest_special = max((len(t) for t in self.special_tokens), default=0)
        self._cache: dict[str, list[int]] = {}
        self._hf: tokenizers.Tokenizer | None = None
        self._native: CoreBPE | None = None
        self._fingerprint: str | None = None  # of immutable vocab and merges: computed once, on first use

    def _check_merges(self) -> tuple[list[int], list[int], list[int]]:
        """Each merge's left, right and merged ids, in rank order; a merge whose tokens the vocab lacks
        is refused."""
        get = self._id_of.get
        left = [get(a) for a, _ in self.merges]
        right = [get(b) for _, b in self.merges]
        made = [get(a + b) for a, b in self.merges]
        if None in left or None in right or None in made:
            rank = next(r for r in range(len(made)) if None in (left[r], right[r], made[r]))
            a, b = self.merges[rank]
            raise UserError(f"merge {rank} ({a!r}, {b!r}) refers to a token missing from the vocab")
        return left, right, made  # type: ignore[return-value]  # checked above: no None is left

    @cached_property
    def _ranks(self) -> dict[tuple[int, int], tuple[int, int]]:
        """``(left id, right id) -> (rank, merged id)`` (the oracle encoder's); a pair merged twice
        keeps its first rank. The compiled encoder takes the merges in rank order instead."""
        left, right, made = self._merge_ids
        ranks = range(len(made) - 1, -1, -1)  # from the last: the first rank of a pair is written last
        return dict(zip(zip(left[::-1], right[::-1]), zip(ranks, made[::-1])))

    # ------------------------------------------------------------------ encode
    @property
    def native(self) -> CoreBPE:
        """The compiled encoder (`seqpack.tokenizer.core.CoreBPE`), built on first use."""
        if self._native is None:
            from seqpack.tokenizer.core import CoreBPE

            specials = [(s.encode("utf-8"), self.special_ids[s]) for s in self.special_tokens]
            # the merges in rank order (the first merge of a pair wins there too)
            self._native = native = CoreBPE.from_columns(self._byte_ids, *self._merge_ids, specials)
            # From now on ``self.encode`` is the compiled call itself (no Python frame a call);
            # texts too long for one call go to _encode_pieces, which holds no reference to self.
            fallback = partial(_encode_pieces, native.encode, self._specials_re, self._longest_special)
            self.__dict__["encode"] = native.fast_encode(fallback, 2 * _PIECE_CHARS)
        return self._native

    def clear_cache(self) -> None:
        """Forget the per-word caches (for cold-cache measurements)."""
        self._cache.clear()
        if self._native is not None:
            self._native.clear_cache()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_native"] = None  # rebuilt on first use after unpickling
        state.pop("encode", None)  # its compiled form (see native)
        state.pop("_ranks", None)  # made again when the oracle encoder needs it
        state["_hf"] = None
        state["_cache"] = {}
        return state

    def _bpe(self, word: str) -> list[int]:
        ids = [self._byte_ids[b] for b in word.encode("utf-8")]
        ranks = self._ranks
        while len(ids) > 1:
            best = None
            for pair in itertools.pairwise(ids):
                r = ranks.get(pair)
                if r is not None and (best is None or r[0] < best[0]):
                    best = r
                    best_pair = pair
            if best is None:
                break
            new_id = best[1]
            a, b = best_pair
            out: list[int] = []
            i, n = 0, len(ids)
            while i < n:
                if i + 1 < n and ids[i] == a and ids[i + 1] == b:
                    out.append(new_id)
                    i += 2
                else:
                    out.append(ids[i])
                    i += 1
            ids = out
        return ids

    def _encode_ordinary(self, text: str, out: list[int]) -> None:
        cache = self._cache
        for word in split_words(text):
            ids = cache.get(word)
            if ids is None:
                ids = self._bpe(word)
                if len(cache) < _CACHE_LIMIT:
                    cache[word] = ids
            out.extend(ids)

    def _encode(self, text: str) -> list[int]:
        """Token ids of ``text``; special tokens (longest match first) map to their ids.

        ``tok.encode`` is the compiled encoder's own call, built at the first access (see
        `native`), so ``f = tok.encode`` taken before any call is as fast as ``tok.encode(text)``:
        no Python frame a call (a 20-character text: 113 ns a call against 270-284 through a method, here).
        """
        return self.encode(text)  # the compiled call (Tokenizer.encode(tok, text) comes here)

    encode = _CompiledCall(_encode)

    def _pieces(self, text: str, size: int) -> Iterator[str]:
        """``text`` cut where the ids cannot change (see `_pieces`).

        >>> tok = Tokenizer({i: bytes([i]) for i in range(256)}, [])
        >>> list(tok._pieces("ab cd ef gh", 6))
        ['ab cd', ' ef gh']
        """
        return _pieces(text, size, self._specials_re, self._longest_special)

    def encode_oracle(self, text: str) -> list[int]:
        """`encode` in plain Python (the ``regex`` pre-tokenizer, a dict cache): the oracle.

        Args:
            text: the text.

        Returns:
            Its ids, equal to `encode(text)`.
        """
        if not isinstance(text, str):
            raise TypeError(f"encode takes a str, got {type(text).__name__}")
        out: list[int] = []
        if self._specials_re is None:
            self._encode_ordinary(text, out)
            return out
        pos = 0
        for m in self._specials_re.finditer(text):
            self._encode_ordinary(text[pos : m.start()], out)
            out.append(self.special_ids[m.group()])
            pos = m.end()
        self._encode_ordinary(text[pos:], out)
        return out

    def encode_iterable(self, iterable: Iterable[str]) -> Iterator[int]:
        """Stream ids from an iterable of strings (e.g. a file handle), bounded memory.

        Text is held back only up to the last safe cut (`_safe_cut`: ``"x\\ny"`` or
        ``"a b"``), so the ids are exactly ``encode("".join(iterable))``. Only input with
        neither (no newline between printable characters, no space between letters) is
        buffered whole.

        Args:
            iterable: the pieces of one text, in order.

        Yields:
            The ids of their concatenation.
        """
        buf = ""
        for piece in iterable:
            buf += piece
            if len(buf) < _STREAM_FLUSH_CHARS:
                continue
            cut = _safe_cut(buf, len(buf) // 2)
            if cut <= 0 or self._straddles_special(buf, cut):
                continue
            head, buf = buf[:cut], buf[cut:]
            yield from self.encode(head)
        if buf:
            yield from self.encode(buf)

    def _straddles_special(self, text: str, cut: int) -> bool:
        return _straddles_special(text, cut, self._specials_re, self._longest_special)

    # ------------------------------------------------------------------ decode
    def decode(self, ids: Iterable[int]) -> str:
        """Text of ``ids``; byte sequences that are not valid UTF-8 become U+FFFD. Ids are integers
        (`seqpack._ids.token_ids`: a float, a text or a nested list is refused, not cast).

        Args:
            ids: token ids, ints.

        Returns:
            The text.
        """
        from seqpack._ids import token_ids  # numpy: `seqpack encode` starts without it

        vocab = self.vocab
        flat = token_ids(ids, what="decode")
        try:
            data = b"".join(vocab[i] for i in flat.tolist())
        except KeyError as e:
            raise UserError(f"unknown token id {e.args[0]} (vocab has {len(vocab)} ids)") from e
        return data.decode("utf-8", errors="replace")

    # --------------------------------------------------------------- fast path
    def to_hf(self) -> tokenizers.Tokenizer:
        """An equivalent ``tokenizers.Tokenizer`` (same ids, same merges).

        Returns:
            The `tokenizers.Tokenizer`.
        """
        if self._hf is None:
            from seqpack.tokenizer.hf_export import build_hf_tokenizer

            self._hf = build_hf_tokenizer(self)
        return self._hf

    def encode_batch(
        self, texts: Iterable[str], *, backend: str = "native", workers: int | None = None
    ) -> list[list[int]]:
        """Encode many texts at once; ids identical to ``[self.encode(t) for t in texts]``.

        ``backend="native"``: the compiled core on up to ``workers`` threads (default: all cores), one
        for each 32 KB of text (a smaller batch runs on one: starting a thread costs more than it gives).
        ``backend="python"``: `encode_oracle`, one text after another.
        ``backend="hf"``: the equivalent Hugging Face tokenizer (Rust, threads; tested
        identical).

        Args:
            texts: the texts.
            backend: `native`, `python` or `hf`.
            workers: threads of the native backend (`None`: the cores this process may use).

        Returns:
            Each text's ids, in order.
        """
        if isinstance(texts, (str, bytes)):  # a str is an iterable of characters: never what was meant
            raise TypeError(f"encode_batch takes a list of texts, got one {type(texts).__name__}; use encode(text)")
        if backend == "hf":
            hf = self.to_hf()
            return [e.ids for e in hf.encode_batch(list(texts), add_special_tokens=False)]
        if backend == "python":
            return [self.encode_oracle(t) for t in texts]
        if backend != "native":
            raise UserError(f"backend must be 'native', 'python' or 'hf', got {backend!r}")
        threads, out = workers or default_workers(), []
        if isinstance(texts, (list, tuple)):  # one call: its ids take less memory than the lists made of them
            return self.native.encode_lists(texts, threads)
        for chunk in doc_chunks(texts, 1 << 22):  # 4M characters a call: the input is read as it comes
            out += self.native.encode_lists(chunk.documents, threads)
        return out

    def encode_batch_flat(self, texts: Iterable[str], *, workers: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Encode many texts into one array: ``(ids, offsets)``, text ``i``'s ids being
        ``ids[offsets[i]:offsets[i + 1]]`` (``ids`` ``uint32``, ``offsets`` ``int64`` of ``len(texts) + 1``).

        The same ids as `encode_batch`, on the same threads, without a Python list per text: the
        compiled core writes every id into one buffer (what the token store keeps), so the call
        costs no list made and none freed.

        >>> tok = Tokenizer({i: bytes([i]) for i in range(256)} | {256: b"ab"}, [(b"a", b"b")])
        >>> ids, offsets = tok.encode_batch_flat(["ab", "cab", ""])
        >>> ids.tolist(), offsets.tolist()
        ([256, 99, 256], [0, 1, 3, 3])

        Args:
            texts: the texts.
            workers: threads (`None`: the cores this process may use).

        Returns:
            `(ids, offsets)`: uint32 `(total,)` and int64 `(len(texts) + 1,)`.
        """
        if isinstance(texts, (str, bytes)):  # a str is an iterable of characters: never what was meant
            raise TypeError(
                f"encode_batch_flat takes a list of texts, got one {type(texts).__name__}; use encode(text)"
            )
        threads = workers or default_workers()
        if isinstance(texts, (list, tuple)):
            return self.native.encode_batch(texts, threads)
        import numpy as np

        parts = [self.native.encode_batch(c.documents, threads) for c in doc_chunks(texts, 1 << 22)]
        if not parts:
            return np.zeros(0, np.uint32), np.zeros(1, np.int64)
        starts = np.cumsum([0] + [len(ids) for ids, _ in parts[:-1]])
        offsets = np.concatenate([parts[0][1][:1]] + [o[1:] + s for (_, o), s in zip(parts, starts)])
        return np.concatenate([ids for ids, _ in parts]), offsets

    def encode_with_offsets(self, texts: Iterable[str]) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per text: ids ``(n,)`` and each token's character span ``(n, 2)``; a token that ends
        inside a multi-byte character ends after it.

        >>> tok = Tokenizer({i: bytes([i]) for i in range(256)} | {256: b"ab"}, [(b"a", b"b")])
        >>> ids, spans = tok.encode_with_offsets(["abé"])[0]
        >>> ids.tolist(), spans.tolist()
        ([256, 195, 169], [[0, 2], [2, 3], [2, 3]])

        Args:
            texts: the texts.

        Returns:
            Per text, `(ids, spans)`: `(n,)` and int `(n, 2)` character spans (start, end).
        """
        import numpy as np  # here: training and saving a tokenizer need no numpy (see counts.py)

        texts = list(texts)
        out = []
        for text, ids in zip(texts, self.encode_batch(texts)):
            raw = np.frombuffer(text.encode("utf-8"), dtype=np.uint8)
            char_of = np.cumsum((raw & 0xC0) != 0x80) - 1  # (bytes,) the character each byte belongs to
            sizes = np.fromiter((len(self.vocab[i]) for i in ids), dtype=np.int64, count=len(ids))  # bytes per token
            ends = np.cumsum(sizes)
            starts = ends - sizes
            spans = np.stack([char_of[starts], char_of[ends - 1] + 1], axis=1) if ids else np.zeros((0, 2), np.int64)
            out.append((np.asarray(ids, dtype=np.int64), spans.astype(np.int64)))
        return out

    # --------------------------------------------------------------- identity
    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def token_to_id(self, token: bytes | str) -> int | None:
        """The id of one token, given as its bytes or its text.

        Args:
            token: the token's bytes, or its text (encoded as UTF-8).

        Returns:
            Its id, or `None` where the vocabulary has no such token.
        """
        b = token.encode("utf-8") if isinstance(token, str) else token
        return self._id_of.get(b)

    def fingerprint(self) -> str:
        """sha256 over vocab, merges and special tokens: names this exact tokenizer (computed once).

        Returns:
            The hex digest.
        """
        if self._fingerprint is None:
            self._fingerprint = self._compute_fingerprint()
        return self._fingerprint

    def _compute_fingerprint(self) -> str:
        # the bytes of _fingerprint_oracle, made by the compiled core (faster than the oracle)
        from seqpack.tokenizer.core import CoreBPE

        ids = sorted(self.vocab)
        data = CoreBPE.fingerprint_stream(ids, [self.vocab[i] for i in ids], self.merges)
        specials = b"".join(b"\x00special\x00" + s.encode("utf-8") for s in self.special_tokens)
        return hashlib.sha256(data + specials).hexdigest()

    def _fingerprint_oracle(self) -> str:
        """What the fingerprint hashes, field by field (tested against `_compute_fingerprint`)."""
        h = hashlib.sha256()
        for i in sorted(self.vocab):
            h.update(i.to_bytes(8, "little") + len(self.vocab[i]).to_bytes(4, "little") + self.vocab[i])
        for a, b in self.merges:
            h.update(len(a).to_bytes(4, "little") + a + len(b).to_bytes(4, "little") + b)
        for s in self.special_tokens:
            h.update(b"\x00special\x00" + s.encode("utf-8"))
        return h.hexdigest()

    def __repr__(self) -> str:
        return (
            f"Tokenizer(vocab_size={self.vocab_size}, merges={len(self.merges)}, special_tokens={self.special_tokens})"
        )

    # ---------------------------------------------------------------- files
    @classmethod
    def from_files(
        cls,
        vocab_path: str | os.PathLike[str],
        merges_path: str | os.PathLike[str],
        special_tokens: Sequence[str] | None = None,
    ) -> Tokenizer:
        """Load GPT-2 format ``vocab.json`` + ``merges.txt``.

        Args:
            vocab_path: `vocab.json` (GPT-2 strings -> ids).
            merges_path: `merges.txt`, one merge a line.
            special_tokens: tokens matched whole.

        Returns:
            The `Tokenizer`.

        Raises:
            UserError: a missing or malformed file.
        """
        from seqpack.tokenizer.files import read_merges, read_vocab

        return cls(read_vocab(vocab_path), read_merges(merges_path), special_tokens)

    def save(
        self,
        directory: str | os.PathLike[str],
        *,
        overwrite: bool = False,
        hf: bool = False,
        chat_template: str | None = None,
    ) -> None:
        """Write vocab.json, merges.txt, tokenizer.json and meta.json (atomically); ``hf``: also the
        files that make the directory a complete Hugging Face tokenizer (with ``chat_template``).

        Args:
            directory: where to write, made if missing.
            overwrite: replace a tokenizer already there (otherwise refused).
            hf: also write what makes the directory a complete Hugging Face tokenizer.
            chat_template: the Jinja chat template to record (with `hf`).

        Raises:
            FileExistsError: a tokenizer already in `directory` without `overwrite`.
        """
        from seqpack.tokenizer.files import save_tokenizer

        save_tokenizer(self, directory, overwrite=overwrite, hf=hf, chat_template=chat_template)

    @classmethod
    def load(cls, directory: str | os.PathLike[str]) -> Tokenizer:
        """Load a directory written by `save` (checks the fingerprint in its ``meta.json``).

        Args:
            directory: the tokenizer's directory.

        Returns:
            The `Tokenizer`, with its chat template where the directory has one.

        Raises:
            UserError: a missing or malformed file, or files that do not match the fingerprint.
        """
        from seqpack.tokenizer.files import read_tokenizer_dir

        vocab, merges, specials, expected = read_tokenizer_dir(directory)
        tok = cls(vocab, merges, specials)
        config = Path(directory) / "tokenizer_config.json"  # written by save(hf=True): its chat template
        if config.is_file():
            template = json.loads(config.read_text(encoding="utf-8")).get("chat_template")
            if isinstance(template, str) and template.strip():
                tok.chat_template = template
        if expected is not None and tok.fingerprint() != expected:
            raise UserError(
                f"{directory}: vocab.json/merges.txt do not match the fingerprint in meta.json (edited or truncated)"
            )
        return tok
