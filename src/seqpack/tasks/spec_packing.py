"""The packing part of a task's spec (`seqpack.tasks.spec`): how its examples become the
`Sequences` the pack job packs, in memory, shard by shard and as a stream.

    >>> from seqpack.tasks import get_task
    >>> p = get_task("clm").packs()
    >>> p.reads, p.derived_fields, p.stream is not None
    ('store', ('labels',), True)

No torch at module level (tasks are imported by the torch-free data layer).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

from seqpack.errors import UserError

if TYPE_CHECKING:
    import numpy as np

    from seqpack.data.sequences import Sequences
    from seqpack.tasks.vision.processor import ProcessorTokenizer
    from seqpack.tokenizer.types import AnyTokenizer

#: what the pack job takes as a tokenizer: a seqpack or transformers tokenizer, or the processor of
#: an image-text model (what ``--tokenizer`` opens for ``--task vision``)
PackTokenizer: TypeAlias = "AnyTokenizer | ProcessorTokenizer"


class PackSettings(Protocol):
    """What a task reads of the pack job's settings (`seqpack.pipeline.PackConfig`)."""

    @property
    def task(self) -> str: ...
    @property
    def max_len(self) -> int: ...
    @property
    def seed(self) -> int: ...
    @property
    def position_offset(self) -> int: ...
    @property
    def context_parallel(self) -> int: ...
    @property
    def options(self) -> Any: ...  # the task's own options dataclass


Records = list[dict[str, Any]]
#: the tokenizer a task's builders take: what its `Packing.open_tokenizer` opens (an `AnyTokenizer`;
#: image-text: a `ProcessorTokenizer`), so typed by each task, not here
Tok = Any
Build = Callable[[Any, Tok, PackSettings], "Sequences"]
BuildShard = Callable[[Records, Tok, PackSettings, dict[str, Any]], "Sequences"]
BuildStream = Callable[[list[Any], Tok, PackSettings, dict[str, Any]], "Sequences"]


@dataclass(frozen=True, kw_only=True)
class Derived:
    """Token fields a sharded job does not save between its stages: ``rebuild(name, fields, offsets,
    dtype)`` makes field ``name`` again from the saved ``fields`` after the gather."""

    fields: tuple[str, ...]
    rebuild: Callable[[str, Mapping[str, np.ndarray], np.ndarray, Any], np.ndarray]


@dataclass(frozen=True, kw_only=True)
class Streaming:
    """How a stream's chunks of examples become sequences (`seqpack.pipeline.streaming`).

    Attributes:
        context: what every chunk must agree on, known before any example is read (default:
            `Packing.context` of no examples).
        build: one chunk's sequences, ``example_ids`` local to the chunk (default: the packing's
            shard builder, with a tokenizer required).
    """

    context: Callable[[PackSettings], dict[str, Any]] | None = None
    build: BuildStream | None = None


def _open_tokenizer(path: str | os.PathLike[str]) -> PackTokenizer:
    from seqpack.tokenizer import open_tokenizer

    return open_tokenizer(path)


@dataclass(frozen=True, kw_only=True)
class Packing:
    """How a task's examples become the `Sequences` the pack job packs.

    Attributes:
        reads: ``"store"`` (a token store; a sharded store packs shard by shard) or ``"examples"``
            (``.jsonl`` / ``.parquet`` files, a folder of them, an HF dataset, records in memory).
        build: ``build(source, tokenizer, config)``: the sequences of the whole source.
        shard: one shard's sequences from a batch of records and the `context` (default: `build`).
        context: what every shard must agree on, from one pass over all of the source (a label set).
        identity: what a shard's sequences depend on beyond its records (files the records name),
            for the key a resumed job checks its finished work against.
        stored: what a sharded job saves of the sequences: them without the `derived` fields and
            those fields' dtypes (default: `build`, then the derived fields split off).
        derived: token fields made again after the gather instead of saved.
        tokens_from_store: a sharded job's route stage makes the token fields again from the store
            shard (sequences that are a cheap copy of the store's tokens).
        store_lengths: ``store_lengths(lengths, max_len, options)``: the lengths of the sequences
            made of a token store's documents (what ``seqpack plan`` plans for a store); ``None``:
            the sequences are not a function of the documents' lengths.
        stream: how a stream builds its sequences; ``None``: the task is not streamed, for the
            reason `unstreamed` gives.
        open_tokenizer: what ``--tokenizer PATH`` names for this task, opened.
        beside: writes into the packed dataset's directory (before its manifest) the files its
            readers need beside the rows.
        check_config: refuses, in one line, a pack setting the rows cannot honour.
        summary: a line of the pack command's summary about the task's own counts.
        warnings: what a finished pack job warns about, from the whole job's counts.
    """

    reads: str
    build: Build
    shard: BuildShard | None = None
    context: Callable[[Any, PackSettings], dict[str, Any]] | None = None
    identity: Callable[[Records, PackSettings, dict[str, Any]], Any] | None = None
    stored: Callable[[Any, Tok, PackSettings], tuple[Sequences, dict[str, Any]]] | None = None
    derived: Derived | None = None
    tokens_from_store: bool = False
    store_lengths: Callable[[np.ndarray, int, Any], np.ndarray] | None = None
    stream: Streaming | None = field(default_factory=Streaming)
    unstreamed: str = ""
    open_tokenizer: Callable[[str | os.PathLike[str]], PackTokenizer] = _open_tokenizer
    beside: Callable[[Tok, Path], None] | None = None
    check_config: Callable[[PackSettings], None] | None = None
    summary: Callable[[Mapping[str, Any]], str] | None = None
    warnings: Callable[[Mapping[str, Any]], list[str]] | None = None

    def __post_init__(self) -> None:
        if self.reads not in ("store", "examples"):
            raise ValueError(f"Packing.reads is 'store' or 'examples', got {self.reads!r}")

    @property
    def derived_fields(self) -> tuple[str, ...]:
        """The token fields `derived` makes again (none without it)."""
        return self.derived.fields if self.derived is not None else ()

    def shard_context(self, source: Any, config: PackSettings) -> dict[str, Any]:
        """`context` of ``source`` (default: nothing to agree on)."""
        return self.context(source, config) if self.context is not None else {}

    def build_shard(
        self, records: Records, tokenizer: PackTokenizer, config: PackSettings, context: dict[str, Any]
    ) -> Sequences:
        """One shard's sequences (`shard`, or `build` of the records)."""
        if self.shard is not None:
            return self.shard(records, tokenizer, config, context)
        return self.build(records, tokenizer, config)

    def stored_sequences(
        self, source: Any, tokenizer: PackTokenizer, config: PackSettings
    ) -> tuple[Sequences, dict[str, Any]]:
        """`stored`, or `build` with the `derived` fields split off."""
        if self.stored is not None:
            return self.stored(source, tokenizer, config)
        from seqpack.tasks.base import split_derived

        return split_derived(self.build(source, tokenizer, config), self.derived_fields)

    def streaming(self, task: str) -> Streaming:
        """`stream`, or a one-line refusal when the task is not streamed."""
        if self.stream is None:
            raise UserError(f"task {task} is not streamed: {self.unstreamed}")
        return self.stream

    def stream_context(self, config: PackSettings) -> dict[str, Any]:
        """What a stream's chunks agree on (`Streaming.context`, or `shard_context` of no examples)."""
        s = self.streaming(config.task)
        return s.context(config) if s.context is not None else self.shard_context([], config)

    def stream_sequences(
        self, records: list[Any], tokenizer: PackTokenizer | None, config: PackSettings, context: dict[str, Any]
    ) -> Sequences:
        """One chunk of a stream's sequences (`Streaming.build`, or `build_shard` with a tokenizer)."""
        s = self.streaming(config.task)
        if s.build is not None:
            return s.build(records, tokenizer, config, context)
        if tokenizer is None:
            raise UserError(f"task {config.task} tokenizes its examples: pass tokenizer=...")
        return self.build_shard(records, tokenizer, config, context)


__all__ = ["Derived", "PackSettings", "PackTokenizer", "Packing", "Streaming"]
