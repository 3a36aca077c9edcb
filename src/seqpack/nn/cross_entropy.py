"""Per-row cross-entropy of logits ``(N, V)``, computed in float32 from logits of any float dtype.

    loss = token_cross_entropy(logits, targets)      # (N, V), (N,) -> (N,) float32, 0 where ignored

On CUDA (with Triton) one fused kernel reads each row once for the loss (an online
log-sum-exp) and once for its gradient (``softmax - onehot``, written in the logits' dtype): no
float32 copy of the logits, no saved log-probabilities. The per-token losses of packed rows
(every sequence's own mean) make this the step's largest per-token cost on a GPU: on an H100,
PyTorch's log-softmax, its backward and the float32 copy cost ~0.29 us per target over a
30,522-token vocabulary (docs/benchmarks/gpu.md). Elsewhere, and under ``torch.compile`` (which fuses
the plain form itself), it is `cross_entropy_oracle`: ``F.cross_entropy`` on the logits
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
from seqpack.errors import UserError

_BLOCK = 4096  # columns per step of a row's loop


def cross_entropy_oracle(
    logits: torch.Tensor, targets: torch.Tensor, *, ignore_index: int = IGNORE_INDEX
) -> torch.Tensor:
    """``F.cross_entropy`` of each row in float32; 0 where the target is ``ignore_index``.  # (N,)"""
    return F.cross_entropy(logits.float(), targets, ignore_index=ignore_index, reduction="none")


def token_cross_entropy(
    logits: torch.Tensor, targets: torch.Tensor, *, ignore_index: int = IGNORE_INDEX
) -> torch.Tensor:
    """Cross-entropy of each row of ``logits`` (N, V) against ``targets`` (N,), float32.  # (N,)"""
    if _fused_ok(logits, targets):
        return _FusedCrossEntropy.apply(logits, targets, ignore_index)
    return cross_entropy_oracle(logits, targets, ignore_index=ignore_index)


def _fused_ok(logits: torch.Tensor, targets: torch.Tensor) -> bool:
    return (
        logits.is_cuda
        and logits.ndim == 2
        and logits.shape[0] > 0
        and logits.stride(-1) == 1
        and logits.dtype in (torch.float32, torch.bfloat16, torch.float16)
        and targets.shape == logits.shape[:1]
        and not torch.compiler.is_compiling()
        and _kernels() is not None
    )


@functools.cache
def _kernels() -> tuple[Any, Any] | None:
    """The two Triton kernels, compiled on first use; None without Triton."""
    try:
        import triton
        import triton.language as tl
    except ImportError:
        return None

    @triton.jit
    def forward(x_ptr, x_stride, t_ptr, loss_ptr, lse_ptr, top_ptr, V, ignore, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]  # Triton pointers
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
        tl.store(top_ptr + row, (valid & (xt >= m)).to(tl.int8))  # the target is (one of) the row's largest

    @triton.jit
    def backward(  # type: ignore[no-untyped-def]  # Triton's kernel arguments are untyped pointers
        x_ptr,
        x_stride,
        t_ptr,
        lse_ptr,
        g_ptr,
        dx_ptr,
        dx_stride,
        V,
        ignore,
        BLOCK: tl.constexpr,
    ):
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


def _forward_rows(
    kernels: tuple[Any, Any], x: torch.Tensor, targets: torch.Tensor, ignore_index: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The forward kernel over the rows of ``x`` (N, V): each row's loss and log-sum-exp (float32)
    and whether its target is the row's top logit (int8).  # (N,) x 3"""
    N, V = x.shape
    loss = torch.empty(N, dtype=torch.float32, device=x.device)
    lse = torch.empty(N, dtype=torch.float32, device=x.device)
    top = torch.empty(N, dtype=torch.int8, device=x.device)
    kernels[0][(N,)](x, x.stride(0), targets, loss, lse, top, V, ignore_index, BLOCK=_BLOCK, num_warps=8)
    return loss, lse, top


class _FusedCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, logits: torch.Tensor, targets: torch.Tensor, ignore_index: int) -> torch.Tensor:
        kernels = _kernels()
        assert kernels is not None
        _N, V = logits.shape
        targets = targets.contiguous()
        # the oracle raises on a target outside the vocabulary; the kernel would read past the
        # row, so check on the device (no synchronisation)
        torch._assert_async(
            ((targets >= 0) & (targets < V) | (targets == ignore_index)).all(), "cross-entropy target outside [0, V)"
        )
        loss, lse, _ = _forward_rows(kernels, logits, targets, ignore_index)
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
        kernels[1][(N,)](
            logits,
            logits.stride(0),
            targets,
            lse,
            grad.contiguous(),
            dx,
            dx.stride(0),
            V,
            ctx.ignore_index,
            BLOCK=_BLOCK,
            num_warps=8,
        )
        return dx, None, None


#: rows of logits a chunk of `linear_cross_entropy` holds at once, at most this many bytes
_CHUNK_BYTES = 1 << 29
#: ``torch.addmm(..., out_dtype=torch.float32)`` of half-precision inputs (CUDA, torch 2.8+)
_MM_OUT_DTYPE = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2]) >= (2, 8)


def linear_cross_entropy_oracle(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    row_weights: torch.Tensor,
    *,
    bias: torch.Tensor | None = None,
    ignore_index: int = IGNORE_INDEX,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The definition `linear_cross_entropy` is tested against: the logits whole, then
    ``F.cross_entropy`` in float32, weighted and summed. Returns ``(loss, top1)``.  # (), (N,)"""
    logits = F.linear(hidden, weight, bias)  # (N, V)
    ce = F.cross_entropy(logits.float(), targets, ignore_index=ignore_index, reduction="none")
    top1 = (logits.detach().argmax(-1) == targets) & (targets != ignore_index)
    return (ce * row_weights.float()).sum(), top1


def linear_cross_entropy(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    row_weights: torch.Tensor,
    *,
    bias: torch.Tensor | None = None,
    ignore_index: int = IGNORE_INDEX,
    chunk_rows: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``sum_i row_weights[i] * CE(hidden[i] @ weight.T + bias, targets[i])`` without the (N, V)
    logits: a vocabulary head and its loss in one step.  # (N, H), (V, H), (N,), (N,) -> (), (N,)

    Returns the loss (float32, a scalar) and ``top1`` (N,) bool: the target is the head's largest
    logit (the token accuracy; False where ignored). The weights are known before the loss (a
    token mean: ``1 / num_targets``; a per-sequence mean: ``1 / (len * sequences)``), so the head's
    gradient is made during the forward, ``chunk_rows`` rows at a time (by default as many as
    fit in 512 MiB of logits): each chunk's logits become their own gradient in place, then the two
    gradient products; backward only scales them. Three matrix products over the targets, as with
    the logits whole, and never more than one chunk of logits in memory. Under autocast the
    products run in autocast's dtype (the weight cast once), the loss in float32 and the weight's
    gradient accumulates in float32. On CUDA the per-row loss and gradient are the Triton kernels
    of `token_cross_entropy`; elsewhere torch operations. ``hidden`` must not need a
    second derivative.

        >>> h, w = torch.randn(5, 4), torch.randn(7, 4)
        >>> t, rw = torch.tensor([1, 0, -100, 6, 2]), torch.full((5,), 0.25)
        >>> loss, top1 = linear_cross_entropy(h, w, t, rw)
        >>> torch.allclose(loss, linear_cross_entropy_oracle(h, w, t, rw)[0])
        True
    """
    N, V = hidden.shape[0], weight.shape[0]
    if hidden.ndim != 2 or weight.ndim != 2 or hidden.shape[1] != weight.shape[1]:
        raise UserError(f"hidden must be (N, H) and weight (V, H), got {tuple(hidden.shape)} and {tuple(weight.shape)}")
    if targets.shape != (N,) or row_weights.shape != (N,):
        raise UserError(
            f"targets and row_weights must be ({N},), got {tuple(targets.shape)} and {tuple(row_weights.shape)}"
        )
    if chunk_rows is not None and chunk_rows < 1:
        raise UserError(f"chunk_rows must be >= 1, got {chunk_rows}")
    dev = hidden.device.type
    dtype = torch.get_autocast_dtype(dev) if torch.is_autocast_enabled(dev) else hidden.dtype
    if chunk_rows is None:
        chunk_rows = max(1, _CHUNK_BYTES // (max(V, 1) * torch.finfo(dtype).bits // 8))
    out = _LinearCrossEntropy.apply(
        hidden, weight, bias, targets, row_weights.detach().float().contiguous(), ignore_index, chunk_rows, dtype
    )
    return out[0], out[1].bool()


def _accumulate_(acc: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
    """``acc += a @ b`` into a float32 ``acc``: on CUDA with half-precision inputs one product with a
    float32 output (no rounded temporary of ``acc``'s size), elsewhere through a temporary."""
    if _MM_OUT_DTYPE and acc.is_cuda and a.dtype in (torch.float16, torch.bfloat16):
        torch.addmm(acc, a, b, out_dtype=torch.float32, out=acc)
    else:
        acc += a @ b


def _use_kernels(x: torch.Tensor) -> bool:
    """The Triton kernels run on CUDA tensors, outside ``torch.compile``, where Triton is installed."""
    return x.is_cuda and not torch.compiler.is_compiling() and _kernels() is not None


def _loss_and_grad_(
    x: torch.Tensor,
    targets: torch.Tensor,
    row_weights: torch.Tensor,
    ignore_index: int,
    kernels: tuple[Any, Any] | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's loss (float32) and top-1 hit; ``x`` (c, V) is overwritten with
    ``row_weights * (softmax - onehot)`` (0 on ignored rows), in its dtype."""
    c, V = x.shape
    if kernels is not None:
        loss, lse, top = _forward_rows(kernels, x, targets, ignore_index)
        # in place: each program reads a block of its row, then writes the same block
        kernels[1][(c,)](
            x, x.stride(0), targets, lse, row_weights, x, x.stride(0), V, ignore_index, BLOCK=_BLOCK, num_warps=8
        )
        return loss, top.bool()
    xf = x.float()
    valid = targets != ignore_index
    safe = torch.where(valid, targets, 0)
    lse = torch.logsumexp(xf, dim=-1)  # (c,)
    xt = xf.gather(1, safe[:, None])[:, 0]
    loss = torch.where(valid, lse - xt, 0.0)
    top = valid & (xt >= xf.amax(-1))
    grad = torch.exp(xf - lse[:, None])
    grad[torch.arange(c, device=x.device), safe] -= 1.0
    x.copy_(grad * torch.where(valid, row_weights, 0.0)[:, None])
    return loss, top


class _LinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any,
        hidden: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        targets: torch.Tensor,
        row_weights: torch.Tensor,
        ignore_index: int,
        chunk_rows: int,
        dtype: torch.dtype,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        N, V = hidden.shape[0], weight.shape[0]
        need_h, need_w, need_b = ctx.needs_input_grad[:3]
        kernels = _kernels() if _use_kernels(hidden) else None
        pad = -V % 64 if hidden.is_cuda else 0  # aligned rows for cuBLAS (seqpack.nn.heads.vocab_logits)
        with torch.autocast(hidden.device.type, enabled=False):
            w = F.pad(weight.to(dtype), (0, 0, 0, pad))  # (Vp, H)
            b = None if bias is None else F.pad(bias.to(dtype), (0, pad))
            h = hidden.to(dtype)
            targets = targets.contiguous()
            torch._assert_async(
                ((targets >= 0) & (targets < V) | (targets == ignore_index)).all(),
                "cross-entropy target outside [0, V)",
            )
            loss = torch.zeros((), dtype=torch.float32, device=hidden.device)
            top1 = torch.zeros(N, dtype=torch.bool, device=hidden.device)
            grad_h = torch.empty_like(h) if need_h else None
            grad_w = torch.zeros(w.shape, dtype=torch.float32, device=w.device) if need_w else None
            grad_b = torch.zeros(w.shape[0], dtype=torch.float32, device=w.device) if need_b else None
            for lo in range(0, N, chunk_rows):
                hc = h[lo : lo + chunk_rows]
                z = hc @ w.t() if b is None else torch.addmm(b, hc, w.t())  # (c, Vp); padding columns are 0
                rows, top = _loss_and_grad_(
                    z[:, :V], targets[lo : lo + chunk_rows], row_weights[lo : lo + chunk_rows], ignore_index, kernels
                )
                loss += (rows * row_weights[lo : lo + chunk_rows]).sum()
                top1[lo : lo + chunk_rows] = top
                if grad_h is not None:
                    torch.mm(z, w, out=grad_h[lo : lo + chunk_rows])
                if grad_w is not None:
                    _accumulate_(grad_w, z.t(), hc)
                if grad_b is not None:
                    grad_b += z.sum(0)
        ctx.save_for_backward(grad_h, None if grad_w is None else grad_w[:V], None if grad_b is None else grad_b[:V])
        ctx.dtypes = (hidden.dtype, weight.dtype, None if bias is None else bias.dtype)
        ctx.mark_non_differentiable(top1)
        return loss, top1

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: torch.Tensor, _: Any) -> tuple[torch.Tensor | None, ...]:
        grad_h, grad_w, grad_b = ctx.saved_tensors
        dt_h, dt_w, dt_b = ctx.dtypes
        scale = lambda g, dt: None if g is None else (g * grad).to(dt)  # noqa: E731
        return scale(grad_h, dt_h), scale(grad_w, dt_w), scale(grad_b, dt_b), None, None, None, None, None


__all__ = ["cross_entropy_oracle", "linear_cross_entropy", "linear_cross_entropy_oracle", "token_cross_entropy"]
