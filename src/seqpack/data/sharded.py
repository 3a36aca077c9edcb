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
def sequences_stage(
    shard: str | list[dict[str, Any]], tokenizer: Tokenizer, config: PackConfig, doc_base: int, path: str,
    context: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Build one input shard's sequences (a token store shard's path, or a batch of example
    records) and save them under ``path``; returns their summary."""
    from seqpack.store import TokenStore
    from seqpack.tasks import get_task

    done = _summary(Path(path))
    if done is not None:
        return done
    task = get_task(config.task)
    if isinstance(shard, str):
        seqs = task.build_sequences(TokenStore(shard), tokenizer, config)
    else:
        try:
            seqs = task.build_shard(shard, tokenizer, config, context or {})
        except ValueError as e:  # "example i" counts within the shard: say which records it holds
            raise ValueError(f"examples {doc_base}..{doc_base + len(shard) - 1} of the file: {e}") from None
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
@dataclasses.dataclass(frozen=True)
class _Output:
    """How the packed dataset is written (the job's output options)."""

    shard_packs: int
    compression: str
    export_bin: bool
    row_group_packs: int


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
    store.check_tokenizer(tokenizer.fingerprint())
    inputs = ((str(s.path), int(store.document_bases[i]), None) for i, s in enumerate(store.shards))
    key = {"store": str(store.path.resolve()), "shards": store.meta["shards"]}
    output = _output(config, shard_packs, compression, export_bin, row_group_packs)
    return _run_job(key, inputs, tokenizer, out, config, output, engine=engine, overwrite=overwrite)


def build_packed_examples_sharded(
    source: str | os.PathLike[str],
    tokenizer: Tokenizer,
    out: str | os.PathLike[str],
    config: PackConfig,
    *,
    shard_examples: int = 100_000,
    engine: Engine | None = None,
    overwrite: bool = False,
    export_bin: bool = False,
    compression: str = "zstd",
    shard_packs: int | None = None,
    row_group_packs: int = 4096,
) -> dict[str, Any]:
    """Pack labelled examples (``.jsonl``/``.parquet``) ``shard_examples`` at a time, with one global plan.

    A first pass asks the task for what must be global (classification: the label set); then
    the examples are read in order and each batch of ``shard_examples`` is one stage.
    """
    from itertools import islice

    from seqpack.corpus.readers import require_file
    from seqpack.data.examples import iter_records
    from seqpack.tasks import get_task

    if shard_examples < 1:
        raise ValueError(f"shard_examples must be >= 1, got {shard_examples}")
    p = require_file(source)
    task = get_task(config.task)
    context = task.shard_context(p, config)

    def inputs():  # type: ignore[no-untyped-def]
        it, base = iter_records(p), 0
        while batch := list(islice(it, shard_examples)):
            yield batch, base, context
            base += len(batch)

    st = p.stat()
    key = {"examples": str(p.resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns, "shard_examples": shard_examples}
    output = _output(config, shard_packs, compression, export_bin, row_group_packs)
    return _run_job(key, inputs(), tokenizer, out, config, output, engine=engine, overwrite=overwrite)


def _output(config: PackConfig, shard_packs: int | None, compression: str, export_bin: bool, row_group_packs: int) -> _Output:
    from seqpack.data.io import COMPRESSION, default_shard_packs

    if compression not in COMPRESSION:
        raise ValueError(f"compression must be one of {'|'.join(COMPRESSION)}, got {compression!r}")
    shard_packs = shard_packs or default_shard_packs(config.max_len)
    if shard_packs < 1:
        raise ValueError(f"shard_packs must be >= 1, got {shard_packs}")
    return _Output(shard_packs, compression, export_bin, row_group_packs)


def _run_job(
    key: dict[str, Any], inputs: Any, tokenizer: Tokenizer, out: str | os.PathLike[str], config: PackConfig,
    output: _Output, *, engine: Engine | None, overwrite: bool,
) -> dict[str, Any]:
    """Stages 1-3 and the manifest, in ``.OUT.partial/``; the finished dataset renamed to ``out``."""
    from seqpack.engine import LocalEngine
    from seqpack.store.sharded import prepare_partial

    engine = engine or LocalEngine()
    out = Path(out)
    cfg_d = {**dataclasses.asdict(config), "options_type": type(config.options).__name__}
    with output_lock(out):
        check_output_dir(out, overwrite=overwrite)
        job = {**key, "tokenizer": tokenizer.fingerprint(), "config": json.loads(json.dumps(cfg_d, default=str)),
               **dataclasses.asdict(output)}
        work = prepare_partial(out, job)
        dirs: list[str] = []
        reused: list[str] = []

        def items():  # type: ignore[no-untyped-def]
            for i, (src, base, context) in enumerate(inputs):
                d = work / f"sequences-{i:05d}"
                dirs.append(str(d))
                if _summary(d) is not None:
                    reused.append(d.name)
                yield src, tokenizer, dataclasses.replace(config, seed=config.seed + i), base, str(d), context

        summaries = list(engine.map(sequences_stage, items()))
        packing, meta = _plan(dirs, summaries, config, output)
        final = work / "dataset"
        files, bounds, columns = _write_packs(final, dirs, summaries, packing, meta, output, engine, reused)
        extra = {
            "position_offset": config.position_offset, "seed": config.seed, "algorithm": config.algorithm,
            "tokenizer_hash": tokenizer.fingerprint(), "num_examples": meta["num_examples"],
            "dropped": dict(sorted(_sum_dropped(summaries).items())), "position_fields": summaries[0]["position_fields"],
            "task_info": _merged_info(summaries),
            "vocab_size": int(summaries[0]["info"].get("vocab_size", tokenizer.vocab_size)), "config": cfg_d,
        }
        manifest = _write_manifest(final, config, packing, meta["max_depth"], columns, extra, files, bounds, output)
        replace_directory(final, out)
        shutil.rmtree(work)
    manifest["reused"] = reused
    return manifest


def _plan(dirs: list[str], summaries: list[dict[str, Any]], config: PackConfig, output: _Output) -> tuple[Any, dict[str, Any]]:
    """Stage 2: one plan over every shard's lengths, and what stage 3 needs to know."""
    from seqpack.data.pack import _depth
    from seqpack.packing import pack_lengths

    lengths = np.concatenate([np.diff(np.load(Path(d) / "offsets.npy")) for d in dirs]) if dirs else np.zeros(0, np.int64)
    if lengths.size == 0:
        raise ValueError("no sequences to pack (every document or example was empty or dropped)")
    packing = pack_lengths(lengths, config.max_len, algorithm=config.algorithm, max_depth=config.max_depth, seed=config.seed)
    dtypes = {kind: {k: np.result_type(*[np.dtype(s[kind][k]) for s in summaries]).str for k in summaries[0][kind]}
              for kind in ("token_fields", "seq_fields")}
    meta = {"task": config.task, "dtypes": dtypes, "position_fields": summaries[0]["position_fields"],
            "num_examples": int(sum(s["num_examples"] for s in summaries)), "max_len": config.max_len,
            "max_depth": _depth(packing, config.max_depth), "position_offset": config.position_offset,
            "compression": output.compression, "row_group_packs": output.row_group_packs,
            "bases": np.concatenate([[0], np.cumsum([s["num_sequences"] for s in summaries])]).astype(np.int64)}
    return packing, meta


def _write_packs(
    final: Path, dirs: list[str], summaries: list[dict[str, Any]], packing: Any, meta: dict[str, Any],
    output: _Output, engine: Engine, reused: list[str],
) -> tuple[list[str], list[tuple[int, int]], dict[str, Any]]:
    """Stage 3: every output shard laid out and written; returns files, pack ranges, column specs."""
    (final / "data").mkdir(parents=True, exist_ok=True)
    P = packing.num_packs
    bounds = [(lo, min(P, lo + output.shard_packs)) for lo in range(0, P, output.shard_packs)]
    files = [f"data/part-{k:05d}.parquet" for k in range(len(bounds))]
    reused += [f for f, (lo, hi) in zip(files, bounds) if _parquet_complete(final / f, hi - lo)]
    bin_dir = None
    if output.export_bin:
        bin_dir = final / "bin"
        shutil.rmtree(bin_dir, ignore_errors=True)
        bin_dir.mkdir()
    poff, order, bases = packing.pack_offsets, packing.sequence_index, meta["bases"]
    items = [(str(final / f), dirs, bases, poff[lo : hi + 1], order[poff[lo] : poff[hi]], packing.plan, meta,
              str(bin_dir) if bin_dir else None, lo) for f, (lo, hi) in zip(files, bounds)]
    if bin_dir is not None:  # the .bin files at full size first; each stage fills its rows
        for name, spec in packs_stage(*items[0][:-2], None, 0).items():
            row = int(np.prod(spec["shape"], dtype=np.int64)) * np.dtype(spec["dtype"]).itemsize
            with open(bin_dir / f"{name}.bin", "wb") as f:
                f.truncate(row * P)
    list(engine.map(packs_stage, items))
    return files, bounds, _specs_from_parquet(final / files[0])


def _write_manifest(
    final: Path, config: PackConfig, packing: Any, depth: int, columns: dict[str, Any], extra: dict[str, Any],
    files: list[str], bounds: list[tuple[int, int]], output: _Output,
) -> dict[str, Any]:
    from seqpack.data.io import MANIFEST, dump_manifest, manifest_fields

    manifest = manifest_fields(config.task, packing.plan, config.max_len, depth, columns, extra)
    manifest["shards"] = [{"file": f, "rows": hi - lo} for f, (lo, hi) in zip(files, bounds)]
    manifest["compression"] = output.compression
    manifest["bin"] = output.export_bin
    (final / MANIFEST).write_text(dump_manifest(manifest), encoding="utf-8")
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


def _specs_from_parquet(path: Path) -> dict[str, Any]:  # the written files are the truth
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
