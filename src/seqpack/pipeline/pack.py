"""One call from a token store or labelled examples to a packed dataset on disk.

    cfg = PackConfig.for_task("clm", max_len=512)                # task options by name
    manifest = build_packed_dataset("store/", tokenizer, "packed/", cfg)

Store tasks (``clm``, ``mlm``) read a token store (``seqpack tokenize``); example tasks
(``classification``, ``multilabel``, ``qa``, ``chat``) read labelled examples (``.jsonl``,
``.parquet`` or an HF dataset). The task says which (`seqpack.tasks.Packing.reads`).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from seqpack._atomic import check_not_input, check_output_dir
from seqpack.data.format import OUTPUT as PACKED_OUTPUT
from seqpack.data.format import SCHEDULE, write_packed
from seqpack.packing.balance import packing_schedule
from seqpack.pipeline.config import SHARD_EXAMPLES, OutputOptions, PackConfig
from seqpack.pipeline.in_memory import pack_task
from seqpack.pipeline.job import pack_example_shards, pack_store_shards
from seqpack.store.sharded import SHARDS, ShardedTokenStore
from seqpack.tasks import get_task
from seqpack.tasks.base import check_examples

if TYPE_CHECKING:
    from seqpack.pipeline.engine import Engine
    from seqpack.store import TokenStore
    from seqpack.tasks.spec import PackTokenizer


def build_packed_dataset(
    source: str | os.PathLike[str] | Iterable[Any] | TokenStore,
    tokenizer: PackTokenizer,
    out: str | os.PathLike[str],
    config: PackConfig,
    *,
    output: OutputOptions | None = None,
    engine: Engine | None = None,
    shard_examples: int = SHARD_EXAMPLES,
    glob: str | None = None,
) -> dict[str, Any]:
    """Build, pack and write; returns the manifest (also in ``out/manifest.json``).

    A sharded token store (``seqpack tokenize`` writes one) goes through
    `seqpack.pipeline.job.pack_store_shards`, and an examples file (``.jsonl`` /
    ``.parquet``) or a folder of them (``glob``: which of its files, default every ``.jsonl``,
    ``.ndjson`` and ``.parquet`` below it, in sorted order) through
    `seqpack.pipeline.job.pack_example_shards` (``shard_examples`` at a time): shard by shard, one global plan, on ``engine``
    (`seqpack.pipeline.engine.get_engine`; default: this process). Other sources (a plain
    store, an HF dataset, a list of records) are packed in memory.

    ``output`` (`OutputOptions`) says how it is written: Parquet parts and row groups, compression,
    the ``encoding`` of the numeric columns (``byte_stream_split``, smaller and faster to write, or
    ``plain`` for Parquet readers that lack BYTE_STREAM_SPLIT on integers), ``.bin`` columns,
    ``overwrite``. Its ``schedule`` also groups the packs into compute-balanced data-parallel steps,
    written as ``schedule.npy`` (``(steps, world, micro_batch)`` pack indices) and described in the
    manifest's ``schedule`` (read by `seqpack.data.BalancedSampler`). The task's derived columns
    (``segment_ids``; ``clm``'s labels) are left out of the Parquet parts and rebuilt by every seqpack
    reader (`seqpack.data.derived`); its ``write_derived`` stores them too.

        >>> build_packed_dataset("chat.jsonl", tok, "packed/", PackConfig(task="chat", max_len=2048),
        ...                      output=OutputOptions(overwrite=True, compression="lz4"))  # doctest: +SKIP

    Args:
        source: a token store, an examples file or folder, an HF dataset, or a list of records.
        tokenizer: the tokenizer the task encodes with.
        out: the dataset's directory.
        config: the task and how to pack.
        output: how the dataset is written (`None`: `OutputOptions()`).
        engine: where the shards' stages run (`None`: this process).
        shard_examples: examples per stage of a sharded job.
        glob: which files of a folder of examples.

    Returns:
        The manifest.

    Raises:
        UserError: a malformed input, or a sequence that does not fit with `overflow="error"`.
        FileExistsError: a dataset already at `out` without `output.overwrite`.
    """
    output = output if output is not None else OutputOptions()
    task = get_task(config.task)
    packing = task.packs()
    source_path = source if isinstance(source, (str, os.PathLike)) else getattr(source, "path", None)
    check_not_input(out, [source_path])  # --out must not replace or sit inside what it reads
    sharded = isinstance(source, ShardedTokenStore) or (
        isinstance(source, (str, os.PathLike)) and (Path(source) / SHARDS).is_file()
    )
    if not task.reads_store and isinstance(source, (str, os.PathLike)):
        check_examples(source, task.name)
        m = pack_example_shards(
            source, tokenizer, out, config, output=output, engine=engine, shard_examples=shard_examples, glob=glob
        )
    elif task.reads_store and sharded:
        store = source if isinstance(source, ShardedTokenStore) else ShardedTokenStore(source)  # type: ignore[arg-type]  # a path here: a TokenStore was taken above
        m = pack_store_shards(store, tokenizer, out, config, output=output, engine=engine)
    else:
        check_output_dir(out, overwrite=output.overwrite, kind=PACKED_OUTPUT)
        pc, extra = pack_task(source, tokenizer, config)
        arrays = {}
        if output.schedule is not None:
            arrays[SCHEDULE], extra["schedule"] = packing_schedule(
                pc.packing.lengths, pc.packing.pack_offsets, pc.packing.sequence_index, output.schedule
            )
        m = write_packed(
            pc,
            out,
            options=output.write(),
            extra=extra,
            arrays=arrays,
            derived=output.derived(config.task),
            beside=None if (keep := packing.beside) is None else lambda root: keep(tokenizer, root),
        )
    for message in packing.warnings(m) if packing.warnings is not None else []:  # once, from the whole job's counts
        warnings.warn(message, stacklevel=2)
    return m
