"""What a transformers model needs to run packed rows exactly, read from its config and layers."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import transformers

from seqpack.nn.hf_support import check_packable, packing_support

SMALL: dict[str, Any] = {
    "vocab_size": 64,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
}


def test_needs_are_read_per_layer_kind() -> None:
    assert packing_support(transformers.LlamaForCausalLM(transformers.LlamaConfig(**SMALL))).needs == frozenset()
    assert packing_support(
        transformers.MistralForCausalLM(transformers.MistralConfig(**SMALL, sliding_window=8))
    ).needs == {"window"}
    off = transformers.Qwen2Config(**SMALL, sliding_window=8, use_sliding_window=False)
    assert packing_support(transformers.Qwen2ForCausalLM(off)).needs == frozenset()  # the window is unused
    gemma = transformers.Gemma2Config(**SMALL, head_dim=16, sliding_window=8, attn_logit_softcapping=1.0)
    assert packing_support(transformers.Gemma2ForCausalLM(gemma)).needs == {"window", "softcap"}


def test_a_window_a_model_stores_but_never_uses_is_not_asked() -> None:
    """Moshi's config has ``sliding_window`` and no ``layer_types``; its modeling file makes no
    sliding masks, so its layers attend whole documents (the matrix checks the cells)."""
    from seqpack.nn.hf_support import builds_sliding_masks

    mistral = transformers.MistralForCausalLM(transformers.MistralConfig(**SMALL, sliding_window=8))
    assert builds_sliding_masks(mistral)
    assert not builds_sliding_masks(transformers.LlamaForCausalLM(transformers.LlamaConfig(**SMALL)))


def test_refusals_are_one_line_and_say_what_would_work() -> None:
    mystery = transformers.LlamaForCausalLM(transformers.LlamaConfig(**SMALL))
    mystery.config.layer_types = ["mystery", "full_attention"]  # a kind that is not attention, and no state layer
    with pytest.raises(ValueError, match=r"mystery layers, and seqpack finds no layer.*train it on unpacked rows"):
        check_packable(mystery)
    bert = transformers.BertLMHeadModel(
        transformers.BertConfig(
            vocab_size=64, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64
        )
    )
    with pytest.raises(ValueError, match="bidirectional"):
        check_packable(bert)
    with pytest.raises(ValueError, match="attention interface"):
        check_packable(
            transformers.BloomForCausalLM(transformers.BloomConfig(vocab_size=64, hidden_size=32, n_layer=1, n_head=2))
        )


def test_a_hybrid_names_its_state_layers() -> None:
    nxt = transformers.Qwen3NextConfig(**SMALL, head_dim=16, layer_types=["linear_attention", "full_attention"])
    support = check_packable(transformers.Qwen3NextForCausalLM(nxt))
    assert support.refusal is None and support.mixers == ("Qwen3NextGatedDeltaNet",)


def test_attach_packed_attention_runs_a_hybrid_per_document() -> None:
    """The route for a model seqpack does not call: positions restarting at each document give the
    attention its plan and the Gated DeltaNet layers their documents."""
    from seqpack.nn.hf_attention import attach_packed_attention

    nxt = transformers.Qwen3NextConfig(
        **SMALL,
        head_dim=16,
        layer_types=["linear_attention", "full_attention"],
        linear_num_value_heads=2,
        linear_num_key_heads=1,
        linear_key_head_dim=16,
        linear_value_head_dim=16,
    )
    torch.manual_seed(0)
    model = transformers.Qwen3NextForCausalLM(nxt).eval()
    docs = [[3, 9, 4, 7, 11], [6, 2, 13, 5]]
    alone = [model(input_ids=torch.tensor([d]), use_cache=False).logits[0] for d in docs]
    handle = attach_packed_attention(model)
    pos = torch.tensor([[0, 1, 2, 3, 4, 0, 1, 2, 3]])
    packed = model(input_ids=torch.tensor([docs[0] + docs[1]]), position_ids=pos, use_cache=False).logits[0]
    handle.remove()
    # float32, two layers of width 32: summation order only
    assert torch.allclose(packed[:5], alone[0], atol=1e-5) and torch.allclose(packed[5:], alone[1], atol=1e-5)


def test_unknown_attention_keywords_are_refused_by_name() -> None:
    from seqpack.nn.attention import plan_attention
    from seqpack.nn.hf_attention import packed_attention_forward

    module = torch.nn.Module()
    q = torch.randn(1, 2, 4, 8)
    plan = plan_attention(torch.tensor([[1, 1, 2, 2]]), causal=True)
    with pytest.raises(ValueError, match="passes alibi_slopes to its attention"):
        packed_attention_forward(module, q, q, q, None, seqpack_plan=plan, alibi_slopes=torch.ones(2))
    out, _ = packed_attention_forward(module, q, q, q, None, seqpack_plan=plan, output_router_logits=False)
    assert out.shape == (1, 4, 2, 8)


def test_latent_attention_values_narrower_than_queries_are_exact() -> None:
    """DeepSeek's multi-head latent attention: v of width 4 under q/k of width 8, zero-padded."""
    from seqpack.nn.attention import plan_attention
    from seqpack.nn.attention.base import oracle_attention
    from seqpack.nn.hf_attention import packed_attention_forward

    torch.manual_seed(0)
    q, k, v = torch.randn(1, 2, 6, 8), torch.randn(1, 2, 6, 8), torch.randn(1, 2, 6, 4)
    seg = torch.tensor([[1, 1, 1, 2, 2, 2]])
    out, _ = packed_attention_forward(
        torch.nn.Module(), q, k, v, None, scaling=0.3, seqpack_plan=plan_attention(seg, causal=True)
    )
    allowed = (seg[:, :, None] == seg[:, None, :]) & torch.ones(6, 6, dtype=torch.bool).tril()
    want = oracle_attention(q, k, v, allowed[:, None], scale=0.3)  # (1, 2, 6, 4)
    assert out.shape == (1, 6, 2, 4)
    assert (out.transpose(1, 2) - want).abs().max() <= 1e-6  # fp32, 3 keys
