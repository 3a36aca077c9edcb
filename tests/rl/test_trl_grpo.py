"""Against TRL 1.16's ``GRPOTrainer``: ``grpo_loss`` equals its ``_compute_loss`` for every supported
``loss_type`` (with and without the KL term, token and sequence importance sampling);
``PackedGRPOTrainer``'s packed pass equals TRL's padded one on rows of varied lengths; and a short
run of each trainer on the same generations takes the same steps.

Tolerances (fp32): the loss formulas are the same operations on the same tensors, so the losses and
their gradients agree to a few units in the last place (1e-6 relative). The packed pass against the
padded one: attention over other key sets and blocks, as in test_logprobs (5e-5 absolute on a
log-probability of ~-6, and on an entropy of ~6).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from seqpack.rl import GRPOLoss, grpo_loss
from tests.hf_tokenizers import bpe_tokenizer_dir, texts

trl = pytest.importorskip("trl")
tf = pytest.importorskip("transformers")
datasets = pytest.importorskip("datasets")
pytestmark = pytest.mark.filterwarnings("ignore")


def reward(completions: list[str], **_: Any) -> list[float]:
    return [len(c) / 10 for c in completions]  # a toy reward: the completion's length


def make(
    cls: Any, root: Path, impl: str = "sdpa", attention: Any = "seqpack_packed", kind: str = "llama", **config: Any
) -> Any:
    """A trainer on a tiny Llama or Qwen2 (random init, saved locally: TRL loads a reference model from its path)."""
    from seqpack.nn.hf_attention import register_packed_attention

    register_packed_attention()
    tok = tf.AutoTokenizer.from_pretrained(str(bpe_tokenizer_dir(root / "tok", chat_template=None)))
    path = root / f"{kind}-{impl}"
    if not path.exists():
        torch.manual_seed(0)
        config_cls, model_cls = (
            (tf.LlamaConfig, tf.LlamaForCausalLM) if kind == "llama" else (tf.Qwen2Config, tf.Qwen2ForCausalLM)
        )
        model_cls(
            config_cls(
                vocab_size=len(tok),
                hidden_size=32,
                intermediate_size=64,
                num_hidden_layers=2,
                num_attention_heads=4,
                num_key_value_heads=2,
                pad_token_id=tok.pad_token_id,
                eos_token_id=tok.eos_token_id,
            )
        ).save_pretrained(path)
    args = trl.GRPOConfig(
        **{
            "output_dir": str(root / "out"),
            "per_device_train_batch_size": 8,
            "num_generations": 4,
            "max_completion_length": 24,
            "max_steps": 3,
            "learning_rate": 1e-2,
            "report_to": [],
            "use_cpu": True,
            "logging_steps": 1,
            "save_strategy": "no",
            "seed": 0,
            "bf16": False,
            "disable_tqdm": True,
            "model_init_kwargs": {"attn_implementation": impl, "dtype": torch.float32},
            **config,
        }
    )
    extra = {} if cls is trl.GRPOTrainer else {"attention": attention}
    return cls(
        model=str(path),
        reward_funcs=reward,
        args=args,
        train_dataset=datasets.Dataset.from_dict({"prompt": texts(16, seed=3)}),
        processing_class=tok,
        **extra,
    )


def trl_rows(prompts: list[list[int]], comps: list[list[int]], P: int, C: int) -> tuple[torch.Tensor, torch.Tensor]:
    """TRL's padded rows: each group of 4 completions after its left-padded prompt (width ``P``),
    right-padded to ``C``; ``(ids, attention_mask)``, each ``(len(comps), P + C)``."""
    ids = torch.zeros(len(comps), P + C, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for r, c in enumerate(comps):
        p = prompts[r // 4]
        ids[r, P - len(p) : P], mask[r, P - len(p) : P] = torch.tensor(p), 1
        ids[r, P : P + len(c)], mask[r, P : P + len(c)] = torch.tensor(c), 1
    return ids, mask


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("grpo")


@pytest.fixture(scope="module")
def trainer(root: Path) -> Any:
    return make(trl.GRPOTrainer, root)


CASES = [
    (lt, beta, level)
    for lt in ("grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "luspo")
    for beta in (0.0, 0.04)
    for level in ("token", "sequence")
    if not (level == "sequence" and lt in ("bnpo", "dr_grpo", "dapo", "cispo"))
]  # TRL refuses those


@pytest.mark.parametrize(("loss_type", "beta", "level"), CASES)
def test_grpo_loss_equals_trl(trainer: Any, loss_type: str, beta: float, level: str) -> None:
    rng = np.random.default_rng(0)
    B, T = 8, 12
    lengths = rng.integers(1, T + 1, B)
    mask = torch.from_numpy(np.arange(T)[None, :] < lengths[:, None]).long()
    logps = torch.from_numpy(rng.normal(-3, 1, (B, T))).float()
    old = logps + torch.from_numpy(rng.normal(0, 0.3, (B, T))).float()  # ratios off 1: the clip bites
    ref = logps + torch.from_numpy(rng.normal(0, 0.5, (B, T))).float()
    adv = torch.from_numpy(rng.normal(0, 1, B)).float()
    opts = GRPOLoss(
        loss_type=loss_type,
        beta=beta,
        epsilon=0.2,
        epsilon_high=0.28,
        importance_sampling_level=level,
        max_completion_length=T,
        delta=1.5 if loss_type == "grpo" else None,
    )
    t = trainer
    t.loss_type, t.beta, t.importance_sampling_level, t.max_completion_length = loss_type, beta, level, T
    t.epsilon_low, t.epsilon_high = 0.2, 0.28
    t.current_gradient_accumulation_steps = 2  # set by Trainer's loop in training: each micro-batch's share
    t.args.loss_type, t.args.delta = loss_type, opts.delta  # what _compute_loss reads of its arguments
    want_logps = logps.clone().requires_grad_(True)
    t._get_per_token_logps_and_entropies = lambda *a, **k: (want_logps, torch.ones(B, T), None)
    inputs = {
        "prompt_ids": torch.zeros(B, 2, dtype=torch.long),
        "prompt_mask": torch.ones(B, 2, dtype=torch.long),
        "completion_ids": torch.zeros(B, T, dtype=torch.long),
        "completion_mask": mask,
        "advantages": adv,
        "old_per_token_logps": old,
        "ref_per_token_logps": ref,
        "num_items_in_batch": mask.sum(),
    }
    t.model.train()
    want = t._compute_loss(t.model, inputs)
    want.backward()
    got_logps = logps.clone().requires_grad_(True)
    got = grpo_loss(
        got_logps,
        mask,
        adv,
        opts,
        old_logps=old,
        ref_logps=ref,
        num_items_in_batch=int(mask.sum()),
        accumulation=t.current_gradient_accumulation_steps,
        num_processes=t.accelerator.num_processes,
        steps_per_generation=t.args.steps_per_generation,
    )
    got.backward()
    torch.testing.assert_close(got, want.detach(), rtol=1e-6, atol=0.0)
    torch.testing.assert_close(got_logps.grad, want_logps.grad, rtol=1e-6, atol=1e-9)


def test_grpo_loss_refusals() -> None:
    with pytest.raises(ValueError, match="vespo runs through PackedGRPOTrainer"):
        GRPOLoss(loss_type="vespo")
    m = torch.ones(2, 3)
    with pytest.raises(ValueError, match="needs the reference model's per-token log-probabilities"):
        grpo_loss(torch.zeros(2, 3), m, torch.zeros(2), GRPOLoss(beta=0.1))
    with pytest.raises(ValueError, match="normalises by num_items_in_batch"):
        grpo_loss(torch.zeros(2, 3), m, torch.zeros(2), GRPOLoss(loss_type="dapo"))
    with pytest.raises(ValueError, match=r"advantages has shape \(3,\); give \(2,\), one per completion"):
        grpo_loss(torch.zeros(2, 3), m, torch.zeros(3))
    with pytest.raises(ValueError, match=r"old_logps has shape \(2, 4\), logps \(2, 3\)"):
        grpo_loss(torch.zeros(2, 3), m, torch.zeros(2), old_logps=torch.zeros(2, 4))


@pytest.mark.parametrize(
    ("kind", "attention"), [("llama", "seqpack_packed"), ("llama", None), ("qwen2", "seqpack_packed")]
)
def test_packed_pass_equals_trls_padded_pass(root: Path, kind: str, attention: str | None) -> None:
    """TRL's own padded pass (left-padded prompts, right-padded completions, its fused head) and
    PackedGRPOTrainer's on the same rows: groups of 4 sharing a prompt, completions of 1-24 tokens;
    the packed pass under seqpack's plans, or the model's own sdpa with the branch mask. The model's
    attention is its own again after the pass."""
    from seqpack.train.trl_grpo import PackedGRPOTrainer

    trainer, packed = (
        make(trl.GRPOTrainer, root, kind=kind),
        make(PackedGRPOTrainer, root, attention=attention, kind=kind),
    )
    rng = np.random.default_rng(1)
    prompts = [rng.integers(3, 300, n).tolist() for n in (5, 11, 2, 8)]
    comps = [rng.integers(3, 300, rng.integers(1, 25)).tolist() for _ in range(16)]
    P, C = max(map(len, prompts)), max(map(len, comps))
    ids, mask = trl_rows(prompts, comps, P, C)
    with torch.no_grad():
        want, want_ent, _ = trainer._get_per_token_logps_and_entropies(
            trainer.model, ids, mask, C, compute_entropy=True
        )
        got, got_ent, _ = packed._get_per_token_logps_and_entropies(packed.model, ids, mask, C, compute_entropy=True)
    assert packed._own_attention == "sdpa" and packed.model.config._attn_implementation == (attention or "sdpa")
    keep = mask[:, P:].bool()
    torch.testing.assert_close(got[keep], want[keep], rtol=0.0, atol=5e-5)
    torch.testing.assert_close(got_ent[keep], want_ent[keep], rtol=0.0, atol=5e-5)


def test_masked_out_completions_score_zero_and_the_rest_match_trl(root: Path) -> None:
    """TRL's ``mask_truncated_completions`` (DAPO's recipe) zeroes a truncated completion's whole
    mask: the packed pass leaves such a row out and returns zeros there (TRL's loss masks it), and
    every other row equals TRL's padded pass (5e-5, as above). All rows masked: zeros, no pass."""
    from seqpack.train.trl_grpo import PackedGRPOTrainer

    trainer, packed = make(trl.GRPOTrainer, root), make(PackedGRPOTrainer, root)
    rng = np.random.default_rng(2)
    prompts = [rng.integers(3, 300, n).tolist() for n in (4, 7)]
    comps = [rng.integers(3, 300, rng.integers(2, 13)).tolist() for _ in range(8)]
    P, C = 7, 12
    ids, mask = trl_rows(prompts, comps, P, C)
    truncated = [1, 4, 5, 6, 7]  # the second prompt loses its whole group
    mask[truncated, P:] = 0
    with torch.no_grad():
        want, _, _ = trainer._get_per_token_logps_and_entropies(trainer.model, ids, mask, C)
        got, got_ent, _ = packed._get_per_token_logps_and_entropies(packed.model, ids, mask, C, compute_entropy=True)
        all_masked = mask.clone()
        all_masked[:, P:] = 0
        none, none_ent, _ = packed._get_per_token_logps_and_entropies(
            packed.model, ids, all_masked, C, compute_entropy=True
        )
    keep = mask[:, P:].bool()
    assert got.shape == want.shape and got_ent is not None
    torch.testing.assert_close(got[keep], want[keep], rtol=0.0, atol=5e-5)
    assert bool((got[truncated] == 0).all()) and bool((got_ent[truncated] == 0).all())
    assert none.shape == (8, C) and bool((none == 0).all()) and none_ent is not None and bool((none_ent == 0).all())


def test_token_ids_past_the_vocabulary_are_one_line(root: Path) -> None:
    """An id past the model's embedding rows is refused naming the id and the vocabulary, not
    torch's ``IndexError`` inside the model; float ids are refused, not cast."""
    from seqpack.rl import pack_rollouts, packed_logprobs
    from seqpack.train.trl_grpo import PackedGRPOTrainer

    packed = make(PackedGRPOTrainer, root)
    vocab = packed.model.get_input_embeddings().num_embeddings
    with pytest.raises(ValueError, match=f"token id {vocab + 5} is past the model's vocabulary of {vocab} ids"):
        packed_logprobs(packed.model, [[3, 4]], [[[5, vocab + 5]]], max_len=8)
    with pytest.raises(ValueError, match=r"completion 0 of prompt 0: token ids are integers, got float64 values \(5\)"):
        pack_rollouts([[3, 4]], [[[5.0, 6.0]]], max_len=8)  # type: ignore[list-item]  # the wrong type under test
    with pytest.raises(ValueError, match="prompt 0: not a flat list of token ids"):
        pack_rollouts([[3, [4, 5]]], [[[5, 6]]], max_len=8)  # type: ignore[list-item]  # the wrong type under test


@pytest.mark.parametrize(("loss_type", "beta", "masked"), [("dapo", 0.0, True), ("grpo", 0.04, False)])
def test_a_short_run_takes_trls_steps(root: Path, loss_type: str, beta: float, masked: bool) -> None:
    """Three steps of each trainer from the same seed: the same generations (TRL generates them the
    same way), the same losses and nearly the same weights. num_iterations=2: the old policy's pass
    runs packed too; DAPO's recipe masks truncated completions (24 tokens of a random model: most
    are). Losses within 1e-5 relative (the packed pass's 5e-5 on log-probabilities enters them as
    differences of ~1e-6); weights after 3 AdamW steps of lr 1e-2 within AdamW's derived bound
    (`tests.train.conftest.assert_adam_weights_close`)."""
    from seqpack.train.trl_grpo import PackedGRPOTrainer
    from tests.train.conftest import assert_adam_weights_close

    runs = []
    for cls in (trl.GRPOTrainer, PackedGRPOTrainer):
        t = make(cls, root, loss_type=loss_type, beta=beta, num_iterations=2, mask_truncated_completions=masked)
        t.train()
        runs.append(([h["loss"] for h in t.state.log_history if "loss" in h], t.model.state_dict()))
    (a, wa), (b, wb) = runs
    assert len(a) == 3 and np.allclose(a, b, rtol=1e-5, atol=1e-6), (a, b)
    assert_adam_weights_close(wb, wa, lr=1e-2, steps=3)
