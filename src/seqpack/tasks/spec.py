"""What a task is: one frozen spec of parts, each part a small record of functions.

A task names itself, its options and what its rows hold (`Rows`), then declares the parts it has:

- `Packing` (`seqpack.tasks.spec_packing`, re-exported here): how its examples become `Sequences`
  for the pack job (in memory, shard by shard, as a stream), what ``--tokenizer`` opens, the files
  kept beside the rows, the pack summary;
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
from typing import TYPE_CHECKING, Any, Protocol

from seqpack.errors import UserError
from seqpack.tasks.spec_packing import Derived, Packing, PackSettings, PackTokenizer, Streaming

if TYPE_CHECKING:
    import torch
    from transformers import PretrainedConfig

    from seqpack.nn.models.common import PackedOutput


class Totals(Protocol):
    """Sums over an evaluation pass (`seqpack.train.step_loss.EvalTotals`): a task's metrics add to it."""

    def add(self, key: str, value: float, count: float) -> None: ...


class Forward(Protocol):
    """One forward pass on a training batch ``{column: (B, L)}``; ``objective``: `Training.objective`'s."""

    def __call__(
        self, model: torch.nn.Module, batch: Mapping[str, torch.Tensor], *, reduction: str, objective: Any = None
    ) -> PackedOutput: ...


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
