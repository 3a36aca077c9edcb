"""``flex``: FlexAttention with a ``BlockMask`` whose blocks with no allowed (query, key) pair
are skipped. On CUDA the kernel is ``torch.compile``d once (uncompiled FlexAttention
materialises the scores); on CPU it runs forward only, uncompiled (torch has no CPU backward)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from seqpack.nn.attention.base import AttentionPlan, Backend, common
from seqpack.nn.masks import block_mask


@dataclass(frozen=True, kw_only=True)
class FlexPlan(AttentionPlan):
    block_mask: Any  # torch.nn.attention.flex_attention.BlockMask


def plan_flex(segment_ids: torch.Tensor, *, causal: bool, dtype: torch.dtype, branch_ids: torch.Tensor | None = None) -> FlexPlan:
    bm = block_mask(segment_ids, causal=causal, branch_ids=branch_ids)
    return FlexPlan(**common("flex", segment_ids, causal), block_mask=bm)  # type: ignore[arg-type]


@functools.cache
def _kernel(compiled: bool) -> Callable[..., torch.Tensor]:
    from torch.nn.attention.flex_attention import flex_attention

    return torch.compile(flex_attention, dynamic=False) if compiled else flex_attention  # type: ignore[return-value]


def attend_flex(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, plan: AttentionPlan, scale: float) -> torch.Tensor:
    assert isinstance(plan, FlexPlan)
    return _kernel(q.is_cuda)(q, k, v, block_mask=plan.block_mask, scale=scale)


FLEX = Backend(
    name="flex", plan=plan_flex, attend=attend_flex,
    summary="FlexAttention with a BlockMask, compiled on CUDA (forward only on CPU)",
)
