"""The exactness suite on CUDA: fp32 (TF32 off) like the CPU suite, and bf16 autocast with a
tolerance derived from bf16's precision. Skipped without a CUDA device.

bf16 (8 significant bits, unit roundoff u = 2**-8) cannot reproduce fp32 to 1e-5, and a packed
batch runs other kernels than a sequence alone, so the two round differently. What packing must
not do is add error: each packed output is compared with the fp32 result of its sequence run
alone, and its error must stay within twice the error of the *same sequence run alone in bf16*
plus 2u of the output's scale (packed and unpacked bf16 errors are of the same order, never
equal). A sequence that saw another sequence's tokens is off by O(1), far beyond that.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch

from seqpack.nn.attention import BACKENDS, REGISTRY
from tests.nn._packs import spans
from tests.nn.test_models import (
    KINDS,
    alone,
    build,
    check_packed_equals_unpacked,
    heads_for,
    make_batch,
    on,
    run,
    slot_outputs,
)

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

U_BF16 = 2.0**-8
ROWS = [(64, [[20, 17, 9, 18], [64]]), (48, [[2, 30, 16], [5, 5, 5]]), (40, [[40], [13, 27]])]
FP32_BACKENDS = ("sdpa", "per_document", "eager", "flex")  # varlen kernels take only fp16/bf16
HALF_BACKENDS = ("sdpa", "per_document", "varlen", "flash_varlen", "flex")


@pytest.fixture(autouse=True)
def _no_tf32() -> Iterator[None]:
    old = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old


def _skip_unavailable(backend: str, dtype: torch.dtype) -> None:
    reason = REGISTRY[backend].unavailable(torch.ones(1, 1, dtype=torch.long, device="cuda"), dtype)
    if reason:
        pytest.skip(reason)


@pytest.mark.parametrize("backend", FP32_BACKENDS)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("case", range(len(ROWS)))
def test_fp32_packed_equals_unpacked_on_cuda(kind: str, backend: str, case: int) -> None:
    if backend == "flex" and kind != "gpt":  # flex's CUDA kernel is compiled: one model kind is enough
        pytest.skip("flex fp32 is covered by the gpt case")
    T, rows = ROWS[case]
    check_packed_equals_unpacked(kind, backend, T, rows, device="cuda")


def _outputs(kind: str, out: Any, b: int, k: int, at: int, n: int, packed: bool) -> list[torch.Tensor]:
    """Hidden states, slot outputs and the per-sequence loss of one sequence, as fp32."""
    hidden = out.hidden[b, at : at + n] if packed else out.hidden[0]
    got = [hidden.float()]
    for x in slot_outputs(kind, out):
        if kind == "qa":
            got.append((x[b, k, at : at + n] if packed else x[0, 0]).float())
        else:
            got.append((x[b, k] if packed else x[0, 0]).float())
    if out.per_sequence is not None and (
        out.present is None or bool(out.present[b if packed else 0, k if packed else 0])
    ):
        got.append(out.per_sequence[b, k].float().reshape(1) if packed else out.per_sequence[0, 0].float().reshape(1))
    return got


@pytest.mark.parametrize("backend", HALF_BACKENDS)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("case", range(len(ROWS)))
def test_bf16_packing_adds_no_error(kind: str, backend: str, case: int) -> None:
    _skip_unavailable(backend, torch.bfloat16)
    T, rows = ROWS[case]
    model = build(kind, backend).cuda().eval()
    reference = build(kind, "eager", heads=heads_for(backend)).cuda().eval()  # same weights (seeded), fp32 maths
    batch = on(make_batch(T, rows, seed=T), torch.device("cuda"))
    with torch.no_grad():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            packed = run(model, kind, batch)
        for b, k, at, n in spans(rows):
            x = alone(batch, b, k, at, n)
            ref = run(reference, kind, x)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                single = run(reference, kind, x)  # the same sequence alone, in bf16
            for p, s, r in zip(
                _outputs(kind, packed, b, k, at, n, True),
                _outputs(kind, single, b, k, at, n, False),
                _outputs(kind, ref, b, k, at, n, False),
            ):
                finite = torch.isfinite(r)
                err_packed = float((p - r)[finite].abs().max())
                err_alone = float((s - r)[finite].abs().max())
                scale = float(r[finite].abs().max())
                assert err_packed <= 2 * err_alone + 2 * U_BF16 * scale, (b, k, err_packed, err_alone, scale)


def test_cuda_backends_are_registered() -> None:
    assert {"varlen", "flash_varlen", "flex", "sdpa", "per_document"} <= set(BACKENDS)


@pytest.mark.parametrize("impl", ("sdpa", "eager"))
@pytest.mark.parametrize("case", range(len(ROWS)))
def test_hf_adapters_fp32_on_cuda(impl: str, case: int) -> None:
    pytest.importorskip("transformers")
    from tests.nn.test_hf_adapter import KINDS as HF_KINDS
    from tests.nn.test_hf_adapter import check_adapter

    T, rows = ROWS[case]
    for kind in HF_KINDS:
        check_adapter(kind, impl, T, rows, device="cuda")


@pytest.mark.parametrize("T", [64, 192, 512])
def test_sdpa_backward_with_a_packed_mask_is_finite(T):
    """bf16 sdpa with a packed (B, 1, T, T) mask: gradients finite at lengths of 64 mod 128, where
    cuDNN's backward (torch 2.11, H100/H200) gives NaN dq (pytorch/pytorch#196678); 512 keeps cuDNN."""
    from seqpack.nn.attention import packed_attention, plan_attention

    seg = torch.tensor([[1] * (T // 2) + [2] * (T // 4) + [0] * (T - T // 2 - T // 4)] * 2, device="cuda")
    plan = plan_attention(seg, causal=True, backend="sdpa", dtype=torch.bfloat16)
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (
        torch.randn(2, 4, T, 64, device="cuda", dtype=torch.bfloat16, generator=g).mul(3).requires_grad_()
        for _ in range(3)
    )
    packed_attention(q, k, v, plan).float().square().sum().backward()
    assert all(torch.isfinite(x.grad).all() for x in (q, k, v))
