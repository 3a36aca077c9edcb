"""A token store in shards, built shard by shard (resumable), read as one store.

Layout::

    STORE/shards.json       kind, format version, tokenizer hash, totals, the shards in order
    STORE/shard-00000/      an ordinary token store (tokens.bin, offsets.idx, meta.json)
    STORE/shard-00001/ ...

Documents are cut into shards by a character budget (``shard_chars``), in input order,
so the shards are the same whatever engine or how many workers encode them. Each shard
is finished atomically (`seqpack.pipeline.tokenize.build_sharded_store`, the job that
writes one); ``STORE`` appears only once every shard and ``shards.json`` exist.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from seqpack._atomic import read_versioned_json
from seqpack.errors import UserError
from seqpack.store.store import SHARDED_KIND, SHARDS, StoreMeta, TokenStore

if TYPE_CHECKING:
    from seqpack.tokenizer.types import AnyTokenizer

FORMAT_VERSION = 1
KIND = SHARDED_KIND
DEFAULT_SHARD_CHARS = 64 << 20


def shard_name(i: int) -> str:
    return f"shard-{i:05d}"


def shards_manifest(
    metas: list[dict[str, Any]], tokenizer: AnyTokenizer, source: str, shard_chars: int
) -> dict[str, Any]:
    """``shards.json`` of a sharded store from its shards' ``meta.json`` (in order)."""

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
            {
                "name": shard_name(i),
                "num_documents": m["num_documents"],
                "num_tokens": m["num_tokens"],
                "first_document": m["first_document"],
                "input_documents": m["input_documents"],
            }
            for i, m in enumerate(metas)
        ],
    }


class ShardedTokenStore(StoreMeta):
    """Read-only view of a sharded store: ``shards`` are `TokenStore` s, in order.

    Documents are numbered across shards (shard 0's first); ``store[i]``, ``len(store)`` and
    ``store.lengths()`` work as on one store.

    Args:
        path: the store's directory (holding `shards.json`).

    Raises:
        UserError: a missing, malformed or damaged store.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.meta = read_versioned_json(
            self.path,
            SHARDS,
            kind=KIND,
            version=FORMAT_VERSION,
            what="sharded token store",
            hint="make one with seqpack tokenize",
        )
        names = [s.get("name") if isinstance(s, dict) else None for s in self.meta.get("shards", [])]
        if names != [shard_name(i) for i in range(len(names))]:  # each once, in order, inside the store
            raise UserError(
                f"{self.path / SHARDS}: the shards must be listed once each, in order, as "
                f"shard-00000, shard-00001, ... (found {', '.join(map(str, names[:4]))}"
                f"{', ...' if len(names) > 4 else ''}); re-run seqpack tokenize"
            )
        self.shards = [TokenStore(self.path / s["name"]) for s in self.meta["shards"]]
        for s, spec in zip(self.shards, self.meta["shards"]):
            if len(s) != spec["num_documents"] or s.num_tokens != spec["num_tokens"]:
                raise UserError(f"{s.path}: does not match {self.path / SHARDS} (corrupt or replaced shard)")
        self.document_bases = np.concatenate([[0], np.cumsum([len(s) for s in self.shards])]).astype(np.int64)
        self.reused: list[str] = []  # shards a resumed job took from its work directory
        self.redone: dict[str, str] = {}  # shards it found there but rebuilt: {name: why}

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
        """Tokens per document, across shards.  # (num_documents,) int64

        Returns:
            The lengths, int64 `(num_documents,)`.
        """
        return np.concatenate([s.lengths() for s in self.shards]) if self.shards else np.zeros(0, np.int64)

    def __repr__(self) -> str:
        return (
            f"ShardedTokenStore({str(self.path)!r}, shards={len(self.shards)}, documents={len(self):,}, "
            f"tokens={self.num_tokens:,})"
        )


def open_store(path: str | os.PathLike[str] | TokenStore | ShardedTokenStore) -> TokenStore | ShardedTokenStore:
    """The store at ``path``, one or sharded.

    Args:
        path: a store's directory, or a store already open (returned as it is).

    Returns:
        A `TokenStore`, or a `ShardedTokenStore` where `path` holds shards.

    Raises:
        UserError: no store at `path`, or a damaged one.
    """
    if isinstance(path, (TokenStore, ShardedTokenStore)):
        return path
    p = Path(path)
    return ShardedTokenStore(p) if (p / SHARDS).is_file() else TokenStore(p)
