"""A packed dataset from shards (a sharded token store, or an examples file read in batches):
one global plan, shards in and out.

Three steps, each resumable and each the same whatever engine runs it:

1. **sequences** (one stage per input shard, `seqpack.pipeline.stages.sequences_stage`):
   the task builds the shard's sequences, saved in the job's work directory (memory: one shard).
2. **plan** (the driver): the shards' sequence lengths are concatenated in shard order and
   packed with `seqpack.packing.pack_lengths`, exactly as one process would pack the
   whole corpus: same histogram, same plan, same seeded assignment, same pack count.
   Lengths are 8 bytes per sequence; no token passes through the driver.
3. **route** (one stage per input shard, `seqpack.pipeline.stages.route_stage`): each
   shard's tokens written again in plan order, by output row group.
4. **packs** (one stage per output shard of ``shard_packs`` packs,
   `seqpack.pipeline.stages.packs_stage`): each row group read as one contiguous chunk of
   every routed file, laid into rows, written to one Parquet part. Every read of token data is
   sequential, so the job keeps its speed when its work files do not fit in memory.

The manifest is written last and the directory renamed into place, so a job that dies
leaves no dataset that looks complete; re-running it reuses every finished stage
(``.OUT.partial/`` beside the output, `seqpack._stages`). The output is byte-identical for
any engine and any number of workers. Per-shard randomness (MLM masking and pairs) is seeded
with ``seed + shard index``, so a one-shard store packs exactly like the plain store.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from collections.abc import Iterable, Iterator
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from seqpack._atomic import check_output_dir, output_lock, remove_leftovers, replace_directory
from seqpack._progress import progress_bar
from seqpack._resources import small_pages
from seqpack._stages import StageLog, content_hash, discard_on_rejection, work_dir
from seqpack.corpus.records import iter_records, record_files
from seqpack.data.columns import pack_depth
from seqpack.data.format import (
    OUTPUT as PACKED_OUTPUT,
)
from seqpack.data.format import (
    SCHEDULE,
    bin_checksums,
    manifest_fields,
    parquet_column_specs,
    write_manifest,
)
from seqpack.data.sequences import COUNTED_INFO
from seqpack.errors import UserError
from seqpack.packing import pack_lengths
from seqpack.packing.balance import packing_schedule
from seqpack.packing.plan import preload
from seqpack.pipeline.config import SHARD_EXAMPLES, OutputOptions, PackConfig
from seqpack.pipeline.engine import LocalEngine
from seqpack.pipeline.in_memory import manifest_extra
from seqpack.pipeline.stages import (
    EXAMPLES_FILE,
    group_chunks,
    input_identity,
    packs_key,
    packs_stage,
    route_key,
    route_stage,
    sequences_key,
    sequences_stage,
)
from seqpack.tasks import get_task

if TYPE_CHECKING:
    from seqpack.pipeline.engine import Engine
    from seqpack.store.sharded import ShardedTokenStore
    from seqpack.tasks.spec import PackTokenizer

#: one input shard: (a store shard's path or a batch of records, its first document's number, the task's context)
ShardInput = tuple[Any, int, "dict[str, Any] | None"]


def pack_store_shards(
    store: ShardedTokenStore,
    tokenizer: PackTokenizer,
    out: str | os.PathLike[str],
    config: PackConfig,
    *,
    output: OutputOptions = OutputOptions(),
    engine: Engine | None = None,
) -> dict[str, Any]:
    """Pack a sharded store into ``out`` with one global plan; returns the manifest (see the module)."""
    store.check_tokenizer(tokenizer.fingerprint())
    inputs = ((str(s.path), int(store.document_bases[i]), None) for i, s in enumerate(store.shards))
    key = {"store": str(store.path.resolve()), "shards": store.meta["shards"]}
    return run_job(key, inputs, tokenizer, out, config, output, engine=engine)


def pack_example_shards(
    source: str | os.PathLike[str],
    tokenizer: PackTokenizer,
    out: str | os.PathLike[str],
    config: PackConfig,
    *,
    output: OutputOptions = OutputOptions(),
    engine: Engine | None = None,
    shard_examples: int = SHARD_EXAMPLES,
    glob: str | None = None,
) -> dict[str, Any]:
    """Pack labelled examples (``.jsonl``/``.parquet``, or a folder of them: `seqpack.corpus.record_files`,
    ``glob`` picking its files) ``shard_examples`` at a time, with one global plan.

    A first pass asks the task for what must be global (classification: the label set); then
    the examples are read in order (a folder's files one after another) and each batch of
    ``shard_examples`` is one stage.
    """
    if shard_examples < 1:
        raise UserError(f"shard_examples must be >= 1, got {shard_examples}")
    files = record_files(source, glob=glob)
    context = get_task(config.task).packs().shard_context(files, config)

    def inputs() -> Iterator[ShardInput]:
        it, base = iter_records(files), 0
        while batch := list(islice(it, shard_examples)):
            yield batch, base, context
            base += len(batch)

    stats = [(str(Path(f).resolve()), Path(f).stat()) for f in files]
    folder = Path(source).is_dir()
    if folder:
        key: dict[str, Any] = {"examples": [[f, st.st_size, st.st_mtime_ns] for f, st in stats]}
    else:  # one file: its key as it always was
        key = {"examples": stats[0][0], "size": stats[0][1].st_size, "mtime_ns": stats[0][1].st_mtime_ns}
    key["shard_examples"] = shard_examples
    manifest = run_job(key, inputs(), tokenizer, out, config, output, engine=engine)
    if folder:
        manifest["input_files"] = len(files)  # for the summary line, as "reused" (not written to disk)
    return manifest


def run_job(
    key: dict[str, Any],
    inputs: Iterable[ShardInput],
    tokenizer: PackTokenizer,
    out: str | os.PathLike[str],
    config: PackConfig,
    output: OutputOptions,
    *,
    engine: Engine | None,
) -> dict[str, Any]:
    """The three steps and the manifest, in ``.OUT.partial/``; the finished dataset renamed to ``out``."""
    engine = engine or LocalEngine()
    preload(config.algorithm)  # the solver's imports, while the shards are read
    out = Path(out)
    with output_lock(out), small_pages():
        check_output_dir(out, overwrite=output.overwrite, kind=PACKED_OUTPUT)
        job = {
            **key,
            "tokenizer": tokenizer.fingerprint(),
            "config": config.to_dict(),
            **{
                k: v for k, v in dataclasses.asdict(output).items() if k not in ("overwrite", "schedule")
            },  # the schedule is made anew each time
            "shard_packs": output.parts(max_len=config.max_len),
            "row_group_packs": output.row_groups(max_len=config.max_len),
        }
        work = work_dir(out, job)
        with discard_on_rejection(work):
            log = StageLog(work)
            dirs: list[str] = []
            keys: list[str] = []
            reused: list[str] = []
            rebuild: list[Any] = []  # per input shard: what its route stage makes the tokens again from, or None
            sequencer = get_task(config.task).packs()
            redone: dict[str, str] = {}

            def items() -> Iterator[tuple[Any, ...]]:
                for i, (src, base, context) in enumerate(inputs):
                    d = work / f"sequences-{i:05d}"
                    cfg = dataclasses.replace(config, seed=config.seed + i)
                    identity = input_identity(src)
                    more = None
                    if not isinstance(src, str) and sequencer.identity is not None:
                        more = sequencer.identity(src, cfg, context or {})
                    if more is not None:  # files the records name (their images): a changed one redoes the shard
                        identity = [identity, more]
                    key = sequences_key(d.name, base, identity, cfg, tokenizer)
                    dirs.append(str(d))
                    keys.append(key)
                    rebuild.append(
                        (src, tokenizer, cfg) if isinstance(src, str) and sequencer.tokens_from_store else None
                    )
                    done, why = log.check(d.name, key, outputs=[d])
                    if done is not None:
                        reused.append(d.name)
                    elif why:
                        redone[d.name] = why
                    yield src, tokenizer, cfg, base, str(d), context, key, done  # done: verified here, once

            summaries = list(
                progress_bar(
                    iterable=engine.map(sequences_stage, items()), desc="pack: sequences", unit="shard", leave=False
                )
            )
            packing, meta = _plan(dirs, summaries, config, output, work)
            meta["inputs_key"] = content_hash(*keys)
            bounds = _part_bounds(packing.num_packs, output.parts(max_len=config.max_len))
            part_chunks = _route(dirs, keys, rebuild, packing, bounds, meta, engine, reused, redone)
            final = work / "dataset"
            files, columns = _write_packs(
                final, dirs, packing, bounds, part_chunks, meta, output, engine, reused, redone
            )
            extra = {
                "position_offset": config.position_offset,
                "seed": config.seed,
                "algorithm": config.algorithm,
                **manifest_extra(
                    config,
                    tokenizer,
                    num_examples=meta["num_examples"],
                    dropped=_sum_dropped(summaries),
                    position_fields=summaries[0]["position_fields"],
                    info=_merged_info(summaries),
                ),
                **config.cp_summary(packing),
            }
            if any(s.get("examples") for s in summaries):
                extra["example_table"] = _example_table(final, dirs)
            if sequencer.beside is not None:
                sequencer.beside(tokenizer, final)
            if output.schedule is not None:
                steps, extra["schedule"] = packing_schedule(
                    packing.lengths, packing.pack_offsets, packing.sequence_index, output.schedule
                )
                np.save(final / SCHEDULE, steps)
            manifest = _write_manifest(final, config, packing, meta["max_depth"], columns, extra, files, bounds, output)
            replace_directory(final, out, kind=PACKED_OUTPUT)
            shutil.rmtree(work)
    manifest["reused"] = reused
    manifest["redone"] = redone  # stages a previous run left, rebuilt: {name: "inputs changed" | "output changed"}
    return manifest


def _plan(
    dirs: list[str],
    summaries: list[dict[str, Any]],
    config: PackConfig,
    output: OutputOptions,
    work: Path,
) -> tuple[Any, dict[str, Any]]:
    """Step 2: one plan over every shard's lengths, and what step 3 needs to know."""
    lengths = (
        np.concatenate([np.diff(np.load(Path(d) / "offsets.npy")) for d in dirs]) if dirs else np.zeros(0, np.int64)
    )
    if lengths.size == 0:
        raise UserError("no sequences to pack (every document or example was empty or dropped)")
    packing = pack_lengths(
        lengths,
        config.max_len,
        algorithm=config.algorithm,
        max_depth=config.max_depth,
        seed=config.seed,
        round_to=config.round_to,
    )
    dtypes = {
        kind: {k: np.result_type(*[np.dtype(s[kind][k]) for s in summaries]).str for k in summaries[0][kind]}
        for kind in ("token_fields", "seq_fields")
    }
    meta = {
        "task": config.task,
        "dtypes": dtypes,
        "derived_fields": summaries[0].get("derived_fields", []),
        "position_fields": summaries[0]["position_fields"],
        "num_examples": int(sum(s["num_examples"] for s in summaries)),
        "max_len": config.max_len,
        "max_depth": pack_depth(packing, config.max_depth),
        "position_offset": config.position_offset,
        "compression": output.compression,
        "encoding": output.encoding,
        "row_group_packs": output.row_groups(max_len=config.max_len),
        "work": str(work),
        "derived_columns": output.derived(config.task),
        "bases": np.concatenate([[0], np.cumsum([s["num_sequences"] for s in summaries])]).astype(np.int64),
    }
    return packing, meta


def _part_bounds(P: int, step: int) -> list[tuple[int, int]]:
    """The pack range of each output part."""
    return [(lo, min(P, lo + step)) for lo in range(0, P, step)]


def _route(
    dirs: list[str],
    keys: list[str],
    rebuild: list[Any],
    packing: Any,
    bounds: list[tuple[int, int]],
    meta: dict[str, Any],
    engine: Engine,
    reused: list[str],
    redone: dict[str, str],
) -> list[np.ndarray]:
    """Step 3: every input shard's tokens in plan order (`seqpack.pipeline.stages.route_stage`);
    returns each part's rows of `seqpack.pipeline.stages.group_chunks`. Sets ``meta["routes"]``."""
    rg, poff, order = meta["row_group_packs"], packing.pack_offsets, packing.sequence_index
    part_groups = [list(range(lo, hi, rg)) for lo, hi in bounds]  # each part's row groups (first pack of each)
    starts = [g for groups in part_groups for g in groups]
    group_bounds = np.append(poff[starts], poff[-1]).astype(np.int64)
    slots = np.empty(order.size, dtype=np.int64)
    slots[order] = np.arange(order.size, dtype=np.int64)
    bases, work = meta["bases"], Path(meta["work"])
    fields = [k for k in meta["dtypes"]["token_fields"] if k not in meta["derived_fields"]]
    log = StageLog(work)
    routes = [str(work / f"route-{i:05d}") for i in range(len(dirs))]

    def items() -> Iterator[tuple[Any, ...]]:
        for i, (d, r) in enumerate(zip(dirs, routes)):
            mine = slots[bases[i] : bases[i + 1]]
            key = route_key(Path(r).name, keys[i], mine, group_bounds)
            done, why = log.check(Path(r).name, key, outputs=[Path(r)])
            if done is not None:
                reused.append(Path(r).name)
            elif why:
                redone[Path(r).name] = why
            yield d, r, mine, group_bounds, fields, key, done, rebuild[i]

    for _ in progress_bar(
        iterable=engine.map(route_stage, items()), total=len(dirs), desc="pack: route", unit="shard", leave=False
    ):
        pass
    meta["routes"] = routes
    chunks = group_chunks(packing.lengths, order, bases, group_bounds)
    first = np.cumsum([0, *(len(groups) for groups in part_groups)])
    return [chunks[first[k] : first[k + 1] + 1] for k in range(len(bounds))]


def _write_packs(
    final: Path,
    dirs: list[str],
    packing: Any,
    bounds: list[tuple[int, int]],
    part_chunks: list[np.ndarray],
    meta: dict[str, Any],
    output: OutputOptions,
    engine: Engine,
    reused: list[str],
    redone: dict[str, str],
) -> tuple[list[str], dict[str, Any]]:
    """Step 4: every output shard laid out and written; returns files and column specs."""
    (final / "data").mkdir(parents=True, exist_ok=True)
    P = packing.num_packs
    files = [f"data/part-{k:05d}.parquet" for k in range(len(bounds))]
    log = StageLog(meta["work"])
    poff, order = packing.pack_offsets, packing.sequence_index
    found = []  # each part's verified record, or None
    for f, (lo, hi) in zip(files, bounds):
        done, why = log.check(
            Path(f).name, packs_key(Path(f).name, lo, order[poff[lo] : poff[hi]], meta), outputs=[final / f]
        )
        found.append(done)
        if done is not None:
            reused.append(f)
        elif why:
            redone[f] = why
    bin_dir = None
    if output.export_bin:
        bin_dir = final / "bin"
        shutil.rmtree(bin_dir, ignore_errors=True)
        bin_dir.mkdir()
    bases = meta["bases"]
    items = [
        (
            str(final / f),
            dirs,
            bases,
            poff[lo : hi + 1],
            order[poff[lo] : poff[hi]],
            packing.plan,
            meta,
            chunks,
            str(bin_dir) if bin_dir else None,
            lo,
            done,
        )
        for f, (lo, hi), done, chunks in zip(files, bounds, found, part_chunks)
    ]
    if bin_dir is not None:  # the .bin files at full size first (part 0 gives the specs); each stage fills its rows
        specs = packs_stage(*items[0][:8], None, 0, items[0][10])
        items[0] = (*items[0][:10], specs)  # part 0 is written and recorded now
        for name, spec in _column_specs(specs, specs, meta).items():  # the derived columns too
            row = int(np.prod(spec["shape"], dtype=np.int64)) * np.dtype(spec["dtype"]).itemsize
            with open(bin_dir / f"{name}.bin", "wb") as fh:
                fh.truncate(row * P)
    made = list(
        progress_bar(
            iterable=engine.map(packs_stage, items), total=len(items), desc="pack: parts", unit="part", leave=False
        )
    )
    remove_leftovers(final / "data", ".*.tmp-*")  # a write a killed worker left half done (its task ran again)
    return files, _column_specs(
        parquet_column_specs(final / files[0]), made[0], meta
    )  # the written files are the truth


def _column_specs(written: dict[str, Any], made: dict[str, Any], meta: dict[str, Any]) -> dict[str, Any]:
    """Every column's spec, in the order `materialize` makes them (the token fields first): those the
    parts hold (``written``), and the derived ones they leave out, as the stage laid them out
    (``made``) or, for a token field it did not make, as the sequences hold it."""
    tokens = meta["dtypes"]["token_fields"]
    specs = {**made, **written}
    for k in meta["derived_columns"]:
        if k not in specs:  # a token field the stage did not lay out
            specs[k] = {"dtype": np.dtype(tokens[k]).name, "shape": [meta["max_len"]]}
    order = [k for k in tokens if k in specs] + [k for k in made if k not in tokens]
    assert sorted(order) == sorted(specs), (order, list(specs))
    return {k: specs[k] for k in order}


def _write_manifest(
    final: Path,
    config: PackConfig,
    packing: Any,
    depth: int,
    columns: dict[str, Any],
    extra: dict[str, Any],
    files: list[str],
    bounds: list[tuple[int, int]],
    output: OutputOptions,
) -> dict[str, Any]:
    manifest = manifest_fields(
        config.task, packing.plan, config.max_len, depth, columns, extra, derived=output.derived(config.task)
    )
    log = StageLog(final.parent)  # each part's checksum, as its stage recorded it (verified there if reused)
    manifest["shards"] = [
        {"file": f, "rows": hi - lo, "checksum": log.checksum(Path(f).name, final / f)}
        for f, (lo, hi) in zip(files, bounds)
    ]
    manifest["compression"] = output.compression
    manifest["encoding"] = output.encoding
    manifest["bin"] = output.export_bin
    if output.export_bin:
        manifest["bin_checksums"] = bin_checksums(final, columns)
    return write_manifest(final, manifest)


def _example_table(final: Path, dirs: list[str]) -> dict[str, Any]:
    """The sequences stages' example tables as the dataset's parts (`seqpack.data.example_table`),
    in input order; returns the manifest's ``example_table``."""
    from seqpack.data.example_table import EXAMPLES, part_name, table_entry

    shutil.rmtree(final / EXAMPLES, ignore_errors=True)  # a killed run's copies
    (final / EXAMPLES).mkdir()
    names: list[str] = []
    for d in dirs:
        f = Path(d) / EXAMPLES_FILE
        if f.is_file():
            names.append(part_name(len(names)))
            shutil.copyfile(f, final / names[-1])
    return table_entry(final, names)


def _merged_info(summaries: list[dict[str, Any]]) -> dict[str, Any]:
    """Shard 0's info, with the counting entries summed over shards."""
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
