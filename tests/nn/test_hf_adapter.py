"""Hugging Face adapters: a packed batch gives what each sequence gives run alone through the
unmodified transformers model (its own loss included)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from hypothesis import given, settings

from seqpack.nn import check_hf_mask, hf_attention_mask, hf_inputs, packed_forward
from tests.nn._packs import packs, spans
from tests.nn.test_models import V, alone, f, make_batch

tf = pytest.importorskip("transformers")
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

KINDS = (
    "BertForPreTraining",
    "BertForMaskedLM",
    "BertForSequenceClassification-single",
    "BertForSequenceClassification-multi",
    "BertForQuestionAnswering",
    "GPT2LMHeadModel",
    "LlamaForCausalLM",
)


def build(kind: str, impl: str) -> Any:
    torch.manual_seed(0)
    if kind.startswith("Bert"):
        problem = "multi_label_classification" if kind.endswith("multi") else "single_label_classification"
        cfg = tf.BertConfig(
            vocab_size=V,
            hidden_size=16,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=32,
            max_position_embeddings=64,
            hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0,
            num_labels=2 if kind.endswith("Answering") else 3,
            problem_type=problem,
            attn_implementation=impl,
        )
        return getattr(tf, kind.split("-")[0])(cfg)
    if kind == "GPT2LMHeadModel":
        cfg = tf.GPT2Config(
            vocab_size=V,
            n_embd=16,
            n_layer=2,
            n_head=2,
            n_positions=64,
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
            bos_token_id=0,
            eos_token_id=0,
            attn_implementation=impl,
        )
        return tf.GPT2LMHeadModel(cfg)
    cfg = tf.LlamaConfig(
        vocab_size=V,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=64,
        bos_token_id=0,
        eos_token_id=0,
        attn_implementation=impl,
    )
    return tf.LlamaForCausalLM(cfg)


def packed_batch(kind: str, x: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    batch = {"input_ids": x["input_ids"], "segment_ids": x["segment_ids"], "token_type_ids": x["token_type_ids"]}
    if kind in ("BertForPreTraining", "BertForMaskedLM"):
        batch["labels"] = x["mlm"]
    if kind == "BertForPreTraining":
        batch["next_sentence_label"] = x["nsp"]
    if kind.endswith("single"):
        batch["labels"] = x["cls"]
    if kind.endswith("multi"):
        batch["labels"] = x["multi"]
    if kind == "BertForQuestionAnswering":
        batch["start_positions"], batch["end_positions"] = x["start"], x["end"]
    if kind in ("GPT2LMHeadModel", "LlamaForCausalLM"):
        batch = {"input_ids": x["input_ids"], "segment_ids": x["segment_ids"], "labels": x["clm"]}
    return batch


def hf_alone(model: Any, kind: str, x: dict[str, torch.Tensor]) -> Any:
    """The unmodified model on one unpadded sequence, with its own loss."""
    if kind in ("GPT2LMHeadModel", "LlamaForCausalLM"):
        return model(input_ids=x["input_ids"], labels=x["clm"])
    kw: dict[str, Any] = {"input_ids": x["input_ids"], "token_type_ids": x["token_type_ids"]}
    if kind == "BertForPreTraining":
        kw.update(labels=x["mlm"], next_sentence_label=x["nsp"][:, 0])
    elif kind == "BertForMaskedLM":
        kw.update(labels=x["mlm"])
    elif kind.endswith("single"):
        kw.update(labels=x["cls"][:, 0])
    elif kind.endswith("multi"):
        kw.update(labels=x["multi"][:, 0])
    else:
        kw.update(start_positions=x["start"][:, 0], end_positions=x["end"][:, 0])
    return model(**kw)


def compare_outputs(kind: str, out: Any, ref: Any, b: int, k: int, at: int, n: int) -> None:
    if kind in ("BertForQuestionAnswering",):
        assert (out.extra["start_logits"][b, k, at : at + n] - ref.start_logits[0]).abs().max() <= 1e-5
        assert (out.extra["end_logits"][b, k, at : at + n] - ref.end_logits[0]).abs().max() <= 1e-5
    elif kind.startswith("BertForSequenceClassification"):
        assert (out.slot_logits[b, k] - ref.logits[0]).abs().max() <= 1e-5
    elif kind == "BertForPreTraining":
        assert (out.logits[b, at : at + n] - ref.prediction_logits[0]).abs().max() <= 1e-5
        assert (out.slot_logits[b, k] - ref.seq_relationship_logits[0]).abs().max() <= 1e-5
    else:
        assert (out.logits[b, at : at + n] - ref.logits[0]).abs().max() <= 1e-5


def check_adapter(kind: str, impl: str, T: int, rows: list[list[int]], *, device: str = "cpu") -> None:
    """The adapter on a packed batch equals the unmodified model on each sequence alone (its own loss)."""
    model = build(kind, impl).to(device)
    x = make_batch(T, rows, seed=T)
    for b, _, at, n in spans(rows):  # every sequence gets a masked token (HF's mean is nan without one)
        x["mlm"][b, at + n - 1] = x["input_ids"][b, at + n - 1]
    x = {k: v.to(device) for k, v in x.items()}
    out = packed_forward(model, packed_batch(kind, x))
    out.loss.backward()  # type: ignore[union-attr]  # PackedOutput.loss: set when the batch has targets
    grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    refs = []
    for b, k, at, n in spans(rows):
        ref = hf_alone(model, kind, alone(x, b, k, at, n))
        compare_outputs(kind, out, ref, b, k, at, n)
        refs.append(ref.loss)
    want = torch.stack(refs).mean()  # per-sequence losses, averaged over sequences
    assert abs(f(out.loss) - f(want)) <= 1e-5 * max(1.0, abs(f(want)))
    want.backward()
    for name, p in model.named_parameters():
        if name in grads:
            ref = p.grad if p.grad is not None else torch.zeros_like(p)
            assert (grads[name] - ref).abs().max() <= 1e-5 + 1e-4 * ref.abs().max(), name


@pytest.mark.parametrize("impl", ("sdpa", "eager"))
@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=4, deadline=None)
@given(pack=packs(max_rows=2, max_len=20, max_depth=3, min_len=2))
def test_adapter_equals_model_run_alone(kind: str, impl: str, pack) -> None:
    check_adapter(kind, impl, *pack)


def test_bool_mask_with_eager_is_refused_and_would_be_wrong() -> None:
    model = build("BertForMaskedLM", "eager")
    seg = torch.tensor([[1, 1, 1, 2, 2, 2]])
    ids = torch.randint(0, V, (1, 6))
    good = hf_inputs(model, {"input_ids": ids, "segment_ids": seg})
    assert good["attention_mask"].dtype == torch.float32
    bad_mask = hf_attention_mask(build("BertForMaskedLM", "sdpa"), seg, causal=False)
    assert bad_mask.dtype == torch.bool
    with pytest.raises(ValueError, match="silently attends across sequences"):
        check_hf_mask(model, bad_mask)
    right = model(**good).logits
    wrong = model(**{**good, "attention_mask": bad_mask}).logits  # what the check prevents
    assert (right - wrong).abs().max() > 1e-5  # beyond the exactness tolerance
    with pytest.raises(ValueError, match="must be 4-D"):
        check_hf_mask(model, bad_mask[:, 0])


def test_adapter_bad_inputs() -> None:
    model = build("GPT2LMHeadModel", "sdpa")
    with pytest.raises(ValueError, match="no packed adapter for Linear"):
        packed_forward(torch.nn.Linear(2, 2), {"input_ids": torch.zeros(1, 2)})
    with pytest.raises(ValueError, match="no 'segment_ids' column"):
        packed_forward(model, {"input_ids": torch.zeros(1, 4, dtype=torch.long)})
    with pytest.raises(ValueError, match="segment_ids has shape"):
        packed_forward(
            model, {"input_ids": torch.zeros(1, 4, dtype=torch.long), "segment_ids": torch.ones(1, 3, dtype=torch.long)}
        )
    model.config._attn_implementation = "flash_attention_2"
    with pytest.raises(ValueError, match="attn_implementation='sdpa'"):
        hf_attention_mask(model, torch.ones(1, 3, dtype=torch.long), causal=True)


def _outputs(kind: str, out: Any) -> list[torch.Tensor]:
    if kind == "BertForQuestionAnswering":
        return [out.extra["start_logits"], out.extra["end_logits"]]
    if kind.startswith("BertForSequenceClassification"):
        return [out.slot_logits]
    return [out.logits]


@pytest.mark.parametrize("impl", ("sdpa", "eager"))
@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=3, deadline=None)
@given(pack=packs(max_rows=2, max_len=20, max_depth=3, min_len=2))
def test_adapter_no_cross_contamination(kind: str, impl: str, pack) -> None:
    T, rows = pack
    model = build(kind, impl)
    x = make_batch(T, rows, seed=5)
    before = packed_forward(model, packed_batch(kind, x))
    b, k, at, n = spans(rows)[-1]
    changed = dict(x)
    changed["input_ids"] = x["input_ids"].clone()
    changed["input_ids"][b, at : at + n] = (x["input_ids"][b, at : at + n] + 11) % V
    after = packed_forward(model, packed_batch(kind, changed))
    for b2, k2, at2, n2 in spans(rows):
        if (b2, k2) == (b, k):
            continue
        for x1, x2 in zip(_outputs(kind, before), _outputs(kind, after)):
            if kind != "BertForQuestionAnswering" and not kind.startswith("BertForSequenceClassification"):  # (B, T, V)
                d = x1[b2, at2 : at2 + n2] - x2[b2, at2 : at2 + n2]
            else:  # per-slot (B, D, ...), -inf outside the sequence for QA
                d = x1[b2, k2].nan_to_num(0, 0, 0) - x2[b2, k2].nan_to_num(0, 0, 0)
            assert d.abs().max() <= 1e-6
