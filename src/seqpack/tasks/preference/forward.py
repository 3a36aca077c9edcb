"""One forward pass of a preference batch: each response's log-probability (or a reward model's
score at its last token), then the loss of `seqpack.nn.preference.PreferenceLoss`.

Works with seqpack's ``GPT`` / ``GPTReward`` and with transformers causal LMs / sequence
classifiers (Llama, GPT-2): those get the stored ``position_ids`` and either seqpack's attention
plan (``attn_implementation="seqpack_packed"``, `seqpack.nn.hf_attention`: per-pair work,
no ``T x T`` mask), a 4-D mask built from ``branch_ids`` (bool for ``sdpa``, additive for
``eager``), or, padding-free (``flash_attention_*``, ``seqpack_varlen``), the ``pairs`` layout's
branches as sequences.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from seqpack.errors import UserError
from seqpack.nn.branch_states import causal_states, hf_branch_states, is_transformers
from seqpack.nn.models.common import PackedOutput
from seqpack.nn.preference import (
    PreferenceLoss,
    ResponseLogps,
    bradley_terry,
    mean_over_pairs,
    response_ends,
    response_logps,
)


def policy_logps(model: Any, batch: Mapping[str, torch.Tensor], depth: int | None = None) -> ResponseLogps:
    """Each response's summed log-probability under ``model``.  # (B, D) fields

    The vocabulary projection runs only where a response token is predicted (N positions, not
    B x T): for seqpack's GPT, and for the transformers models of `seqpack.nn.hf_causal_lm.HEAD_AT_TARGETS`, whose
    base model and ``lm_head`` are called apart (other models: their full logits, then a slice)."""
    hidden, head = causal_states(model, batch)
    return response_logps(
        lambda r, c: head(hidden[r, c]), batch["labels"], batch["segment_ids"], batch["branch_ids"], depth=depth
    )


def reward_scores(
    model: Any, batch: Mapping[str, torch.Tensor], depth: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """A reward model's scalar score at each response's last token, ``(chosen, rejected)`` (B, D)."""
    seg, br, labels = batch["segment_ids"], batch["branch_ids"], batch["labels"]
    if is_transformers(model):
        hidden = hf_branch_states(model, batch, lambda **kw: model.base_model(**kw).last_hidden_state)
        score = model.score(hidden).squeeze(-1)  # (B, T)
    else:
        score = model(batch["input_ids"], seg, position_ids=batch["position_ids"], branch_ids=br)  # (B, T)
    ends_c, ends_r = response_ends(labels, seg, br, depth=depth)
    return score.gather(1, ends_c), score.gather(1, ends_r)


def _present(seg: torch.Tensor, depth: int) -> torch.Tensor:
    return torch.arange(1, depth + 1, device=seg.device)[None, :] <= seg.amax(dim=1, keepdim=True)


def preference_forward(model: Any, batch: Mapping[str, torch.Tensor], objective: PreferenceLoss | None) -> PackedOutput:
    """The loss (mean over the batch's pairs), per-pair losses and rewards in ``extra``."""
    obj = objective or PreferenceLoss()
    seg = batch["segment_ids"]
    depth = int(seg.max()) if seg.numel() else 0
    present = _present(seg, depth)
    if obj.reward_model:
        sc, sr = reward_scores(model, batch, depth)
        margin = batch.get("margin")  # (B, max_depth) like the reference columns: this batch's slots
        per = bradley_terry(sc, sr, None if margin is None else margin[:, :depth])
        extra = {"chosen_rewards": sc.detach(), "rejected_rewards": sr.detach()}
    else:
        lp = policy_logps(model, batch, depth)
        ref = None
        if "ref_chosen_logps" in batch:  # (B, max_depth): the slots past this batch's deepest row are empty
            ref = (batch["ref_chosen_logps"][:, :depth], batch["ref_rejected_logps"][:, :depth])
        per, cr, rr = obj(lp, ref)
        extra = {
            "chosen_rewards": cr,
            "rejected_rewards": rr,
            "chosen_logps": lp.chosen.detach(),
            "rejected_logps": lp.rejected.detach(),
        }
    return PackedOutput(loss=mean_over_pairs(per, present), per_sequence=per, present=present, extra=extra)


@dataclass(frozen=True)
class PairOutputs:
    """A preference batch's loss and its per-pair outputs, each pair named by its record's id.

    ``loss`` is the batch's loss as training takes it (differentiable); ``example_ids`` ``(N,)``
    the record of each of the batch's ``N`` pairs, row by row; ``values`` one ``(N,)`` array per
    output: ``loss`` (the pair's), ``chosen_rewards`` / ``rejected_rewards`` and, for the losses on
    log-probabilities, ``chosen_logps`` / ``rejected_logps``.
    """

    loss: torch.Tensor
    example_ids: np.ndarray
    values: dict[str, np.ndarray]

    def by_record(self) -> dict[int, dict[str, float]]:
        """``{record id: {output: value}}``.

        >>> PairOutputs(torch.tensor(0.5), np.array([7, 2]), {"loss": np.array([0.25, 0.75])}).by_record()
        {7: {'loss': 0.25}, 2: {'loss': 0.75}}
        """
        return {int(e): {k: float(v[i]) for k, v in self.values.items()} for i, e in enumerate(self.example_ids)}


def pair_outputs(model: Any, batch: Mapping[str, torch.Tensor], objective: PreferenceLoss | None = None) -> PairOutputs:
    """The loss and every pair's outputs (rewards, log-probabilities, loss) of ``model`` on a packed
    preference batch, keyed by the records' ids (the batch's ``example_ids`` column, ``(B, D)``),
    without a Trainer. ``objective``: the loss (default `PreferenceLoss`'s,
    sigmoid DPO, which needs the batch's ``ref_chosen_logps`` / ``ref_rejected_logps``).

        rows = PackedDataset("packed_prefs/")                  # every column, example_ids too
        out = pair_outputs(model, collate_packed([rows[0], rows[1]]), PreferenceLoss(kind="simpo"))
        out.by_record()                                        # {17: {"chosen_rewards": ..., ...}, ...}
    """
    if "example_ids" not in batch:
        raise UserError(
            "the batch has no example_ids column (which record each pair is); read every column of the "
            "packed rows (seqpack.data.PackedDataset, or PackedDPOTrainer's batches)"
        )
    out = preference_forward(model, batch, objective)
    assert out.present is not None and out.per_sequence is not None and out.loss is not None  # a pair forward sets them
    depth = out.present.shape[1]
    ids = batch["example_ids"][:, :depth]  # (B, depth): this batch's slots
    keep = out.present & (ids >= 0)
    per_pair = {"loss": out.per_sequence.detach(), **out.extra}
    values = {k: v[keep].detach().float().cpu().numpy() for k, v in per_pair.items()}
    return PairOutputs(loss=out.loss, example_ids=ids[keep].cpu().numpy().astype(np.int64), values=values)
