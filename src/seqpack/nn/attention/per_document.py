"""``per_document``: gather each sequence into a bucket of similar lengths and run SDPA per
bucket (``is_causal`` when causal), so blocks between documents are never computed:
``sum(l_i^2)`` work instead of ``T^2`` per row."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from seqpack.nn.attention.base import AttentionPlan, Backend, common, tokens, untokens
from seqpack.nn.masks import cu_seqlens, unpad_index


@dataclass(frozen=True, kw_only=True)
class Bucket:
    """``n`` sequences padded to length ``size``: rows ``offset .. offset + n*size`` of the gathered tokens."""

    offset: int
    n: int
    size: int
    key_mask: torch.Tensor | None  # (n, 1, 1, size) bool, None when causal or every sequence fills size


@dataclass(frozen=True, kw_only=True)
class BucketPlan(AttentionPlan):
    buckets: tuple[Bucket, ...]
    gather: torch.Tensor  # (sum n*size,) flat token of each bucket slot
    inverse: torch.Tensor  # (B*T,) bucket slot of each token (padding: a zero row)


def bucket_lengths(lengths: torch.Tensor, T: int) -> torch.Tensor:
    """Round each length up to a ladder of 8 steps per octave (at most 12.5% longer), >= 8.

    >>> bucket_lengths(torch.tensor([1, 9, 100, 130, 512]), 512).tolist()
    [8, 16, 104, 144, 512]
    """
    lf = lengths.clamp(min=1).double()
    step = torch.exp2(torch.floor(torch.log2(lf)) - 3).clamp(min=8)
    return (torch.ceil(lf / step) * step).long().clamp(max=T)


def plan_per_document(segment_ids: torch.Tensor, *, causal: bool, dtype: torch.dtype) -> BucketPlan:
    """Group sequences by padded length. Bucket slots past a sequence's end read token 0:
    they are masked keys (or, causal, keys after every real query) and their outputs are dropped."""
    B, T = segment_ids.shape
    dev = segment_ids.device
    cu = cu_seqlens(segment_ids).long()
    lengths = cu[1:] - cu[:-1]
    starts = unpad_index(segment_ids)[cu[:-1]]  # flat index of each sequence's first token
    padded = bucket_lengths(lengths, T)
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
    return BucketPlan(**common("per_document", segment_ids, causal), buckets=tuple(buckets), gather=gather, inverse=inverse)  # type: ignore[arg-type]


def attend_per_document(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, plan: AttentionPlan, scale: float) -> torch.Tensor:
    assert isinstance(plan, BucketPlan)
    B, H, T, d = q.shape
    gq, gk, gv = (tokens(x).index_select(0, plan.gather) for x in (q, k, v))
    sizes = [bk.n * bk.size for bk in plan.buckets]
    outs = []  # split (not slicing): its backward is one concatenation, not a full-size zero per bucket
    for bk, bq, bkk, bv in zip(plan.buckets, gq.split(sizes), gk.split(sizes), gv.split(sizes)):
        bq, bkk, bv = (x.view(bk.n, bk.size, H, d).transpose(1, 2) for x in (bq, bkk, bv))  # (n, H, Lb, d)
        o = F.scaled_dot_product_attention(bq, bkk, bv, attn_mask=bk.key_mask, is_causal=plan.causal, scale=scale)
        outs.append(o.transpose(1, 2).reshape(-1, H, d))  # (n * Lb, H, d)
    outs.append(q.new_zeros(1, H, d))
    return untokens(torch.cat(outs).index_select(0, plan.inverse), B, T)  # (B, H, T, d)


PER_DOCUMENT = Backend(
    name="per_document", plan=plan_per_document, attend=attend_per_document,
    summary="sequences gathered into length buckets, SDPA per bucket: sum(l^2) work, never T^2",
)
