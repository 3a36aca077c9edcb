"""The tokenize job: documents encoded into a sharded token store, shard by shard, resumable.

Documents are cut into shards by a character budget (``shard_chars``), in input order, so the
shards are the same whatever engine or how many workers encode them. Each shard is a stage
(`seqpack._stages`) finished atomically in ``.STORE.partial/`` beside the output; a re-run of
the same job (same tokenizer and budget) reuses each finished shard whose documents hash the same
and whose files are intact, and encodes the rest (``store.redone`` says which, and why).
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

import itertools
import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from seqpack._atomic import check_output_dir, output_lock, remove_leftovers, replace_directory
from seqpack._progress import progress_bar
from seqpack._stages import (
    JOB,
    StageLog,
    content_hash,
    corpus_hash,
    discard_on_rejection,
    work_dir,
)
from seqpack.errors import UserError
from seqpack.pipeline.engine import LocalEngine
from seqpack.store.build import build_store
from seqpack.store.sharded import (
    DEFAULT_SHARD_CHARS,
    SHARDS,
    ShardedTokenStore,
    shard_name,
    shards_manifest,
)
from seqpack.store.store import OUTPUT as STORE_OUTPUT
from seqpack.tokenizer.pretokenize import doc_chunks

if TYPE_CHECKING:
    from seqpack.pipeline.engine import Engine
    from seqpack.tokenizer.types import AnyTokenizer


def _shards_of(documents: Iterable[str], shard_chars: int) -> Iterator[tuple[int, int, list[str], int]]:
    """(shard index, index of its first document, documents, characters); one empty shard for no input."""
    i, first = -1, 0
    for i, chunk in enumerate(doc_chunks(documents, shard_chars)):
        yield i, first, list(chunk.documents), sum(map(len, chunk.documents))
        first += len(chunk.documents)
    if i < 0:
        yield 0, 0, [], 0


def encode_shard(
    path: str, documents: list[str], tokenizer: AnyTokenizer, first: int, workers: int | None, key: str
) -> dict[str, Any]:
    """One stage of `build_sharded_store`: encode ``documents`` into the store ``path``, then record it."""
    extra = {"first_document": first, "input_documents": len(documents)}
    meta = json.loads(
        json.dumps(dict(build_store(documents, tokenizer, path, workers=workers, overwrite=True, extra=extra).meta))
    )
    StageLog(Path(path).parent).finish(Path(path).name, key, meta, files=[path])
    return meta


def build_sharded_store(
    documents: Iterable[str],
    tokenizer: AnyTokenizer,
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

    Args:
        documents: the texts, one per document.
        tokenizer: the tokenizer.
        out: the store's directory.
        shard_chars: characters per shard.
        workers: encoding threads per shard (`None`: the cores this process may use).
        engine: where the shards' stages run (`None`: this process).
        overwrite: replace a store already at `out`.
        source: what the documents came from, recorded in the store.

    Returns:
        The `ShardedTokenStore`.

    Raises:
        FileExistsError: a store already at `out` without `overwrite`.
    """
    if shard_chars < 1:
        raise UserError(f"shard_chars must be >= 1, got {shard_chars}")
    documents = iter(documents)
    first = next(documents, None)  # nothing at all to read: refused before any output, as train-tokenizer and pack do
    if first is None:
        raise UserError(f"{source or 'the input'}: no documents to tokenize (empty input); give files that hold text")
    documents = itertools.chain([first], documents)
    engine = engine or LocalEngine()
    out = Path(out)
    with output_lock(out):
        check_output_dir(out, overwrite=overwrite, kind=STORE_OUTPUT)
        job = {"tokenizer_hash": tokenizer.fingerprint(), "shard_chars": shard_chars, "source": source}
        work = work_dir(out, job)
        with discard_on_rejection(work):
            log = StageLog(work)
            reused: list[str] = []
            redone: dict[str, str] = {}

            def items() -> Iterator[tuple[Any, ...]]:
                for i, first, docs, chars in _shards_of(documents, shard_chars):
                    path = work / shard_name(i)
                    key = content_hash(path.name, first, len(docs), chars, corpus_hash(docs))  # the documents' content
                    done, why = log.check(path.name, key, outputs=[path])
                    if done is not None:
                        reused.append(path.name)
                        yield (_reuse, done)
                    else:
                        if why:
                            redone[path.name] = why
                        yield (encode_shard, str(path), docs, tokenizer, first, workers, key)

            bar = progress_bar(desc="tokenize", unit="char", unit_scale=True, leave=False)
            metas = []
            for meta in engine.map(_call, ((it,) for it in items())):
                metas.append(meta)
                bar.update(int(meta.get("input_chars", 0)))
            bar.close()
            manifest = shards_manifest(metas, tokenizer, source, shard_chars)
            log.clear()
            (work / JOB).unlink()
            (work / SHARDS).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")
            remove_leftovers(work, ".*")  # a killed worker's temp and lock files: a store's own names have no dot
            replace_directory(work, out, kind=STORE_OUTPUT)
    store = ShardedTokenStore(out)
    store.reused = reused
    store.redone = redone
    return store


def _reuse(meta: dict[str, Any]) -> dict[str, Any]:
    return meta


def _call(item: tuple[Any, ...]) -> Any:
    fn, *args = item
    return fn(*args)
