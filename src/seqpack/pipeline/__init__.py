"""The jobs above the tasks: tokenize a corpus into a (sharded) token store, and pack a task's
sequences into a packed dataset, in memory or shard by shard with one global plan, on an engine
(this process or Ray), resumable stage by stage.

    cfg = PackConfig.for_task("clm", max_len=512)
    store = build_sharded_store(docs, tokenizer, "store/")
    manifest = build_packed_dataset(store.path, tokenizer, "packed/", cfg, engine=get_engine("local"))

Nothing below this layer imports it: the tasks say how to build sequences, ``data/`` says how
packed rows are laid out and written, and this layer runs the job.
"""

from __future__ import annotations

from seqpack.pipeline.config import OutputOptions, PackConfig
from seqpack.pipeline.engine import ENGINES, Engine, LocalEngine, get_engine
from seqpack.pipeline.in_memory import build_sequences, pack_task
from seqpack.pipeline.pack import build_packed_dataset
from seqpack.pipeline.tokenize import build_sharded_store

__all__ = [
    "ENGINES",
    "Engine",
    "LocalEngine",
    "OutputOptions",
    "PackConfig",
    "build_packed_dataset",
    "build_sequences",
    "build_sharded_store",
    "get_engine",
    "pack_task",
]
