"""The fused cross-entropy (CUDA, Triton) against its definition, ``F.cross_entropy`` in float64.

On CPU :func:`token_cross_entropy` is the reference itself; the kernel is checked on CUDA only.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from seqpack.nn.cross_entropy import cross_entropy_oracle, token_cross_entropy


def test_reference_is_cross_entropy_in_float32() -> None:
    logits = torch.tensor([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]], dtype=torch.bfloat16)
    got = token_cross_entropy(logits, torch.tensor([2, -100]))
    assert got.dtype == torch.float32
    want = -torch.log_softmax(torch.tensor([1.0, 2.0, 3.0]), 0)[2]
    assert got.tolist() == pytest.approx([float(want), 0.0], rel=1e-6)
    assert torch.equal(cross_entropy_oracle(logits, torch.tensor([2, -100])), got)


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
    err = (x.grad.double() - ref_x.grad).abs()  # type: ignore[union-attr,operator]
    rel = 2.0**-8 if dtype == torch.bfloat16 else 0.0
    assert bool((err <= 1e-5 + rel * ref_x.grad.abs()).all()), float(err.max())  # type: ignore[union-attr]
    assert x.grad.dtype == dtype and bool((x.grad[::3] == 0).all())  # type: ignore[union-attr,index]


# --- the head and its loss in one step (linear_cross_entropy) ---------------------------------------

from seqpack.nn.cross_entropy import (  # noqa: E402
    linear_cross_entropy,
    linear_cross_entropy_oracle,
)


def _head_case(
    N: int, V: int, H: int, *, bias: bool, dtype: torch.dtype = torch.float64, device: str = "cpu", seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor, torch.Tensor]:
    g = torch.Generator(device=device).manual_seed(seed)
    h = torch.randn(N, H, device=device, generator=g, dtype=dtype)
    w = torch.randn(V, H, device=device, generator=g, dtype=dtype) / H**0.5
    b = torch.randn(V, device=device, generator=g, dtype=dtype) if bias else None
    t = torch.randint(0, V, (N,), device=device, generator=g)
    t[::4] = -100  # ignored rows: no loss, no gradient
    rw = torch.rand(N, device=device, generator=g, dtype=dtype)
    return h, w, b, t, rw


def _loss_and_grads(fn, h, w, b, t, rw, **kw):
    leaves = [x.detach().clone().requires_grad_() for x in (h, w) + ((b,) if b is not None else ())]
    loss, top1 = fn(leaves[0], leaves[1], t, rw, bias=leaves[2] if b is not None else None, **kw)
    loss.backward()
    return loss.detach(), top1, [x.grad for x in leaves]


@pytest.mark.parametrize("chunk_rows", (None, 1, 3, 64))
@pytest.mark.parametrize("bias", (False, True))
def test_linear_cross_entropy_equals_the_definition(chunk_rows: int | None, bias: bool) -> None:
    h, w, b, t, rw = _head_case(10, 37, 8, bias=bias)
    loss, top1, grads = _loss_and_grads(linear_cross_entropy, h, w, b, t, rw, chunk_rows=chunk_rows)
    ref, ref_top1, ref_grads = _loss_and_grads(linear_cross_entropy_oracle, h, w, b, t, rw)
    # float64 products; the per-row loss and softmax in float32 (as the reference's .float()):
    # each within a few float32 ulps (6e-8) of its size, summed over 10 rows -> 1e-6 relative is ample
    # (a wrong chunk, a missed row or a wrong target column is off by O(1))
    assert float(loss) == pytest.approx(float(ref), rel=1e-6)
    assert torch.equal(top1, ref_top1) and not bool(top1[::4].any())
    for got, want in zip(grads, ref_grads):
        assert got.dtype == want.dtype
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)  # float32 softmax entries: ~1e-7 each


def test_linear_cross_entropy_checks_its_shapes() -> None:
    h, w, _, t, rw = _head_case(4, 5, 3, bias=False)
    with pytest.raises(ValueError, match=r"targets and row_weights must be \(4,\)"):
        linear_cross_entropy(h, w, t[:3], rw)
    with pytest.raises(ValueError, match="hidden must be"):
        linear_cross_entropy(h, w[:, :2], t, rw)
    with pytest.raises(ValueError, match="chunk_rows"):
        linear_cross_entropy(h, w, t, rw, chunk_rows=0)


def test_linear_cross_entropy_under_bf16_autocast_adds_no_error_beyond_bf16() -> None:
    """On CPU autocast: the products in bf16 like ``F.linear`` under autocast; against float64, the
    fused step's error is that of the plain bf16 path (same roundings, other summation orders)."""
    h, w, b, t, rw = _head_case(64, 300, 32, bias=False, dtype=torch.float32)
    h64, w64, b64 = (x.double() if x is not None and x.is_floating_point() else x for x in (h, w, b))
    truth, _, truth_grads = _loss_and_grads(linear_cross_entropy_oracle, h64, w64, b64, t, rw.double())
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got, _, grads = _loss_and_grads(linear_cross_entropy, h, w, b, t, rw, chunk_rows=16)
        plain, _, plain_grads = _loss_and_grads(linear_cross_entropy_oracle, h, w, b, t, rw)
    # both round the logits and the gradient products to bf16 (u = 2^-8); their errors are of one
    # size, never equal: allow twice the plain path's error plus 2u of the value's scale
    u = 2.0**-8
    assert abs(float(got) - float(truth)) <= 2 * abs(float(plain) - float(truth)) + 2 * u * abs(float(truth))
    for g, p, r in zip(grads, plain_grads, truth_grads):
        assert g.dtype == torch.float32
        err, base = (g.double() - r).abs().max(), (p.double() - r).abs().max()
        assert err <= 2 * base + 2 * u * r.abs().max(), (float(err), float(base))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the Triton kernels run on CUDA")
@pytest.mark.parametrize(("N", "V", "H"), ((7, 4097, 64), (300, 30522, 128), (1000, 128256, 64)))
def test_linear_cross_entropy_on_cuda_adds_no_error_beyond_bf16(N: int, V: int, H: int) -> None:
    pytest.importorskip("triton")
    h, w, b, t, rw = _head_case(N, V, H, bias=False, dtype=torch.float32, device="cuda")
    truth, truth_top1, truth_grads = _loss_and_grads(
        linear_cross_entropy_oracle, h.double(), w.double(), None, t, rw.double()
    )
    with torch.autocast("cuda", dtype=torch.bfloat16):
        got, top1, grads = _loss_and_grads(linear_cross_entropy, h, w, b, t, rw, chunk_rows=max(1, N // 3))
        plain, _, plain_grads = _loss_and_grads(linear_cross_entropy_oracle, h, w, b, t, rw)
    u = 2.0**-8  # as in the CPU test above: twice the plain bf16 path's error plus 2u of the scale
    assert abs(float(got) - float(truth)) <= 2 * abs(float(plain) - float(truth)) + 2 * u * abs(float(truth))
    for g, p, r in zip(grads, plain_grads, truth_grads):
        err, base = (g.double() - r).abs().max(), (p.double() - r).abs().max()
        assert err <= 2 * base + 2 * u * r.abs().max(), (float(err), float(base))
    assert float((top1 == truth_top1).float().mean()) > 0.99  # bf16 ties aside, the same top-1 tokens


@pytest.mark.skipif(torch.cuda.is_available(), reason="with a GPU the kernels themselves are tested (above)")
def test_the_kernels_under_the_triton_interpreter() -> None:
    """Where Triton is installed but no GPU is, its interpreter runs the kernels on CPU tensors: the
    fused path (in-place gradient, chunks, top-1) checked without a device."""
    pytest.importorskip("triton")
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent("""
        import torch
        import seqpack.nn.cross_entropy as ce
        ce._use_kernels = lambda x: True
        from tests.nn.test_cross_entropy import _head_case, _loss_and_grads
        for N, V, bias, chunk in ((10, 37, True, 3), (33, 4100, False, None)):
            h, w, b, t, rw = _head_case(N, V, 8, bias=bias, dtype=torch.float32)
            got, top1, grads = _loss_and_grads(ce.linear_cross_entropy, h, w, b, t, rw, chunk_rows=chunk)
            ref, ref_top1, ref_grads = _loss_and_grads(ce.linear_cross_entropy_oracle, h, w, b, t, rw)
            assert abs(float(got) - float(ref)) <= 1e-5 * abs(float(ref)), (float(got), float(ref))
            assert torch.equal(top1, ref_top1)
            for g, r in zip(grads, ref_grads):
                torch.testing.assert_close(g, r, rtol=1e-4, atol=1e-5)
        print("ok")
    """)
    import os

    env = {**os.environ, "TRITON_INTERPRET": "1"}
    r = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))),
    )
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stderr[-3000:]
