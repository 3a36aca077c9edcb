"""``flex``: FlexAttention with a ``BlockMask`` whose blocks with no allowed (query, key) pair
are skipped. On CUDA the kernel is ``torch.compile``d once (uncompiled FlexAttention
materialises the scores); on CPU it runs forward only, uncompiled (torch has no CPU backward)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from torch.nn.attention.flex_attention import BlockMask

from seqpack.nn.attention.base import PLAIN, AttentionPlan, Backend, LayerAttention, common
from seqpack.nn.masks import block_mask


@dataclass(frozen=True, kw_only=True)
class FlexPlan(AttentionPlan):
    block_mask: BlockMask
    segment_ids: torch.Tensor  # (B, T), for the block masks of layers with a window or a chunk
    branch_ids: torch.Tensor | None = None
    layer_masks: dict[tuple[int | None, int | None], BlockMask] = field(default_factory=dict, compare=False, repr=False)


def plan_flex(
    segment_ids: torch.Tensor, *, causal: bool, dtype: torch.dtype, branch_ids: torch.Tensor | None = None
) -> FlexPlan:
    bm = block_mask(segment_ids, causal=causal, branch_ids=branch_ids)
    return FlexPlan(
        **common("flex", segment_ids, causal),
        block_mask=bm,
        segment_ids=segment_ids,
        branch_ids=branch_ids,
    )


def _layer_block_mask(plan: FlexPlan, layer: LayerAttention) -> BlockMask:
    if layer.window is None and layer.chunk is None:
        return plan.block_mask
    key = (layer.window, layer.chunk)
    if key not in plan.layer_masks:
        plan.layer_masks[key] = block_mask(
            plan.segment_ids,
            causal=plan.causal,
            branch_ids=plan.branch_ids,
            positions=plan.positions,
            window=layer.window,
            chunk=layer.chunk,
        )
    return plan.layer_masks[key]


def _softcap_mod(cap: float) -> Callable[..., torch.Tensor]:
    def score_mod(
        score: torch.Tensor, b: torch.Tensor, h: torch.Tensor, q: torch.Tensor, kv: torch.Tensor
    ) -> torch.Tensor:
        return cap * torch.tanh(score / cap)

    return score_mod


@functools.cache
def _kernel(compiled: bool) -> Callable[..., torch.Tensor]:
    from torch.nn.attention.flex_attention import flex_attention

    return torch.compile(flex_attention, dynamic=False) if compiled else flex_attention  # type: ignore[return-value]  # torch.compile's stub returns a loose callable


def attend_flex(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, plan: AttentionPlan, scale: float, layer: LayerAttention = PLAIN
) -> torch.Tensor:
    assert isinstance(plan, FlexPlan)
    kw = {} if layer.softcap is None else {"score_mod": _softcap_mod(layer.softcap)}
    return _kernel(q.is_cuda)(q, k, v, block_mask=_layer_block_mask(plan, layer), scale=scale, **kw)


FLEX = Backend(
    name="flex",
    plan=plan_flex,
    attend=attend_flex,
    features=frozenset({"window", "chunk", "softcap"}),
    summary="FlexAttention with a BlockMask, compiled on CUDA (forward only on CPU)",
)
