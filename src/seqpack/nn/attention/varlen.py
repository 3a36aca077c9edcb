"""Variable-length (unpadded) attention on CUDA: the real tokens of every row are concatenated
into ``(total, H, d)`` and one flash kernel walks the sequences given by ``cu_seqlens``.

``flash_varlen``  ``flash_attn_varlen_func`` from the ``flash-attn`` package (fp16/bf16).
``varlen``        PyTorch's own ``torch.nn.attention.varlen.varlen_attn`` (the flash kernel
                  built into torch; fp16/bf16), for when no flash-attn wheel fits.

Padding tokens get output 0.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from seqpack.nn.attention.base import (
    AttentionPlan,
    Backend,
    common,
    half_precision,
    tokens,
    untokens,
)
from seqpack.nn.masks import cu_seqlens, max_seqlen, unpad_index


@dataclass(frozen=True, kw_only=True)
class VarlenPlan(AttentionPlan):
    unpad: torch.Tensor  # (total,) flat index of every real token
    cu_seqlens: torch.Tensor  # (N + 1,) int32
    max_seqlen: int


def _plan(name: str) -> Callable[..., VarlenPlan]:
    def plan(segment_ids: torch.Tensor, *, causal: bool, dtype: torch.dtype) -> VarlenPlan:
        return VarlenPlan(
            **common(name, segment_ids, causal),  # type: ignore[arg-type]
            unpad=unpad_index(segment_ids), cu_seqlens=cu_seqlens(segment_ids), max_seqlen=max_seqlen(segment_ids),
        )
    return plan


def _scatter(q: torch.Tensor, plan: VarlenPlan, out: torch.Tensor) -> torch.Tensor:
    """Unpadded outputs ``(total, H, d)`` back into ``(B, H, T, d)``, zeros at padding."""
    B, H, T, d = q.shape
    return untokens(q.new_zeros(B * T, H, d).index_copy(0, plan.unpad, out.to(q.dtype)), B, T)


def flash_attn_available() -> bool:
    try:
        import flash_attn  # noqa: F401
    except ImportError:
        return False
    return True


def _flash_unavailable(segment_ids: torch.Tensor, dtype: torch.dtype) -> str | None:
    if segment_ids.is_cuda and flash_attn_available():
        return None
    return ("attention backend 'flash_varlen' needs CUDA tensors and the flash-attn package; "
            "use backend='varlen' (PyTorch's own) on CUDA, or 'sdpa' / 'per_document' on CPU")


def attend_flash(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, plan: AttentionPlan, scale: float) -> torch.Tensor:
    from flash_attn import flash_attn_varlen_func

    assert isinstance(plan, VarlenPlan)
    o = flash_attn_varlen_func(
        *(tokens(x)[plan.unpad] for x in (q, k, v)), plan.cu_seqlens, plan.cu_seqlens, plan.max_seqlen,
        plan.max_seqlen, softmax_scale=scale, causal=plan.causal,
    )
    return _scatter(q, plan, o)


def torch_varlen() -> Callable[..., Any] | None:
    """``torch.nn.attention.varlen.varlen_attn`` when this torch has it (2.10+), else None."""
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return None
    return varlen_attn  # type: ignore[no-any-return]


def _torch_unavailable(segment_ids: torch.Tensor, dtype: torch.dtype) -> str | None:
    if segment_ids.is_cuda and half_precision(dtype) and torch_varlen() is not None:
        return None
    return (f"attention backend 'varlen' needs CUDA tensors in float16/bfloat16 (got {segment_ids.device.type}, "
            f"{dtype}) and torch >= 2.10 (torch.nn.attention.varlen); use 'sdpa' or 'per_document' otherwise")


@functools.cache
def _varlen_params(fn: Callable[..., Any]) -> frozenset[str]:
    return frozenset(inspect.signature(fn).parameters)  # read once, not in every layer's call


def varlen_kwargs(fn: Callable[..., Any], causal: bool, scale: float, d: int) -> dict[str, Any]:
    """The causal and scale keywords of this torch's ``varlen_attn`` (its signature changed across releases)."""
    params = _varlen_params(fn)
    kw: dict[str, Any] = {}
    if "window_size" in params:
        kw["window_size"] = (-1, 0) if causal else (-1, -1)
    elif "is_causal" in params:
        kw["is_causal"] = causal
    elif causal:
        raise ValueError("this torch's varlen_attn has no causal option; use backend='flex' or 'per_document'")
    if "scale" in params:
        kw["scale"] = scale
    elif abs(scale - d ** -0.5) > 1e-12:
        raise ValueError("this torch's varlen_attn takes no scale; only the default 1/sqrt(d) is supported")
    return kw


def attend_torch(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, plan: AttentionPlan, scale: float) -> torch.Tensor:
    assert isinstance(plan, VarlenPlan)
    fn = torch_varlen()
    assert fn is not None
    cu = plan.cu_seqlens.to(torch.int32)
    o = fn(*(tokens(x)[plan.unpad] for x in (q, k, v)), cu, cu, plan.max_seqlen, plan.max_seqlen,
           **varlen_kwargs(fn, plan.causal, scale, q.shape[-1]))
    return _scatter(q, plan, o)


FLASH_VARLEN = Backend(
    name="flash_varlen", plan=_plan("flash_varlen"), attend=attend_flash, unavailable=_flash_unavailable,
    summary="flash_attn_varlen_func on the unpadded tokens (CUDA, fp16/bf16, the flash-attn package)",
)
VARLEN = Backend(
    name="varlen", plan=_plan("varlen"), attend=attend_torch, unavailable=_torch_unavailable,
    summary="PyTorch's varlen_attn (its built-in flash kernel) on the unpadded tokens (CUDA, fp16/bf16)",
)
