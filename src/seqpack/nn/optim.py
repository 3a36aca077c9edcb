"""LAMB and the paper's hyper-parameter helpers for packed training (§3.4).

Packing raises the number of sequences per step by the packing factor ``p`` (on average).
Two ways to keep convergence comparable (paper §4.2):

* keep the sequences per step: divide gradient accumulation (or rows) by ``p``
  (`packed_accumulation`);
* keep the rows and adjust LAMB's decays, ``beta ** p`` (`adjust_betas`): for ``p = 2``
  that is exactly the moments after applying the same gradient twice.

The learning rate is best left alone (`packed_learning_rate` with ``rule="none"``): the
per-sequence mean loss already corrects for the larger batch, and the paper measured worse
results when scaling it; ``"linear"`` / ``"sqrt"`` are there for experiments.

    >>> [round(b, 6) for b in adjust_betas((0.9, 0.999), 2.0)]
    [0.81, 0.998001]
    >>> packed_accumulation(16, 2.0)
    8
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import torch

from seqpack.errors import UserError

LR_RULES = ("none", "linear", "sqrt")


def _check_factor(packing_factor: float) -> float:
    p = float(packing_factor)
    if not math.isfinite(p) or p < 1.0:
        raise UserError(f"packing_factor must be a finite number >= 1 (sequences per pack), got {packing_factor}")
    return p


def adjust_betas(betas: tuple[float, float], packing_factor: float) -> tuple[float, float]:
    """``(beta1 ** p, beta2 ** p)``.

    Args:
        betas: Adam's `(beta1, beta2)`, each in `[0, 1)`.
        packing_factor: sequences per row `p`, >= 1.

    Returns:
        The betas for packed steps.

    Raises:
        UserError: a beta outside `[0, 1)` or a packing factor below 1.
    """
    p = _check_factor(packing_factor)
    b1, b2 = betas
    for name, b in (("beta1", b1), ("beta2", b2)):
        if not 0.0 <= b < 1.0:
            raise UserError(f"{name} must be in [0, 1), got {b}")
    return (b1**p, b2**p)


def packed_learning_rate(lr: float, packing_factor: float, *, rule: str = "none") -> float:
    """``lr`` unchanged (the paper's advice), ``* p`` (linear) or ``* sqrt(p)``.

    Args:
        lr: the learning rate of the padded run.
        packing_factor: sequences per row `p`, >= 1.
        rule: `none`, `linear` or `sqrt` (`LR_RULES`).

    Returns:
        The learning rate for packed steps.

    Raises:
        UserError: an unknown rule or a packing factor below 1.
    """
    p = _check_factor(packing_factor)
    if rule not in LR_RULES:
        raise UserError(f"rule must be one of {'|'.join(LR_RULES)}, got {rule!r}")
    return lr * {"none": 1.0, "linear": p, "sqrt": math.sqrt(p)}[rule]


def packed_accumulation(accumulation: int, packing_factor: float) -> int:
    """Accumulation steps that keep the sequences per optimiser step on average (>= 1).

    Args:
        accumulation: the padded run's accumulation steps, >= 1.
        packing_factor: sequences per row `p`, >= 1.

    Returns:
        `round(accumulation / p)`, at least 1.

    Raises:
        UserError: an accumulation below 1 or a packing factor below 1.
    """
    p = _check_factor(packing_factor)
    if accumulation < 1:
        raise UserError(f"accumulation must be >= 1, got {accumulation}")
    return max(1, round(accumulation / p))


class Lamb(torch.optim.Optimizer):
    """LAMB (You et al., 2020): Adam moments, then a per-tensor trust ratio
    ``||w|| / ||update||`` scales each layer's step.

    ``update = m_hat / (sqrt(v_hat) + eps) + weight_decay * w``;
    ``w -= lr * trust * update``, trust = 1 where either norm is 0, capped at ``max_trust``.
    """

    def __init__(
        self,
        params: Iterable[torch.Tensor] | Iterable[dict],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-6,
        weight_decay: float = 0.01,
        *,
        bias_correction: bool = True,
        max_trust: float = 10.0,
    ) -> None:
        if lr <= 0:
            raise UserError(f"lr must be > 0, got {lr}")
        if eps <= 0:
            raise UserError(f"eps must be > 0, got {eps}")
        if weight_decay < 0:
            raise UserError(f"weight_decay must be >= 0, got {weight_decay}")
        for i, b in enumerate(betas):
            if not 0.0 <= b < 1.0:
                raise UserError(f"betas[{i}] must be in [0, 1), got {b}")
        defaults = {
            "lr": lr,
            "betas": betas,
            "eps": eps,
            "weight_decay": weight_decay,
            "bias_correction": bias_correction,
            "max_trust": max_trust,
        }
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]  # torch's stub overloads step on the closure
        """One update of every parameter with a gradient.

        Args:
            closure: re-evaluates the model and returns the loss (`None`: none).

        Returns:
            The closure's loss, or `None`.
        """
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            b1, b2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise UserError("Lamb does not take sparse gradients")
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["m"] = torch.zeros_like(p)
                    state["v"] = torch.zeros_like(p)
                state["step"] += 1
                m, v, t = state["m"], state["v"], state["step"]
                m.mul_(b1).add_(p.grad, alpha=1 - b1)
                v.mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
                m_hat, v_hat = (m / (1 - b1**t), v / (1 - b2**t)) if group["bias_correction"] else (m, v)
                update = m_hat / (v_hat.sqrt() + group["eps"])
                if group["weight_decay"]:
                    update.add_(p, alpha=group["weight_decay"])
                w_norm, u_norm = p.norm(), update.norm()
                trust = torch.where(
                    (w_norm > 0) & (u_norm > 0),
                    (w_norm / u_norm).clamp(max=group["max_trust"]),
                    torch.ones_like(w_norm),
                )
                p.add_(update * trust, alpha=-group["lr"])
        return loss
