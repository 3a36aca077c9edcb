"""A packed dataset from a sharded token store: one global plan, shards in and out.

Three stages, each resumable and each the same whatever engine runs it:

1. **sequences** (one stage per input shard): the task builds the shard's sequences, which
   are saved as ``.npy`` files in the job's work directory (memory: one shard).
2. **plan** (the driver): the shards' sequence lengths are concatenated in shard order and
   packed with :func:`seqpack.packing.pack_lengths`, exactly as one process would pack the
   whole corpus: same histogram, same plan, same seeded assignment, same pack count.
   Lengths are 8 bytes per sequence; no token passes through the driver.
3. **packs** (one stage per output shard of ``shard_packs`` packs): the shard's sequences
   are gathered by index from the memory-mapped sequence files and laid into rows
   (:func:`seqpack.data.pack.materialize`), then written as one Parquet file.

The manifest is written last and the directory renamed into place, so a job that dies
leaves no dataset that looks complete; re-running it reuses every finished stage
(``.OUT.partial/`` beside the output). The output is byte-identical for any engine and
any number of workers. Per-shard randomness (MLM masking and pairs) is seeded with
``seed + shard index``, so a one-shard store packs exactly like the plain store.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from seqpack._atomic import (
    atomic_directory,
    atomic_file,
    check_output_dir,
    output_lock,
    replace_directory,
)

if TYPE_CHECKING:
    from seqpack.data.build import PackConfig
    from seqpack.engine import Engine
    from seqpack.store.sharded import ShardedTokenStore
    from seqpack.tokenizer.tokenizer import Tokenizer

SUMMARY = "summary.json"


# ------------------------------------------------------------------ stage 1: sequences
def sequences_stage(shard: str, tokenizer: Tokenizer, config: PackConfig, doc_base: int, path: str) -> dict[str, Any]:
    """Build one input shard's sequences and save them under ``path``; returns their summary."""
    from seqpack.store import TokenStore
    from seqpack.tasks import get_task

    done = _summary(Path(path))
    if done is not None:
        return done
    seqs = get_task(config.task).build_sequences(TokenStore(shard), tokenizer, config)
    with atomic_directory(path, overwrite=True) as tmp:
        np.save(tmp / "offsets.npy", seqs.offsets)
        np.save(tmp / "example_ids.npy", seqs.example_ids + doc_base)
        for name, v in seqs.token_fields.items():
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
            "seq_fields": {k: v.dtype.str for k, v in seqs.seq_fields.items()},
        }
        (tmp / SUMMARY).write_text(json.dumps(summary, sort_keys=True), encoding="utf-8")
    return summary


def _summary(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads((path / SUMMARY).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


# ------------------------------------------------------------------ stage 3: packs
def _mapped(path: Path) -> np.ndarray:
    """A saved array, memory-mapped for scattered reads (no read-ahead or fault-around)."""
    import mmap

    arr = np.load(path, mmap_mode="r")
    m = getattr(arr, "_mmap", None)
    if m is not None and hasattr(mmap, "MADV_RANDOM"):
        m.madvise(mmap.MADV_RANDOM)
    return arr


def _gather(dirs: list[str], bases: np.ndarray, ids: np.ndarray, dtypes: dict[str, dict[str, str]]) -> dict[str, Any]:
    """The sequences ``ids`` (global numbers, in this order) read from the saved shards.

    One input shard at a time: its files are mapped, the needed rows copied out and the
    mapping dropped, so the pages touched never add up over shards.
    """
    from seqpack.data.sequences import _offsets, _ranges

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
    offsets = _offsets(lengths)
    tok = {k: np.empty(int(offsets[-1]), dtype=dt) for k, dt in dtypes["token_fields"].items()}
    seq_fields: dict[str, np.ndarray] = {}
    for s in shards:
        m = shard_of == s
        dst = _ranges(offsets[:-1][m], lengths[m])
        src = _ranges(starts[m], lengths[m])
        for k in dtypes["token_fields"]:
            arr = _mapped(Path(dirs[s]) / f"token.{k}.npy")
            tok[k][dst] = arr[src]
            del arr
        for k, dt in dtypes["seq_fields"].items():
            arr = _mapped(Path(dirs[s]) / f"seq.{k}.npy")
            if k not in seq_fields:
                seq_fields[k] = np.empty((ids.size, *arr.shape[1:]), dtype=dt)
            seq_fields[k][m] = arr[local[m]]
            del arr
    return {"offsets": offsets, "example_ids": example_ids, "token_fields": tok, "seq_fields": seq_fields}


def packs_stage(
    path: str, dirs: list[str], bases: np.ndarray, pack_offsets: np.ndarray, sequence_index: np.ndarray,
    plan: Any, meta: dict[str, Any], bin_dir: str | None, first_pack: int,
) -> dict[str, Any]:
    """Lay out one output shard (packs ``pack_offsets``, sequences ``sequence_index``) and write it."""
    from seqpack.data.io import _write_shard
    from seqpack.data.pack import materialize
    from seqpack.data.sequences import Sequences
    from seqpack.packing import Packing

    rows = pack_offsets.size - 1
    if not _parquet_complete(Path(path), rows) or bin_dir is not None:
        g = _gather(dirs, bases, sequence_index, meta["dtypes"])
        seqs = Sequences(task=meta["task"], offsets=g["offsets"], example_ids=g["example_ids"],
                         token_fields=g["token_fields"], seq_fields=g["seq_fields"],
                         position_fields=tuple(meta["position_fields"]), num_examples=meta["num_examples"])
        local = Packing(pack_offsets - pack_offsets[0], np.arange(sequence_index.size, dtype=np.int64), seqs.lengths, plan)
        cols = materialize(seqs, local, max_len=meta["max_len"], max_depth=meta["max_depth"],
                           position_offset=meta["position_offset"])
        if not _parquet_complete(Path(path), rows):
            with atomic_file(path) as tmp:
                _write_shard(tmp, cols, 0, rows, meta["row_group_packs"], meta["compression"])
        if bin_dir is not None:
            for name, v in cols.items():
                f = Path(bin_dir) / f"{name}.bin"
                mm = np.memmap(f, dtype=v.dtype, mode="r+", offset=first_pack * v[0].nbytes if rows else 0, shape=v.shape)
                mm[:] = v
                mm.flush()
        return {k: {"dtype": v.dtype.name, "shape": list(v.shape[1:])} for k, v in cols.items()}
    return {}


def _parquet_complete(path: Path, rows: int) -> bool:
    if not path.is_file():
        return False
    try:
        import pyarrow.parquet as pq

        return pq.ParquetFile(path).metadata.num_rows == rows
    except Exception:  # a damaged file is rewritten
        return False


# ------------------------------------------------------------------ the job
def build_packed_sharded(
    store: ShardedTokenStore,
    tokenizer: Tokenizer,
    out: str | os.PathLike[str],
    config: PackConfig,
    *,
    engine: Engine | None = None,
    overwrite: bool = False,
    export_bin: bool = False,
    compression: str = "zstd",
    shard_packs: int | None = None,
    row_group_packs: int = 4096,
) -> dict[str, Any]:
    """Pack a sharded store into ``out`` with one global plan; returns the manifest (see the module)."""
    from seqpack.data.io import (
        COMPRESSION,
        MANIFEST,
        default_shard_packs,
        dump_manifest,
        manifest_fields,
    )
    from seqpack.data.pack import _depth
    from seqpack.engine import LocalEngine
    from seqpack.packing import pack_lengths
    from seqpack.store.sharded import prepare_partial

    if compression not in COMPRESSION:
        raise ValueError(f"compression must be one of {'|'.join(COMPRESSION)}, got {compression!r}")
    shard_packs = shard_packs or default_shard_packs(config.max_len)
    if shard_packs < 1:
        raise ValueError(f"shard_packs must be >= 1, got {shard_packs}")
    store.check_tokenizer(tokenizer.fingerprint())
    engine = engine or LocalEngine()
    out = Path(out)
    cfg_d = {**dataclasses.asdict(config), "options_type": type(config.options).__name__}
    with output_lock(out):
        check_output_dir(out, overwrite=overwrite)
        job = {"store": str(store.path.resolve()), "shards": store.meta["shards"], "tokenizer": tokenizer.fingerprint(),
               "config": json.loads(json.dumps(cfg_d, default=str)), "shard_packs": shard_packs,
               "compression": compression, "bin": export_bin, "row_group_packs": row_group_packs}
        work = prepare_partial(out, job)
        reused: list[str] = []
        # 1. sequences, shard by shard
        dirs = [str(work / f"sequences-{i:05d}") for i in range(len(store.shards))]
        reused += [Path(d).name for d in dirs if _summary(Path(d)) is not None]
        items = [(str(s.path), tokenizer, dataclasses.replace(config, seed=config.seed + i), int(store.document_bases[i]), d)
                 for i, (s, d) in enumerate(zip(store.shards, dirs))]
        summaries = list(engine.map(sequences_stage, items))
        # 2. one plan over every shard's lengths
        counts = [s["num_sequences"] for s in summaries]
        bases = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        lengths = np.concatenate([np.diff(np.load(Path(d) / "offsets.npy")) for d in dirs]) if dirs else np.zeros(0, np.int64)
        if lengths.size == 0:
            raise ValueError("no sequences to pack (every document or example was empty or dropped)")
        packing = pack_lengths(lengths, config.max_len, algorithm=config.algorithm, max_depth=config.max_depth, seed=config.seed)
        depth = _depth(packing, config.max_depth)
        dtypes = {kind: {k: np.result_type(*[np.dtype(s[kind][k]) for s in summaries]).str for k in summaries[0][kind]}
                  for kind in ("token_fields", "seq_fields")}
        num_examples = int(sum(s["num_examples"] for s in summaries))
        meta = {"task": config.task, "dtypes": dtypes, "position_fields": summaries[0]["position_fields"],
                "num_examples": num_examples, "max_len": config.max_len, "max_depth": depth,
                "position_offset": config.position_offset, "compression": compression, "row_group_packs": row_group_packs}
        # 3. output shards
        final = work / "dataset"
        (final / "data").mkdir(parents=True, exist_ok=True)
        P = packing.num_packs
        bounds = [(lo, min(P, lo + shard_packs)) for lo in range(0, P, shard_packs)]
        files = [f"data/part-{k:05d}.parquet" for k in range(len(bounds))]
        reused += [f for f, (lo, hi) in zip(files, bounds) if _parquet_complete(final / f, hi - lo)]
        bin_dir = None
        if export_bin:
            bin_dir = final / "bin"
            shutil.rmtree(bin_dir, ignore_errors=True)
            bin_dir.mkdir()
        poff, order = packing.pack_offsets, packing.sequence_index
        items3 = [(str(final / f), dirs, bases, poff[lo : hi + 1], order[poff[lo] : poff[hi]], packing.plan, meta,
                   str(bin_dir) if bin_dir else None, lo) for f, (lo, hi) in zip(files, bounds)]
        if bin_dir is not None:  # columns' sizes: from the first shard's layout
            specs = packs_stage(*items3[0][:-2], None, 0)
            for name, spec in specs.items():
                row = int(np.prod(spec["shape"], dtype=np.int64)) * np.dtype(spec["dtype"]).itemsize
                with open(bin_dir / f"{name}.bin", "wb") as f:
                    f.truncate(row * P)
        specs = [s for s in engine.map(packs_stage, items3) if s]
        columns = specs[0] if specs else _specs_from_parquet(final / files[0])
        columns = {k: columns[k] for k in _specs_from_parquet(final / files[0])}  # the files' column order
        extra = {
            "position_offset": config.position_offset, "seed": config.seed, "algorithm": config.algorithm,
            "tokenizer_hash": tokenizer.fingerprint(), "num_examples": num_examples,
            "dropped": dict(sorted(_sum_dropped(summaries).items())), "position_fields": summaries[0]["position_fields"],
            "task_info": _merged_info(summaries),
            "vocab_size": int(summaries[0]["info"].get("vocab_size", tokenizer.vocab_size)), "config": cfg_d,
        }
        manifest = manifest_fields(config.task, packing.plan, config.max_len, depth, columns, extra)
        manifest["shards"] = [{"file": f, "rows": hi - lo} for f, (lo, hi) in zip(files, bounds)]
        manifest["compression"] = compression
        manifest["bin"] = export_bin
        (final / MANIFEST).write_text(dump_manifest(manifest), encoding="utf-8")
        replace_directory(final, out)
        shutil.rmtree(work)
    manifest["reused"] = reused
    return manifest


def _merged_info(summaries: list[dict[str, Any]]) -> dict[str, Any]:
    """Shard 0's info, with the counting entries summed over shards."""
    from seqpack.data.sequences import COUNTED_INFO

    info = dict(summaries[0]["info"])
    for k in COUNTED_INFO:
        if k in info:
            info[k] = int(sum(s["info"].get(k, 0) for s in summaries))
    return info


def _sum_dropped(summaries: list[dict[str, Any]]) -> dict[str, int]:
    total: dict[str, int] = {}
    for s in summaries:
        for k, v in s["dropped"].items():
            total[k] = total.get(k, 0) + int(v)
    return total


def _specs_from_parquet(path: Path) -> dict[str, Any]:
    """Column dtypes and shapes from a written shard's schema (when every shard was reused)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = {}
    for field in pq.read_schema(path):
        t, shape = field.type, []
        while pa.types.is_fixed_size_list(t):
            shape.append(t.list_size)
            t = t.value_type
        out[field.name] = {"dtype": np.dtype(t.to_pandas_dtype()).name, "shape": shape}
    return out
