"""What every attention backend shares: the plan's common fields, the backend record, the q/k/v check.

A backend is two functions and an availability rule::

    plan = backend.plan(segment_ids, causal=..., dtype=...)   # once per batch, (B, T) -> its own plan type
    out = backend.attend(q, k, v, plan, scale)               # every layer, (B, H, T, d) -> (B, H, T, d)

Each backend's plan is a subclass of :class:`AttentionPlan` holding only that backend's fields.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch


@dataclass(frozen=True, kw_only=True)
class AttentionPlan:
    """Fields every plan has, derived once from ``segment_ids`` (B, T)."""

    backend: str
    causal: bool
    batch: int
    length: int


@dataclass(frozen=True, kw_only=True)
class Backend:
    """One entry of the backend registry.

    ``unavailable(segment_ids, dtype)`` returns ``None`` when the backend can run on those
    tensors, else the reason (the ``ValueError`` message a user sees).
    """

    name: str
    summary: str
    plan: Callable[..., AttentionPlan]  # (segment_ids, *, causal, dtype) -> plan
    attend: Callable[[torch.Tensor, torch.Tensor, torch.Tensor, AttentionPlan, float], torch.Tensor]
    unavailable: Callable[[torch.Tensor, torch.dtype], str | None] = lambda seg, dtype: None


def common(backend: str, segment_ids: torch.Tensor, causal: bool) -> dict[str, object]:
    """The :class:`AttentionPlan` fields of a plan for ``segment_ids`` (B, T)."""
    B, T = segment_ids.shape
    return {"backend": backend, "causal": causal, "batch": B, "length": T}


def half_precision(dtype: torch.dtype) -> bool:
    return dtype in (torch.float16, torch.bfloat16)


def check_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, plan: AttentionPlan) -> None:
    for name, x in (("q", q), ("k", k), ("v", v)):
        if x.ndim != 4:
            raise ValueError(f"{name} must be (B, H, T, d), got shape {tuple(x.shape)}")
    if k.shape != v.shape or q.shape[:2] != k.shape[:2] or q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)} disagree; expected (B, H, T, d)")
    if (q.shape[0], q.shape[2]) != (plan.batch, plan.length) or k.shape[2] != plan.length:
        raise ValueError(
            f"q has (B, T) = ({q.shape[0]}, {q.shape[2]}) but the attention plan was built for "
            f"segment_ids of shape ({plan.batch}, {plan.length})"
        )


def tokens(x: torch.Tensor) -> torch.Tensor:
    """``(B, H, T, d) -> (B*T, H, d)``; a view when q/k/v are slices of one (B, T, 3, H, d) projection."""
    B, H, T, d = x.shape
    return x.transpose(1, 2).reshape(B * T, H, d)


def untokens(flat: torch.Tensor, B: int, T: int) -> torch.Tensor:
    """``(B*T, H, d) -> (B, H, T, d)``."""
    return flat.view(B, T, *flat.shape[1:]).transpose(1, 2)
