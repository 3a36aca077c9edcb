"""``per_document``: gather each sequence into a bucket of similar lengths and run SDPA per
bucket (``is_causal`` when causal), so blocks between documents are never computed:
``sum(l_i^2)`` work instead of ``T^2`` per row. A layer's window or chunk narrows each bucket's
causal mask; soft-capping and sinks, which SDPA lacks, run the oracle attention per bucket
(still ``sum(l_i^2)``).

With ``branch_ids`` (a shared prefix: the preference task's prompt, then two responses that
never see each other) each response becomes a document with the prompt gathered in front of it
(causal; the prompt's projections and MLP still run once): plain ``is_causal`` kernels, no mask.
Bidirectional, each bucket gets the branch mask of its sequences instead, ``(n, 1, Lb, Lb)``."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from seqpack.nn.attention.base import (
    PLAIN,
    AttentionPlan,
    Backend,
    LayerAttention,
    band,
    common,
    oracle_attention,
    tokens,
    untokens,
)
from seqpack.nn.masks import attention_mask, cu_seqlens, unpad_index


def offsets_of(lengths: torch.Tensor) -> torch.Tensor:
    """``[0, l0, l0+l1, ...]``.  # (N + 1,)"""
    out = torch.zeros(lengths.numel() + 1, dtype=torch.long, device=lengths.device)
    out[1:] = lengths.cumsum(0)
    return out


@dataclass(frozen=True, kw_only=True)
class Bucket:
    """``n`` sequences padded to length ``size``: rows ``offset .. offset + n*size`` of the gathered tokens."""

    offset: int
    n: int
    size: int
    key_mask: torch.Tensor | None  # (n, 1, 1, size) bool, None when causal or every sequence fills size;
    # (n, 1, size, size) with branch_ids (causality included)


@dataclass(frozen=True, kw_only=True)
class BucketPlan(AttentionPlan):
    buckets: tuple[Bucket, ...]
    gather: torch.Tensor  # (sum n*size,) flat token of each bucket slot
    inverse: torch.Tensor  # (B*T,) bucket slot of each token (padding: a zero row)
    #: per (window, chunk), each bucket's mask (n, 1, Lb, Lb), made once per batch
    layer_masks: dict[tuple[int | None, int | None], list[torch.Tensor]] = field(
        default_factory=dict, compare=False, repr=False
    )


def _bucket_masks(plan: BucketPlan, layer: LayerAttention) -> list[torch.Tensor] | None:
    """Each bucket's causal mask narrowed by the layer's window and chunk, from the gathered
    tokens' positions (slots past a document's end come after all its queries: causality drops them)."""
    if layer.window is None and layer.chunk is None:
        return None
    key = (layer.window, layer.chunk)
    if key not in plan.layer_masks:
        assert plan.positions is not None and plan.causal
        pos = plan.positions.reshape(-1).index_select(0, plan.gather)
        masks = []
        for bk, p in zip(plan.buckets, pos.split([bk.n * bk.size for bk in plan.buckets])):
            tri = torch.ones(bk.size, bk.size, dtype=torch.bool, device=p.device).tril()
            narrowed = band(p.view(bk.n, bk.size), layer)
            assert narrowed is not None
            masks.append(narrowed & tri)
        plan.layer_masks[key] = masks
    return plan.layer_masks[key]


def bucket_lengths(lengths: torch.Tensor, T: int) -> torch.Tensor:
    """Round each length up to a ladder of 8 steps per octave (at most 12.5% longer), >= 8.

    >>> bucket_lengths(torch.tensor([1, 9, 100, 130, 512]), 512).tolist()
    [8, 16, 104, 144, 512]
    """
    lf = lengths.clamp(min=1).double()
    step = torch.exp2(torch.floor(torch.log2(lf)) - 3).clamp(min=8)
    return (torch.ceil(lf / step) * step).long().clamp(max=T)


def _documents(
    segment_ids: torch.Tensor, branch_ids: torch.Tensor | None, causal: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """What attends to what, as documents of tokens: ``(tokens, lengths, owner, slot)``.

    ``tokens`` (sum of lengths,) are flat token indices, document after document; ``owner[i]``
    (its flat token) takes its output from entry ``slot[i]`` of ``tokens``. Without branches a
    document is a sequence. With a shared prefix (causal) each branch of a sequence is a document
    of its own, the prefix gathered in front of it: ``p p c c r r`` -> ``[p p c c]``, ``[p p r r]``
    (the prefix's outputs come from the first; the second's copies serve only as keys). Causal
    attention inside each equals the branch mask, since the prefix comes before every branch.
    """
    flat = unpad_index(segment_ids)  # real tokens, row-major
    cu = cu_seqlens(segment_ids).long()
    seq = torch.repeat_interleave(
        torch.arange(cu.numel() - 1, device=flat.device), cu[1:] - cu[:-1]
    )  # sequence of each
    if branch_ids is None or not causal:
        n = torch.bincount(seq, minlength=int(seq.max()) + 1 if seq.numel() else 0)
        return flat, n, flat, torch.arange(flat.numel(), device=flat.device)
    br = branch_ids.reshape(-1)[flat].long()
    N, K = int(seq.max()) + 1 if seq.numel() else 0, int(br.max()) if br.numel() else 0
    has = torch.zeros(N, K + 1, dtype=torch.bool, device=flat.device)
    has[seq, br] = True
    branched = has[:, 1:].any(dim=1)  # (N,) sequences with at least one branch
    first = torch.where(has[:, 1:], torch.arange(1, K + 1, device=flat.device), K + 1).amin(dim=1)
    tokens, lengths, owner, slot, offset = [], [], [], [], 0
    for k in range(K + 1):  # k = 0: the sequences without branches, whole
        if k == 0:
            take = ~branched[seq]
        else:
            take = (br == k) | ((br == 0) & has[seq, k])
        if not bool(take.any()):
            continue
        pos = offset + torch.arange(int(take.sum()), device=flat.device)
        mine = (br == k) | ((br == 0) & (first[seq] == k)) if k else torch.ones_like(take)
        tokens.append(flat[take])
        n = torch.bincount(seq[take], minlength=N)
        lengths.append(n[n > 0])
        owner.append(flat[take][mine[take]])
        slot.append(pos[mine[take]])
        offset += int(take.sum())
    cat = lambda xs: torch.cat(xs) if xs else flat.new_zeros(0)  # noqa: E731
    return cat(tokens), cat(lengths), cat(owner), cat(slot)


def plan_per_document(
    segment_ids: torch.Tensor, *, causal: bool, dtype: torch.dtype, branch_ids: torch.Tensor | None = None
) -> BucketPlan:
    """Group documents (`_documents`) by padded length. Bucket slots past a document's end
    read token 0: they are masked keys (or, causal, keys after every real query) and their outputs
    are dropped."""
    B, T = segment_ids.shape
    dev = segment_ids.device
    doc_tokens, lengths, owner, slot = _documents(segment_ids, branch_ids, causal)
    starts = offsets_of(lengths)
    padded = bucket_lengths(lengths, T)
    where = torch.empty(doc_tokens.numel(), dtype=torch.long, device=dev)  # bucket row of each document token
    buckets: list[Bucket] = []
    gathers: list[torch.Tensor] = []
    offset = 0
    for size in torch.unique(padded).tolist():
        members = (padded == size).nonzero().squeeze(1)
        st, ln = starts[members], lengths[members]
        ar = torch.arange(size, device=dev)
        valid = ar[None, :] < ln[:, None]  # (n, Lb)
        at = st[:, None] + ar[None, :]
        index = torch.where(valid, doc_tokens[at.clamp(max=max(doc_tokens.numel() - 1, 0))], torch.zeros_like(at))
        rows = offset + torch.arange(valid.numel(), device=dev).view_as(valid)
        where[at[valid]] = rows[valid]
        if branch_ids is not None and not causal:
            key_mask: torch.Tensor | None = attention_mask(
                valid.long(), causal=causal, branch_ids=branch_ids.reshape(-1)[index]
            )
        else:
            key_mask = None if (causal or bool(valid.all())) else valid[:, None, None, :]
        buckets.append(Bucket(offset=offset, n=int(valid.shape[0]), size=int(size), key_mask=key_mask))
        gathers.append(index.reshape(-1))
        offset += valid.numel()
    inverse = torch.full((B * T,), offset, dtype=torch.long, device=dev)  # padding -> the zero row
    inverse[owner] = where[slot]
    gather = torch.cat(gathers) if gathers else torch.zeros(0, dtype=torch.long, device=dev)
    return BucketPlan(
        **common("per_document", segment_ids, causal), buckets=tuple(buckets), gather=gather, inverse=inverse
    )


def attend_per_document(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, plan: AttentionPlan, scale: float, layer: LayerAttention = PLAIN
) -> torch.Tensor:
    assert isinstance(plan, BucketPlan)
    B, H, T, d = q.shape
    gq, gk, gv = (tokens(x).index_select(0, plan.gather) for x in (q, k, v))
    sizes = [bk.n * bk.size for bk in plan.buckets]
    narrowed = _bucket_masks(plan, layer)
    outs = []  # split (not slicing): its backward is one concatenation, not a full-size zero per bucket
    for i, (bk, bq, bkk, bv) in enumerate(zip(plan.buckets, gq.split(sizes), gk.split(sizes), gv.split(sizes))):
        bq, bkk, bv = (x.view(bk.n, bk.size, H, d).transpose(1, 2) for x in (bq, bkk, bv))  # (n, H, Lb, d)
        mask = bk.key_mask if narrowed is None else narrowed[i]
        causal = plan.causal and mask is None  # a branch mask holds the causality itself
        if layer.softcap is not None or layer.sinks is not None:  # SDPA has neither: the oracle, per bucket
            if causal:
                mask = torch.ones(bk.size, bk.size, dtype=torch.bool, device=q.device).tril()
            o = oracle_attention(bq, bkk, bv, mask, scale=scale, layer=layer)
        else:
            o = F.scaled_dot_product_attention(bq, bkk, bv, attn_mask=mask, is_causal=causal, scale=scale)
        outs.append(o.transpose(1, 2).reshape(-1, H, d))  # (n * Lb, H, d)
    outs.append(q.new_zeros(1, H, d))
    return untokens(torch.cat(outs).index_select(0, plan.inverse), B, T)  # (B, H, T, d)


PER_DOCUMENT = Backend(
    name="per_document",
    plan=plan_per_document,
    attend=attend_per_document,
    features=frozenset({"window", "chunk", "softcap", "sinks"}),
    summary="sequences gathered into length buckets, SDPA per bucket: sum(l^2) work, never T^2",
)
