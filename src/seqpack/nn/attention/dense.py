"""Dense-mask backends: ``sdpa`` (a bool mask into ``scaled_dot_product_attention``) and
``eager`` (the oracle, slow and obviously correct: ``softmax(q k^T * scale + mask) v``)."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from seqpack.errors import UserError
from seqpack.nn.attention.base import (
    PLAIN,
    AttentionPlan,
    Backend,
    LayerAttention,
    band,
    common,
    oracle_attention,
)
from seqpack.nn.masks import attention_mask


@dataclass(frozen=True, kw_only=True)
class MaskPlan(AttentionPlan):
    mask: torch.Tensor | None  # (B, 1, T, T) or (B, 1, 1, T); None: plain is_causal
    #: the mask of each (window, chunk) a layer asked for, made once per batch
    layer_masks: dict[tuple[int | None, int | None], torch.Tensor] = field(
        default_factory=dict, compare=False, repr=False
    )


def layer_mask(plan: MaskPlan, layer: LayerAttention) -> torch.Tensor | None:
    """The plan's bool mask narrowed by the layer's window and chunk (cached per pair); the plan's
    own mask when the layer has neither.  # (B, 1, T, T)"""
    if layer.window is None and layer.chunk is None:
        return plan.mask
    key = (layer.window, layer.chunk)
    if key not in plan.layer_masks:
        assert plan.positions is not None
        narrowed = band(plan.positions, layer)
        assert narrowed is not None
        base = plan.mask if plan.mask is None or plan.mask.dtype == torch.bool else plan.mask == 0
        plan.layer_masks[key] = narrowed if base is None else narrowed & base
    return plan.layer_masks[key]


def _sdpa_mask(segment_ids: torch.Tensor, *, causal: bool) -> torch.Tensor | None:
    """Dense bool mask; a cheap key-padding form when no row holds two sequences."""
    if segment_ids.numel() and int(segment_ids.max()) <= 1:
        if causal:  # one sequence per row, padding after it: plain is_causal never reads padding keys
            return None
        return (segment_ids > 0)[:, None, None, :]  # (B, 1, 1, T) key padding
    return attention_mask(segment_ids, causal=causal)  # (B, 1, T, T)


def plan_sdpa(
    segment_ids: torch.Tensor, *, causal: bool, dtype: torch.dtype, branch_ids: torch.Tensor | None = None
) -> MaskPlan:
    mask = (
        _sdpa_mask(segment_ids, causal=causal)
        if branch_ids is None
        else attention_mask(segment_ids, causal=causal, branch_ids=branch_ids)
    )
    return MaskPlan(**common("sdpa", segment_ids, causal), mask=mask)


def attend_sdpa(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, plan: AttentionPlan, scale: float, layer: LayerAttention = PLAIN
) -> torch.Tensor:
    assert isinstance(plan, MaskPlan)
    if plan.mask is not None and plan.mask.dtype != torch.bool and plan.mask.dtype != q.dtype:
        raise UserError(f"an additive mask must have the dtype of q ({q.dtype}), got {plan.mask.dtype}")
    mask = layer_mask(plan, layer)
    is_causal = plan.causal and mask is None
    if q.is_cuda and mask is not None and q.shape[-2] % 128:
        with sdpa_kernel(_NOT_CUDNN):  # see _NOT_CUDNN
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal, scale=scale)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal, scale=scale)


#: SDPA's kernels other than cuDNN's. With a mask and a length that is not a multiple of 128, cuDNN's
#: backward (torch 2.11, H100/H200) returns NaN in dq for lengths of 64 mod 128 (pytorch/pytorch
#: #196678): found on an H200, where bf16 training of a 64-token packed GPT went NaN at its second
#: step under ``sdpa`` and not under ``eager`` or ``per_document``. Multiples of 128 keep cuDNN (the
#: fastest at 512, docs/benchmarks/gpu.md).
_NOT_CUDNN = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]


def plan_eager(
    segment_ids: torch.Tensor, *, causal: bool, dtype: torch.dtype, branch_ids: torch.Tensor | None = None
) -> MaskPlan:
    mask = attention_mask(segment_ids, causal=causal, dtype=dtype, branch_ids=branch_ids)
    return MaskPlan(**common("eager", segment_ids, causal), mask=mask)


def eager_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, *, scale: float
) -> torch.Tensor:
    """Oracle attention with an additive float mask (0 allowed / dtype-min masked).

    A bool mask here would be added as 0/1 and silently attend everywhere, so it is refused.
    Rows with no allowed key (padding) return 0, as SDPA does.

    Args:
        q: queries `(B, H, T, d)`.
        k: keys `(B, H, T, d)`.
        v: values `(B, H, T, d)`.
        mask: the additive float mask, broadcast to `(B, H, T, T)` (`None`: none).
        scale: the scores' scale.

    Returns:
        The output `(B, H, T, d)`.

    Raises:
        UserError: a bool mask.
    """
    if mask is not None and not mask.dtype.is_floating_point:
        raise UserError(
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


def attend_eager(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, plan: AttentionPlan, scale: float, layer: LayerAttention = PLAIN
) -> torch.Tensor:
    assert isinstance(plan, MaskPlan)
    if not layer.features():
        return eager_attention(q, k, v, plan.mask, scale=scale)
    allowed = layer_mask(plan, layer)
    if allowed is not None and allowed.dtype != torch.bool:
        allowed = allowed == 0  # the additive mask: 0 where allowed
    return oracle_attention(q, k, v, allowed, scale=scale, layer=layer)


SDPA = Backend(
    name="sdpa",
    plan=plan_sdpa,
    attend=attend_sdpa,
    features=frozenset({"window", "chunk"}),
    summary="dense (B, 1, T, T) bool mask into scaled_dot_product_attention; rows of one sequence use a "
    "(B, 1, 1, T) key-padding mask or plain is_causal (the padded baseline)",
)
EAGER = Backend(
    name="eager",
    plan=plan_eager,
    attend=attend_eager,
    features=frozenset({"window", "chunk", "softcap", "sinks"}),
    summary="the oracle: softmax(q k^T * scale + additive mask) v in plain ops (every layer argument)",
)
