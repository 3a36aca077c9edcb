"""Per-row cross-entropy of logits ``(N, V)``, computed in float32 from logits of any float dtype.

    loss = token_cross_entropy(logits, targets)      # (N, V), (N,) -> (N,) float32, 0 where ignored

On CUDA (with Triton) one fused kernel reads each row once for the loss (an online
log-sum-exp) and once for its gradient (``softmax - onehot``, written in the logits' dtype): no
float32 copy of the logits, no saved log-probabilities. The per-token losses of packed rows
(every sequence's own mean) make this the step's largest per-token cost on a GPU: on an H100,
PyTorch's log-softmax, its backward and the float32 copy cost ~0.29 us per target over a
30,522-token vocabulary (benchmarks/gpu.md). Elsewhere, and under ``torch.compile`` (which fuses
the plain form itself), it is :func:`cross_entropy_reference`: ``F.cross_entropy`` on the logits
in float32, the definition the kernel is tested against.

    >>> logits = torch.tensor([[0.0, 0.0], [2.0, 0.0]])
    >>> [round(x, 4) for x in token_cross_entropy(logits, torch.tensor([1, -100])).tolist()]
    [0.6931, 0.0]
"""

from __future__ import annotations

import functools
from typing import Any

import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable

from seqpack.data.sequences import IGNORE_INDEX

_BLOCK = 4096  # columns per step of a row's loop


def cross_entropy_reference(logits: torch.Tensor, targets: torch.Tensor, *, ignore_index: int = IGNORE_INDEX) -> torch.Tensor:
    """``F.cross_entropy`` of each row in float32; 0 where the target is ``ignore_index``.  # (N,)"""
    return F.cross_entropy(logits.float(), targets, ignore_index=ignore_index, reduction="none")


def token_cross_entropy(logits: torch.Tensor, targets: torch.Tensor, *, ignore_index: int = IGNORE_INDEX) -> torch.Tensor:
    """Cross-entropy of each row of ``logits`` (N, V) against ``targets`` (N,), float32.  # (N,)"""
    if _fused_ok(logits, targets):
        return _FusedCrossEntropy.apply(logits, targets, ignore_index)  # type: ignore[no-any-return]
    return cross_entropy_reference(logits, targets, ignore_index=ignore_index)


def _fused_ok(logits: torch.Tensor, targets: torch.Tensor) -> bool:
    return (logits.is_cuda and logits.ndim == 2 and logits.shape[0] > 0 and logits.stride(-1) == 1
            and logits.dtype in (torch.float32, torch.bfloat16, torch.float16) and targets.shape == logits.shape[:1]
            and not torch.compiler.is_compiling() and _kernels() is not None)


@functools.cache
def _kernels() -> tuple[Any, Any] | None:
    """The two Triton kernels, compiled on first use; None without Triton."""
    try:
        import triton
        import triton.language as tl
    except ImportError:
        return None

    @triton.jit
    def forward(x_ptr, x_stride, t_ptr, loss_ptr, lse_ptr, V, ignore, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
        row = tl.program_id(0).to(tl.int64)
        x_row = x_ptr + row * x_stride
        m = tl.full((), float("-inf"), tl.float32)  # running max
        s = tl.full((), 0.0, tl.float32)  # running sum of exp(x - m)
        for start in range(0, V, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            x = tl.load(x_row + cols, mask=cols < V, other=float("-inf")).to(tl.float32)
            m_new = tl.maximum(m, tl.max(x, 0))
            s = s * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), 0)
            m = m_new
        lse = m + tl.log(s)
        t = tl.load(t_ptr + row)
        valid = t != ignore
        xt = tl.load(x_row + t, mask=valid, other=0.0).to(tl.float32)
        tl.store(loss_ptr + row, tl.where(valid, lse - xt, 0.0))
        tl.store(lse_ptr + row, lse)

    @triton.jit
    def backward(x_ptr, x_stride, t_ptr, lse_ptr, g_ptr, dx_ptr, dx_stride, V, ignore,  # type: ignore[no-untyped-def]
                 BLOCK: tl.constexpr):
        row = tl.program_id(0).to(tl.int64)
        x_row = x_ptr + row * x_stride
        dx_row = dx_ptr + row * dx_stride
        t = tl.load(t_ptr + row)
        g = tl.where(t != ignore, tl.load(g_ptr + row).to(tl.float32), 0.0)
        lse = tl.load(lse_ptr + row)
        for start in range(0, V, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            inside = cols < V
            x = tl.load(x_row + cols, mask=inside, other=0.0).to(tl.float32)
            p = tl.exp(x - lse)
            p = tl.where(cols == t, p - 1.0, p)
            tl.store(dx_row + cols, (p * g).to(dx_ptr.dtype.element_ty), mask=inside)

    return forward, backward


class _FusedCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, logits: torch.Tensor, targets: torch.Tensor, ignore_index: int) -> torch.Tensor:
        kernels = _kernels()
        assert kernels is not None
        N, V = logits.shape
        targets = targets.contiguous()
        # the reference raises on a target outside the vocabulary; the kernel would read past the
        # row, so check on the device (no synchronisation)
        torch._assert_async(((targets >= 0) & (targets < V) | (targets == ignore_index)).all(),
                            "cross-entropy target outside [0, V)")
        loss = torch.empty(N, dtype=torch.float32, device=logits.device)
        lse = torch.empty(N, dtype=torch.float32, device=logits.device)
        kernels[0][(N,)](logits, logits.stride(0), targets, loss, lse, V, ignore_index, BLOCK=_BLOCK, num_warps=8)
        ctx.save_for_backward(logits, targets, lse)
        ctx.ignore_index = ignore_index
        return loss

    @staticmethod
    @once_differentiable  # a second derivative is refused with a clear error, not silently wrong
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        kernels = _kernels()
        assert kernels is not None
        logits, targets, lse = ctx.saved_tensors
        N, V = logits.shape
        dx = torch.empty(N, V, dtype=logits.dtype, device=logits.device)
        kernels[1][(N,)](logits, logits.stride(0), targets, lse, grad.contiguous(), dx, dx.stride(0), V, ctx.ignore_index,
                         BLOCK=_BLOCK, num_warps=8)
        return dx, None, None


__all__ = ["cross_entropy_reference", "token_cross_entropy"]
