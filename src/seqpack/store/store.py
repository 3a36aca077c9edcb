"""Token store files, a streaming writer and a memory-mapped reader.

What a store directory holds::

    tokens.bin    all documents' tokens back to back      uint16 if vocab_size <= 65536, else uint32
    offsets.idx   document boundaries, int64, num_documents + 1 entries, offsets[0] == 0
    meta.json     format version, dtype, counts, tokenizer hash (written last)

Document ``i`` is ``tokens[offsets[i]:offsets[i + 1]]``. Empty documents are not
stored; they are counted in ``meta["empty_documents"]``.
"""

from __future__ import annotations

import json
import os
import zlib
from contextlib import ExitStack
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np

from seqpack._atomic import OutputKind, atomic_directory, read_versioned_json
from seqpack.errors import UserError

FORMAT_VERSION = 1
KIND = "seqpack.token_store"
TOKENS, OFFSETS, META = "tokens.bin", "offsets.idx", "meta.json"
SHARDED_KIND, SHARDS = "seqpack.sharded_token_store", "shards.json"
#: what a token store directory is (one store, or a sharded one): `--overwrite` replaces only these
OUTPUT = OutputKind("token store", (META, "kind", KIND), (SHARDS, "kind", SHARDED_KIND))
_FLUSH_OFFSETS = 1 << 16


def token_dtype(vocab_size: int) -> np.dtype:
    """The smallest unsigned dtype that holds ids ``0 .. vocab_size - 1``.

    Args:
        vocab_size: the tokenizer's vocabulary size, >= 1.

    Returns:
        `uint16` or `uint32`.

    Raises:
        UserError: a `vocab_size` below 1.
    """
    if vocab_size < 1:
        raise UserError(f"vocab_size must be >= 1, got {vocab_size}")
    return np.dtype(np.uint16) if vocab_size <= 1 << 16 else np.dtype(np.uint32)


class StoreWriter:
    """Append documents one at a time; memory stays bounded (tokens go straight to disk).

    Use as a context manager: the directory appears, complete, only when the block
    ends without an error (temp dir, then rename; ``meta.json`` written last).

    Args:
        path: the store's directory, made when the block ends.
        vocab_size: the tokenizer's vocabulary: the ids' bound and the dtype (`token_dtype`).
        tokenizer_hash: the tokenizer's fingerprint, recorded in `meta.json`.
        overwrite: replace a store already at `path` (otherwise refused).
        extra: more fields for `meta.json`.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        vocab_size: int,
        tokenizer_hash: str,
        overwrite: bool = False,
        extra: dict[str, Any] | None = None,
    ) -> None:
        self.path = Path(path)
        self.dtype = token_dtype(vocab_size)
        self.vocab_size = vocab_size
        self.tokenizer_hash = tokenizer_hash
        self.overwrite = overwrite
        self.extra = dict(extra or {})
        self.num_documents = 0
        self.num_tokens = 0
        self.empty_documents = 0
        self.max_length = 0
        self._pending: list[int] = []
        self._stack: ExitStack | None = None
        self._crc = {TOKENS: 0, OFFSETS: 0}  # CRC-32 of each file's bytes, as they are written
        self._size = {TOKENS: 0, OFFSETS: 0}

    def _write(self, name: str, data: bytes | memoryview) -> None:
        (self._tokens if name == TOKENS else self._offsets).write(data)
        self._crc[name] = zlib.crc32(data, self._crc[name])
        self._size[name] += memoryview(data).nbytes

    def __enter__(self) -> StoreWriter:
        stack = ExitStack()
        self._tmp = stack.enter_context(atomic_directory(self.path, kind=OUTPUT, overwrite=self.overwrite))
        self._tokens = stack.enter_context(open(self._tmp / TOKENS, "wb"))
        self._offsets = stack.enter_context(open(self._tmp / OFFSETS, "wb"))
        self._stack = stack
        self._write(OFFSETS, np.zeros(1, np.int64).tobytes())
        return self

    def add(self, ids: np.ndarray | list[int]) -> None:
        """Append one document's token ids (an empty one is counted, not stored).

        Args:
            ids: the document's token ids, 1-D integers `(T,)`.

        Raises:
            UserError: an id outside `0..vocab_size - 1`.
        """
        if self._stack is None:
            raise RuntimeError("use StoreWriter as a context manager: with StoreWriter(...) as w")
        arr = np.asarray(ids)
        if arr.size == 0:
            self.empty_documents += 1
            return
        if arr.ndim != 1 or arr.dtype.kind not in "iu":
            raise TypeError(f"a document must be a 1-D array of integer ids, got {arr.dtype} {arr.shape}")
        if int(arr.max()) >= self.vocab_size or int(arr.min()) < 0:
            raise UserError(f"document {self.num_documents} has ids outside 0..{self.vocab_size - 1}")
        self._write(TOKENS, arr.astype(self.dtype, copy=False).tobytes())
        self.num_tokens += int(arr.size)
        self.num_documents += 1
        self.max_length = max(self.max_length, int(arr.size))
        self._pending.append(self.num_tokens)
        if len(self._pending) >= _FLUSH_OFFSETS:
            self._flush()

    def add_batch(self, ids: np.ndarray, offsets: np.ndarray) -> None:
        """Append many documents at once: document ``i`` is ``ids[offsets[i]:offsets[i + 1]]``.

        Same result as `add` per document, with one write per batch.

        Args:
            ids: the documents' ids, concatenated, 1-D integers `(total,)`.
            offsets: where each document starts, int `(documents + 1,)`, rising from 0 to `len(ids)`.

        Raises:
            UserError: offsets that do not rise from 0 to `len(ids)`, or an id outside the vocabulary.
        """
        if self._stack is None:
            raise RuntimeError("use StoreWriter as a context manager: with StoreWriter(...) as w")
        ids = np.asarray(ids)
        offsets = np.asarray(offsets, dtype=np.int64)
        if ids.ndim != 1 or ids.dtype.kind not in "iu" or offsets.ndim != 1 or offsets.size == 0:
            raise TypeError("add_batch takes 1-D integer ids and 1-D offsets (one more than documents)")
        if offsets[0] != 0 or offsets[-1] != ids.size or np.any(np.diff(offsets) < 0):
            raise UserError("offsets must rise from 0 to len(ids)")
        lengths = np.diff(offsets)
        kept = lengths[lengths > 0]
        self.empty_documents += int(lengths.size - kept.size)
        if kept.size == 0:
            return
        if int(ids.max()) >= self.vocab_size or (ids.dtype.kind == "i" and int(ids.min()) < 0):
            raise UserError(f"a document from {self.num_documents} on has ids outside 0..{self.vocab_size - 1}")
        self._write(TOKENS, np.ascontiguousarray(ids.astype(self.dtype, copy=False)).data.cast("B"))  # no bytes copy
        self._pending.extend((self.num_tokens + np.cumsum(kept)).tolist())
        self.num_tokens += int(ids.size)
        self.num_documents += int(kept.size)
        self.max_length = max(self.max_length, int(kept.max()))
        if len(self._pending) >= _FLUSH_OFFSETS:
            self._flush()

    def _flush(self) -> None:
        self._write(OFFSETS, np.asarray(self._pending, dtype=np.int64).tobytes())
        self._pending.clear()

    def meta(self) -> dict[str, Any]:
        """What ``meta.json`` will say: sizes, dtype, the tokenizer's fingerprint and the ``extra`` fields.

        Returns:
            The JSON-ready dict.
        """
        return {
            "kind": KIND,
            "format_version": FORMAT_VERSION,
            "dtype": self.dtype.name,
            "vocab_size": self.vocab_size,
            "tokenizer_hash": self.tokenizer_hash,
            "num_documents": self.num_documents,
            "num_tokens": self.num_tokens,
            "empty_documents": self.empty_documents,
            "max_length": self.max_length,
            # what the files held when written (seqpack._stages.file_checksum's form): TokenStore.verify
            # reads them against it, and jobs that reuse work made from the store key it on these
            "checksums": {name: f"{self._size[name]}:{self._crc[name]:08x}" for name in (TOKENS, OFFSETS)},
            **self.extra,
        }

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._stack is not None
        stack, self._stack = self._stack, None
        if exc_type is None:
            self._flush()
            self._tokens.close()
            self._offsets.close()
            text = json.dumps(self.meta(), indent=2, sort_keys=True) + "\n"
            (self._tmp / META).write_text(text, encoding="utf-8")
        stack.__exit__(exc_type, exc, tb)


class StoreMeta:
    """What every store (one, or sharded) says about itself, read from ``self.meta``."""

    path: Path
    meta: dict[str, Any]

    @property
    def tokenizer_hash(self) -> str:
        return str(self.meta["tokenizer_hash"])

    @property
    def vocab_size(self) -> int:
        return int(self.meta["vocab_size"])

    @property
    def num_tokens(self) -> int:
        return int(self.meta["num_tokens"])

    def check_tokenizer(self, tokenizer_hash: str) -> None:
        """Raise unless the store was made by the tokenizer with this fingerprint."""
        if tokenizer_hash != self.tokenizer_hash:
            raise UserError(
                f"{self.path}: made with tokenizer {self.tokenizer_hash[:12]}, not the given "
                f"{tokenizer_hash[:12]} (hash mismatch); pass the tokenizer that made it or re-run seqpack tokenize"
            )


class TokenStore(StoreMeta):
    """Read-only, memory-mapped view of a store directory.

    ``store[i]`` is document ``i`` (a read-only array view), ``len(store)`` the number
    of documents, ``store.lengths()`` all lengths at once. Corrupt or truncated files
    are refused, the error naming the file.

    Args:
        path: the store's directory.

    Raises:
        UserError: a missing, truncated or corrupt file.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.meta = _read_meta(self.path)
        self.dtype = np.dtype(self.meta["dtype"])
        n_docs, n_tok = self.meta["num_documents"], self.meta["num_tokens"]
        self.offsets = _mapped(self.path / OFFSETS, np.dtype(np.int64), n_docs + 1)
        self.tokens = _mapped(self.path / TOKENS, self.dtype, n_tok)
        if n_docs and (self.offsets[0] != 0 or self.offsets[-1] != n_tok or np.any(np.diff(self.offsets) <= 0)):
            raise UserError(f"{self.path / OFFSETS}: corrupt (offsets must rise from 0 to {n_tok})")

    def __len__(self) -> int:
        return int(self.meta["num_documents"])

    def verify(self) -> bool:
        """Read ``tokens.bin`` and ``offsets.idx`` against the checksums ``meta.json`` recorded when
        they were written, and name a file that changed since.

        Returns:
            True when every checksum matches, False when the store recorded none.

        Raises:
            UserError: a file whose checksum differs.
        """
        from seqpack._stages import file_checksum

        sums = self.meta.get("checksums")
        if not isinstance(sums, dict):
            return False
        for name in (TOKENS, OFFSETS):
            if file_checksum(self.path / name) != sums.get(name):
                raise UserError(
                    f"{self.path / name}: its bytes changed since seqpack tokenize wrote it (checksum "
                    f"mismatch with {META}); re-run seqpack tokenize to rebuild the store"
                )
        return True

    def __getitem__(self, i: int) -> np.ndarray:
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"document {i} out of range (store has {n})")
        i %= n
        return self.tokens[self.offsets[i] : self.offsets[i + 1]]

    def lengths(self) -> np.ndarray:
        """Tokens per document.  # (num_documents,) int64

        Returns:
            The lengths, int64 `(num_documents,)`.
        """
        return np.diff(self.offsets)

    def __repr__(self) -> str:
        return f"TokenStore({str(self.path)!r}, documents={len(self):,}, tokens={self.num_tokens:,}, dtype={self.dtype.name})"


def _read_meta(path: Path) -> dict[str, Any]:
    meta_path = path / META
    meta = read_versioned_json(
        path, META, kind=KIND, version=FORMAT_VERSION, what="token store", hint="make one with seqpack tokenize"
    )
    for key in ("dtype", "vocab_size", "tokenizer_hash", "num_documents", "num_tokens"):
        if key not in meta:
            raise UserError(f"{meta_path}: corrupt (no {key!r})")
    if meta["dtype"] not in ("uint16", "uint32"):
        raise UserError(f"{meta_path}: corrupt (dtype {meta['dtype']!r})")
    return meta


def _mapped(path: Path, dtype: np.dtype, count: int) -> np.ndarray:
    if not path.is_file():
        raise UserError(f"{path}: missing from the store")
    size = path.stat().st_size
    if size != count * dtype.itemsize:
        raise UserError(f"{path}: {size:,} bytes, expected {count * dtype.itemsize:,} (truncated or corrupt store)")
    if count == 0:
        return np.zeros(0, dtype=dtype)
    return np.memmap(path, dtype=dtype, mode="r", shape=(count,))
