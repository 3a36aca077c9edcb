"""What a task is: one frozen object that owns everything that differs between tasks.

A small base (`TaskBase`: its name, options, what its rows hold, the sources it reads) and the
capabilities a task opts into:

- `PacksSequences`: its examples become `Sequences` that the pack job packs (its sequence
  builder, what ``--tokenizer`` opens, the fields a sharded job rebuilds, the files kept beside the
  rows, streams);
- `Trains`: the models that train it and how they are called, its batches when plain tensors are
  not them, its loss components and how they are counted, its evaluation metrics.

`Task` is the usual task: `PacksSequences` and `Trains` (every text task, and a task you add). Code
that needs a capability asks for it by the interface (`seqpack.tasks.sequence_task`,
`seqpack.tasks.trained_task`), never by a task's name: ``data/``, ``train/`` and the CLI ask the task;
none of them compares a task's name to a string.

No torch at module level (tasks are imported by the torch-free data layer).
"""

from __future__ import annotations

import abc
import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from seqpack.data.sequences import IGNORE_INDEX
from seqpack.errors import UserError

if TYPE_CHECKING:
    import torch

    from seqpack.data.sequences import Sequences
    from seqpack.nn.models.common import PackedOutput
    from seqpack.store import TokenStore
    from seqpack.tokenizer.types import AnyTokenizer

COMPONENTS = ("lm", "nsp", "cls")  # loss components, in the order of loss_units


@dataclass(frozen=True, kw_only=True)
class NoOptions:
    """A task without options of its own."""


@dataclass(frozen=True, kw_only=True)
class TaskBase:
    """What every task has: its name, options, what its rows hold and the sources it reads; a task
    adds capabilities (`PacksSequences`, `Trains`). Instances are registered in
    `seqpack.tasks`."""

    name: str
    summary: str
    reads: str  # "store" (a token store) | "examples" (.jsonl / .parquet / an HF dataset)
    models: tuple[str, ...] = ()  # seqpack model kinds that train it, the default first
    token_labels: bool = False  # ``labels`` is a per-token (P, L) column
    float_labels: bool = False  # ``labels`` becomes float32 (multi-hot)
    options_type: ClassVar[type] = NoOptions
    #: packed columns the Parquet parts leave out, ``(name, rule)``: every seqpack reader rebuilds
    #: them from the stored ones by the rule (`seqpack.data.derived`)
    derived_columns: ClassVar[tuple[tuple[str, str], ...]] = (("segment_ids", "segments"),)  # positions restart

    def options(self, **kw: Any) -> Any:
        """The task's options; an unknown one is a ``ValueError`` naming those it has."""
        names = {f.name for f in dataclasses.fields(self.options_type)}
        extra = sorted(set(kw) - names)
        if extra:
            flag = lambda n: "--" + n.replace("_", "-")  # noqa: E731
            have = ", ".join(flag(n) for n in sorted(names)) or "none"
            raise UserError(
                f"{', '.join(flag(n) for n in extra)} does not apply to task {self.name} (its options: {have})"
            )
        return self.options_type(**kw)

    def check_pack_config(self, config: Any) -> None:
        """Refuse, in one line, a setting of the pack config (``PackConfig``) that this task's rows
        cannot honour (default: every setting is honoured)."""

    @property
    def causal_lm(self) -> bool:
        """True when the task trains causal LMs (GPT; the model shifts the labels)."""
        return "gpt" in self.models

    def facts(self) -> dict[str, bool]:
        """What readers of the packed format must know of this task, written into the manifest
        (`seqpack.data.format.DatasetFacts`)."""
        return {"token_labels": self.token_labels, "float_labels": self.float_labels, "causal_lm": self.causal_lm}

    def check_manifest(self, manifest: Mapping[str, Any], where: str) -> None:
        """Refuse a packed dataset whose manifest names this task for rows another task wrote (an
        edited ``task``): the facts it records, its pack config's task and its derived columns' rules
        must be this task's."""

        def refuse(what: str) -> ValueError:
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
        if derived and dict(derived) != dict(self.derived_columns):
            raise refuse(f"its derived columns {dict(derived)} are not this task's {dict(self.derived_columns)}")

    @property
    def reads_store(self) -> bool:
        """True when the task's sequences come from a token store (so a sharded store packs shard by shard)."""
        return self.reads == "store"

    def pack_summary(self, manifest: Mapping[str, Any]) -> str:
        """A line for the pack command's summary about this task's own counts (default: none)."""
        return ""

    def pack_warnings(self, manifest: Mapping[str, Any]) -> list[str]:
        """What a finished packing job should warn about (from the whole job's counts; default: nothing)."""
        return []

    def open_store(self, source: Any, tokenizer: AnyTokenizer) -> TokenStore:
        from seqpack.store import TokenStore

        if isinstance(source, TokenStore):
            store = source
        elif isinstance(source, (str, os.PathLike)) and Path(source).is_dir():
            store = TokenStore(source)
        else:
            raise UserError(
                f"task {self.name} reads a token store directory, got {source!r}; make one with seqpack tokenize"
            )
        store.check_tokenizer(tokenizer.fingerprint())
        top = int(store.tokens.max()) if store.num_tokens else -1
        if top >= tokenizer.vocab_size:
            raise UserError(
                f"{store.path}: holds token id {top}, past the tokenizer's {tokenizer.vocab_size} ids "
                "(a damaged store); re-run seqpack tokenize"
            )
        return store

    def check_examples(self, source: Any) -> None:
        """Refuse a token store given to a task that reads labelled examples (a folder of record files is fine)."""
        from seqpack.store.sharded import SHARDS
        from seqpack.store.store import META

        if isinstance(source, (str, os.PathLike)) and any((Path(source) / f).is_file() for f in (META, SHARDS)):
            raise UserError(
                f"{source} is a token store; task {self.name} reads labelled examples "
                "(.jsonl or .parquet files, or a folder of them)"
            )

    def model_kind(self, asked: str | None) -> str:
        kind = asked or (self.models[0] if self.models else "bert")
        if kind not in self.models:
            hint = f"use --model {self.models[0]}" if self.models else "seqpack train does not train this task yet"
            raise UserError(f"--model {kind} does not train a {self.name} dataset; {hint}")
        return kind


class PacksSequences(TaskBase, abc.ABC):
    """Capability: the task's examples become `Sequences` that the pack job packs (in memory, shard
    by shard, or as a stream)."""

    #: token fields that a sharded job does not save between its stages: `rebuild_field`
    #: makes them again from the saved ones, after the gather (less written, read and cached)
    derived_fields: ClassVar[tuple[str, ...]] = ()
    #: a sharded job's route stage makes this task's token fields again from the store shard instead
    #: of saving them between the stages (a task whose sequences are a cheap copy of the store's tokens)
    tokens_from_store: ClassVar[bool] = False

    def store_lengths(self, lengths: Any, max_len: int, options: Any) -> Any:
        """The lengths of the sequences ``seqpack pack`` makes of a token store's documents
        (``lengths``, ``(n,)``) at ``max_len``: what ``seqpack plan``/``stats`` plan for a store.
        Default: not offered (the task's sequences are not a function of the documents' lengths)."""
        raise UserError(
            f"task {self.name}'s sequences are not the store's document lengths; pack the store with "
            f"seqpack pack --task {self.name}, then plan the packed dataset (--histogram PACKED_DIR)"
        )

    @abc.abstractmethod
    def build_sequences(self, source: Any, tokenizer: AnyTokenizer, config: Any) -> Sequences:
        """The task's sequences (not yet packed) from ``source``; ``config`` is a ``PackConfig``."""

    def stored_sequences(self, source: Any, tokenizer: AnyTokenizer, config: Any) -> tuple[Sequences, dict[str, Any]]:
        """What a sharded job saves of `build_sequences`'s sequences: them without their
        `derived_fields`, and the dtype each of those has (`rebuild_field` makes them after
        the gather). A task whose derived fields cost something to make overrides this to not make them."""
        return split_derived(self.build_sequences(source, tokenizer, config), self.derived_fields)

    def rebuild_field(self, name: str, fields: Mapping[str, Any], offsets: Any, dtype: Any) -> Any:
        """Token field ``name`` (one of `derived_fields`) of the sequences ``offsets``, from
        their other token ``fields``, as ``dtype``: what `build_sequences` gave."""
        raise KeyError(f"task {self.name} rebuilds no token field {name!r} (its derived_fields: {self.derived_fields})")

    def shard_context(self, source: Any, config: Any) -> dict[str, Any]:
        """What every shard must agree on, from one pass over all of ``source`` (default: nothing)."""
        return {}

    def shard_identity(self, records: list[dict[str, Any]], config: Any, context: dict[str, Any]) -> Any:
        """What a shard's sequences depend on beyond its records and the config (files the records
        name: image-text's images), for the key a resumed job checks its finished work against;
        ``None`` (the default): nothing more."""
        return None

    def build_shard(
        self, records: list[dict[str, Any]], tokenizer: AnyTokenizer, config: Any, context: dict[str, Any]
    ) -> Sequences:
        """One shard's sequences from a batch of example records (default: `build_sequences`)."""
        return self.build_sequences(records, tokenizer, config)

    def open_tokenizer(self, path: str | os.PathLike[str]) -> AnyTokenizer:
        """What ``--tokenizer PATH`` names for this task, opened (default: a seqpack tokenizer or a
        transformers one, `seqpack.tokenizer.open_tokenizer`; image-text: the model's processor)."""
        from seqpack.tokenizer import open_tokenizer

        return open_tokenizer(path)

    def write_beside(self, tokenizer: AnyTokenizer, root: Path) -> None:
        """Write into the packed dataset's directory ``root`` (before its manifest) the files its
        readers need beside the rows (default: none; image-text rows keep their processor)."""

    def stream_context(self, config: Any) -> dict[str, Any]:
        """What a stream's chunks must agree on, known before any example is read (default: the
        same as `shard_context` of no examples)."""
        return self.shard_context([], config)

    def stream_sequences(
        self, records: list[Any], tokenizer: AnyTokenizer | None, config: Any, context: dict[str, Any]
    ) -> Sequences:
        """The sequences of one chunk of a stream's examples, ``example_ids`` local to the chunk
        (default: `build_shard`: the offline job's sequences of those examples)."""
        if tokenizer is None:
            raise UserError(f"task {self.name} tokenizes its examples: pass tokenizer=...")
        return self.build_shard(records, tokenizer, config, context)


class Trains(TaskBase, abc.ABC):
    """Capability: the models that train the task and how they are called, its loss components
    (`COMPONENTS`) and how they are counted, its evaluation metrics."""

    #: its transformers models run through `seqpack.nn.hf_adapter` (False: `hf_forward` runs them)
    hf_adapted: ClassVar[bool] = True
    #: a step may leave part of the model unused (a batch with no image: the vision encoder), which
    #: ``DistributedDataParallel`` must be told (``find_unused_parameters``)
    partial_graph: ClassVar[bool] = False

    @abc.abstractmethod
    def seqpack_model(
        self, kind: str, size: str, vocab: int, manifest: Mapping[str, Any], extra: dict[str, Any]
    ) -> tuple[Any, Any]:
        """``(model, model_config)`` of seqpack's own models."""

    def batch_maker(self, path: str | os.PathLike[str], manifest: Mapping[str, Any]) -> Any:
        """How training makes a batch of the packs' columns when plain tensors are not it: ``None``
        (the default: the columns as ``(B, L)`` tensors), or a function ``{column: (B, ...)} ->
        {name: tensor}`` (image-text: the rows side by side with their images' pixels). It reads the
        packs' ``example_ids`` and is offered packed rows only (a ``--padded`` run is refused)."""
        return None

    def hf_config(self, d: dict[str, Any], manifest: Mapping[str, Any]) -> None:
        """Task-specific fields of a transformers config dict (in place)."""

    def hf_model(self, config: Any, model_type: str, manifest: Mapping[str, Any], *, kind: str = "") -> Any:
        """A transformers model of ``config`` for this task (``kind``: the ``--model`` asked, e.g. reward)."""
        raise UserError(
            f"task {self.name} trains seqpack's own models (--model {'|'.join(self.models) or '...'}), not --hf-model"
        )

    @abc.abstractmethod
    def forward(
        self, model: Any, batch: Mapping[str, torch.Tensor], *, reduction: str, objective: Any = None
    ) -> PackedOutput:
        """One forward pass of seqpack's model on a training batch (``objective``: `objective`'s)."""

    def hf_batch(self, model: Any, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The batch a transformers model takes through ``packed_forward`` (columns dropped)."""
        return batch

    def hf_forward(
        self, model: Any, batch: Mapping[str, torch.Tensor], *, reduction: str, objective: Any = None
    ) -> PackedOutput:
        """One forward pass of a transformers model (default: `hf_batch`, then ``packed_forward``)."""
        from seqpack.nn.hf_adapter import packed_forward

        b = self.hf_batch(model, {k: v for k, v in batch.items() if k != "num_sequences"})
        return packed_forward(model, b, reduction=reduction)

    def objective(self, options: Any, kind: str) -> Any:
        """The training objective passed to `forward`, from the run's options and model kind
        (default: none; the preference task's loss and beta)."""
        return None

    @abc.abstractmethod
    def loss_units(self, batch: Mapping[str, torch.Tensor], reduction: str) -> torch.Tensor:
        """Units behind each component's mean, ``(3,)`` float64 in `COMPONENTS` order."""

    def component_means(self, out: PackedOutput) -> list[torch.Tensor | None]:
        """The model's mean loss per component (None where the model has none)."""
        return [None, None, out.loss]

    @abc.abstractmethod
    def update_eval(self, totals: Any, out: PackedOutput, batch: Mapping[str, torch.Tensor]) -> None:
        """Add one evaluation batch to ``totals`` (`seqpack.train.step_loss.EvalTotals`)."""


class Task(PacksSequences, Trains):
    """The usual task: its sequences packed by the pack job, trained by seqpack's loop (every text
    task; subclass it to add one)."""


def slot_units(labels: torch.Tensor) -> int:
    """Real slots of a per-slot label column ``(B, D)`` or ``(B, D, C)``."""
    present = labels != IGNORE_INDEX
    return int((present.all(dim=-1) if labels.ndim == 3 else present).sum())


def add_slot_metrics(totals: Any, key: str, per: Any, slots: Any, slot_logits: Any) -> None:
    """``{key}_loss`` over real slots and, single-label, ``{key}_accuracy``."""
    if slots is None or per is None:
        return
    present = (slots != IGNORE_INDEX).all(dim=-1) if slots.ndim == 3 else slots != IGNORE_INDEX
    totals.add(f"{key}_loss", float(per[present].sum()), float(present.sum()))
    if slots.ndim == 2 and slot_logits is not None:
        hits = slot_logits.argmax(-1) == slots
        totals.add(f"{key}_accuracy", float(hits[present].sum()), float(present.sum()))


def num_labels(manifest: Mapping[str, Any]) -> int:
    info = manifest.get("task_info", {})
    cfg = manifest.get("config", {})
    n = (
        info.get("num_labels")
        or len(info.get("label_names") or ())
        or cfg.get("options", {}).get("num_labels")
        or cfg.get("num_labels")
    )
    if not n:
        raise UserError("the dataset's manifest records no num_labels; re-pack it with --num-labels N")
    return int(n)


def split_derived(seqs: Sequences, names: tuple[str, ...]) -> tuple[Sequences, dict[str, Any]]:
    """``seqs`` without the token fields ``names``, and the dtype of each of those it had.

    >>> import numpy as np
    >>> from seqpack.data.sequences import from_lists
    >>> s = from_lists([[1, 2]])
    >>> s = dataclasses.replace(s, token_fields={**s.token_fields, "labels": np.array([-100, 2], np.int16)})
    >>> kept, dtypes = split_derived(s, ("labels",))
    >>> list(kept.token_fields), dtypes
    (['input_ids'], {'labels': dtype('int16')})
    """
    dtypes = {k: v.dtype for k, v in seqs.token_fields.items() if k in names}
    kept = {k: v for k, v in seqs.token_fields.items() if k not in dtypes}
    return dataclasses.replace(seqs, token_fields=kept), dtypes
