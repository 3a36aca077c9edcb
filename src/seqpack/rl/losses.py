"""TRL's GRPO-family losses on per-token values in TRL's padded ``(B, T)`` completion layout, for
loops outside TRL (``PackedGRPOTrainer`` keeps TRL's own loss code).

With ``r = exp(logp - old_logp)`` (per token, or with ``importance_sampling_level="sequence"`` the
exponent of its masked mean per sequence), ``A`` the advantages and ``e_lo``, ``e_hi`` the clip range:

``grpo`` ``bnpo`` ``dr_grpo`` ``dapo`` ``luspo``  ``-min(r A, clip(r, 1 - e_lo, 1 + e_hi) A)``
                                                   (``r`` first capped at ``delta`` when given)
``cispo``                                          ``-min(r, e_hi).detach() A logp``
``sapo``                                           ``-sigmoid(tau (r - 1)) 4 / tau A``, ``tau`` by the sign of A

plus ``beta`` times the KL estimate ``exp(ref - logp) - (ref - logp) - 1`` (times ``r`` with
``use_bias_correction_kl``), then reduced as TRL does: ``grpo``/``sapo`` the mean over sequences of
each one's token mean; ``bnpo`` the token mean; ``dr_grpo`` the sum over ``B x max_completion_length``;
``dapo``/``cispo`` the sum over ``num_items_in_batch`` (the generation batch's tokens over the
processes, per accumulation window); ``luspo`` the mean of per-sequence sums; each divided by the
gradient accumulation steps as TRL divides it in training. ``vespo`` is refused (its gamma weights
are TRL's own; ``PackedGRPOTrainer`` runs it).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from seqpack.errors import UserError

LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "luspo")


@dataclass(frozen=True, kw_only=True)
class GRPOLoss:
    """The options of `grpo_loss`, named and defaulted as in ``trl.GRPOConfig`` (TRL 1.16).

    Attributes:
        loss_type: one of `LOSS_TYPES` (`grpo`, `bnpo`, `dr_grpo`, `dapo`, `cispo`, `sapo`, `luspo`), as TRL names them.
        beta: the KL penalty's weight (0: no reference model).
        epsilon: the lower clip of the importance ratio.
        epsilon_high: its upper clip (`None`: `epsilon`).
        delta: a cap on the ratio before it is clipped (`None`: none).
        importance_sampling_level: `token` or `sequence`.
        max_completion_length: the normaliser of `dr_grpo`.
        sapo_temperature_pos: SAPO's temperature for positive advantages.
        sapo_temperature_neg: SAPO's temperature for negative advantages.
        use_bias_correction_kl: weight the KL term by the importance ratio.
    """

    loss_type: str = "dapo"
    beta: float = 0.0
    epsilon: float = 0.2
    epsilon_high: float | None = None
    delta: float | None = None
    importance_sampling_level: str = "token"
    max_completion_length: int = 512
    sapo_temperature_pos: float = 1.0
    sapo_temperature_neg: float = 1.05
    use_bias_correction_kl: bool = True

    def __post_init__(self) -> None:
        if self.loss_type not in LOSS_TYPES:
            hint = "; vespo runs through PackedGRPOTrainer (TRL's own loss)" if self.loss_type == "vespo" else ""
            raise UserError(f"loss_type must be one of {'|'.join(LOSS_TYPES)}, got {self.loss_type!r}{hint}")
        if self.importance_sampling_level not in ("token", "sequence"):
            raise UserError(f"importance_sampling_level must be token|sequence, got {self.importance_sampling_level!r}")
        if self.beta < 0 or self.epsilon < 0 or self.max_completion_length < 1:
            raise UserError("beta and epsilon must be >= 0 and max_completion_length >= 1")


def grpo_loss(
    logps: torch.Tensor,
    mask: torch.Tensor,
    advantages: torch.Tensor,
    options: GRPOLoss = GRPOLoss(),
    *,
    old_logps: torch.Tensor | None = None,
    ref_logps: torch.Tensor | None = None,
    num_items_in_batch: float | None = None,
    accumulation: int = 1,
    num_processes: int = 1,
    steps_per_generation: int = 1,
) -> torch.Tensor:
    """The loss of one micro-batch, as ``trl.GRPOTrainer`` computes it in training (see the module).

    ``logps``, ``mask``, ``old_logps``, ``ref_logps``: ``(B, T)`` (``old_logps`` None: on-policy,
    ``logps`` detached); ``advantages``: ``(B,)`` or ``(B, T)``; ``num_items_in_batch``: for ``dapo``
    and ``cispo``, the completion tokens of the whole generation batch (TRL's input of that name).

    Args:
        logps: the completion tokens' log-probabilities `(B, T)`, with gradients.
        mask: which of them count `(B, T)`.
        advantages: the advantages `(B,)` or `(B, T)`.
        options: the loss's options.
        old_logps: the log-probabilities at generation `(B, T)` (`None`: on-policy).
        ref_logps: the reference model's `(B, T)`, with `options.beta` > 0.
        num_items_in_batch: the completion tokens of the whole generation batch (`dapo`, `cispo`).
        accumulation: micro-batches per optimizer step.
        num_processes: data-parallel ranks.
        steps_per_generation: optimizer steps per generation batch.

    Returns:
        The loss, a scalar tensor.
    """
    o = options
    _check_shapes(logps, mask, advantages, old_logps, ref_logps)
    m = mask.to(logps.dtype)
    adv = advantages[:, None] if advantages.dim() == 1 else advantages
    old = logps.detach() if old_logps is None else old_logps
    log_ratio = logps - old
    if o.importance_sampling_level == "sequence":
        log_ratio = ((log_ratio * m).sum(-1) / m.sum(-1).clamp(min=1.0))[:, None]
    ratio = torch.exp(log_ratio)
    hi = o.epsilon if o.epsilon_high is None else o.epsilon_high
    if o.loss_type == "cispo":
        per_token = -torch.clamp(ratio, max=hi).detach() * adv * logps
    elif o.loss_type == "sapo":
        tau = torch.where(adv > 0, o.sapo_temperature_pos, o.sapo_temperature_neg)
        per_token = -torch.sigmoid(tau * (ratio - 1)) * 4 / tau * adv
    else:
        clipped = torch.clamp(ratio, 1 - o.epsilon, 1 + hi)
        capped = ratio if o.delta is None else torch.clamp(ratio, max=o.delta)
        per_token = -torch.min(capped * adv, clipped * adv)
    if o.beta != 0.0:
        if ref_logps is None:
            raise UserError("beta != 0 needs the reference model's per-token log-probabilities (ref_logps)")
        d = ref_logps - logps
        kl = torch.exp(d) - d - 1
        per_token = per_token + o.beta * (kl * ratio if o.use_bias_correction_kl else kl)
    masked = per_token * m
    if o.loss_type in ("grpo", "sapo"):
        return (masked.sum(-1) / m.sum(-1).clamp(min=1.0)).mean() / accumulation
    if o.loss_type == "bnpo":
        return masked.sum() / m.sum().clamp(min=1.0) / accumulation
    if o.loss_type == "dr_grpo":
        return masked.sum() / (per_token.size(0) * o.max_completion_length) / accumulation
    if o.loss_type == "luspo":
        return masked.sum(-1).mean() / accumulation
    if num_items_in_batch is None:
        raise UserError(
            f"loss_type {o.loss_type} normalises by num_items_in_batch (the generation batch's completion tokens)"
        )
    normalizer = max(float(num_items_in_batch), 1.0) / num_processes * accumulation / steps_per_generation
    return masked.sum() / normalizer


def _check_shapes(
    logps: torch.Tensor,
    mask: torch.Tensor,
    advantages: torch.Tensor,
    old: torch.Tensor | None,
    ref: torch.Tensor | None,
) -> None:
    """Side data that does not match the log-probabilities' ``(B, T)``: one line naming it."""
    if logps.dim() != 2:
        raise UserError(
            f"logps must be (B, T) (TRL's padded completions; seqpack.rl.to_padded), got {tuple(logps.shape)}"
        )
    shape = tuple(logps.shape)
    for name, t in (("mask", mask), ("old_logps", old), ("ref_logps", ref)):
        if t is not None and tuple(t.shape) != shape:
            raise UserError(f"{name} has shape {tuple(t.shape)}, logps {shape}; give one value per completion token")
    if tuple(advantages.shape) not in ((shape[0],), shape):
        raise UserError(
            f"advantages has shape {tuple(advantages.shape)}; give ({shape[0]},), one per completion, "
            f"or {shape}, one per token"
        )


__all__ = ["LOSS_TYPES", "GRPOLoss", "grpo_loss"]
