"""The jobs above the tasks: tokenize a corpus into a (sharded) token store, and pack a task's
sequences into a packed dataset, in memory or shard by shard with one global plan, on an engine
(this process or Ray), resumable stage by stage.

    cfg = PackConfig.for_task("clm", max_len=512)
    store = build_sharded_store(docs, tokenizer, "store/")
    manifest = build_packed_dataset(store.path, tokenizer, "packed/", cfg, engine=get_engine("local"))
    rows = StreamingPackedDataset(token_lists, max_len=2048, buffer_size=10_000)   # a stream, resumable

Nothing below this layer imports it: the tasks say how to build sequences, ``data/`` says how
packed rows are laid out and written, and this layer runs the job.
"""

from __future__ import annotations

from seqpack._lazy import keep, listing

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from types import ModuleType
    from typing import Any

    from seqpack.pipeline.config import OutputOptions, PackConfig
    from seqpack.pipeline.engine import ENGINES, Engine, LocalEngine, get_engine
    from seqpack.pipeline.in_memory import build_sequences, pack_task
    from seqpack.pipeline.mixture import Mixture
    from seqpack.pipeline.pack import build_packed_dataset
    from seqpack.pipeline.stream_dataset import StreamingPackedDataset, collate_stream
    from seqpack.pipeline.streaming import PackedStream, StreamConfig
    from seqpack.pipeline.tokenize import build_sharded_store

__all__ = [
    "ENGINES",
    "Engine",
    "LocalEngine",
    "Mixture",
    "OutputOptions",
    "PackConfig",
    "PackedStream",
    "StreamConfig",
    "StreamingPackedDataset",
    "build_packed_dataset",
    "build_sequences",
    "build_sharded_store",
    "collate_stream",
    "get_engine",
    "pack_task",
]


def __getattr__(name: str) -> Any:
    """The names load on first use (PEP 562): ``seqpack tokenize`` needs the engine and the store,
    not the tasks, the packed format or the planners behind `PackConfig`."""
    module: ModuleType
    if name in ("OutputOptions", "PackConfig"):
        from seqpack.pipeline import config as module
    elif name in ("ENGINES", "Engine", "LocalEngine", "get_engine"):
        from seqpack.pipeline import engine as module
    elif name in ("build_sequences", "pack_task"):
        from seqpack.pipeline import in_memory as module
    elif name == "build_packed_dataset":
        from seqpack.pipeline import pack as module
    elif name == "build_sharded_store":
        from seqpack.pipeline import tokenize as module
    elif name == "Mixture":
        from seqpack.pipeline import mixture as module
    elif name in ("PackedStream", "StreamConfig"):
        from seqpack.pipeline import streaming as module
    elif name in ("StreamingPackedDataset", "collate_stream"):  # torch, on first use
        from seqpack.pipeline import stream_dataset as module
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return keep(globals(), module, name)


def __dir__() -> list[str]:
    return listing(globals(), __all__)
