"""The padding-free path (transformers' flattened layout, ``seqpack_varlen`` attention): a packed
batch gives what each sequence gives alone through the unmodified model."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings

from seqpack.nn import packed_forward
from seqpack.nn.hf_padding_free import (
    VARLEN_IMPL,
    flat_inputs,
    register_varlen_attention,
    unflatten_slots,
)
from tests.nn._packs import packs, segment_rows
from tests.nn.test_hf_adapter import check_adapter

pytest.importorskip("transformers")
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


@pytest.mark.parametrize("kind", ("GPT2LMHeadModel", "LlamaForCausalLM"))
@settings(max_examples=4, deadline=None)
@given(pack=packs(max_rows=2, max_len=20, max_depth=3, min_len=2))
def test_padding_free_equals_model_run_alone(kind: str, pack) -> None:
    register_varlen_attention()
    check_adapter(kind, VARLEN_IMPL, *pack)


def test_flat_layout_golden() -> None:
    seg = torch.tensor([[1, 1, 2, 0], [1, 1, 1, 0]])
    ids = torch.tensor([[5, 6, 7, 0], [8, 9, 10, 0]])
    inputs, flat_seg = flat_inputs({"input_ids": ids, "segment_ids": seg})
    assert inputs["input_ids"].tolist() == [[5, 6, 7, 8, 9, 10]]
    assert inputs["position_ids"].tolist() == [[0, 1, 0, 0, 1, 2]]
    assert inputs["cu_seq_lens_q"].tolist() == [0, 2, 3, 6] and inputs["max_length_q"] == 3
    assert flat_seg.tolist() == [[1, 1, 2, 3, 3, 3]]
    assert unflatten_slots(torch.tensor([[0.5, 1.5, 2.5]]), seg).tolist() == [[0.5, 1.5], [2.5, 0.0]]
    assert segment_rows(4, [[2, 1], [3]]).tolist() == seg.tolist()


def test_padding_free_refuses_attention_dropout() -> None:
    import transformers as tf

    register_varlen_attention()
    cfg = tf.LlamaConfig(
        vocab_size=40,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,  # type: ignore[call-arg]  # attn_implementation: every config takes it, its typed signature does not list it
        num_key_value_heads=1,
        max_position_embeddings=64,
        attention_dropout=0.1,
        attn_implementation=VARLEN_IMPL,
    )
    model = tf.LlamaForCausalLM(cfg).train()
    with pytest.raises(ValueError, match="has no attention dropout"):
        packed_forward(
            model, {"input_ids": torch.ones(1, 4, dtype=torch.long), "segment_ids": torch.ones(1, 4, dtype=torch.long)}
        )


@pytest.mark.parametrize("kind", ("GPT2LMHeadModel", "LlamaForCausalLM"))
def test_padding_free_equals_the_sdpa_model(kind: str) -> None:
    """Same weights, attention through SDPA with seqpack's 4-D mask: the same logits and loss."""
    from tests.nn.test_hf_adapter import build, packed_batch
    from tests.nn.test_models import make_batch

    register_varlen_attention()
    x = make_batch(18, [[5, 9, 4], [18]], seed=3)
    flat, dense = (
        packed_forward(build(kind, VARLEN_IMPL), packed_batch(kind, x)),
        packed_forward(build(kind, "sdpa"), packed_batch(kind, x)),
    )
    real = x["segment_ids"] > 0
    assert (flat.logits - dense.logits)[real].abs().max() <= 1e-5  # type: ignore[operator]  # PackedOutput.logits: asked for
    assert abs(float(flat.loss) - float(dense.loss)) <= 1e-5 * max(1.0, abs(float(dense.loss)))  # type: ignore[arg-type]  # PackedOutput.loss: set when the batch has targets
    assert torch.equal(flat.present, dense.present)  # type: ignore[arg-type]  # present: set with the loss


def test_flex_attention_forward_on_cpu() -> None:
    """``flex_attention`` takes the same path as sdpa (no 4-D mask; transformers builds a block mask
    from ``position_ids``). On CPU flex has no backward, so logits only. Llama only: GPT-2 has no flex."""
    from tests.nn._packs import spans
    from tests.nn.test_hf_adapter import build, hf_alone, packed_batch
    from tests.nn.test_models import alone, make_batch

    rows = [[5, 7], [16]]
    x = make_batch(16, rows, seed=1)
    model = build("LlamaForCausalLM", "flex_attention").eval()
    with torch.no_grad():
        out = packed_forward(model, packed_batch("LlamaForCausalLM", x))
        for b, k, at, n in spans(rows):
            ref = hf_alone(model, "LlamaForCausalLM", alone(x, b, k, at, n))
            assert (out.logits[b, at : at + n] - ref.logits[0]).abs().max() <= 1e-5  # type: ignore[index]  # PackedOutput.logits: asked for


@pytest.mark.skipif(not torch.cuda.is_available(), reason="flash_attention_2/3 need a CUDA device")
@pytest.mark.parametrize("impl", ["flash_attention_2", "flash_attention_3"])
def test_flash_attention_equals_the_reference_on_gpu(impl: str) -> None:
    """On a GPU with flash-attn installed: the flash kernels on the padding-free layout give the
    logits of seqpack's varlen reference (per-sequence SDPA) within bf16 rounding."""
    import importlib.util

    from tests.nn.test_hf_adapter import build, packed_batch
    from tests.nn.test_models import make_batch

    if importlib.util.find_spec("flash_attn" if impl == "flash_attention_2" else "flash_attn_interface") is None:
        pytest.skip(f"{impl} needs the flash-attn package")
    register_varlen_attention()
    x = {k: v.cuda() for k, v in make_batch(48, [[20, 17, 9], [48]], seed=2).items()}
    outs = []
    for name in (impl, VARLEN_IMPL):
        model = build("LlamaForCausalLM", name).cuda().to(torch.bfloat16).eval()
        with torch.no_grad():
            outs.append(packed_forward(model, packed_batch("LlamaForCausalLM", x)).logits.float())  # type: ignore[union-attr]  # PackedOutput.logits: asked for
    real = x["segment_ids"] > 0
    scale = float(outs[1][real].abs().max())
    assert (outs[0] - outs[1])[real].abs().max() <= 4 * 2.0**-8 * scale  # a few bf16 roundings (u = 2**-8)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the varlen kernel runs on CUDA")
def test_grouped_query_attention_on_cuda_adds_no_error_beyond_bf16() -> None:
    """Llama with 2 query heads per kv head through the varlen kernel (its own GQA where torch has
    it, else the kv heads repeated): against fp32 SDPA with seqpack's mask, its bf16 error is that of
    bf16 SDPA's (twice it, plus 2u of the logits' scale; attending across sequences is off by O(1))."""
    from tests.nn.test_hf_adapter import build, packed_batch
    from tests.nn.test_models import make_batch

    register_varlen_attention()
    x = make_batch(64, [[20, 30, 14], [64], [9, 50]], seed=5)
    batch = {k: v.cuda() for k, v in packed_batch("LlamaForCausalLM", x).items()}
    real = batch["segment_ids"] > 0
    flat_model, dense_model = build("LlamaForCausalLM", VARLEN_IMPL).cuda(), build("LlamaForCausalLM", "sdpa").cuda()
    truth = packed_forward(dense_model, batch).logits.float()  # type: ignore[union-attr]  # PackedOutput.logits: asked for
    with torch.autocast("cuda", dtype=torch.bfloat16):
        flat = packed_forward(flat_model, batch).logits.float()  # type: ignore[union-attr]  # PackedOutput.logits: asked for
        dense = packed_forward(dense_model, batch).logits.float()  # type: ignore[union-attr]  # PackedOutput.logits: asked for
    u = 2.0**-8
    err, base = (flat - truth)[real].abs().max(), (dense - truth)[real].abs().max()
    assert err <= 2 * base + 2 * u * truth[real].abs().max(), (float(err), float(base))
