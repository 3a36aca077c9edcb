"""Preference objectives on packed pairs: each response's log-probability, and the losses.

A packed row holds pairs (slots ``d = segment - 1``), each with a chosen (branch 1) and a
rejected (branch 2) response; ``labels`` hold the response tokens (-100 on prompts).

Which output predicts a token: the previous token's, except for a response's first token in the
shared-prefix layout, whose predictor is the prompt's last token (the rejected response does not
follow the chosen one; it follows the prompt)::

    branch     0  0  0  1  1  2  2
    token      p0 p1 p2 c0 c1 r0 r1
    predictor  -  -  -  p2 c0 p2 r0       (predictor_index)

    >>> seg, br = torch.tensor([[1, 1, 1, 1, 1, 1, 1]]), torch.tensor([[0, 0, 0, 1, 1, 2, 2]])
    >>> predictor_index(seg, br).tolist()
    [[-1, 0, 1, 2, 3, 2, 5]]

Losses (per pair; the batch loss is their mean), with ``pc``/``pr`` the policy's summed
log-probabilities of the chosen/rejected response, ``rc``/``rr`` the reference's, ``n`` token counts:

``sigmoid``  DPO: ``-(1-ls) logsig(b D) - ls logsig(-b D)``, ``D = (pc - rc) - (pr - rr)``
``ipo``      IPO: ``(D' - 1/(2b))^2``, ``D'`` as ``D`` with each log-ratio divided by its ``n`` (TRL)
``simpo``    SimPO: ``-(1-ls) logsig(b (pc/nc - pr/nr) - g) - ls logsig(-...)``, no reference
``orpo``     ORPO: ``-pc/nc - b logsig(log odds(pc/nc) - log odds(pr/nr))``, no reference
``bt``       Bradley-Terry reward model: ``-logsig(s_c - s_r - margin)`` on scalar scores
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from seqpack.errors import UserError
from seqpack.nn.losses import IGNORE_INDEX

CHOSEN, REJECTED = 1, 2


def predictor_index(segment_ids: torch.Tensor, branch_ids: torch.Tensor) -> torch.Tensor:
    """Column whose output predicts each token (-1: none; see the module docstring).  # (B, T)"""
    B, T = segment_ids.shape
    t = torch.arange(T, device=segment_ids.device).expand(B, T)
    prev_ok = torch.zeros_like(segment_ids, dtype=torch.bool)
    prev_ok[:, 1:] = (segment_ids[:, 1:] == segment_ids[:, :-1]) & (
        (branch_ids[:, :-1] == 0) | (branch_ids[:, :-1] == branch_ids[:, 1:])
    )
    prompt = (branch_ids == 0) & (segment_ids > 0)
    upto = torch.where(prompt, t, torch.full_like(t, -1)).cummax(dim=1).values  # last prompt token at or before t
    before = torch.cat([torch.full_like(upto[:, :1], -1), upto[:, :-1]], dim=1)  # ... strictly before t
    return torch.where(prev_ok, t - 1, before).masked_fill(segment_ids == 0, -1)


@dataclass
class ResponseLogps:
    """Each pair's responses: summed log-probabilities and token counts.  # all (B, D)"""

    chosen: torch.Tensor
    rejected: torch.Tensor
    chosen_tokens: torch.Tensor
    rejected_tokens: torch.Tensor
    present: torch.Tensor  # bool: the slot holds a pair

    @property
    def chosen_mean(self) -> torch.Tensor:
        return self.chosen / self.chosen_tokens.clamp(min=1)

    @property
    def rejected_mean(self) -> torch.Tensor:
        return self.rejected / self.rejected_tokens.clamp(min=1)


def _slots(segment_ids: torch.Tensor, depth: int | None) -> int:
    return int(segment_ids.max()) if depth is None else depth


def response_logps(
    logits_at: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    labels: torch.Tensor,
    segment_ids: torch.Tensor,
    branch_ids: torch.Tensor,
    *,
    depth: int | None = None,
) -> ResponseLogps:
    """Per-response log-probabilities from packed rows.

    ``logits_at(rows, cols)`` returns the (N, V) logits of the outputs at those positions (a
    model's head on its hidden states, or a slice of full logits); log-softmax runs in fp32.
    """
    D = _slots(segment_ids, depth)
    rows, cols = (labels != IGNORE_INDEX).nonzero(as_tuple=True)
    pred = predictor_index(segment_ids, branch_ids)[rows, cols]
    assert bool((pred >= 0).all()), "a response token has no predictor: a pair without a prompt"
    logp = torch.log_softmax(logits_at(rows, pred).float(), dim=-1)
    token = logp.gather(1, labels[rows, cols].long()[:, None]).squeeze(1)  # (N,)
    slot = rows * D + segment_ids[rows, cols].long() - 1
    branch = branch_ids[rows, cols]
    B = labels.shape[0]

    def total(values: torch.Tensor, which: int) -> torch.Tensor:
        out = torch.zeros(B * D, dtype=values.dtype, device=labels.device)
        keep = branch == which
        return out.index_add(0, slot[keep], values[keep]).view(B, D)

    ones = torch.ones_like(token)
    present = torch.zeros(B * D, dtype=torch.bool, device=labels.device)
    present[slot] = True
    return ResponseLogps(
        total(token, CHOSEN), total(token, REJECTED), total(ones, CHOSEN), total(ones, REJECTED), present.view(B, D)
    )


def response_ends(
    labels: torch.Tensor, segment_ids: torch.Tensor, branch_ids: torch.Tensor, *, depth: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Column of each response's last token, ``(chosen, rejected)`` each (B, D) (0 in empty slots):
    where a reward model reads its score, as a sequence classifier reads its last token."""
    D = _slots(segment_ids, depth)
    rows, cols = (labels != IGNORE_INDEX).nonzero(as_tuple=True)
    slot = rows * D + segment_ids[rows, cols].long() - 1
    branch = branch_ids[rows, cols]
    out = []
    for which in (CHOSEN, REJECTED):
        keep = branch == which
        end = torch.zeros(labels.shape[0] * D, dtype=torch.long, device=labels.device)
        out.append(end.scatter_reduce(0, slot[keep], cols[keep], reduce="amax").view(-1, D))
    return out[0], out[1]


LOSSES = ("sigmoid", "ipo", "simpo", "orpo", "bt")
REFERENCE_LOSSES = ("sigmoid", "ipo")  # compare the policy with a frozen reference


@dataclass(frozen=True, kw_only=True)
class PreferenceLoss:
    """Which preference loss and its knobs (defaults: TRL's ``DPOConfig`` / ``CPOConfig``)."""

    kind: str = "sigmoid"
    beta: float = 0.1
    label_smoothing: float = 0.0
    gamma: float = 0.5  # SimPO's target reward margin (TRL's simpo_gamma)

    def __post_init__(self) -> None:
        if self.kind not in LOSSES:
            raise UserError(f"preference loss must be one of {'|'.join(LOSSES)}, got {self.kind!r}")
        if not (self.beta > 0 and math.isfinite(self.beta)):
            raise UserError(f"beta must be a finite number > 0, got {self.beta}")
        if not math.isfinite(self.gamma):
            raise UserError(f"gamma must be a finite number, got {self.gamma}")
        if not 0.0 <= self.label_smoothing < 0.5:
            raise UserError(f"label_smoothing must be in [0, 0.5), got {self.label_smoothing}")

    @property
    def needs_reference(self) -> bool:
        return self.kind in REFERENCE_LOSSES

    @property
    def reward_model(self) -> bool:
        """The loss trains a scalar score (a reward model), not the LM's log-probabilities."""
        return self.kind == "bt"

    def __call__(
        self,
        policy: ResponseLogps,
        reference: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(loss, chosen_rewards, rejected_rewards)``, each (B, D), for the log-prob losses."""
        b, ls = self.beta, self.label_smoothing
        if self.needs_reference:
            if reference is None:
                raise UserError(
                    f"the {self.kind} loss needs the reference model's log-probabilities "
                    "(ref_chosen_logps / ref_rejected_logps)"
                )
            rc, rr = (r.to(policy.chosen.dtype) for r in reference)
            chosen_ratio, rejected_ratio = policy.chosen - rc, policy.rejected - rr
            if self.kind == "sigmoid":
                d = b * (chosen_ratio - rejected_ratio)
                loss = -(1 - ls) * F.logsigmoid(d) - ls * F.logsigmoid(-d)
            else:  # ipo, on per-token log-ratios (TRL's normalisation)
                d = chosen_ratio / policy.chosen_tokens.clamp(min=1) - rejected_ratio / policy.rejected_tokens.clamp(
                    min=1
                )
                loss = (d - 1 / (2 * b)) ** 2
            return loss, b * chosen_ratio.detach(), b * rejected_ratio.detach()
        mc, mr = policy.chosen_mean, policy.rejected_mean
        if self.kind == "simpo":
            d = b * (mc - mr) - self.gamma
            loss = -(1 - ls) * F.logsigmoid(d) - ls * F.logsigmoid(-d)
        elif self.kind == "orpo":
            # an empty slot's mean log-prob is 0, where log(1 - p) is -inf: give it a finite stand-in
            mc, mr = (torch.where(policy.present, x, -1.0) for x in (mc, mr))
            log_odds = (mc - mr) - (torch.log1p(-torch.exp(mc)) - torch.log1p(-torch.exp(mr)))
            loss = -mc - b * F.logsigmoid(log_odds)
        else:
            raise UserError(f"the {self.kind} loss scores responses with a reward head; call bradley_terry")
        return loss, b * mc.detach(), b * mr.detach()


def bradley_terry(chosen: torch.Tensor, rejected: torch.Tensor, margin: torch.Tensor | None = None) -> torch.Tensor:
    """The reward-model loss of each pair, ``-logsig(s_c - s_r - margin)``.  # (B, D)"""
    d = chosen - rejected
    if margin is not None:
        d = d - margin.to(d.dtype)
    return -F.logsigmoid(d)


def mean_over_pairs(loss: torch.Tensor, present: torch.Tensor) -> torch.Tensor:
    """The mean over real pairs (0 when there are none, keeping the graph); an empty slot's value,
    whatever it is (even NaN), never reaches it."""
    return torch.where(present, loss, 0.0).sum() / present.sum().clamp(min=1)
