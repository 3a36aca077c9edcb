"""A data collator for ``transformers.Trainer`` (and TRL's ``SFTTrainer``) over a seqpack packed dataset.

    ds = PackedDataset("sft/")                                        # clm or chat packs
    trainer = transformers.Trainer(model, args, train_dataset=ds, data_collator=PackedCollator())

``flatten=True`` (the default) gives the padding-free form of transformers' ``DataCollatorWithFlattening``:
every real token of the batch in one row, ``position_ids`` restarting at each sequence, labels
with -100 at each sequence's first token, and ``cu_seq_lens_q/k`` + ``max_length_q/k`` for the
flash kernels (other attention implementations ignore them). ``flatten=False`` keeps the packed
``(B, L)`` rows: with ``sdpa`` or ``eager`` transformers then builds a ``(B, 1, L, L)`` block-diagonal
mask instead of one ``(1, 1, N, N)`` over the whole batch (less memory for large batches).
Either way there is no ``attention_mask`` (transformers derives the sequences from ``position_ids``)
and ``use_cache=False`` (a cache turns that derivation off and attention would cross sequences).

The loss is the model's own: the mean over the batch's target tokens (``--reduction token`` in
``seqpack train``). For TRL with ``padding_free=True``, which refuses custom collators, use
`seqpack.data.trl.trl_examples` instead.

Rows read straight from the Parquet parts (``datasets.load_dataset("parquet", ...)``) lack the
columns the parts leave out (`seqpack.data.derived`): the collator makes ``segment_ids`` from
``position_ids`` and ``num_sequences``, and causal-LM labels from ``position_ids`` (pass the
dataset's ``position_offset`` if it is not 0), as seqpack's readers do.

    >>> import torch
    >>> row = {"input_ids": torch.tensor([5, 6, 7, 0]), "labels": torch.tensor([-100, 6, -100, -100]),
    ...        "segment_ids": torch.tensor([1, 1, 2, 0]), "position_ids": torch.tensor([0, 1, 0, 0])}
    >>> b = PackedCollator()([row])
    >>> b["input_ids"].tolist(), b["position_ids"].tolist(), b["labels"].tolist(), b["cu_seq_lens_q"].tolist()
    ([[5, 6, 7]], [[0, 1, 0]], [[-100, 6, -100]], [0, 2, 3])
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from seqpack.data.derived import lm_labels, segments
from seqpack.errors import UserError
from seqpack.nn.hf_padding_free import flat_inputs, flatten
from seqpack.nn.losses import IGNORE_INDEX
from seqpack.nn.masks import position_ids


@dataclass(frozen=True, kw_only=True)
class PackedCollator:
    """Packs (items of `seqpack.data.PackedDataset`) -> one padding-free training batch."""

    flatten: bool = True
    flash_kwargs: bool = True  # cu_seq_lens_q/k and max_length_q/k, read by flash_attention_2/3 and seqpack_varlen
    position_offset: int = 0  # the dataset's, for rows that lack derived columns

    def __call__(self, rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        if not rows:
            raise UserError("PackedCollator got an empty batch")
        batch = self._columns(rows)
        seg = batch["segment_ids"]
        labels = batch.get("labels", torch.where(seg > 0, batch["input_ids"], IGNORE_INDEX))
        labels = labels.long().masked_fill(seg == 0, IGNORE_INDEX)
        if self.flatten:
            out, _ = flat_inputs(batch)
            out["labels"] = flatten(labels, seg)
            if not self.flash_kwargs:
                for k in ("cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k"):
                    out.pop(k)
        else:
            pos = batch.get("position_ids")
            out = {
                "input_ids": batch["input_ids"].long(),
                "labels": labels,
                "position_ids": (position_ids(seg) if pos is None else pos).long(),
            }
        out["input_ids"] = out["input_ids"].long()
        out["position_ids"] = out["position_ids"].long()
        out["use_cache"] = False
        return out

    def _columns(self, rows: Sequence[Mapping[str, Any]]) -> dict[str, torch.Tensor]:
        """The batch's ``(B, L)`` columns; ``segment_ids`` (and labels) made when the rows lack them."""
        have = set(rows[0])
        derivable = {"position_ids", "num_sequences"} <= have
        missing = {"input_ids", "segment_ids"} - have - ({"segment_ids"} if derivable else set())
        if missing:
            raise UserError(
                f"rows lack {', '.join(sorted(missing))}: give items of seqpack.data.PackedDataset; under "
                "transformers' Trainer or TRL's SFTTrainer pass remove_unused_columns=False in its "
                "arguments, which otherwise drops the columns the model's forward does not name"
            )
        if "segment_ids" in have:
            return {
                k: torch.stack([torch.as_tensor(r[k]) for r in rows])
                for k in ("input_ids", "segment_ids", "position_ids", "labels")
                if k in have
            }
        cols: dict[str, np.ndarray] = {
            k: np.stack([np.asarray(r[k]) for r in rows])
            for k in ("input_ids", "position_ids", "num_sequences", "labels")
            if k in have
        }
        cols["segment_ids"] = segments(cols, np.int64, self.position_offset)  # (B, L)
        if "labels" not in cols:
            cols["labels"] = lm_labels(cols, np.int64, self.position_offset)  # (B, L)
        return {k: torch.as_tensor(v) for k, v in cols.items() if k != "num_sequences"}


__all__ = ["PackedCollator"]
