"""One call from a token store or labelled examples to a packed dataset on disk.

    cfg = PackConfig.for_task("clm", max_len=512)                # task options by name
    manifest = build_packed_dataset("store/", tokenizer, "packed/", cfg)

``clm`` and ``mlm`` read a token store (``seqpack tokenize``); ``classification``,
``multilabel`` and ``qa`` read labelled examples (``.jsonl``, ``.parquet`` or an HF dataset).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable
from pathlib import Path
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from seqpack.packing.histogram import check_max_len
from seqpack.packing.plan import ALGORITHMS, check_max_depth

if TYPE_CHECKING:
    from seqpack.data.pack import PackedColumns
    from seqpack.data.sequences import Sequences
    from seqpack.store import TokenStore
    from seqpack.tokenizer.tokenizer import Tokenizer

COMMON = ("task", "max_len", "algorithm", "max_depth", "seed", "position_offset")


@dataclass(frozen=True, kw_only=True)
class PackConfig:
    """The task, how to pack, and the task's own options (its options dataclass, see
    :mod:`seqpack.tasks`; ``None``: the task's defaults).

    >>> PackConfig.for_task("clm", max_len=512, overflow="drop").options
    CLMOptions(overflow='drop', eos_token='<|endoftext|>')
    """

    task: str
    max_len: int
    algorithm: str = "best"
    max_depth: int | None = None
    seed: int = 0
    position_offset: int = 0
    options: Any = None

    def __post_init__(self) -> None:
        from seqpack.tasks import get_task

        t = get_task(self.task)
        check_max_len(self.max_len)
        if self.algorithm not in ALGORITHMS:
            raise ValueError(f"algorithm must be one of {'|'.join(ALGORITHMS)}, got {self.algorithm!r}")
        check_max_depth(self.max_depth)
        if self.position_offset < 0:
            raise ValueError(f"position_offset must be >= 0, got {self.position_offset}")
        if self.options is None:
            object.__setattr__(self, "options", t.options())
        elif not isinstance(self.options, t.options_type):
            raise TypeError(f"task {self.task} takes {t.options_type.__name__} options, got {type(self.options).__name__}")

    @classmethod
    def for_task(cls, task: str, **kw: Any) -> PackConfig:
        """Packing fields and the task's options in one call (each option checked against the task)."""
        from seqpack.tasks import get_task

        common = {k: v for k, v in kw.items() if k in COMMON}
        options = get_task(task).options(**{k: v for k, v in kw.items() if k not in COMMON})
        return cls(task=task, options=options, **common)


def build_sequences(source: Any, tokenizer: Tokenizer, config: PackConfig) -> Sequences:
    """The task's sequences (not yet packed); see :class:`PackConfig`."""
    from seqpack.tasks import get_task

    return get_task(config.task).build_sequences(source, tokenizer, config)


def pack_task(source: Any, tokenizer: Tokenizer, config: PackConfig) -> tuple[PackedColumns, dict[str, Any]]:
    """Sequences packed into columns, and the manifest fields that describe where they came from."""
    from seqpack.data.pack import pack_sequences

    seqs = build_sequences(source, tokenizer, config)
    pc = pack_sequences(seqs, config.max_len, algorithm=config.algorithm, max_depth=config.max_depth,
                        seed=config.seed, position_offset=config.position_offset)
    extra = {
        "tokenizer_hash": tokenizer.fingerprint(),
        "num_examples": seqs.num_examples,
        "dropped": dict(sorted(seqs.dropped.items())),
        "position_fields": list(seqs.position_fields),
        "task_info": seqs.info,
        "vocab_size": int(seqs.info.get("vocab_size", tokenizer.vocab_size)),
        "config": {**asdict(config), "options_type": type(config.options).__name__},
    }
    return pc, extra


def build_packed_dataset(
    source: str | os.PathLike[str] | Iterable[Any] | TokenStore,
    tokenizer: Tokenizer,
    out: str | os.PathLike[str],
    config: PackConfig,
    *,
    overwrite: bool = False,
    export_bin: bool = False,
    compression: str = "zstd",
    shard_packs: int | None = None,
    engine: Any = None,
    shard_examples: int = 100_000,
) -> dict[str, Any]:
    """Build, pack and write; returns the manifest (also in ``out/manifest.json``).

    A sharded token store (``seqpack tokenize`` writes one) goes through
    :func:`seqpack.data.sharded.build_packed_sharded`, and an examples file (``.jsonl`` /
    ``.parquet``) through :func:`seqpack.data.sharded.build_packed_examples_sharded`
    (``shard_examples`` at a time): shard by shard, one global plan, on ``engine``
    (:func:`seqpack.engine.get_engine`; default: this process). Other sources (a plain store,
    an HF dataset, a list of records) are packed in memory.
    """
    from seqpack._atomic import check_output_dir
    from seqpack.data.io import write_packed
    from seqpack.store.sharded import SHARDS, ShardedTokenStore
    from seqpack.tasks import get_task

    sharded = isinstance(source, (str, os.PathLike)) and (Path(source) / SHARDS).is_file()
    task = get_task(config.task)
    options = {"engine": engine, "overwrite": overwrite, "export_bin": export_bin, "compression": compression,
               "shard_packs": shard_packs}
    if not task.reads_store and isinstance(source, (str, os.PathLike)):
        from seqpack.data.sharded import build_packed_examples_sharded

        task.check_examples(source)
        m = build_packed_examples_sharded(source, tokenizer, out, config, shard_examples=shard_examples, **options)
    elif task.reads_store and (sharded or isinstance(source, ShardedTokenStore)):
        source = source if isinstance(source, ShardedTokenStore) else ShardedTokenStore(source)
        from seqpack.data.sharded import build_packed_sharded

        m = build_packed_sharded(source, tokenizer, out, config, **options)
    else:
        check_output_dir(out, overwrite=overwrite)
        pc, extra = pack_task(source, tokenizer, config)
        m = write_packed(pc, out, overwrite=overwrite, export_bin=export_bin, compression=compression,
                         shard_packs=shard_packs, extra=extra)
    for message in task.pack_warnings(m):  # once, from the whole job's counts (not once per shard)
        warnings.warn(message, stacklevel=2)
    return m
