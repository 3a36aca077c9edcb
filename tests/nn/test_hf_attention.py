"""``seqpack_packed``: transformers causal LMs running seqpack's attention plans equal the same
models with the dense 4-D mask (block-diagonal, and the preference task's shared prefix)."""

from __future__ import annotations

import pytest
import torch

from seqpack.nn.attention import plan_attention
from seqpack.nn.hf_adapter import packed_forward
from seqpack.nn.hf_attention import PACKED_IMPL, register_packed_attention
from seqpack.nn.masks import attention_mask

tf = pytest.importorskip("transformers")
SEG = torch.tensor([[1] * 5 + [2] * 4 + [0] * 3, [1] * 12])
BRANCH = torch.tensor([[0, 0, 1, 1, 2, 0, 1, 2, 2, 0, 0, 0], [0] * 4 + [1] * 4 + [2] * 4])
POS = torch.tensor([[0, 1, 2, 3, 2, 0, 1, 1, 2, 0, 0, 0], [0, 1, 2, 3, 4, 5, 6, 7, 4, 5, 6, 7]])


def pair(kind: str) -> tuple[torch.nn.Module, torch.nn.Module]:
    """The same weights under sdpa and under seqpack_packed."""
    register_packed_attention()
    torch.manual_seed(0)
    if kind == "llama":
        kw = {
            "vocab_size": 50,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
        }
        make = lambda impl: tf.LlamaForCausalLM(tf.LlamaConfig(**kw, attn_implementation=impl))  # noqa: E731
    else:
        kw = {"vocab_size": 50, "n_embd": 32, "n_layer": 2, "n_head": 2, "bos_token_id": 0, "eos_token_id": 0}
        make = lambda impl: tf.GPT2LMHeadModel(tf.GPT2Config(**kw, attn_implementation=impl))  # noqa: E731
    a, b = make("sdpa").eval(), make(PACKED_IMPL).eval()
    b.load_state_dict(a.state_dict())
    return a, b


@pytest.mark.parametrize("backend", ["sdpa", "eager", "per_document"])
@pytest.mark.parametrize("kind", ["llama", "gpt2"])
def test_shared_prefix_plan_equals_the_dense_mask(kind: str, backend: str) -> None:
    dense, packed = pair(kind)
    ids = torch.randint(1, 50, SEG.shape, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = dense(
            ids, attention_mask=attention_mask(SEG, causal=True, branch_ids=BRANCH), position_ids=POS, use_cache=False
        ).logits
        plan = plan_attention(SEG, causal=True, backend=backend, branch_ids=BRANCH)
        got = packed(ids, position_ids=POS, seqpack_plan=plan, use_cache=False).logits
    real = SEG > 0
    # the same masked softmax through other kernels: fp32 rounding of 8-16-wide dot products
    torch.testing.assert_close(got[real], want[real], rtol=1e-5, atol=1e-5)


def test_packed_forward_uses_the_plan() -> None:
    dense, packed = pair("llama")
    seg = torch.tensor([[1, 1, 1, 2, 2, 2, 2, 0], [1, 1, 1, 1, 1, 1, 2, 2]])
    ids = torch.randint(1, 50, seg.shape, generator=torch.Generator().manual_seed(2))
    labels = torch.where(seg > 0, ids, -100)
    labels[:, 0] = -100
    batch = {"input_ids": ids, "segment_ids": seg, "labels": labels}
    a, b = packed_forward(dense, batch), packed_forward(packed, batch)
    torch.testing.assert_close(b.per_sequence, a.per_sequence, rtol=1e-5, atol=1e-6)  # as above


def test_a_call_without_a_plan_is_refused() -> None:
    _, packed = pair("llama")
    with pytest.raises(ValueError, match="seqpack_plan"):
        packed(torch.ones(1, 4, dtype=torch.long), use_cache=False)
