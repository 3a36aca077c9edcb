"""What a task is: one frozen spec of parts, each part a small record of functions.

A task names itself, its options and what its rows hold (`Rows`), then declares the parts it has:

- `Packing`: how its examples become `Sequences` for the pack job (in memory, shard by shard, as a
  stream), what ``--tokenizer`` opens, the files kept beside the rows, the pack summary;
- `Training`: its loss components and how they are counted, its evaluation metrics, its batches
  when plain tensors are not them, its objective;
- `OwnModels`: seqpack's own models that train it (built by kind, called on a batch);
- `HFModels`: the transformers models that train it (their config fields, build, forward).

A part a task lacks is ``None``: the pack job, the loop and ``seqpack train`` ask for the part
(`Task.packs`, `Task.trains`, `Task.own_models`, `Task.hf_models`) and refuse in one line where it is
absent, so no task writes a method only to refuse. Functions a part leaves out have a default that
works (a shard is built like the whole source; a stream like a shard).

    >>> from seqpack.tasks import get_task
    >>> t = get_task("vision")
    >>> t.packing is not None, t.training is not None, t.models, t.hf is not None
    (True, True, None, True)

No torch at module level (tasks are imported by the torch-free data layer).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

from seqpack.errors import UserError

if TYPE_CHECKING:
    import numpy as np
    import torch
    from transformers import PretrainedConfig

    from seqpack.data.sequences import Sequences
    from seqpack.nn.models.common import PackedOutput
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


class Totals(Protocol):
    """Sums over an evaluation pass (`seqpack.train.step_loss.EvalTotals`): a task's metrics add to it."""

    def add(self, key: str, value: float, count: float) -> None: ...


class Forward(Protocol):
    """One forward pass on a training batch ``{column: (B, L)}``; ``objective``: `Training.objective`'s."""

    def __call__(
        self, model: torch.nn.Module, batch: Mapping[str, torch.Tensor], *, reduction: str, objective: Any = None
    ) -> PackedOutput: ...


Records = list[dict[str, Any]]
#: the tokenizer a task's builders take: what its `Packing.open_tokenizer` opens (an `AnyTokenizer`;
#: image-text: a `ProcessorTokenizer`), so typed by each task, not here
Tok = Any
Build = Callable[[Any, Tok, PackSettings], "Sequences"]
BuildShard = Callable[[Records, Tok, PackSettings, dict[str, Any]], "Sequences"]
BuildStream = Callable[[list[Any], Tok, PackSettings, dict[str, Any]], "Sequences"]


@dataclass(frozen=True, kw_only=True)
class NoOptions:
    """A task without options of its own."""


#: the default derived columns: positions restart at each sequence (`seqpack.data.derived`)
SEGMENTS: tuple[tuple[str, str], ...] = (("segment_ids", "segments"),)


@dataclass(frozen=True, kw_only=True)
class Rows:
    """What a task's packed rows hold, written into the manifest (`seqpack.data.format.DatasetFacts`).

    Attributes:
        token_labels: ``labels`` is a per-token ``(P, L)`` column.
        float_labels: ``labels`` becomes float32 (multi-hot).
        causal_lm: a causal LM trains on the rows (the model shifts the labels).
        derived_columns: packed columns the Parquet parts leave out, ``(name, rule)``: every seqpack
            reader rebuilds them from the stored ones by the rule.
    """

    token_labels: bool = False
    float_labels: bool = False
    causal_lm: bool = False
    derived_columns: tuple[tuple[str, str], ...] = SEGMENTS

    def facts(self) -> dict[str, bool]:
        """What readers of the packed format must know of the rows."""
        return {"token_labels": self.token_labels, "float_labels": self.float_labels, "causal_lm": self.causal_lm}


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


@dataclass(frozen=True, kw_only=True)
class Training:
    """How a task's batches are counted, scored and evaluated in training.

    Attributes:
        loss_units: ``loss_units(batch, reduction)``: units behind each component's mean, ``(3,)``
            float64 in `seqpack.tasks.COMPONENTS` order.
        component_means: ``component_means(out)``: the model's mean loss per component (None where
            the model has none).
        update_eval: ``update_eval(totals, out, batch)``: adds one evaluation batch to ``totals``
            (`seqpack.train.step_loss.EvalTotals`).
        objective: ``objective(options, kind)``: the training objective passed to the forward pass
            (the preference task's loss and beta); ``None``: none.
        batch_maker: ``batch_maker(path, manifest)``: a function ``{column: (B, ...)} -> {name:
            tensor}`` when plain tensors are not a batch (image-text: the rows with their images'
            pixels); ``None``: the columns as ``(B, L)`` tensors.
        partial_graph: a step may leave part of the model unused (a batch with no image), which
            ``DistributedDataParallel`` must be told (``find_unused_parameters``).
    """

    loss_units: Callable[[Mapping[str, torch.Tensor], str], torch.Tensor]
    component_means: Callable[[PackedOutput], list[torch.Tensor | None]]
    update_eval: Callable[[Totals, PackedOutput, Mapping[str, torch.Tensor]], None]
    objective: Callable[[Any, str], Any] | None = None
    batch_maker: Callable[[str | os.PathLike[str], Mapping[str, Any]], Any] | None = None
    partial_graph: bool = False


@dataclass(frozen=True, kw_only=True)
class OwnModels:
    """seqpack's own models that train a task.

    Attributes:
        kinds: the ``--model`` kinds, the default first (``("gpt", "reward")``).
        build: ``build(kind, size, vocab, manifest, extra)``: ``(model, model_config)``.
        forward: one forward pass of the model on a training batch.
    """

    kinds: tuple[str, ...]
    build: Callable[[str, str, int, Mapping[str, Any], dict[str, Any]], tuple[Any, Any]]
    forward: Forward


def _packed_forward(
    model: torch.nn.Module, batch: Mapping[str, torch.Tensor], *, reduction: str, objective: Any = None
) -> PackedOutput:
    from seqpack.nn.hf_adapter import packed_forward

    return packed_forward(model, dict(batch), reduction=reduction)


@dataclass(frozen=True, kw_only=True)
class HFModels:
    """The transformers models that train a task (``seqpack train --hf-model``).

    Attributes:
        build: ``build(config, model_type, manifest, kind)``: a model of the transformers ``config``
            (``kind``: the ``--model`` asked, e.g. reward).
        config: ``config(d, manifest)``: the task's fields of a transformers config dict, in place.
        ready: a model made ready for the task's forward once built or loaded (image-text: its text
            model's attention packed); ``None``: as it is.
        batch: ``batch(model, batch)``: the batch the model takes (columns dropped); ``None``: as it is.
        forward: the task's own forward pass; ``None``: `seqpack.nn.hf_adapter.packed_forward`.
        adapted: the model runs through `seqpack.nn.hf_adapter` (its attention packed there);
            False: `forward` runs the model, attention included.
        lora_task_type: the peft task type (LoRA: which head peft keeps trainable), or None.
        what: what ``--hf-model`` must name, for messages.
    """

    build: Callable[[PretrainedConfig, str, Mapping[str, Any], str], torch.nn.Module]
    config: Callable[[dict[str, Any], Mapping[str, Any]], None] | None = None
    ready: Callable[[torch.nn.Module], torch.nn.Module] | None = None
    batch: Callable[[torch.nn.Module, dict[str, torch.Tensor]], dict[str, torch.Tensor]] | None = None
    forward: Forward | None = None
    adapted: bool = True
    lora_task_type: str | None = None
    what: str = "a transformers model config"

    def run(
        self, model: torch.nn.Module, batch: Mapping[str, torch.Tensor], *, reduction: str, objective: Any = None
    ) -> PackedOutput:
        """One forward pass: `forward`, or `batch` then ``packed_forward``."""
        if self.forward is not None:
            return self.forward(model, batch, reduction=reduction, objective=objective)
        b = {k: v for k, v in batch.items() if k != "num_sequences"}
        if self.batch is not None:
            b = self.batch(model, b)
        return _packed_forward(model, b, reduction=reduction)


@dataclass(frozen=True, kw_only=True)
class Task:
    """A task: its name, options and rows, and the parts it has (``None``: absent).

    Attributes:
        name: the registry's name (``seqpack pack --task NAME``).
        summary: one line for ``--help`` and the docs.
        options_type: its options dataclass (``--FIELD`` flags derive from its fields).
        rows: what its packed rows hold.
        packing: how the pack job makes its sequences.
        training: its losses and metrics in training.
        models: seqpack's own models that train it.
        hf: the transformers models that train it.
    """

    name: str
    summary: str
    options_type: type = NoOptions
    rows: Rows = field(default_factory=Rows)
    packing: Packing | None = None
    training: Training | None = None
    models: OwnModels | None = None
    hf: HFModels | None = None

    def options(self, **kw: Any) -> Any:
        """The task's options; an unknown one is a `UserError` naming those it has."""
        names = {f.name for f in dataclasses.fields(self.options_type)}
        extra = sorted(set(kw) - names)
        if extra:
            have = ", ".join(_flag(n) for n in sorted(names)) or "none"
            raise UserError(
                f"{', '.join(_flag(n) for n in extra)} does not apply to task {self.name} (its options: {have})"
            )
        return self.options_type(**kw)

    # ---- the parts, asked for -------------------------------------------------------------------
    def packs(self) -> Packing:
        """Its `Packing`; refused in one line where the task has none."""
        if self.packing is None:
            raise UserError(f"task {self.name} has no sequences of its own; the pack job cannot pack it")
        return self.packing

    def trains(self) -> Training:
        """Its `Training`; refused in one line where the task has none."""
        if self.training is None:
            raise UserError(f"task {self.name} is not trained by seqpack train")
        return self.training

    def own_models(self) -> OwnModels:
        """Its `OwnModels`; refused in one line where only transformers models train it."""
        if self.models is None:
            what = self.hf.what if self.hf is not None else "a transformers model config"
            raise UserError(f"task {self.name} trains no seqpack model: pass --hf-model CONFIG ({what})")
        return self.models

    def hf_models(self) -> HFModels:
        """Its `HFModels`; refused in one line where only seqpack's own models train it."""
        if self.hf is None:
            kinds = "|".join(self.models.kinds) if self.models is not None else "..."
            raise UserError(f"task {self.name} trains seqpack's own models (--model {kinds}), not --hf-model")
        return self.hf

    def model_kind(self, asked: str | None, *, hf: bool = False) -> str:
        """The ``--model`` kind a run trains: ``asked``, else the default of `models` (``"hf"``
        for a task only transformers models train, with ``hf``)."""
        if self.models is None:
            if asked is not None or not hf:
                self.own_models()
            return "hf"
        kind = asked or self.models.kinds[0]
        if kind not in self.models.kinds:
            raise UserError(f"--model {kind} does not train a {self.name} dataset; use --model {self.models.kinds[0]}")
        return kind

    # ---- its rows -------------------------------------------------------------------------------
    @property
    def reads_store(self) -> bool:
        """True when the task's sequences come from a token store."""
        return self.packing is not None and self.packing.reads == "store"

    @property
    def causal_lm(self) -> bool:
        """True when a causal LM trains on the rows (the model shifts the labels)."""
        return self.rows.causal_lm

    def facts(self) -> dict[str, bool]:
        """What readers of the packed format must know of this task, written into the manifest."""
        return self.rows.facts()

    def check_manifest(self, manifest: Mapping[str, Any], where: str) -> None:
        """Refuse a packed dataset whose manifest names this task for rows another task wrote (an
        edited ``task``): the facts it records, its pack config's task and its derived columns' rules
        must be this task's."""

        def refuse(what: str) -> UserError:
            return UserError(
                f"{where}: the manifest says task {self.name}, but {what} (the manifest was edited); "
                "re-run seqpack pack with --task " + self.name
            )

        for key, value in self.facts().items():
            if key in manifest and bool(manifest[key]) != value:
                raise refuse(
                    f"its rows record {key}={str(bool(manifest[key])).lower()}, which task {self.name} never writes"
                )
        config = manifest.get("config")
        if isinstance(config, Mapping) and config.get("task") not in (None, self.name):
            raise refuse(f"it was packed with --task {config['task']}")
        derived = manifest.get("derived_columns")
        own = dict(self.rows.derived_columns)
        if derived and dict(derived) != own:
            raise refuse(f"its derived columns {dict(derived)} are not this task's {own}")


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


__all__ = [
    "Derived",
    "Forward",
    "HFModels",
    "NoOptions",
    "OwnModels",
    "PackSettings",
    "PackTokenizer",
    "Packing",
    "Rows",
    "SEGMENTS",
    "Streaming",
    "Task",
    "Totals",
    "Training",
]
