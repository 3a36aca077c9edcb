"""What every attention backend shares: the plan's common fields, the backend record, the q/k/v check.

A backend is two functions and an availability rule::

    plan = backend.plan(segment_ids, causal=..., dtype=...)   # once per batch, (B, T) -> its own plan type
    out = backend.attend(q, k, v, plan, scale, layer)        # every layer, (B, H, T, d) -> (B, H, T, d)

Each backend's plan is a subclass of `AttentionPlan` holding only that backend's fields.
``layer`` (a `LayerAttention`) says what one layer computes beyond plain softmax attention inside
its document: a sliding window, a chunk, logit soft-capping, attention sinks. A backend declares
the ones it computes (`Backend.features`); `check_layer` refuses the others in one line, so no
backend ever drops one silently.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypedDict

import torch

from seqpack.errors import UserError

#: the arguments of a layer's attention a backend may compute (`LayerAttention`'s fields)
FEATURES: tuple[str, ...] = ("window", "chunk", "softcap", "sinks")


@dataclass(frozen=True, kw_only=True)
class LayerAttention:
    """What one attention layer computes beyond ``softmax(q k^T * scale) v`` over its document.

    Positions are the document's own (``position_ids``), so a packed row attends exactly as each
    document alone does:

    - ``window``: a query at position ``p`` sees keys at positions ``> p - window`` (transformers'
      ``sliding_window``: the query and the ``window - 1`` tokens before it);
    - ``chunk``: a query sees keys of its own chunk, ``p // chunk`` (Llama 4's chunked attention);
    - ``softcap``: scores become ``softcap * tanh(scores / softcap)`` before the mask (Gemma 2);
    - ``sinks``: one logit per head ``(H,)`` added to the softmax's denominator, attending to no
      value (gpt-oss's ``s_aux``).

        >>> sorted(LayerAttention(window=4, softcap=30.0).features())
        ['softcap', 'window']
    """

    window: int | None = None
    chunk: int | None = None
    softcap: float | None = None
    sinks: torch.Tensor | None = None

    def __post_init__(self) -> None:
        for name in ("window", "chunk"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise UserError(f"attention {name} must be a positive int, got {value!r}")
        if self.softcap is not None and not self.softcap > 0:
            raise UserError(f"attention softcap must be > 0, got {self.softcap!r}")

    def features(self) -> frozenset[str]:
        """The names of the fields set.

        Returns:
            The set fields' names.
        """
        return frozenset(f for f in FEATURES if getattr(self, f) is not None)


PLAIN = LayerAttention()


@dataclass(frozen=True, kw_only=True)
class AttentionPlan:
    """Fields every plan has, derived once from ``segment_ids`` (B, T); ``positions`` (B, T): each
    token's position in its document, kept when a layer needs them (a window or a chunk)."""

    backend: str
    causal: bool
    batch: int
    length: int
    positions: torch.Tensor | None = None


@dataclass(frozen=True, kw_only=True)
class Backend:
    """One entry of the backend registry.

    ``unavailable(segment_ids, dtype)`` returns ``None`` when the backend can run on those
    tensors, else the reason (the `UserError` message a user sees). ``plan`` is ``None`` for a
    backend whose plans are made elsewhere (context parallelism: from a row's shard across ranks).
    """

    name: str
    summary: str
    attend: Callable[[torch.Tensor, torch.Tensor, torch.Tensor, AttentionPlan, float, LayerAttention], torch.Tensor]
    plan: Callable[..., AttentionPlan] | None = None  # (segment_ids, *, causal, dtype) -> plan
    unavailable: Callable[[torch.Tensor, torch.dtype], str | None] = lambda seg, dtype: None
    #: the `LayerAttention` fields this backend computes (`FEATURES`)
    features: frozenset[str] = frozenset()


def check_layer(backend: Backend, layer: LayerAttention, plan: AttentionPlan) -> None:
    """Refuse, in one line naming the argument, a layer this backend would compute wrongly."""
    missing = sorted(layer.features() - backend.features)
    if missing:
        raise UserError(
            f"attention backend {backend.name} cannot compute this layer's {' and '.join(missing)}; make "
            "the plan with plan_attention(..., needs=...) (auto picks a backend that can: backends_for)"
        )
    if (layer.window is not None or layer.chunk is not None) and plan.positions is None:
        raise UserError(
            "this layer has a sliding window or a chunk, but the attention plan holds no positions; "
            "make it with plan_attention(..., needs=..., position_ids=...)"
        )


def band(
    positions: torch.Tensor, layer: LayerAttention, *, positions_k: torch.Tensor | None = None
) -> torch.Tensor | None:
    """Which (query, key) pairs a layer's window and chunk allow, from document positions
    ``(B, Tq)`` (keys: ``positions_k`` (B, Tk), the queries' own by default); ``None`` when the
    layer has neither.  # (B, 1, Tq, Tk) bool

        >>> band(torch.tensor([[0, 1, 2, 3]]), LayerAttention(window=2))[0, 0].int().tolist()
        [[1, 0, 0, 0], [1, 1, 0, 0], [0, 1, 1, 0], [0, 0, 1, 1]]
    """
    if layer.window is None and layer.chunk is None:
        return None
    pq = positions[:, None, :, None]  # (B, 1, Tq, 1)
    pk = (positions if positions_k is None else positions_k)[:, None, None, :]  # (B, 1, 1, Tk)
    keep = pk <= pq  # a window or a chunk is causal in every model that has one
    if layer.window is not None:
        keep = keep & (pk > pq - layer.window)
    if layer.chunk is not None:
        keep = keep & (
            torch.div(pk, layer.chunk, rounding_mode="floor") == torch.div(pq, layer.chunk, rounding_mode="floor")
        )
    return keep


def oracle_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    allowed: torch.Tensor | None,
    *,
    scale: float,
    layer: LayerAttention = PLAIN,
) -> torch.Tensor:
    """The slow, obviously correct attention every backend is tested against: scores, soft-capped,
    masked by ``allowed`` (bool, broadcast to (B, H, Tq, Tk); None: all), a sink logit per head in
    the denominator, softmax in float32, times v. A query with no allowed key returns 0.
    # (B, H, Tq, d), (B, H, Tk, d), (B, H, Tk, dv) -> (B, H, Tq, dv)

        >>> q, k, v = torch.zeros(1, 1, 1, 1), torch.ones(1, 1, 1, 1), torch.ones(1, 1, 1, 1)
        >>> oracle_attention(q, k, v, None, scale=1.0, layer=LayerAttention(sinks=torch.zeros(1))).item()  # e^0 / (e^0 + e^0)
        0.5

    Args:
        q: queries `(B, H, Tq, d)`.
        k: keys `(B, H, Tk, d)`.
        v: values `(B, H, Tk, dv)`.
        allowed: bool, broadcast to `(B, H, Tq, Tk)` (`None`: every pair).
        scale: the scores' scale.
        layer: soft-capping, sinks, as `LayerAttention` says.

    Returns:
        The output `(B, H, Tq, dv)`, in q's dtype.
    """
    scores = (q.float() @ k.float().transpose(-2, -1)) * scale  # (B, H, Tq, Tk)
    if layer.softcap is not None:
        scores = layer.softcap * torch.tanh(scores / layer.softcap)
    if allowed is not None:
        scores = scores.masked_fill(~allowed, float("-inf"))
    if layer.sinks is not None:
        sink = layer.sinks.float().view(1, -1, 1, 1).expand(*scores.shape[:-1], 1)
        scores = torch.cat([scores, sink], dim=-1)
    top = scores.amax(dim=-1, keepdim=True).clamp(min=torch.finfo(torch.float32).min)  # all masked: -inf -> finite
    e = (scores - top).exp()
    p = e / e.sum(dim=-1, keepdim=True).clamp(min=torch.finfo(torch.float32).tiny)
    if layer.sinks is not None:
        p = p[..., :-1]
    return (p @ v.float()).to(q.dtype)


class PlanFields(TypedDict):
    """The fields every `AttentionPlan` has, as keywords."""

    backend: str
    causal: bool
    batch: int
    length: int


def common(backend: str, segment_ids: torch.Tensor, causal: bool) -> PlanFields:
    """The `AttentionPlan` fields of a plan for ``segment_ids`` (B, T)."""
    B, T = segment_ids.shape
    return {"backend": backend, "causal": causal, "batch": B, "length": T}


def half_precision(dtype: torch.dtype) -> bool:
    return dtype in (torch.float16, torch.bfloat16)


def check_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, plan: AttentionPlan) -> None:
    for name, x in (("q", q), ("k", k), ("v", v)):
        if x.ndim != 4:
            raise UserError(f"{name} must be (B, H, T, d), got shape {tuple(x.shape)}")
    if k.shape != v.shape or q.shape[:2] != k.shape[:2] or q.shape[-1] != k.shape[-1]:
        raise UserError(f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)} disagree; expected (B, H, T, d)")
    if (q.shape[0], q.shape[2]) != (plan.batch, plan.length) or k.shape[2] != plan.length:
        raise UserError(
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
