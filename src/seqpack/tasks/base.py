"""What several tasks share: opening their sources, counting slot labels, a manifest's label
count, splitting derived fields off sequences. A task itself is a spec of parts
(`seqpack.tasks.spec.Task`).

No torch at module level (tasks are imported by the torch-free data layer).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from seqpack.data.sequences import IGNORE_INDEX
from seqpack.errors import UserError

if TYPE_CHECKING:
    import torch
    from transformers import PretrainedConfig

    from seqpack.data.sequences import Sequences
    from seqpack.store import TokenStore
    from seqpack.tasks.spec import Totals
    from seqpack.tokenizer.types import AnyTokenizer

COMPONENTS = ("lm", "nsp", "cls")  # loss components, in the order of Training.loss_units


def open_store(source: Any, tokenizer: AnyTokenizer, task: str) -> TokenStore:
    """The token store ``source`` names (a `TokenStore` or its directory), checked against ``tokenizer``."""
    from seqpack.store import TokenStore

    if isinstance(source, TokenStore):
        store = source
    elif isinstance(source, (str, os.PathLike)) and Path(source).is_dir():
        store = TokenStore(source)
    else:
        raise UserError(f"task {task} reads a token store directory, got {source!r}; make one with seqpack tokenize")
    store.check_tokenizer(tokenizer.fingerprint())
    top = int(store.tokens.max()) if store.num_tokens else -1
    if top >= tokenizer.vocab_size:
        raise UserError(
            f"{store.path}: holds token id {top}, past the tokenizer's {tokenizer.vocab_size} ids "
            "(a damaged store); re-run seqpack tokenize"
        )
    return store


def check_examples(source: Any, task: str) -> None:
    """Refuse a token store given to a task that reads labelled examples (a folder of record files is fine)."""
    from seqpack.store.sharded import SHARDS
    from seqpack.store.store import META

    if isinstance(source, (str, os.PathLike)) and any((Path(source) / f).is_file() for f in (META, SHARDS)):
        raise UserError(
            f"{source} is a token store; task {task} reads labelled examples "
            "(.jsonl or .parquet files, or a folder of them)"
        )


def slot_units(labels: torch.Tensor) -> int:
    """Real slots of a per-slot label column ``(B, D)`` or ``(B, D, C)``."""
    present = labels != IGNORE_INDEX
    return int((present.all(dim=-1) if labels.ndim == 3 else present).sum())


def slot_loss_units(column: str) -> Callable[[Mapping[str, torch.Tensor], str], torch.Tensor]:
    """A `Training.loss_units` whose loss is the per-sequence (``cls``) component alone, counted
    in the real slots of label ``column``: ``[0, 0, slots]``, ``(3,)`` float64.

    >>> import torch
    >>> slot_loss_units("labels")({"labels": torch.tensor([[1, 0, -100]])}, "sequence").tolist()
    [0.0, 0.0, 2.0]
    """

    def loss_units(batch: Mapping[str, torch.Tensor], reduction: str) -> torch.Tensor:
        import torch

        labels = batch.get(column)
        return torch.tensor([0.0, 0.0, slot_units(labels) if labels is not None else 0.0], dtype=torch.float64)

    return loss_units


def auto_model(auto_class: str) -> Callable[[PretrainedConfig, str, Mapping[str, Any], str], torch.nn.Module]:
    """A `HFModels.build` that makes transformers' ``auto_class`` (``"AutoModelForCausalLM"``) of a config."""

    def build(config: PretrainedConfig, model_type: str, manifest: Mapping[str, Any], kind: str) -> torch.nn.Module:
        import transformers

        made: torch.nn.Module = getattr(transformers, auto_class).from_config(config)
        return made

    return build


def add_slot_metrics(
    totals: Totals, key: str, per: torch.Tensor | None, slots: torch.Tensor | None, slot_logits: torch.Tensor | None
) -> None:
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
