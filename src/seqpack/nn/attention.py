"""Packed attention behind one function: build a plan once per batch, call it in every layer.

    plan = plan_attention(segment_ids, causal=True)        # (B, T) -> masks / indices, once
    out = packed_attention(q, k, v, plan)                  # (B, H, T, d) -> (B, H, T, d), per layer

Backends (``plan.backend``):

``sdpa``          dense ``(B, 1, T, T)`` bool mask into ``scaled_dot_product_attention``; rows
                  holding one sequence use a ``(B, 1, 1, T)`` key-padding mask instead.
                  The default on CPU.
``eager``         the reference: ``softmax(q k^T * scale + additive mask) v`` in plain ops.
``per_document``  gathers each sequence into a bucket of similar lengths and runs SDPA per
                  bucket (``is_causal`` when causal), so blocks between documents are never
                  computed: ``sum(l_i^2)`` work instead of ``T^2`` per row.
``flash_varlen``  ``flash_attn_varlen_func`` on the unpadded tokens (CUDA, fp16/bf16, needs
                  the ``flash-attn`` package).
``flex``          FlexAttention with a ``BlockMask`` (CUDA; forward only on CPU).

Padding tokens (segment 0) get output 0, except with ``sdpa`` when no row holds two
sequences: its cheaper key-padding / ``is_causal`` forms leave padding outputs unspecified
(nothing reads them: no real token attends to padding).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from seqpack.nn.masks import (
    attention_mask,
    block_mask,
    check_segment_ids,
    cu_seqlens,
    max_seqlen,
    sequence_lengths,
    unpad_index,
)

BACKENDS = ("auto", "sdpa", "eager", "per_document", "flash_varlen", "flex")


@dataclass(frozen=True, kw_only=True)
class Bucket:
    """``n`` sequences padded to length ``Lb``: rows ``offset .. offset + n*Lb`` of the gathered tokens."""

    offset: int
    n: int
    size: int
    key_mask: torch.Tensor | None  # (n, 1, 1, Lb) bool, None when causal or every sequence fills Lb


@dataclass(frozen=True, kw_only=True)
class AttentionPlan:
    """Everything a backend needs, derived once from ``segment_ids`` (B, T)."""

    backend: str
    causal: bool
    batch: int
    length: int
    mask: torch.Tensor | None = None  # sdpa / eager
    buckets: tuple[Bucket, ...] = ()  # per_document
    gather: torch.Tensor | None = None  # per_document: (sum n*Lb,) flat token of each bucket slot
    inverse: torch.Tensor | None = None  # per_document: (B*T,) bucket slot of each token (padding: a zero row)
    unpad: torch.Tensor | None = None  # flash_varlen: (total,)
    cu_seqlens: torch.Tensor | None = None
    max_seqlen: int = 0
    block_mask: object | None = None  # flex


def _flash_available() -> bool:
    try:
        import flash_attn  # noqa: F401
    except ImportError:
        return False
    return True


def choose_backend(segment_ids: torch.Tensor, *, dtype: torch.dtype) -> str:
    """The ``auto`` rule. CUDA with flash-attn and half precision: ``flash_varlen``.
    Otherwise ``per_document`` when it would do under 40% of the dense attention work
    (``sum(l_i^2) < 0.4 * B * T^2``; causality halves both sides) on rows of at least 1024
    tokens, else dense ``sdpa``."""
    if segment_ids.is_cuda and dtype in (torch.float16, torch.bfloat16) and _flash_available():
        return "flash_varlen"
    B, T = segment_ids.shape
    if T < 1024 or B == 0:
        return "sdpa"
    lengths = _bucket_lengths(sequence_lengths(segment_ids), T).double()
    return "per_document" if float((lengths * lengths).sum()) < 0.4 * B * T * T else "sdpa"


def plan_attention(
    segment_ids: torch.Tensor,
    *,
    causal: bool = False,
    backend: str = "auto",
    dtype: torch.dtype = torch.float32,
    validate: bool = True,
) -> AttentionPlan:
    """Masks or indices for ``packed_attention`` (``dtype`` is the dtype of q/k/v)."""
    if backend not in BACKENDS:
        raise ValueError(f"attention backend must be one of {'|'.join(BACKENDS)}, got {backend!r}")
    if validate:
        check_segment_ids(segment_ids)
    if backend == "auto":
        backend = choose_backend(segment_ids, dtype=dtype)
    B, T = segment_ids.shape
    base = {"backend": backend, "causal": causal, "batch": B, "length": T}
    if backend == "sdpa":
        return AttentionPlan(**base, mask=_sdpa_mask(segment_ids, causal=causal))
    if backend == "eager":
        return AttentionPlan(**base, mask=attention_mask(segment_ids, causal=causal, dtype=dtype))
    if backend == "per_document":
        buckets, gather, inverse = _plan_buckets(segment_ids, causal=causal)
        return AttentionPlan(**base, buckets=buckets, gather=gather, inverse=inverse)
    if backend == "flash_varlen":
        if not segment_ids.is_cuda or not _flash_available():
            raise ValueError(
                "attention backend 'flash_varlen' needs CUDA tensors and the flash-attn package; "
                "use backend='sdpa' or 'per_document' on CPU"
            )
        return AttentionPlan(
            **base, unpad=unpad_index(segment_ids), cu_seqlens=cu_seqlens(segment_ids),
            max_seqlen=max_seqlen(segment_ids),
        )
    return AttentionPlan(**base, block_mask=block_mask(segment_ids, causal=causal))


def _sdpa_mask(segment_ids: torch.Tensor, *, causal: bool) -> torch.Tensor | None:
    """Dense bool mask; a cheap key-padding form when no row holds two sequences."""
    if segment_ids.numel() and int(segment_ids.max()) <= 1:
        if causal:  # one sequence per row, padding after it: plain is_causal never reads padding keys
            return None
        return (segment_ids > 0)[:, None, None, :]  # (B, 1, 1, T) key padding
    return attention_mask(segment_ids, causal=causal)  # (B, 1, T, T)


def _bucket_lengths(lengths: torch.Tensor, T: int) -> torch.Tensor:
    """Round each length up to a ladder of 8 steps per octave (at most 12.5% longer), >= 8.

    >>> _bucket_lengths(torch.tensor([1, 9, 100, 130, 512]), 512).tolist()
    [8, 16, 104, 144, 512]
    """
    lf = lengths.clamp(min=1).double()
    step = torch.exp2(torch.floor(torch.log2(lf)) - 3).clamp(min=8)
    return (torch.ceil(lf / step) * step).long().clamp(max=T)


def _plan_buckets(
    segment_ids: torch.Tensor, *, causal: bool
) -> tuple[tuple[Bucket, ...], torch.Tensor, torch.Tensor]:
    """Group sequences by padded length. Bucket slots past a sequence's end read token 0:
    they are masked keys (or, causal, keys after every real query) and their outputs are dropped."""
    B, T = segment_ids.shape
    dev = segment_ids.device
    cu = cu_seqlens(segment_ids).long()
    lengths = cu[1:] - cu[:-1]
    starts = unpad_index(segment_ids)[cu[:-1]]  # flat index of each sequence's first token
    padded = _bucket_lengths(lengths, T)
    inverse = torch.full((B * T,), -1, dtype=torch.long, device=dev)
    buckets: list[Bucket] = []
    gathers: list[torch.Tensor] = []
    offset = 0
    for size in torch.unique(padded).tolist():
        members = (padded == size).nonzero().squeeze(1)
        st, ln = starts[members], lengths[members]
        ar = torch.arange(size, device=dev)
        valid = ar[None, :] < ln[:, None]  # (n, Lb)
        index = torch.where(valid, st[:, None] + ar[None, :], torch.zeros_like(valid, dtype=torch.long))
        rows = offset + torch.arange(valid.numel(), device=dev).view_as(valid)
        inverse[index[valid]] = rows[valid]
        key_mask = None if (causal or bool(valid.all())) else valid[:, None, None, :]
        buckets.append(Bucket(offset=offset, n=int(valid.shape[0]), size=int(size), key_mask=key_mask))
        gathers.append(index.reshape(-1))
        offset += valid.numel()
    inverse = torch.where(inverse < 0, torch.full_like(inverse, offset), inverse)  # padding -> zero row
    gather = torch.cat(gathers) if gathers else torch.zeros(0, dtype=torch.long, device=dev)
    return tuple(buckets), gather, inverse


def _check_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, plan: AttentionPlan) -> None:
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


def packed_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, plan: AttentionPlan, *, scale: float | None = None
) -> torch.Tensor:
    """Attention that never mixes sequences of one row.  # (B, H, T, d) x3 -> (B, H, T, d)"""
    _check_qkv(q, k, v, plan)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    b = plan.backend
    if b == "sdpa":
        if plan.mask is not None and plan.mask.dtype != torch.bool and plan.mask.dtype != q.dtype:
            raise ValueError(f"an additive mask must have the dtype of q ({q.dtype}), got {plan.mask.dtype}")
        is_causal = plan.causal and plan.mask is None
        return F.scaled_dot_product_attention(q, k, v, attn_mask=plan.mask, is_causal=is_causal, scale=scale)
    if b == "eager":
        return eager_attention(q, k, v, plan.mask, scale=scale)
    if b == "per_document":
        return _per_document(q, k, v, plan, scale)
    if b == "flash_varlen":
        return _flash_varlen(q, k, v, plan, scale)
    from torch.nn.attention.flex_attention import flex_attention

    return flex_attention(q, k, v, block_mask=plan.block_mask, scale=scale)  # type: ignore[no-any-return]


def eager_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, *, scale: float
) -> torch.Tensor:
    """Reference attention with an additive float mask (0 allowed / dtype-min masked).

    A bool mask here would be added as 0/1 and silently attend everywhere, so it is refused.
    Rows with no allowed key (padding) return 0, as SDPA does.
    """
    if mask is not None and not mask.dtype.is_floating_point:
        raise ValueError(
            f"eager attention needs an additive float mask (0 / finfo.min), got dtype {mask.dtype}; "
            "build it with attention_mask(segment_ids, dtype=q.dtype)"
        )
    scores = (q @ k.transpose(-2, -1)) * scale  # (B, H, T, T)
    if mask is None:
        return scores.softmax(dim=-1) @ v
    scores = scores + mask
    out = scores.softmax(dim=-1) @ v
    any_key = (mask == 0).any(dim=-1, keepdim=True)  # (B, 1, T, 1)
    return out * any_key


def _per_document(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, plan: AttentionPlan, scale: float) -> torch.Tensor:
    B, H, T, d = q.shape
    assert plan.gather is not None and plan.inverse is not None
    # (B, H, T, d) -> (B*T, H, d) is a view when q/k/v are slices of one (B, T, 3, H, d) projection
    gq, gk, gv = (x.transpose(1, 2).reshape(B * T, H, d).index_select(0, plan.gather) for x in (q, k, v))
    sizes = [bk.n * bk.size for bk in plan.buckets]
    outs = []  # split (not slicing): its backward is one concatenation, not a full-size zero per bucket
    for bk, bq, bkk, bv in zip(plan.buckets, gq.split(sizes), gk.split(sizes), gv.split(sizes)):
        bq, bkk, bv = (x.view(bk.n, bk.size, H, d).transpose(1, 2) for x in (bq, bkk, bv))  # (n, H, Lb, d)
        o = F.scaled_dot_product_attention(bq, bkk, bv, attn_mask=bk.key_mask, is_causal=plan.causal, scale=scale)
        outs.append(o.transpose(1, 2).reshape(-1, H, d))  # (n * Lb, H, d)
    outs.append(q.new_zeros(1, H, d))
    out = torch.cat(outs).index_select(0, plan.inverse)  # (B*T, H, d)
    return out.view(B, T, H, d).transpose(1, 2)


def _flash_varlen(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, plan: AttentionPlan, scale: float) -> torch.Tensor:
    from flash_attn import flash_attn_varlen_func

    B, H, T, d = q.shape
    assert plan.unpad is not None and plan.cu_seqlens is not None

    def unpad(x: torch.Tensor) -> torch.Tensor:
        return x.transpose(1, 2).reshape(B * T, H, d)[plan.unpad]

    o = flash_attn_varlen_func(
        unpad(q), unpad(k), unpad(v), plan.cu_seqlens, plan.cu_seqlens, plan.max_seqlen, plan.max_seqlen,
        softmax_scale=scale, causal=plan.causal,
    )
    out = q.new_zeros(B * T, H, d).index_copy(0, plan.unpad, o)
    return out.view(B, T, H, d).transpose(1, 2)
