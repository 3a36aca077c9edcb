"""The fused cross-entropy (CUDA, Triton) against its definition, ``F.cross_entropy`` in float64.

On CPU :func:`token_cross_entropy` is the reference itself; the kernel is checked on CUDA only.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from seqpack.nn.cross_entropy import cross_entropy_reference, token_cross_entropy


def test_reference_is_cross_entropy_in_float32() -> None:
    logits = torch.tensor([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]], dtype=torch.bfloat16)
    got = token_cross_entropy(logits, torch.tensor([2, -100]))
    assert got.dtype == torch.float32
    want = -torch.log_softmax(torch.tensor([1.0, 2.0, 3.0]), 0)[2]
    assert got.tolist() == pytest.approx([float(want), 0.0], rel=1e-6)
    assert torch.equal(cross_entropy_reference(logits, torch.tensor([2, -100])), got)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the fused kernel runs on CUDA")
@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16))
@pytest.mark.parametrize(("N", "V"), ((1, 5), (7, 4096), (300, 4097), (257, 30522)))
@pytest.mark.parametrize("sliced", (False, True))
def test_fused_kernel_equals_the_definition(dtype: torch.dtype, N: int, V: int, sliced: bool) -> None:
    pytest.importorskip("triton")
    g = torch.Generator(device="cuda").manual_seed(N * V)
    wide = torch.randn(N, V + 6 * sliced, device="cuda", generator=g) * 4  # logits up to ~+-16
    logits = wide[:, :V].to(dtype) if not sliced else wide.to(dtype)[:, :V]  # a view with row stride V + 6
    targets = torch.randint(0, V, (N,), device="cuda", generator=g)
    targets[::3] = -100  # ignored rows: loss 0, gradient 0
    weights = torch.randn(N, device="cuda", generator=g)
    x = logits.detach().requires_grad_()
    loss = token_cross_entropy(x, targets)
    (loss * weights).sum().backward()
    ref_x = logits.detach().double().requires_grad_()
    ref = F.cross_entropy(ref_x, targets, reduction="none")
    (ref * weights.double()).sum().backward()
    # float32 online log-sum-exp over <= 30,522 terms (blocks of 4,096, 8 blocks at most): relative
    # error of the sum <= ~22 ulp (1.3e-6), so the loss is within ~3e-6 of float64; 1e-5 leaves a margin
    # (a wrong max, a missed block or a wrong target column is off by O(1))
    assert (loss.double() - ref).abs().max() <= 1e-5 + 1e-6 * ref.abs().max()
    # gradient softmax - onehot: each entry within 3e-6 (the log-sum-exp's error) before rounding to the
    # logits' dtype; bfloat16 adds half an ulp (2^-9 relative) of each entry
    err = (x.grad.double() - ref_x.grad).abs()  # type: ignore[union-attr]
    rel = 2.0**-8 if dtype == torch.bfloat16 else 0.0
    assert bool((err <= 1e-5 + rel * ref_x.grad.abs()).all()), float(err.max())  # type: ignore[union-attr]
    assert x.grad.dtype == dtype and bool((x.grad[::3] == 0).all())  # type: ignore[union-attr]
