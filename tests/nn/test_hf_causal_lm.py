"""The head-at-targets loss of transformers causal LMs against the models' own loss, and the
compiled blocks against eager (CPU, float64: exact to rounding)."""

from __future__ import annotations

import types

import pytest
import torch

tf = pytest.importorskip("transformers")

from seqpack.nn.hf_causal_lm import (  # noqa: E402
    TargetHeadOutput,
    add_target_head,
    causal_lm_loss,
    compile_blocks,
    next_token_targets,
)
from seqpack.nn.hf_padding_free import register_varlen_attention  # noqa: E402


def tiny_llama(attn: str = "sdpa", *, tie: bool = True) -> torch.nn.Module:
    torch.manual_seed(0)
    cfg = tf.LlamaConfig(
        vocab_size=97,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        attn_implementation=attn,
        tie_word_embeddings=tie,
    )
    return tf.LlamaForCausalLM(cfg).double()


def padding_free_batch(lengths: list[int], seed: int = 0) -> dict[str, torch.Tensor | int]:
    """TRL's padding-free layout: one row, restarting positions, labels -100 at each sequence's first
    token (and, here, on a stretch of prompt)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 97, (1, sum(lengths)), generator=g)
    pos = torch.cat([torch.arange(n) for n in lengths])[None]
    labels = ids.clone()
    labels[pos == 0] = -100
    labels[0, 2:4] = -100
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)
    m = max(lengths)
    return {
        "input_ids": ids,
        "position_ids": pos,
        "labels": labels,
        "cu_seq_lens_q": cu,
        "cu_seq_lens_k": cu,
        "max_length_q": m,
        "max_length_k": m,
    }


def grads(model: torch.nn.Module) -> list[torch.Tensor]:
    out = [p.grad.clone() for p in model.parameters()]  # type: ignore[union-attr]  # p.grad: backward() set it
    model.zero_grad(set_to_none=True)
    return out


def test_next_token_targets() -> None:
    where, t = next_token_targets(torch.tensor([[-100, 5, 6, -100, 8], [1, -100, -100, 2, 3]]))
    assert where.tolist() == [0, 1, 3, 7, 8] and t.tolist() == [5, 6, 8, 2, 3]


@pytest.mark.parametrize("tie", (True, False))
def test_padding_free_loss_equals_the_models_own(tie: bool) -> None:
    model = tiny_llama(register_varlen_attention(), tie=tie)
    batch = padding_free_batch([5, 9, 3])
    own = model(**{k: v for k, v in batch.items() if k != "labels"}, labels=batch["labels"], use_cache=False).loss
    own.backward()
    want = grads(model)
    out = causal_lm_loss(model, batch)
    out.loss.backward()
    # float64 model; the cross-entropy in float32 (the fused path's contract): the loss within a few
    # float32 ulps; gradients through the float32 softmax: ~1e-7 relative
    assert float(out.loss) == pytest.approx(float(own), rel=1e-6)
    assert int(out.num_targets) == int((batch["labels"][:, 1:] != -100).sum()) == 12  # type: ignore[index]  # num_targets: a tensor here
    for g, w in zip(grads(model), want):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-7)


def test_padded_rows_and_num_items_in_batch() -> None:
    model = tiny_llama("sdpa")
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 97, (2, 7), generator=g)
    mask = torch.tensor([[1] * 7, [1] * 4 + [0] * 3])
    labels = ids.masked_fill(mask == 0, -100)
    own = model(input_ids=ids, attention_mask=mask, labels=labels, use_cache=False).loss
    out = causal_lm_loss(model, {"input_ids": ids, "attention_mask": mask, "labels": labels})
    assert float(out.loss) == pytest.approx(float(own), rel=1e-6)
    n = int(out.num_targets)
    half = causal_lm_loss(model, {"input_ids": ids, "attention_mask": mask, "labels": labels}, num_items_in_batch=2 * n)
    assert float(half.loss) == pytest.approx(float(own) / 2, rel=1e-6)  # a sum over the accumulated batch's targets


def test_add_target_head_keeps_the_plain_forward() -> None:
    model = tiny_llama(register_varlen_attention())
    batch = padding_free_batch([4, 6])
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    before = model(**inputs).logits
    add_target_head(model)
    assert torch.equal(model(**inputs).logits, before)
    out = model(**batch, target_head=True)
    assert isinstance(out, TargetHeadOutput)
    assert float(out.loss) == pytest.approx(float(causal_lm_loss(model, batch).loss), rel=1e-12)
    with pytest.raises(TypeError, match="keyword arguments only"):
        model(batch["input_ids"], target_head=True)


def test_models_with_scaled_logits_are_refused() -> None:
    gemma = types.SimpleNamespace(config=types.SimpleNamespace(model_type="gemma2"))
    with pytest.raises(ValueError, match="head-at-targets loss takes"):
        causal_lm_loss(gemma, {"labels": torch.zeros(1, 2, dtype=torch.long)})
    capped = types.SimpleNamespace(config=types.SimpleNamespace(model_type="llama", final_logit_softcapping=30.0))
    with pytest.raises(ValueError, match="final_logit_softcapping"):
        causal_lm_loss(capped, {"labels": torch.zeros(1, 2, dtype=torch.long)})


def test_compiled_blocks_equal_eager() -> None:
    eager, compiled = tiny_llama(register_varlen_attention()), tiny_llama(register_varlen_attention())
    assert compile_blocks(compiled) == 2 * 3 + 1  # two layers' two norms and MLP, and the final norm
    for lengths in ([5, 9, 3], [11, 2]):  # another token count: dynamic shapes, no second graph needed
        batch = padding_free_batch(lengths)
        a, b = causal_lm_loss(eager, batch), causal_lm_loss(compiled, batch)
        a.loss.backward()
        b.loss.backward()
        # float64 both ways; inductor reorders the norms' sums (~1e-15 relative), but the loss's softmax
        # runs in float32, where logits that far apart can round one float32 ulp (6e-8) apart: the
        # gradients agree to ~1e-7 of their largest entry (a wrong fusion would be off by O(1))
        assert float(b.loss) == pytest.approx(float(a.loss), rel=1e-10)
        for g, w in zip(grads(compiled), grads(eager)):
            torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6 * float(w.abs().max()))


def test_compile_blocks_refuses_other_layouts() -> None:
    gpt2 = tf.GPT2LMHeadModel(tf.GPT2Config(n_embd=16, n_layer=1, n_head=2, n_positions=16, vocab_size=50))
    with pytest.raises(ValueError, match="Llama-style decoder layers"):
        compile_blocks(gpt2)
