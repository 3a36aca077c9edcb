"""``context_parallel``: attention of one rank's share of packed rows split across context-parallel
(CP) ranks (`seqpack.data.context_parallel`), exact against the unsplit rows.

Each rank holds ``T_local = T / C`` tokens of every row: chunks of each document, not in order. In
every layer the keys and values of all ranks are gathered (all-gather over the CP group), and each
local query attends the gathered keys of its own document at positions up to its own: the mask is
built once per batch from the documents and positions of all ranks' tokens (gathered once, no
gradient). The gather's backward sums every rank's gradient for a rank's keys and values and hands
that rank its share (an all-reduce, then a slice: what gloo can run; on NCCL a reduce-scatter
would move less). Padding queries attend only themselves; nothing reads their outputs.

    plan = plan_context_parallel(segment_ids, position_ids, group=cp_group)   # (B, T_local) each
    out = packed_attention(q, k, v, plan)                                     # (B, H, T_local, d)

Dense masked SDPA over ``T_local x T`` per rank: exact and simple (CPU, and a GPU check); the
all-gather's memory is that of the whole row's keys and values, per layer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F

from seqpack.errors import UserError
from seqpack.nn.attention.base import PLAIN, AttentionPlan, Backend, LayerAttention, band, common

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup


@dataclass(frozen=True, kw_only=True)
class CPPlan(AttentionPlan):
    group: ProcessGroup | None  # the CP process group (None: this process alone)
    rank: int  # this process's rank in the group
    size: int  # ranks in the group
    mask: torch.Tensor  # (B, 1, T_local, T_local * size) bool: which gathered keys each local query attends
    positions_all: torch.Tensor  # (B, T_local * size): every rank's tokens' positions, gathered


def _group_info(group: ProcessGroup | None) -> tuple[int, int]:
    import torch.distributed as dist

    if group is None and not (dist.is_available() and dist.is_initialized()):
        return 0, 1
    return dist.get_rank(group), dist.get_world_size(group)


def gather_tokens(x: torch.Tensor, group: ProcessGroup | None, *, dim: int) -> torch.Tensor:
    """Every rank's ``x`` side by side along ``dim`` (rank order), without gradient."""
    import torch.distributed as dist

    _rank, size = _group_info(group)
    if size == 1:
        return x
    parts = [torch.empty_like(x) for _ in range(size)]
    dist.all_gather(parts, x.contiguous(), group=group)
    return torch.cat(parts, dim=dim)


class _GatherWithGrad(torch.autograd.Function):
    """All-gather along ``dim`` whose backward gives each rank the sum over ranks of its slice's gradient."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: ProcessGroup | None, dim: int) -> torch.Tensor:
        ctx.group, ctx.dim = group, dim
        ctx.rank, ctx.size = _group_info(group)
        ctx.local = x.shape[dim]
        return gather_tokens(x, group, dim=dim)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        import torch.distributed as dist

        g = grad.contiguous()
        if ctx.size > 1:
            g = g.clone()
            dist.all_reduce(g, group=ctx.group)
        return g.narrow(ctx.dim, ctx.rank * ctx.local, ctx.local), None, None


def gather_with_grad(x: torch.Tensor, group: ProcessGroup | None, *, dim: int) -> torch.Tensor:
    """`gather_tokens` with a gradient (see `_GatherWithGrad`)."""
    return _GatherWithGrad.apply(x, group, dim)


def cp_mask(
    seg: torch.Tensor, pos: torch.Tensor, seg_all: torch.Tensor, pos_all: torch.Tensor, *, rank: int, causal: bool
) -> torch.Tensor:
    """Which gathered keys each local query attends: the same document and, causal, a position up to
    its own; a padding query (segment 0) attends its own slot only.  # (B, Tl) x2, (B, T) x2 -> (B, 1, Tl, T)

    >>> seg = torch.tensor([[1, 2]]); pos = torch.tensor([[1, 0]])
    >>> cp_mask(seg, pos, torch.tensor([[1, 2, 1, 0]]), torch.tensor([[0, 0, 1, 0]]), rank=0, causal=True)[0, 0].int().tolist()
    [[1, 0, 1, 0], [0, 1, 0, 0]]
    """
    same = (seg[:, :, None] == seg_all[:, None, :]) & (seg[:, :, None] != 0)
    if causal:
        same &= pos_all[:, None, :] <= pos[:, :, None]
    Tl = seg.shape[1]
    own = torch.zeros_like(same)
    own[:, torch.arange(Tl), rank * Tl + torch.arange(Tl)] = True
    return (same | (own & (seg == 0)[:, :, None]))[:, None]


def plan_context_parallel(
    segment_ids: torch.Tensor, position_ids: torch.Tensor, *, group: ProcessGroup | None = None, causal: bool = True
) -> CPPlan:
    """The plan of one rank's share (``segment_ids``/``position_ids`` (B, T_local), documents'
    ids as in the whole row); gathers every rank's ids and positions once (a collective: every
    rank of ``group`` calls it together).

    Args:
        segment_ids: this rank's share of the rows `(B, T_local)`, ids as in the whole row.
        position_ids: its tokens' positions in their documents `(B, T_local)`.
        group: the context-parallel process group (`None`: the default group, or this process alone).
        causal: each token sees only the tokens before it.

    Returns:
        The `CPPlan`.
    """
    if segment_ids.shape != position_ids.shape or segment_ids.ndim != 2:
        raise UserError(
            f"segment_ids {tuple(segment_ids.shape)} and position_ids {tuple(position_ids.shape)} must "
            "both be (B, T_local)"
        )
    rank, size = _group_info(group)
    seg_all = gather_tokens(segment_ids, group, dim=1)
    pos_all = gather_tokens(position_ids, group, dim=1)
    mask = cp_mask(segment_ids, position_ids, seg_all, pos_all, rank=rank, causal=causal)
    return CPPlan(
        **common("context_parallel", segment_ids, causal),
        group=group,
        rank=rank,
        size=size,
        mask=mask,
        positions=position_ids,
        positions_all=pos_all,
    )


_WHY = (
    "context_parallel attention needs each token's document position across ranks: make its plan with "
    "seqpack.nn.attention.context_parallel.plan_context_parallel from a row's CP shard"
)


def attend_context_parallel(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, plan: AttentionPlan, scale: float, layer: LayerAttention = PLAIN
) -> torch.Tensor:
    assert isinstance(plan, CPPlan)
    k_all = gather_with_grad(k, plan.group, dim=2)  # (B, H, T, d)
    v_all = gather_with_grad(v, plan.group, dim=2)
    mask = plan.mask
    if plan.positions is not None:
        narrowed = band(plan.positions, layer, positions_k=plan.positions_all)
        if narrowed is not None:
            mask = mask & narrowed
    return F.scaled_dot_product_attention(q, k_all, v_all, attn_mask=mask, scale=scale)


CONTEXT_PARALLEL = Backend(
    name="context_parallel",
    summary="one rank's share of rows split across context-parallel ranks: all-gathered keys and values",
    attend=attend_context_parallel,
    unavailable=lambda seg, dtype: _WHY,
    features=frozenset({"window", "chunk"}),
)

__all__ = ["CONTEXT_PARALLEL", "CPPlan", "cp_mask", "gather_tokens", "gather_with_grad", "plan_context_parallel"]
