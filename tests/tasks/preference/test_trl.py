"""Preference training exact against TRL: seqpack's packed DPO loss, rewards and gradients equal
``trl.DPOTrainer``'s (padded, one response per row) on the same pairs and weights, in both layouts;
the reward-model loss equals ``trl.RewardTrainer``'s; and seqpack's GPT packed equals it unpacked.

Tolerances: fp32 throughout. Packed and padded rows reduce in other orders (attention over other
key sets, sums over other row widths): ~1e-7 relative per operation, over chains of ~100 operations
(2 layers, sums of ~30 token log-probabilities) -> 1e-5 relative. A wrong mask, position or
predictor moves a log-probability by ~1e-2 or more (one token's log-probability is ~ -5).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from seqpack.data.torch_dataset import PackedDataset, collate_packed
from seqpack.nn.models import GPT, GPTConfig
from seqpack.nn.preference import PreferenceLoss
from seqpack.pipeline import PackConfig, build_packed_dataset
from seqpack.tasks.preference.forward import policy_logps, preference_forward
from seqpack.tokenizer import open_tokenizer
from tests.hf_tokenizers import LLAMA, bpe_tokenizer_dir, preference_records

trl = pytest.importorskip("trl")
tf = pytest.importorskip("transformers")
datasets = pytest.importorskip("datasets")
pytestmark = pytest.mark.filterwarnings("ignore")
LAYOUTS = ("shared-prefix", "pairs")
N = 10


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("pref_trl")
    tok_dir = bpe_tokenizer_dir(root / "tok")
    records = preference_records(N)
    for layout in LAYOUTS:
        build_packed_dataset(
            records,
            open_tokenizer(tok_dir),
            root / layout,
            PackConfig.for_task("preference", max_len=160, layout=layout),
        )
    return {"root": root, "tok": tok_dir, "records": records}


def packed_batch(path: Path) -> tuple[dict[str, torch.Tensor], np.ndarray]:
    ds = PackedDataset(path)
    batch = collate_packed([ds[i] for i in range(len(ds))])
    return batch, batch.pop("example_ids").numpy()


def by_example(x: torch.Tensor, present: torch.Tensor, ex: np.ndarray) -> torch.Tensor:
    """Slot values (B, D) in example order (N,)."""
    return x[present][np.argsort(ex[present.numpy()])]


def llama_pair(vocab: int, impl: str = "sdpa") -> tuple[Any, Any]:
    """(policy, reference): the reference and a perturbed copy of it (log-ratios far from 0)."""
    from seqpack.nn.hf_attention import register_packed_attention

    register_packed_attention()
    torch.manual_seed(0)
    cfg = tf.LlamaConfig(
        **{k: v for k, v in LLAMA.items() if k != "model_type"}, vocab_size=vocab, attn_implementation=impl
    )
    ref = tf.LlamaForCausalLM(cfg)
    policy = copy.deepcopy(ref)
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(0.02 * torch.randn_like(p))
    return policy, ref


def as_sdpa(model: Any) -> Any:
    out = copy.deepcopy(model)
    out.config._attn_implementation = "sdpa"
    return out


def trl_dpo(
    setup: dict[str, Any],
    policy: Any,
    ref: Any,
    ref_logps: tuple[torch.Tensor, torch.Tensor],
    loss_type: str = "sigmoid",
) -> tuple[float, dict[str, Any], dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """One DPOTrainer loss on all pairs, with the given reference log-probabilities: loss, metrics, grads, inputs."""
    tok = tf.AutoTokenizer.from_pretrained(str(setup["tok"]))
    args = trl.DPOConfig(
        output_dir=str(setup["root"] / "trl"),
        per_device_train_batch_size=N,
        report_to=[],
        use_cpu=True,
        beta=0.1,
        max_length=None,
        save_strategy="no",
        loss_type=[loss_type],
        precompute_ref_log_probs=True,
    )
    policy, ref = (as_sdpa(m) for m in (policy, ref))  # TRL's side: the standard attention
    trainer = trl.DPOTrainer(
        model=copy.deepcopy(policy),
        ref_model=copy.deepcopy(ref),
        args=args,
        train_dataset=datasets.Dataset.from_list(setup["records"]),
        processing_class=tok,
    )
    inputs = trainer.data_collator([trainer.train_dataset[i] for i in range(N)])
    # the same reference numbers on both sides (TRL's own evaluation-mode wrapper computes them ~1e-5
    # relative off the float64 value; the reference pass is checked separately below)
    inputs["ref_chosen_logps"], inputs["ref_rejected_logps"] = ref_logps
    trainer.model.train()
    loss = trainer._compute_loss(trainer.model, inputs, return_outputs=False)
    loss.backward()
    grads = {n: p.grad.clone() for n, p in trainer.model.named_parameters()}
    metrics = {k: v[-1] for k, v in trainer._metrics["train"].items()}
    return float(loss), metrics, grads, inputs


def padded_logps(model: Any, inputs: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed completion log-probabilities of TRL's padded rows (chosen rows, then rejected)."""
    out = model(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"], use_cache=False).logits
    lp = torch.log_softmax(out[:, :-1].float(), -1).gather(2, inputs["input_ids"][:, 1:, None]).squeeze(2)
    return (lp * inputs["completion_mask"][:, 1:]).sum(1).chunk(2)  # type: ignore[return-value]


@pytest.mark.parametrize(("loss_type", "impl"), [("sigmoid", "sdpa"), ("ipo", "sdpa"), ("sigmoid", "seqpack_packed")])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_dpo_matches_trl(setup: dict[str, Any], layout: str, loss_type: str, impl: str) -> None:
    """TRL runs its padded rows with sdpa; seqpack its packed rows with the 4-D mask (sdpa) or its
    own plans inside the model (seqpack_packed)."""
    batch, ex = packed_batch(setup["root"] / layout)
    policy, ref = llama_pair(len(tf.AutoTokenizer.from_pretrained(str(setup["tok"]))), impl)
    with torch.no_grad():
        r = policy_logps(ref, batch)
    ref_pair = (by_example(r.chosen, r.present, ex), by_example(r.rejected, r.present, ex))
    trl_loss, metrics, trl_grads, inputs = trl_dpo(setup, policy, ref, ref_pair, loss_type)

    with torch.no_grad():  # the reference pass equals TRL's padded rows through the plain model
        want_c, want_r = padded_logps(as_sdpa(ref), inputs)
    torch.testing.assert_close(ref_pair[0], want_c, rtol=1e-5, atol=0.0)
    torch.testing.assert_close(ref_pair[1], want_r, rtol=1e-5, atol=0.0)

    batch["ref_chosen_logps"], batch["ref_rejected_logps"] = r.chosen, r.rejected
    model = copy.deepcopy(policy)
    model.train()
    out = preference_forward(model, batch, PreferenceLoss(kind=loss_type))
    out.loss.backward()  # type: ignore[union-attr]  # PackedOutput.loss: set when the batch has targets
    assert abs(float(out.loss) - trl_loss) <= 1e-5 * abs(trl_loss), (float(out.loss), trl_loss)  # type: ignore[arg-type]  # PackedOutput.loss: set when the batch has targets
    if loss_type == "sigmoid":  # rewards beta * (policy - reference): off by what their log-probabilities are
        for key, which in (("rewards/chosen", "chosen"), ("rewards/rejected", "rejected")):
            tol = 1e-5 * 0.1 * float(out.extra[f"{which}_logps"][out.present].abs().mean())
            got = float(by_example(out.extra[f"{which}_rewards"], out.present, ex).mean())  # type: ignore[arg-type]  # out.present: set for preference batches
            assert abs(got - metrics[key]) <= tol, (key, got, metrics[key])
    scale = max(float(g.abs().max()) for g in trl_grads.values())
    for name, p in model.named_parameters():  # gradients relative to the largest entry (1e-5, as above)
        torch.testing.assert_close(p.grad, trl_grads[name], rtol=0.0, atol=1e-5 * scale, msg=name)


def test_gpt_packed_equals_unpacked(setup: dict[str, Any]) -> None:
    """seqpack's GPT: each response's log-probability packed (both layouts) equals the pair run alone,
    padded, one response per row as TRL lays it out; so do the DPO loss and its gradients."""
    vocab = len(tf.AutoTokenizer.from_pretrained(str(setup["tok"])))
    torch.manual_seed(0)
    ref = GPT(GPTConfig(vocab_size=vocab, hidden=32, layers=2, heads=2, attention="sdpa"))
    policy = copy.deepcopy(ref)
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(0.02 * torch.randn_like(p))
    tok = open_tokenizer(setup["tok"])
    rows = []  # TRL's layout: prompt+chosen rows, then prompt+rejected rows
    for kind in ("chosen", "rejected"):
        for rec in setup["records"]:
            prompt = tok.encode_batch([rec["prompt"]])[0]
            full = tok.encode_batch([rec["prompt"] + rec[kind] + "<|im_end|>"])[0]
            rows.append((full, len(prompt)))
    T = max(len(f) for f, _ in rows)
    ids = torch.zeros(len(rows), T, dtype=torch.long)
    seg = torch.zeros_like(ids)
    comp = torch.zeros_like(ids)
    for i, (full, k) in enumerate(rows):
        ids[i, : len(full)] = torch.tensor(full)
        seg[i, : len(full)] = 1
        comp[i, k : len(full)] = 1

    def unpacked(model: GPT) -> tuple[torch.Tensor, torch.Tensor]:
        logits = model(ids, seg).logits
        lp = torch.log_softmax(logits[:, :-1], -1).gather(2, ids[:, 1:, None]).squeeze(2)
        return (lp * comp[:, 1:]).sum(1).chunk(2)  # type: ignore[return-value]

    with torch.no_grad():
        rc, rr = unpacked(ref)
    pc, pr = unpacked(policy)
    want = -torch.nn.functional.logsigmoid(0.1 * ((pc - rc) - (pr - rr))).mean()
    want.backward()
    want_grads = {n: p.grad.clone() for n, p in policy.named_parameters()}  # type: ignore[union-attr]  # p.grad: backward() set it
    for layout in LAYOUTS:
        batch, ex = packed_batch(setup["root"] / layout)
        with torch.no_grad():
            r = policy_logps(ref, batch)
        torch.testing.assert_close(by_example(r.chosen, r.present, ex), rc, rtol=1e-5, atol=0.0)
        torch.testing.assert_close(by_example(r.rejected, r.present, ex), rr, rtol=1e-5, atol=0.0)
        batch["ref_chosen_logps"], batch["ref_rejected_logps"] = r.chosen, r.rejected
        model = copy.deepcopy(policy)
        model.zero_grad()
        out = preference_forward(model, batch, PreferenceLoss())
        out.loss.backward()  # type: ignore[union-attr]  # PackedOutput.loss: set when the batch has targets
        assert abs(float(out.loss) - float(want)) <= 1e-5 * float(want)  # type: ignore[arg-type]  # PackedOutput.loss: set when the batch has targets
        scale = max(float(g.abs().max()) for g in want_grads.values())
        for name, p in model.named_parameters():
            torch.testing.assert_close(p.grad, want_grads[name], rtol=0.0, atol=1e-5 * scale, msg=name)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_reward_model_matches_trl(setup: dict[str, Any], layout: str) -> None:
    tok = tf.AutoTokenizer.from_pretrained(str(setup["tok"]))
    torch.manual_seed(0)
    cfg = tf.LlamaConfig(
        **{k: v for k, v in LLAMA.items() if k != "model_type"},
        vocab_size=len(tok),
        num_labels=1,
        pad_token_id=tok.pad_token_id,
        attn_implementation="sdpa",
    )
    model = tf.LlamaForSequenceClassification(cfg)
    args = trl.RewardConfig(
        output_dir=str(setup["root"] / "rm"),
        per_device_train_batch_size=N,
        report_to=[],
        use_cpu=True,
        max_length=None,
        save_strategy="no",
    )
    trainer = trl.RewardTrainer(
        model=copy.deepcopy(model),
        args=args,
        processing_class=tok,
        train_dataset=datasets.Dataset.from_list(setup["records"]),
    )
    inputs = trainer.data_collator([trainer.train_dataset[i] for i in range(N)])
    trainer.model.train()
    trl_loss = trainer.compute_loss(trainer.model, dict(inputs))
    trl_loss.backward()
    trl_grads = {n: p.grad.clone() for n, p in trainer.model.named_parameters()}

    batch, ex = packed_batch(setup["root"] / layout)
    mine = copy.deepcopy(model)
    mine.train()
    out = preference_forward(mine, batch, PreferenceLoss(kind="bt"))
    out.loss.backward()  # type: ignore[union-attr]  # PackedOutput.loss: set when the batch has targets
    assert abs(float(out.loss) - float(trl_loss)) <= 1e-5 * abs(float(trl_loss))  # type: ignore[arg-type]  # PackedOutput.loss: set when the batch has targets
    assert abs(
        float(by_example(out.extra["chosen_rewards"] - out.extra["rejected_rewards"], out.present, ex).mean())  # type: ignore[arg-type]  # out.present: set for preference batches
        - trainer._metrics["train"]["margin"][-1]
    ) <= 1e-5 + 1e-5 * abs(trainer._metrics["train"]["margin"][-1])
    scale = max(float(g.abs().max()) for g in trl_grads.values())
    for name, p in mine.named_parameters():
        torch.testing.assert_close(p.grad, trl_grads[name], rtol=0.0, atol=1e-5 * scale, msg=name)


def test_packed_dpo_trainer(setup: dict[str, Any]) -> None:
    """TRL's Trainer loop over seqpack's packs: one step over every pack has seqpack's loss on them,
    and the reference model is released once its log-probabilities are columns."""
    from seqpack.train.trl_dpo import PackedDPOTrainer

    path = setup["root"] / "shared-prefix"
    tok = tf.AutoTokenizer.from_pretrained(str(setup["tok"]))
    policy, ref = llama_pair(len(tok))
    batch, _ = packed_batch(path)
    with torch.no_grad():
        r = policy_logps(ref, batch)
        batch["ref_chosen_logps"], batch["ref_rejected_logps"] = r.chosen, r.rejected
        want = float(preference_forward(copy.deepcopy(policy), batch, PreferenceLoss()).loss)  # type: ignore[arg-type]  # PackedOutput.loss: set when the batch has targets
    P = batch["input_ids"].shape[0]
    args = trl.DPOConfig(
        output_dir=str(setup["root"] / "packed-trl"),
        per_device_train_batch_size=P,
        max_steps=1,
        bf16=False,
        logging_steps=1,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
        beta=0.1,
    )
    assert args.remove_unused_columns  # TRL's default
    trainer = PackedDPOTrainer(
        copy.deepcopy(policy), path, ref_model=copy.deepcopy(ref), args=args, processing_class=tok
    )
    assert args.remove_unused_columns and not trainer.args.remove_unused_columns  # the caller's args untouched
    trainer.train()
    got = next(h["loss"] for h in trainer.state.log_history if "loss" in h)
    # the same terms, the packs in the sampler's order: fp32 sums in another order (1e-5 relative); bf16=False:
    # TRL's configs turn on bf16 autocast by default, even on a CPU
    assert abs(got - want) <= 1e-5 * want, (got, want)
    assert trainer.ref_model is None and np.isfinite(got)
    with pytest.raises(ValueError, match=r"sigmoid|ipo"):
        PackedDPOTrainer(
            copy.deepcopy(policy),
            path,
            args=trl.DPOConfig(output_dir=str(setup["root"] / "x"), loss_type=["hinge"], report_to=[], use_cpu=True),
            processing_class=tok,
        )


@pytest.mark.parametrize("layout", LAYOUTS)
def test_head_at_targets_equals_the_full_logits(setup: dict[str, Any], layout: str) -> None:
    """A Llama's head runs only at the positions that predict a response token; the same
    log-probabilities as slicing its full (B, T, V) logits. The products are the same, only the
    matrix multiply's blocking may differ: fp32 dot products of 32 terms, so each logit may move by
    a few units in the last place; summed over a response's ~40 tokens, 1e-5 bounds it."""
    from seqpack.nn.branch_states import hf_branch_states
    from seqpack.nn.hf_causal_lm import HEAD_AT_TARGETS
    from seqpack.nn.preference import response_logps

    assert "llama" in HEAD_AT_TARGETS
    batch, _ = packed_batch(setup["root"] / layout)
    policy, _ = llama_pair(len(tf.AutoTokenizer.from_pretrained(str(setup["tok"]))), "seqpack_packed")
    with torch.no_grad():
        lp = policy_logps(policy, batch)
        logits = hf_branch_states(policy, batch, lambda **kw: policy(**kw).logits)  # (B, T, V)
        full = response_logps(lambda r, c: logits[r, c], batch["labels"], batch["segment_ids"], batch["branch_ids"])
    for a, b in ((lp.chosen, full.chosen), (lp.rejected, full.rejected)):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_pair_outputs_are_keyed_by_record(setup: dict[str, Any], layout: str) -> None:
    """``pair_outputs`` names each pair's outputs by its record: record i's log-probabilities equal
    those of TRL's padded row i (1e-5 relative, as above), its rewards beta * (policy - reference),
    and the batch loss is the training loss on the same rows."""
    from seqpack.tasks.preference.forward import pair_outputs
    from seqpack.train.trl_dpo import PackedDPOTrainer

    ds = PackedDataset(setup["root"] / layout)
    batch = collate_packed([ds[i] for i in range(len(ds))])
    tok = tf.AutoTokenizer.from_pretrained(str(setup["tok"]))
    policy, ref = llama_pair(len(tok), "seqpack_packed")
    with torch.no_grad():
        r = policy_logps(ref, batch)
    batch["ref_chosen_logps"], batch["ref_rejected_logps"] = r.chosen, r.rejected
    out = pair_outputs(policy, batch)
    assert sorted(out.example_ids.tolist()) == list(range(N))
    rows = out.by_record()
    _, _, _, inputs = trl_dpo(setup, policy, ref, (torch.zeros(N), torch.zeros(N)))
    with torch.no_grad():
        want_c, want_r = padded_logps(as_sdpa(policy), inputs)
        ref_c, _ref_r = padded_logps(as_sdpa(ref), inputs)
    for i in range(N):
        assert abs(rows[i]["chosen_logps"] - float(want_c[i])) <= 1e-5 * abs(float(want_c[i]))
        assert abs(rows[i]["rejected_logps"] - float(want_r[i])) <= 1e-5 * abs(float(want_r[i]))
        # a reward is 0.1 x a difference of two log-probabilities of ~-200: 1e-5 of each
        tol = 1e-5 * 0.1 * (abs(float(want_c[i])) + abs(float(ref_c[i])))
        assert abs(rows[i]["chosen_rewards"] - 0.1 * float(want_c[i] - ref_c[i])) <= tol
    train_loss = preference_forward(policy, batch, PreferenceLoss()).loss
    assert float(out.loss) == float(train_loss) and out.loss.requires_grad  # type: ignore[arg-type]  # PackedOutput.loss: set when the batch has targets
    with pytest.raises(ValueError, match="no example_ids column"):
        pair_outputs(policy, {k: v for k, v in batch.items() if k != "example_ids"})
    # PackedDPOTrainer's batches keep example_ids, so its model's outputs map to records the same way
    args = trl.DPOConfig(
        output_dir=str(setup["root"] / "pairs-trl"),
        per_device_train_batch_size=2,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
        bf16=False,
    )
    trainer = PackedDPOTrainer(
        copy.deepcopy(policy), setup["root"] / layout, ref_model=copy.deepcopy(ref), args=args, processing_class=tok
    )
    assert "example_ids" in trainer.train_dataset.column_names  # type: ignore[union-attr]  # the trainer's packed dataset
    got = {}
    for b in trainer.get_train_dataloader():
        got.update(pair_outputs(trainer.model, b, trainer.objective).by_record())
    assert sorted(got) == list(range(N))
    for i in range(N):
        assert abs(got[i]["chosen_logps"] - rows[i]["chosen_logps"]) <= 1e-5 * abs(rows[i]["chosen_logps"])
