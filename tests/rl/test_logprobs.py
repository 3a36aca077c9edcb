"""Per-token log-probabilities from packed rollouts equal each completion run alone (prompt +
completion, one row, no packing), for transformers Llama and Qwen2 and seqpack's GPT, G = 1-8, both
layouts, completions of 1 to ~300 tokens; a completion changes no other's values; gradients agree.

Tolerance: fp32. A packed row and a lone row reduce attention over other key sets and in other
blocks (per-document buckets, a masked dense row), ~1e-7 relative per operation over ~100 chained
operations (2 layers, a 100-400 wide log-softmax): 1e-5 relative of a log-probability, which is
about -ln(V) = -4.6, so 5e-5 absolute. A wrong mask, position or predictor moves a log-probability
by ~1e-2 or more (the models are random, their logits spread ~0.1-1).
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from seqpack.nn.models import GPT, GPTConfig
from seqpack.rl import LAYOUTS, pack_rollouts, packed_logprobs, rollout_logprobs, to_padded

tf = pytest.importorskip("transformers")
V = 100
ATOL = 5e-5


def rollouts(groups: int, g: int, seed: int, *, longest: int = 300) -> tuple[list[list[int]], list[list[list[int]]]]:
    rng = np.random.default_rng(seed)
    prompts = [rng.integers(0, V, rng.integers(1, 40)).tolist() for _ in range(groups)]
    lengths = [[int(x) for x in np.clip(rng.lognormal(3.0, 1.2, g), 1, longest)] for _ in range(groups)]
    lengths[0][0] = 1  # a one-token completion, always
    return prompts, [[rng.integers(0, V, n).tolist() for n in ls] for ls in lengths]


def hf_model(kind: str, impl: str) -> torch.nn.Module:
    from seqpack.nn.hf_attention import register_packed_attention

    register_packed_attention()
    torch.manual_seed(0)
    shape = dict(
        vocab_size=V,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        attn_implementation=impl,
    )
    config = tf.LlamaConfig(**shape) if kind == "llama" else tf.Qwen2Config(**shape)
    model = (tf.LlamaForCausalLM if kind == "llama" else tf.Qwen2ForCausalLM)(config)
    return model.float().eval()


def gpt() -> torch.nn.Module:
    torch.manual_seed(0)
    return GPT(GPTConfig.of_size("tiny", vocab_size=V, max_position=1024, dropout=0.0)).eval()


def alone(model: torch.nn.Module, prompt: list[int], completion: list[int]) -> torch.Tensor:
    """The completion's log-probabilities with prompt + completion as the only sequence of a row."""
    ids = torch.tensor([prompt + completion])
    if type(model).__module__.startswith("transformers"):
        ref = model
        if model.config._attn_implementation not in ("sdpa", "eager"):  # type: ignore[union-attr,operator]  # a transformers model's config
            ref = copy.deepcopy(model)
            ref.config._attn_implementation = "sdpa"  # type: ignore[union-attr]  # the model's standard attention, one sequence, no mask
        logits = ref(input_ids=ids, use_cache=False).logits[0]
    else:
        logits = model(ids, torch.ones_like(ids)).logits[0]
    lp = torch.log_softmax(logits[len(prompt) - 1 : -1].float(), -1)
    return lp.gather(1, torch.tensor(completion)[:, None]).squeeze(1)


MODELS = [("llama", "sdpa"), ("llama", "eager"), ("llama", "seqpack_packed"), ("qwen2", "sdpa"), ("gpt", "auto")]


@pytest.mark.parametrize(("kind", "impl"), MODELS)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("g", [1, 2, 4, 8])
def test_packed_logprobs_equal_each_completion_alone(kind, impl, layout, g):
    model = gpt() if kind == "gpt" else hf_model(kind, impl)
    prompts, comps = rollouts(3, g, seed=g)
    with torch.no_grad():
        got = packed_logprobs(model, prompts, comps, max_len=700, layout=layout)
        for i, p in enumerate(prompts):
            assert len(got[i]) == g
            for j, c in enumerate(comps[i]):
                torch.testing.assert_close(got[i][j], alone(model, p, c), rtol=0.0, atol=ATOL)


@pytest.mark.parametrize(("kind", "impl"), [("llama", "sdpa"), ("llama", "seqpack_packed"), ("gpt", "auto")])
def test_a_completion_changes_no_other(kind, impl):
    """Every other completion's values are bit for bit the same when one completion's tokens change
    (same length: the same rows): no attention crosses siblings or groups."""
    model = gpt() if kind == "gpt" else hf_model(kind, impl)
    prompts, comps = rollouts(3, 4, seed=7)
    changed = copy.deepcopy(comps)
    changed[1][2] = [(t + 1) % V for t in changed[1][2]]
    with torch.no_grad():
        a = packed_logprobs(model, prompts, comps, max_len=500)
        b = packed_logprobs(model, prompts, changed, max_len=500)
    for i in range(3):
        for j in range(4):
            if (i, j) != (1, 2):
                assert torch.equal(a[i][j], b[i][j]), (i, j)
    assert not torch.equal(a[1][2], b[1][2])


def test_gradients_equal_the_unpacked_ones():
    """The gradient of the summed log-probabilities, packed (shared-prefix layout, seqpack_packed) and each
    completion alone: the same terms summed in another order (fp32, 1e-5 of the largest entry)."""
    model = hf_model("llama", "seqpack_packed")
    prompts, comps = rollouts(2, 4, seed=3, longest=80)
    sum(x.sum() for g in packed_logprobs(model, prompts, comps, max_len=400) for x in g).backward()
    packed = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    ref = copy.deepcopy(model)
    ref.config._attn_implementation = "sdpa"
    sum(alone(ref, p, c).sum() for p, g in zip(prompts, comps) for c in g).backward()
    scale = max(float(g.abs().max()) for g in packed.values())
    for n, p in ref.named_parameters():
        torch.testing.assert_close(packed[n], p.grad, rtol=0.0, atol=1e-5 * scale, msg=n)


def test_padded_layout_entropies_and_temperature():
    """``to_padded`` puts completion c's tokens in row c from column 0 (TRL's right-padded layout);
    entropies are those of the distribution each token was drawn from, at the temperature given."""
    model = hf_model("llama", "sdpa")
    prompts, comps = rollouts(2, 3, seed=5, longest=30)
    packed = pack_rollouts(prompts, comps, max_len=200)
    with torch.no_grad():
        logps, ents = rollout_logprobs(model, packed, temperature=0.7, entropies=True)
        values, mask = to_padded(logps, packed)
        flat = [c for g in comps for c in g]
        assert values.shape == (len(flat), max(len(c) for c in flat)) and mask.sum() == sum(len(c) for c in flat)
        ids = torch.tensor([prompts[0] + comps[0][1]])
        logits = model(input_ids=ids, use_cache=False).logits[0, len(prompts[0]) - 1 : -1].float() / 0.7
        lp = torch.log_softmax(logits, -1)
        n = len(comps[0][1])
        torch.testing.assert_close(
            values[1, :n], lp.gather(1, torch.tensor(comps[0][1])[:, None]).squeeze(1), rtol=0.0, atol=ATOL
        )
        ent, _ = to_padded(ents, packed)
        torch.testing.assert_close(ent[1, :n], -(lp.exp() * lp).sum(-1), rtol=0.0, atol=ATOL)
        assert not mask[1, n:].any() and (values[1, n:] == 0).all()
    with pytest.raises(ValueError, match="temperature must be > 0"):
        rollout_logprobs(model, packed, temperature=0.0)


def test_chunked_head_equals_one_chunk(monkeypatch):
    """The head runs CHUNK positions at a time (recomputed in backward): the same values and
    gradients as one chunk. The same products, but a matrix multiply of 7 rows may block its dot
    products (32 terms) otherwise than one of all rows: a few units in the last place of a logit."""
    import seqpack.rl.logprobs as lp

    model = hf_model("llama", "sdpa")
    prompts, comps = rollouts(2, 4, seed=9, longest=60)
    packed = pack_rollouts(prompts, comps, max_len=300)
    out = {}
    for chunk in (10**9, 7):
        monkeypatch.setattr(lp, "CHUNK", chunk)
        model.zero_grad()
        v, _ = lp.rollout_logprobs(model, packed)
        v.sum().backward()
        out[chunk] = (v.detach(), model.lm_head.weight.grad.clone())
    torch.testing.assert_close(out[7][0], out[10**9][0], rtol=0.0, atol=ATOL)
    scale = float(out[10**9][1].abs().max())  # the gradient: the same terms summed in another order
    torch.testing.assert_close(out[7][1], out[10**9][1], rtol=0.0, atol=1e-5 * scale)
