"""Variable-length attention on CUDA: the rows are read as they are, ``(B*T, H, d)``, and one
flash kernel walks the runs given by ``cu_seqlens``.

``flash_varlen``  ``flash_attn_varlen_func`` from the ``flash-attn`` package (fp16/bf16).
``varlen``        PyTorch's own ``torch.nn.attention.varlen.varlen_attn`` (the flash kernel
                  built into torch; fp16/bf16), for when no flash-attn wheel fits.

No gather and no scatter: every sequence is a run, and so is the row-end padding, cut into
blocks of at most 128 tokens (`seqpack.nn.masks.row_runs`). A real token attends only to
its own sequence; padding attends to the padding of its block. Packed rows are ~99.9% full, so
the padding blocks cost nearly nothing, while gathering the real tokens out of the rows and
scattering them back cost as much as the kernel (docs/benchmarks/gpu.md). Padding outputs are
unspecified (finite; nothing reads them), as with ``sdpa``'s key-padding form.

    seg      [[1 1 2 0]  [1 1 1 1]]   (B, T) = (2, 4)
    runs      0   2 3 4   8           cu_seqlens over the 8 flattened tokens

`varlen_oracle` runs each run through SDPA on its own: the slow, obviously correct
kernel the fast ones are tested against (on CPU too).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from seqpack.errors import UserError
from seqpack.nn.attention.base import (
    PLAIN,
    AttentionPlan,
    Backend,
    LayerAttention,
    common,
    half_precision,
    tokens,
    untokens,
)
from seqpack.nn.masks import row_runs

#: ``kernel(q, k, v, cu_seqlens, max_seqlen, causal, scale, window)``; ``window``: a causal sliding
#: window (a query sees itself and the ``window - 1`` tokens before it in its run), or None
Kernel = Callable[
    [torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, int, bool, float, "int | None"], torch.Tensor
]


@dataclass(frozen=True, kw_only=True)
class VarlenPlan(AttentionPlan):
    cu_seqlens: torch.Tensor  # (R + 1,) int32: run boundaries over the B*T flattened tokens
    max_seqlen: int  # the longest run


def _plan(name: str) -> Callable[..., VarlenPlan]:
    def plan(segment_ids: torch.Tensor, *, causal: bool, dtype: torch.dtype) -> VarlenPlan:
        cu = row_runs(segment_ids)
        longest = int((cu[1:] - cu[:-1]).max()) if cu.numel() > 1 else 0
        return VarlenPlan(**common(name, segment_ids, causal), cu_seqlens=cu, max_seqlen=longest)

    return plan


def attend_runs(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    plan: AttentionPlan,
    scale: float,
    kernel: Kernel,
    layer: LayerAttention = PLAIN,
) -> torch.Tensor:
    """``kernel(q, k, v, cu_seqlens, max_seqlen, causal, scale, window)`` on the flattened rows.
    A window is relative, so a run's own token distances give it (a document is one run).  # (B, H, T, d)"""
    assert isinstance(plan, VarlenPlan)
    B, T = q.shape[0], q.shape[2]
    o = kernel(tokens(q), tokens(k), tokens(v), plan.cu_seqlens, plan.max_seqlen, plan.causal, scale, layer.window)
    return untokens(o.to(q.dtype), B, T)  # o: (B*T, H, d)


def varlen_oracle(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu: torch.Tensor,
    max_seqlen: int,
    causal: bool,
    scale: float,
    window: int | None = None,
) -> torch.Tensor:
    """Each run through SDPA on its own: slow and obviously correct.  # (total, H, d) -> (total, H, d)"""
    outs = []
    for a, b in zip(cu[:-1].tolist(), cu[1:].tolist()):
        qs, ks, vs = (x[a:b].transpose(0, 1)[None] for x in (q, k, v))  # (1, H, n, d)
        mask = None
        if window is not None:
            i = torch.arange(b - a, device=q.device)
            mask = (i[None, :] <= i[:, None]) & (i[None, :] > i[:, None] - window)  # (n, n)
        o = F.scaled_dot_product_attention(qs, ks, vs, attn_mask=mask, is_causal=causal and mask is None, scale=scale)
        outs.append(o[0].transpose(0, 1))
    return torch.cat(outs) if outs else q.new_zeros(q.shape)


def flash_attn_available() -> bool:
    try:
        import flash_attn  # noqa: F401
    except ImportError:
        return False
    return True


def _flash_unavailable(segment_ids: torch.Tensor, dtype: torch.dtype) -> str | None:
    if segment_ids.is_cuda and flash_attn_available():
        return None
    return (
        "attention backend 'flash_varlen' needs CUDA tensors and the flash-attn package; "
        "use backend='varlen' (PyTorch's own) on CUDA, or 'sdpa' / 'per_document' on CPU"
    )


def _flash_kernel(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu: torch.Tensor,
    m: int,
    causal: bool,
    scale: float,
    window: int | None = None,
) -> torch.Tensor:
    from flash_attn import flash_attn_varlen_func

    kw = {} if window is None else {"window_size": (window - 1, 0)}  # flash-attn's (left, right), inclusive
    return flash_attn_varlen_func(q, k, v, cu, cu, m, m, softmax_scale=scale, causal=causal, **kw)


def attend_flash(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, plan: AttentionPlan, scale: float, layer: LayerAttention = PLAIN
) -> torch.Tensor:
    return attend_runs(q, k, v, plan, scale, _flash_kernel, layer)


def torch_varlen() -> Callable[..., Any] | None:
    """``torch.nn.attention.varlen.varlen_attn`` when this torch has it (2.10+), else None."""
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return None
    return varlen_attn


def _torch_unavailable(segment_ids: torch.Tensor, dtype: torch.dtype) -> str | None:
    if segment_ids.is_cuda and half_precision(dtype) and torch_varlen() is not None:
        return None
    return (
        f"attention backend 'varlen' needs CUDA tensors in float16/bfloat16 (got {segment_ids.device.type}, "
        f"{dtype}) and torch >= 2.10 (torch.nn.attention.varlen); use 'sdpa' or 'per_document' otherwise"
    )


@functools.cache
def varlen_params(fn: Callable[..., Any]) -> frozenset[str]:
    """The keyword names of this torch's ``varlen_attn`` (read once, not in every layer's call)."""
    return frozenset(inspect.signature(fn).parameters)


def varlen_kwargs(
    fn: Callable[..., Any], causal: bool, scale: float, d: int, window: int | None = None
) -> dict[str, Any]:
    """The causal, scale and window keywords of this torch's ``varlen_attn`` (its signature changed across releases)."""
    params = varlen_params(fn)
    kw: dict[str, Any] = {}
    if window is not None and not (causal and "window_size" in params):
        raise UserError(
            "this torch's varlen_attn takes no sliding window; use backend='flex', 'sdpa' or 'per_document'"
        )
    if "window_size" in params:
        kw["window_size"] = (window - 1, 0) if window is not None else (-1, 0) if causal else (-1, -1)
    elif "is_causal" in params:
        kw["is_causal"] = causal
    elif causal:
        raise UserError("this torch's varlen_attn has no causal option; use backend='flex' or 'per_document'")
    if "scale" in params:
        kw["scale"] = scale
    elif abs(scale - d**-0.5) > 1e-12:
        raise UserError("this torch's varlen_attn takes no scale; only the default 1/sqrt(d) is supported")
    return kw


def _torch_kernel(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu: torch.Tensor,
    m: int,
    causal: bool,
    scale: float,
    window: int | None = None,
) -> torch.Tensor:
    fn = torch_varlen()
    assert fn is not None
    return fn(q, k, v, cu, cu, m, m, **varlen_kwargs(fn, causal, scale, q.shape[-1], window))


def attend_torch(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, plan: AttentionPlan, scale: float, layer: LayerAttention = PLAIN
) -> torch.Tensor:
    return attend_runs(q, k, v, plan, scale, _torch_kernel, layer)


FLASH_VARLEN = Backend(
    name="flash_varlen",
    plan=_plan("flash_varlen"),
    attend=attend_flash,
    unavailable=_flash_unavailable,
    features=frozenset({"window"}),
    summary="flash_attn_varlen_func on the rows as they are (CUDA, fp16/bf16, the flash-attn package)",
)
#: the varlen plan of ``segment_ids`` ``(B, T)``: every row's documents as one flat run
plan_varlen = _plan("varlen")

VARLEN = Backend(
    name="varlen",
    plan=plan_varlen,
    attend=attend_torch,
    unavailable=_torch_unavailable,
    features=frozenset({"window"}),
    summary="PyTorch's varlen_attn (its built-in flash kernel) on the rows as they are (CUDA, fp16/bf16)",
)
