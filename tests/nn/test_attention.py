from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings

from seqpack.nn import attention_mask, choose_backend, packed_attention, plan_attention
from seqpack.nn.attention import MaskPlan
from tests.nn._packs import packs, segment_rows, spans

CPU_BACKENDS = ("sdpa", "eager", "per_document")
VARLEN_ON_CPU = "varlen (reference kernel)"


def attend(
    backend: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, seg: torch.Tensor, causal: bool
) -> torch.Tensor:
    """``packed_attention`` with ``backend``; ``VARLEN_ON_CPU``: the varlen backends' own plan and
    flattening (the rows as they are) with the per-run SDPA reference in place of the CUDA kernel,
    so that only the kernel is left to the GPU suite."""
    if backend != VARLEN_ON_CPU:
        return packed_attention(q, k, v, plan_attention(seg, causal=causal, backend=backend))
    from seqpack.nn.attention.varlen import attend_runs, plan_varlen, varlen_oracle

    return attend_runs(
        q, k, v, plan_varlen(seg, causal=causal, dtype=q.dtype), 1 / math.sqrt(q.shape[-1]), varlen_oracle
    )


def alone(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
    """One sequence, no mask at all: the unpacked reference.  # (H, n, d)"""
    s = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    if causal:
        n = q.shape[-2]
        s = s.masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), float("-inf"))
    return s.softmax(-1) @ v


@settings(max_examples=30, deadline=None)
@given(packs(max_len=40, max_depth=6))
def test_every_backend_equals_each_sequence_alone(pack) -> None:
    T, rows = pack
    seg = segment_rows(T, rows)
    torch.manual_seed(T)
    q, k, v = (torch.randn(len(rows), 2, T, 8) for _ in range(3))
    for causal in (False, True):
        for backend in (*CPU_BACKENDS, VARLEN_ON_CPU):
            out = attend(backend, q, k, v, seg, causal)
            for b, _, at, n in spans(rows):
                sl = slice(at, at + n)
                want = alone(q[b, :, sl], k[b, :, sl], v[b, :, sl], causal)
                # fp32, a softmax over the same <= 40 keys: only summation order differs
                assert (out[b, :, sl] - want).abs().max() <= 1e-5, (backend, causal)
            if backend in ("sdpa", VARLEN_ON_CPU):  # padding outputs unspecified (key-padding form; own block)
                assert bool(out.isfinite().all()), backend
            else:
                assert bool((out.transpose(1, 2)[seg == 0] == 0).all()), backend


@settings(max_examples=15, deadline=None)
@given(packs(max_len=32, max_depth=5))
def test_gradients_agree_across_backends(pack) -> None:
    T, rows = pack
    seg = segment_rows(T, rows)
    torch.manual_seed(1)
    base = [torch.randn(len(rows), 2, T, 4) for _ in range(3)]
    w = torch.randn(len(rows), 2, T, 4) * (seg > 0)[:, None, :, None]  # a loss on real tokens only
    grads = {}
    for backend in (*CPU_BACKENDS, VARLEN_ON_CPU):
        qkv = [x.clone().requires_grad_() for x in base]
        (attend(backend, qkv[0], qkv[1], qkv[2], seg, True) * w).sum().backward()
        grads[backend] = [x.grad for x in qkv]
    for backend in ("sdpa", "per_document", VARLEN_ON_CPU):  # padding gets no gradient from real tokens
        for g, ref in zip(grads[backend], grads["eager"]):
            assert (g - ref).abs().max() <= 1e-5  # type: ignore[operator]  # x.grad: backward() set it


def _varlen_on_cpu(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, seg: torch.Tensor, causal: bool) -> torch.Tensor:
    """The varlen backends' own plan and flattening, with the per-run SDPA reference kernel in
    place of the CUDA one: what is left to the GPU is the kernel alone."""
    from seqpack.nn.attention.varlen import attend_runs, plan_varlen, varlen_oracle

    plan = plan_varlen(seg, causal=causal, dtype=q.dtype)
    return attend_runs(q, k, v, plan, 1 / math.sqrt(q.shape[-1]), varlen_oracle)


def test_auto_backend_rule() -> None:
    many = torch.arange(1, 9).repeat_interleave(256)[None].repeat(2, 1)  # 8 documents of 256 per row
    assert choose_backend(many, dtype=torch.float32) == "per_document"
    one = torch.ones(2, 2048, dtype=torch.long)
    assert choose_backend(one, dtype=torch.float32) == "sdpa"  # one full document per row: no mask needed
    two = torch.arange(1, 3).repeat_interleave(1024)[None].repeat(2, 1)  # 2 x 1024: dense would need a mask
    assert choose_backend(two, dtype=torch.float32) == "per_document"
    short = torch.tensor([[1, 1, 2, 2]])
    assert plan_attention(short).backend == "sdpa"
    padded = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])
    plan, causal_plan = plan_attention(padded), plan_attention(padded, causal=True)
    assert isinstance(plan, MaskPlan) and isinstance(causal_plan, MaskPlan)
    assert plan.mask is not None and plan.mask.shape == (2, 1, 1, 4)  # key padding only
    assert causal_plan.mask is None  # plain is_causal


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
def test_flex_forward_on_cpu() -> None:
    seg = torch.tensor([[1] * 6 + [2] * 6 + [0] * 4])
    q, k, v = (torch.randn(1, 2, 16, 8) for _ in range(3))
    got = packed_attention(q, k, v, plan_attention(seg, causal=True, backend="flex"))
    want = packed_attention(q, k, v, plan_attention(seg, causal=True, backend="eager"))
    assert (got - want).abs().max() <= 1e-5


def test_bad_inputs() -> None:
    seg = torch.tensor([[1, 1, 2, 0]])
    q = torch.randn(1, 2, 4, 8)
    with pytest.raises(ValueError, match=r"unknown attention backend 'fast'; known: auto\|sdpa\|eager\|per_document"):
        plan_attention(seg, backend="fast")
    with pytest.raises(ValueError, match="'varlen' needs CUDA tensors in float16/bfloat16"):
        plan_attention(seg, backend="varlen", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"plan was built for segment_ids of shape \(1, 4\)"):
        packed_attention(torch.randn(2, 2, 4, 8), torch.randn(2, 2, 4, 8), torch.randn(2, 2, 4, 8), plan_attention(seg))
    with pytest.raises(ValueError, match=r"q must be \(B, H, T, d\)"):
        packed_attention(q[0], q, q, plan_attention(seg))
    with pytest.raises(ValueError, match="disagree"):
        packed_attention(q, q[..., :4], q, plan_attention(seg))
    with pytest.raises(ValueError, match="not contiguous runs"):
        plan_attention(torch.tensor([[1, 0, 1, 1]]))
    with pytest.raises(ValueError, match="needs CUDA tensors and the flash-attn package"):
        plan_attention(seg, backend="flash_varlen")
    bool_plan = plan_attention(seg, backend="eager", dtype=torch.float32)
    object.__setattr__(bool_plan, "mask", attention_mask(seg))  # a bool mask smuggled into eager
    with pytest.raises(ValueError, match="eager attention needs an additive float mask"):
        packed_attention(q, q, q, bool_plan)
    half_plan = plan_attention(seg, backend="sdpa")
    object.__setattr__(half_plan, "mask", attention_mask(seg, dtype=torch.float16))
    with pytest.raises(ValueError, match="additive mask must have the dtype of q"):
        packed_attention(q, q, q, half_plan)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("backend", ("flash_varlen", "varlen", "flex"))
def test_cuda_backends_match_eager(backend: str) -> None:
    if backend == "flash_varlen":
        pytest.importorskip("flash_attn")
    seg = torch.tensor([[1] * 100 + [2] * 60 + [3] * 90 + [0] * 6, [1] * 256]).cuda()
    q, k, v = (torch.randn(2, 4, 256, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    for causal in (False, True):
        ref = packed_attention(q.float(), k.float(), v.float(), plan_attention(seg, causal=causal, backend="eager"))
        got = packed_attention(q, k, v, plan_attention(seg, causal=causal, backend=backend, dtype=q.dtype))
        real = (seg > 0)[:, None, :, None]
        assert ((got.float() - ref) * real).abs().max() <= 2e-2
