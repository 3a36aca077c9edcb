"""The stages of a sharded pack job (:mod:`seqpack.pipeline.job`), as top-level functions of small,
picklable arguments, so that any engine runs them and they write the same bytes.

1. :func:`sequences_stage` (one per input shard): the task builds the shard's sequences, saved as
   ``.npy`` files in the job's work directory (memory: one shard).
2. :func:`packs_stage` (one per output shard): the shard's sequences gathered by index from the
   memory-mapped sequence files (one input shard at a time), laid into rows
   (:func:`seqpack.data.layout.materialize`) and written as one Parquet part.

Each stage records itself when its outputs are complete (:class:`seqpack._stages.StageLog`), so a
re-run of the same job reuses it.
"""

from __future__ import annotations

import hashlib
import json
import mmap
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from seqpack._atomic import atomic_directory, atomic_file
from seqpack._stages import StageLog, content_hash, file_fingerprint, file_sha256
from seqpack.data.format import write_parquet_groups
from seqpack.data.layout import materialize
from seqpack.data.sequences import Sequences, concat_ranges, offsets_of
from seqpack.packing import Packing
from seqpack.store import TokenStore
from seqpack.tasks import get_task

if TYPE_CHECKING:
    from seqpack.pipeline.config import PackConfig
    from seqpack.tokenizer.tokenizer import Tokenizer


def sequences_stage(
    shard: str | list[dict[str, Any]], tokenizer: Tokenizer, config: PackConfig, doc_base: int, path: str,
    context: dict[str, Any] | None = None, key: str = "", done: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Build one input shard's sequences (a token store shard's path, or a batch of example
    records) and save them under ``path``, recorded under ``key`` (:func:`sequences_key`); returns
    their summary. ``done``: the summary the driver found recorded and verified (reused as is)."""
    if done is not None:
        return done
    out = Path(path)
    log = StageLog(out.parent)
    task = get_task(config.task)
    if isinstance(shard, str):
        seqs = task.build_sequences(TokenStore(shard), tokenizer, config)
    else:
        try:
            seqs = task.build_shard(shard, tokenizer, config, context or {})
        except ValueError as e:  # "example i" counts within the shard: say which records it holds
            raise ValueError(f"examples {doc_base}..{doc_base + len(shard) - 1} of the file: {e}") from None
    with atomic_directory(out, overwrite=True) as tmp:
        np.save(tmp / "offsets.npy", seqs.offsets)
        np.save(tmp / "example_ids.npy", seqs.example_ids + doc_base)
        for name, v in seqs.token_fields.items():
            if name not in task.derived_fields:  # made again after the gather
                np.save(tmp / f"token.{name}.npy", v)
        for name, v in seqs.seq_fields.items():
            np.save(tmp / f"seq.{name}.npy", v)
    summary = {
        "num_sequences": seqs.num_sequences,
        "num_examples": seqs.num_examples,
        "dropped": seqs.dropped,
        "info": seqs.info,
        "position_fields": list(seqs.position_fields),
        "token_fields": {k: v.dtype.str for k, v in seqs.token_fields.items()},
        "derived_fields": [k for k in seqs.token_fields if k in task.derived_fields],
        "seq_fields": {k: v.dtype.str for k, v in seqs.seq_fields.items()},
    }
    summary = json.loads(json.dumps(summary))  # as a reused record reads back (key order kept: it orders the columns)
    log.finish(out.name, key, summary, files=[out])
    return summary


def input_identity(shard: str | list[dict[str, Any]]) -> Any:
    """What an input shard's sequences depend on, cheaply: a store shard's files (size and mtime
    of its token files; the content of its ``meta.json``), or a hash of the example records."""
    if isinstance(shard, str):
        d = Path(shard)
        return {"files": {f: file_fingerprint(d / f) for f in ("tokens.bin", "offsets.idx", "meta.json")},
                "meta": file_sha256(d / "meta.json")}
    return content_hash(*shard)


#: what a sequences stage saves (2: a task's derived fields are not saved); part of its key, so
#: that a work directory left by another version is not reused
SEQUENCES_FORMAT = 2


def sequences_key(name: str, doc_base: int, identity: Any, config: PackConfig, tokenizer: Tokenizer) -> str:
    """The key a sequences stage is recorded under: its inputs' identity and everything that changes its bytes."""
    return content_hash(SEQUENCES_FORMAT, name, doc_base, identity, config.to_dict(), tokenizer.fingerprint())


def _scattered(path: Path) -> np.ndarray:
    """A saved array, memory-mapped for scattered reads (no read-ahead or fault-around)."""
    arr = np.load(path, mmap_mode="r")
    m = getattr(arr, "_mmap", None)
    if m is not None and hasattr(mmap, "MADV_RANDOM"):
        m.madvise(mmap.MADV_RANDOM)
    return arr


def _gather(dirs: list[str], bases: np.ndarray, ids: np.ndarray, meta: dict[str, Any]) -> dict[str, Any]:
    """The sequences ``ids`` (global numbers, in this order) read from the saved shards.

    One input shard at a time: its files are mapped, the needed rows copied out and the
    mapping dropped, so the pages touched never add up over shards. The task's derived token
    fields (``meta["derived_fields"]``, not saved) are rebuilt from the gathered ones.
    """
    dtypes = meta["dtypes"]
    derived = meta["derived_fields"]
    shard_of = np.searchsorted(bases, ids, side="right") - 1
    local = ids - bases[shard_of]
    shards = np.unique(shard_of).tolist()
    lengths = np.empty(ids.size, dtype=np.int64)
    starts = np.empty(ids.size, dtype=np.int64)
    example_ids = np.empty(ids.size, dtype=np.int64)
    for s in shards:
        m = shard_of == s
        off = np.load(Path(dirs[s]) / "offsets.npy", mmap_mode="r")
        starts[m] = off[local[m]]
        lengths[m] = off[local[m] + 1] - starts[m]
        example_ids[m] = np.load(Path(dirs[s]) / "example_ids.npy", mmap_mode="r")[local[m]]
        del off
    offsets = offsets_of(lengths)
    tok = {k: np.empty(int(offsets[-1]), dtype=dt) for k, dt in dtypes["token_fields"].items() if k not in derived}
    seq_fields: dict[str, np.ndarray] = {}
    for s in shards:
        m = shard_of == s
        dst = concat_ranges(offsets[:-1][m], lengths[m])
        src = concat_ranges(starts[m], lengths[m])
        for k in tok:
            arr = _scattered(Path(dirs[s]) / f"token.{k}.npy")
            tok[k][dst] = arr[src]
            del arr
        for k, dt in dtypes["seq_fields"].items():
            arr = _scattered(Path(dirs[s]) / f"seq.{k}.npy")
            if k not in seq_fields:
                seq_fields[k] = np.empty((ids.size, *arr.shape[1:]), dtype=dt)
            seq_fields[k][m] = arr[local[m]]
            del arr
    task = get_task(meta["task"])
    tok = {k: task.rebuild_field(k, tok, offsets, dt) if k in derived else tok[k]  # the task's order of fields
           for k, dt in dtypes["token_fields"].items()}
    return {"offsets": offsets, "example_ids": example_ids, "token_fields": tok, "seq_fields": seq_fields}


def packs_stage(
    path: str, dirs: list[str], bases: np.ndarray, pack_offsets: np.ndarray, sequence_index: np.ndarray,
    plan: Any, meta: dict[str, Any], bin_dir: str | None, first_pack: int, done: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Lay out one output shard (packs ``pack_offsets``, sequences ``sequence_index``), write it and
    record it in the job's work directory (``meta["work"]``); returns its column specs. ``done``: the
    specs the driver found recorded and verified, the part reused as is unless ``.bin`` columns must
    be filled too.

    One row group (``meta["row_group_packs"]`` packs) is gathered, laid out and written at a time,
    so a stage holds one row group's columns, not the part's."""
    if done is not None and bin_dir is None:
        return done
    out = Path(path)
    rows, step = pack_offsets.size - 1, meta["row_group_packs"]
    specs: dict[str, Any] = {}

    def groups() -> Iterator[dict[str, np.ndarray]]:
        for lo in range(0, rows, step):
            hi = min(rows, lo + step)
            poff = pack_offsets[lo : hi + 1]
            cols = _row_group(dirs, bases, poff, sequence_index[poff[0] - pack_offsets[0] : poff[-1] - pack_offsets[0]],
                              plan, meta)
            specs.update({k: {"dtype": v.dtype.name, "shape": list(v.shape[1:])} for k, v in cols.items()})
            if bin_dir is not None:
                for col, v in cols.items():
                    mm = np.memmap(Path(bin_dir) / f"{col}.bin", dtype=v.dtype, mode="r+",
                                   offset=(first_pack + lo) * v[0].nbytes, shape=v.shape)
                    mm[:] = v
                    mm.flush()
                    del mm
            yield cols
            del cols  # before the next row group is made

    if done is None:
        with atomic_file(out) as tmp:
            write_parquet_groups(tmp, groups(), step, meta["compression"])
        StageLog(meta["work"]).finish(out.name, packs_key(out.name, first_pack, sequence_index, meta), specs, files=[out])
    else:
        for _ in groups():  # only the .bin rows
            pass
    return specs


def _row_group(dirs: list[str], bases: np.ndarray, pack_offsets: np.ndarray, sequence_index: np.ndarray, plan: Any,
               meta: dict[str, Any]) -> dict[str, np.ndarray]:
    """The columns of packs ``pack_offsets`` (holding sequences ``sequence_index``), gathered and laid out."""
    g = _gather(dirs, bases, sequence_index, meta)
    seqs = Sequences(task=meta["task"], offsets=g["offsets"], example_ids=g["example_ids"],
                     token_fields=g["token_fields"], seq_fields=g["seq_fields"],
                     position_fields=tuple(meta["position_fields"]), num_examples=meta["num_examples"])
    local = Packing(pack_offsets - pack_offsets[0], np.arange(sequence_index.size, dtype=np.int64), seqs.lengths, plan)
    return materialize(seqs, local, max_len=meta["max_len"], max_depth=meta["max_depth"],
                       position_offset=meta["position_offset"])


def packs_key(name: str, first_pack: int, sequence_index: np.ndarray, meta: dict[str, Any]) -> str:
    """The key an output part is recorded under: its packs, the sequences they hold (by number,
    and the keys of the stages that built them) and how it is written."""
    layout = {k: meta[k] for k in ("max_len", "max_depth", "position_offset", "compression", "row_group_packs")}
    digest = hashlib.sha256(np.ascontiguousarray(sequence_index, dtype=np.int64).tobytes()).hexdigest()
    return content_hash(name, first_pack, digest, meta["inputs_key"], layout)
