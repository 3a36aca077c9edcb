"""One forward pass of a preference batch: each response's log-probability (or a reward model's
score at its last token), then the loss of :class:`seqpack.nn.preference.PreferenceLoss`.

Works with seqpack's ``GPT`` / ``GPTReward`` and with transformers causal LMs / sequence
classifiers (Llama, GPT-2): those get the stored ``position_ids`` and either seqpack's attention
plan (``attn_implementation="seqpack_packed"``, :mod:`seqpack.nn.hf_attention`: per-pair work,
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

from seqpack.nn.attention import plan_attention
from seqpack.nn.hf_adapter import hf_attention_mask, model_compute_dtype
from seqpack.nn.hf_attention import PACKED_IMPL
from seqpack.nn.hf_causal_lm import HEAD_AT_TARGETS
from seqpack.nn.hf_padding_free import PADDING_FREE, flat_inputs, unflatten_tokens
from seqpack.nn.masks import check_segment_ids, shares_prefix, split_branches
from seqpack.nn.models.common import PackedOutput
from seqpack.nn.preference import (
    PreferenceLoss,
    ResponseLogps,
    bradley_terry,
    mean_over_pairs,
    response_ends,
    response_logps,
)


def _is_hf(model: Any) -> bool:
    return type(getattr(model, "_orig_mod", model)).__module__.startswith("transformers")


def _hf_states(model: Any, batch: Mapping[str, torch.Tensor], run: Any) -> torch.Tensor:
    """``run(**inputs)`` on the packed rows, its (B, T, ...) output."""
    seg, br = batch["segment_ids"], batch["branch_ids"]
    check_segment_ids(seg)
    impl = str(getattr(model.config, "_attn_implementation", None) or "eager")
    if impl == PACKED_IMPL:  # seqpack's backends inside the model: the plan, no mask
        plan = plan_attention(seg, causal=True, dtype=model_compute_dtype(model), validate=False, branch_ids=br)
        return run(input_ids=batch["input_ids"], position_ids=batch["position_ids"], seqpack_plan=plan, use_cache=False)  # type: ignore[no-any-return]
    if impl in PADDING_FREE:
        if shares_prefix(seg, br):
            raise ValueError(f"attn_implementation {impl} runs whole sequences and cannot share a prompt between two "
                             "responses; load the model with sdpa or eager, or pack with --layout pairs")
        flat_batch = {"input_ids": batch["input_ids"], "segment_ids": split_branches(seg, br),
                      "position_ids": batch["position_ids"]}
        inputs, _ = flat_inputs(flat_batch)
        return unflatten_tokens(run(**inputs, use_cache=False), flat_batch["segment_ids"])
    mask = hf_attention_mask(model, seg, causal=True, dtype=next(model.parameters()).dtype, branch_ids=br)
    return run(input_ids=batch["input_ids"], attention_mask=mask, position_ids=batch["position_ids"], use_cache=False)  # type: ignore[no-any-return]


def policy_logps(model: Any, batch: Mapping[str, torch.Tensor], depth: int | None = None) -> ResponseLogps:
    """Each response's summed log-probability under ``model``.  # (B, D) fields

    The vocabulary projection runs only where a response token is predicted (N positions, not
    B x T): for seqpack's GPT, and for the transformers models of :data:`seqpack.nn.hf_causal_lm.HEAD_AT_TARGETS`, whose
    base model and ``lm_head`` are called apart (other models: their full logits, then a slice)."""
    seg, br, labels = batch["segment_ids"], batch["branch_ids"], batch["labels"]
    if _is_hf(model):
        inner = getattr(model, "_orig_mod", model)
        head = inner.get_output_embeddings() if getattr(inner.config, "model_type", None) in HEAD_AT_TARGETS else None
        if head is not None:
            hidden = _hf_states(model, batch, lambda **kw: inner.base_model(**kw).last_hidden_state)  # (B, T, H)
            at = lambda r, c: head(hidden[r, c])  # noqa: E731  # (N, V)
        else:
            logits = _hf_states(model, batch, lambda **kw: model(**kw).logits)  # (B, T, V)
            at = lambda r, c: logits[r, c]  # noqa: E731
    else:
        h = model(batch["input_ids"], seg, position_ids=batch["position_ids"], branch_ids=br, logits=False).hidden
        at = lambda r, c: model.token_logits(h[r, c])  # noqa: E731  # only the N positions that predict a target
    return response_logps(at, labels, seg, br, depth=depth)


def reward_scores(model: Any, batch: Mapping[str, torch.Tensor], depth: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """A reward model's scalar score at each response's last token, ``(chosen, rejected)`` (B, D)."""
    seg, br, labels = batch["segment_ids"], batch["branch_ids"], batch["labels"]
    if _is_hf(model):
        hidden = _hf_states(model, batch, lambda **kw: model.base_model(**kw).last_hidden_state)
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
        extra = {"chosen_rewards": cr, "rejected_rewards": rr, "chosen_logps": lp.chosen.detach(),
                 "rejected_logps": lp.rejected.detach()}
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
    without a Trainer. ``objective``: the loss (default :class:`~seqpack.nn.preference.PreferenceLoss`'s,
    sigmoid DPO, which needs the batch's ``ref_chosen_logps`` / ``ref_rejected_logps``).

        rows = PackedDataset("packed_prefs/")                  # every column, example_ids too
        out = pair_outputs(model, collate_packed([rows[0], rows[1]]), PreferenceLoss(kind="simpo"))
        out.by_record()                                        # {17: {"chosen_rewards": ..., ...}, ...}
    """
    if "example_ids" not in batch:
        raise ValueError("the batch has no example_ids column (which record each pair is); read every column of the "
                         "packed rows (seqpack.data.PackedDataset, or PackedDPOTrainer's batches)")
    out = preference_forward(model, batch, objective)
    depth = out.present.shape[1]
    ids = batch["example_ids"][:, :depth]  # (B, depth): this batch's slots
    keep = out.present & (ids >= 0)
    per_pair = {"loss": out.per_sequence.detach(), **out.extra}
    values = {k: v[keep].detach().float().cpu().numpy() for k, v in per_pair.items()}
    return PairOutputs(loss=out.loss, example_ids=ids[keep].cpu().numpy().astype(np.int64), values=values)
