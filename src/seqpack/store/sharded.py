"""A token store in shards, built shard by shard (resumable), read as one store.

Layout::

    STORE/shards.json       kind, format version, tokenizer hash, totals, the shards in order
    STORE/shard-00000/      an ordinary token store (tokens.bin, offsets.idx, meta.json)
    STORE/shard-00001/ ...

Documents are cut into shards by a character budget (``shard_chars``), in input order,
so the shards are the same whatever engine or how many workers encode them. Each shard
is finished atomically in ``.STORE.partial/`` beside the output; a re-run of the same
job (same inputs, tokenizer and budget) reuses the finished shards and encodes the rest.
``STORE`` appears only once every shard and ``shards.json`` exist (one rename).

    >>> import tempfile
    >>> from seqpack.tokenizer import Tokenizer
    >>> tok = Tokenizer({i: bytes([i]) for i in range(256)}, [])
    >>> d = tempfile.mkdtemp()
    >>> s = build_sharded_store(["ab", "cde", "f"], tok, d + "/s", shard_chars=4)
    >>> [len(x) for x in s.shards], len(s), s[1].tolist()
    ([2, 1], 3, [99, 100, 101])
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from seqpack._atomic import (
    check_output_dir,
    output_lock,
    read_versioned_json,
    replace_directory,
    write_text_atomic,
)
from seqpack.store.store import StoreMeta, TokenStore

if TYPE_CHECKING:
    from seqpack.engine import Engine
    from seqpack.tokenizer.tokenizer import Tokenizer

FORMAT_VERSION = 1
KIND = "seqpack.sharded_token_store"
SHARDS = "shards.json"
JOB = "job.json"
DEFAULT_SHARD_CHARS = 64 << 20


def shard_name(i: int) -> str:
    return f"shard-{i:05d}"


def partial_dir(out: Path) -> Path:
    """Where an unfinished job keeps its finished shards (beside ``out``)."""
    return out.resolve().parent / f".{out.name}.partial"


def prepare_partial(out: Path, job: dict[str, Any]) -> Path:
    """The job's partial directory: kept if it belongs to the same job, else started afresh."""
    work = partial_dir(out)
    if work.is_dir():
        try:
            same = json.loads((work / JOB).read_text(encoding="utf-8")) == job
        except (OSError, ValueError):
            same = False
        if not same:
            shutil.rmtree(work)
    work.mkdir(parents=True, exist_ok=True)
    write_text_atomic(work / JOB, json.dumps(job, sort_keys=True))
    return work


def _shards_of(documents: Iterable[str], shard_chars: int) -> Iterator[tuple[int, int, list[str], int]]:
    """(shard index, index of its first document, documents, characters); one empty shard for no input."""
    from seqpack.tokenizer.pretokenize import doc_chunks

    i, first = -1, 0
    for i, chunk in enumerate(doc_chunks(documents, shard_chars)):
        yield i, first, list(chunk.documents), sum(map(len, chunk.documents))
        first += len(chunk.documents)
    if i < 0:
        yield 0, 0, [], 0


def encode_shard(path: str, documents: list[str], tokenizer: Tokenizer, first: int, workers: int | None) -> dict[str, Any]:
    """One stage of :func:`build_sharded_store`: encode ``documents`` into the store ``path``."""
    from seqpack.store.build import build_store

    extra = {"first_document": first, "input_documents": len(documents)}
    return dict(build_store(documents, tokenizer, path, workers=workers, overwrite=True, extra=extra).meta)


def _finished(path: Path, first: int, n_docs: int, chars: int) -> dict[str, Any] | None:
    try:
        meta = TokenStore(path).meta
    except (OSError, ValueError):
        return None
    ok = (meta.get("first_document"), meta.get("input_documents"), meta.get("input_chars")) == (first, n_docs, chars)
    return meta if ok else None


def build_sharded_store(
    documents: Iterable[str],
    tokenizer: Tokenizer,
    out: str | os.PathLike[str],
    *,
    shard_chars: int = DEFAULT_SHARD_CHARS,
    workers: int | None = None,
    engine: Engine | None = None,
    overwrite: bool = False,
    source: str = "",
) -> ShardedTokenStore:
    """Encode ``documents`` into a sharded store at ``out``; see the module docstring.

    ``engine`` (default: this process) runs one stage per shard; a shard's documents are
    held in memory only while it is being encoded (``2 x`` the engine's window at most).
    """
    from seqpack.engine import LocalEngine

    if shard_chars < 1:
        raise ValueError(f"shard_chars must be >= 1, got {shard_chars}")
    engine = engine or LocalEngine()
    out = Path(out)
    with output_lock(out):
        check_output_dir(out, overwrite=overwrite)
        job = {"tokenizer_hash": tokenizer.fingerprint(), "shard_chars": shard_chars, "source": source}
        work = prepare_partial(out, job)
        reused: list[str] = []

        def items() -> Iterator[tuple[Any, ...]]:
            for i, first, docs, chars in _shards_of(documents, shard_chars):
                path = work / shard_name(i)
                done = _finished(path, first, len(docs), chars)
                if done is not None:
                    reused.append(path.name)
                    yield (_reuse, done)
                else:
                    yield (encode_shard, str(path), docs, tokenizer, first, workers)

        metas = list(engine.map(_call, ((it,) for it in items())))
        manifest = _manifest(metas, tokenizer, source, shard_chars)
        (work / JOB).unlink()
        (work / SHARDS).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        replace_directory(work, out)
    store = ShardedTokenStore(out)
    store.reused = reused
    return store


def _reuse(meta: dict[str, Any]) -> dict[str, Any]:
    return meta


def _call(item: tuple[Any, ...]) -> Any:
    fn, *args = item
    return fn(*args)


def _manifest(metas: list[dict[str, Any]], tokenizer: Tokenizer, source: str, shard_chars: int) -> dict[str, Any]:
    def total(key: str) -> int:
        return int(sum(m.get(key, 0) for m in metas))

    return {
        "kind": KIND,
        "format_version": FORMAT_VERSION,
        "tokenizer_hash": tokenizer.fingerprint(),
        "vocab_size": tokenizer.vocab_size,
        "dtype": metas[0]["dtype"],
        "source": source,
        "shard_chars": shard_chars,
        "num_documents": total("num_documents"),
        "num_tokens": total("num_tokens"),
        "empty_documents": total("empty_documents"),
        "input_documents": total("input_documents"),
        "input_bytes": total("input_bytes"),
        "input_chars": total("input_chars"),
        "encode_seconds": round(sum(m.get("encode_seconds", 0.0) for m in metas), 3),
        "max_length": max(int(m.get("max_length", 0)) for m in metas),
        "shards": [
            {"name": shard_name(i), "num_documents": m["num_documents"], "num_tokens": m["num_tokens"],
             "first_document": m["first_document"], "input_documents": m["input_documents"]}
            for i, m in enumerate(metas)
        ],
    }


class ShardedTokenStore(StoreMeta):
    """Read-only view of a sharded store: ``shards`` are :class:`TokenStore` s, in order.

    Documents are numbered across shards (shard 0's first); ``store[i]``, ``len(store)`` and
    ``store.lengths()`` work as on one store.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.meta = read_versioned_json(self.path, SHARDS, kind=KIND, version=FORMAT_VERSION,
                                        what="sharded token store", hint="make one with seqpack tokenize")
        self.shards = [TokenStore(self.path / s["name"]) for s in self.meta["shards"]]
        for s, spec in zip(self.shards, self.meta["shards"]):
            if len(s) != spec["num_documents"] or s.num_tokens != spec["num_tokens"]:
                raise ValueError(f"{s.path}: does not match {self.path / SHARDS} (corrupt or replaced shard)")
        self.document_bases = np.concatenate([[0], np.cumsum([len(s) for s in self.shards])]).astype(np.int64)
        self.reused: list[str] = []

    def __len__(self) -> int:
        return int(self.document_bases[-1])

    def __getitem__(self, i: int) -> np.ndarray:
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"document {i} out of range (store has {n})")
        i %= n
        k = int(np.searchsorted(self.document_bases, i, side="right")) - 1
        return self.shards[k][i - int(self.document_bases[k])]

    def lengths(self) -> np.ndarray:
        """Tokens per document, across shards.  # (num_documents,) int64"""
        return np.concatenate([s.lengths() for s in self.shards]) if self.shards else np.zeros(0, np.int64)

    def __repr__(self) -> str:
        return (f"ShardedTokenStore({str(self.path)!r}, shards={len(self.shards)}, documents={len(self):,}, "
                f"tokens={self.num_tokens:,})")


def open_store(path: str | os.PathLike[str] | TokenStore | ShardedTokenStore) -> TokenStore | ShardedTokenStore:
    """The store at ``path``, one or sharded."""
    if isinstance(path, (TokenStore, ShardedTokenStore)):
        return path
    p = Path(path)
    return ShardedTokenStore(p) if (p / SHARDS).is_file() else TokenStore(p)
