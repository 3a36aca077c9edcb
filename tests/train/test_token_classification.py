"""``token-classification`` trains: seqpack's BertForTokenClassification and a transformers one
(``--hf-model``) give a packed batch the loss and gradient of its sequences padded one per row
(fp32, both reductions), ``--padded --match packs`` follows the packed run step by step, evaluation
reports token accuracy and entity F1, and the CLI packs and trains it in-process."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from seqpack.train import TrainConfig, train
from seqpack.train.checkpoint import read_metrics
from seqpack.train.data import TrainData
from seqpack.train.models import TaskModule, build_model
from seqpack.train.step_loss import component_means, loss_units, step_loss
from tests.train.conftest import WORDS

TASK = "token-classification"
PEOPLE = {"king", "queen", "lord", "lady"}
BERT = {
    "model_type": "bert",
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "intermediate_size": 64,
    "max_position_embeddings": 64,
    "hidden_dropout_prob": 0.0,
    "attention_probs_dropout_prob": 0.0,
}


def ner_records(n: int, seed: int = 0) -> list[dict]:
    """Sentences of random words; "king queen lord lady" are people (B-PER, a following one I-PER)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        words = [str(w) for w in rng.choice(WORDS, size=int(rng.integers(2, 14)))]
        tags = [
            ("I-PER" if k and words[k - 1] in PEOPLE else "B-PER") if w in PEOPLE else "O" for k, w in enumerate(words)
        ]
        out.append({"tokens": words, "ner_tags": tags})
    return out


@pytest.fixture(scope="module")
def ner(datasets, tmp_path_factory) -> Path:
    from seqpack.pipeline import PackConfig, build_packed_dataset
    from seqpack.tokenizer import open_tokenizer

    root = tmp_path_factory.mktemp("ner")
    tok = open_tokenizer(datasets["tokenizer"])
    build_packed_dataset(ner_records(200), tok, root / "packed", PackConfig.for_task(TASK, max_len=64))
    (root / "bert.json").write_text(json.dumps(BERT))
    return root


def cfg(data, out, **kw) -> TrainConfig:
    base = {
        "data": str(data),
        "out": str(out),
        "steps": 3,
        "batch_size": 4,
        "progress": False,
        "eval_fraction": 0.1,
        "threads": 1,
        "dropout": 0.0,
    }
    return TrainConfig(**{**base, **kw})


@pytest.mark.parametrize("hf", [False, True], ids=["seqpack", "transformers"])
@pytest.mark.parametrize("reduction", ["sequence", "token"])
def test_packed_batch_equals_its_sequences_padded(ner, hf, reduction):
    """Same sequences, packed rows vs one per row: every token attends to its own sequence only, at
    its own positions, so the logits agree to fp32 rounding of attention over another row width
    (~1e-7 relative); the loss (a mean of ~10^2 cross-entropies) to rtol 1e-5, the gradients to
    1e-4 of each tensor's scale."""
    data = ner / "packed"
    packed, padded = TrainData(data), TrainData(data, padded=True)
    packs = np.arange(4)
    chosen = np.flatnonzero(np.isin(padded.spans[:, 0], packed.train_packs[packs]))
    extra = {"hf_model": str(ner / "bert.json")} if hf else {}
    results = []
    for d, units in ((packed, packs), (padded, chosen)):
        torch.manual_seed(0)
        model, _ = build_model(d.manifest, cfg(data, "x", **extra))
        b = d.batch(units)
        n = loss_units(b, TASK, reduction)
        loss = step_loss(component_means(TaskModule(model, TASK, reduction)(b), TASK), n, n)
        loss.backward()
        results.append(
            (loss.detach(), n, {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None})
        )
    (l1, n1, g1), (l2, n2, g2) = results
    assert torch.equal(n1, n2) and n1[0] > 0
    torch.testing.assert_close(l1, l2, rtol=1e-5, atol=1e-6)
    assert g1.keys() == g2.keys() and g1
    for k in g1:
        torch.testing.assert_close(g1[k], g2[k], rtol=1e-4, atol=1e-5 + 1e-4 * float(g1[k].abs().max()))


@pytest.mark.parametrize("hf", [False, True], ids=["seqpack", "transformers"])
def test_padded_run_matched_by_packs_takes_the_packed_runs_steps(ner, tmp_path, hf):
    """The same sequences each step, packed or one per row: the losses agree to fp32 rounding
    compounding through 3 Adam steps (~1e-6 relative), far below another batch's (~1e-2)."""
    extra = {"hf_model": str(ner / "bert.json")} if hf else {}
    a = train(cfg(ner / "packed", tmp_path / "packed", **extra))
    b = train(cfg(ner / "packed", tmp_path / "padded", padded=True, match="packs", **extra))
    ra, rb = ([r for r in read_metrics(tmp_path / x) if "eval" not in r and "loss" in r] for x in ("packed", "padded"))
    assert [r["step_sequences"] for r in ra] == [r["step_sequences"] for r in rb] and len(ra) == 3
    for x, y in zip(ra, rb):
        assert abs(x["loss"] - y["loss"]) <= 1e-5 * abs(x["loss"])
    assert a["model"] == "BertForTokenClassification"  # seqpack's, or transformers' of that name
    ev = a["eval"]
    assert {
        "loss",
        "cls_loss",
        "cls_token_loss",
        "token_accuracy",
        "entity_precision",
        "entity_recall",
        "entity_f1",
    } <= set(ev)
    assert 0.0 <= ev["token_accuracy"] <= 1.0 and 0.0 <= ev["entity_f1"] <= 1.0
    assert abs(ev["loss"] - b["eval"]["loss"]) <= 1e-5 * abs(ev["loss"])


def test_token_metrics_hand_computed():
    """Two sequences in one row, tags O=0, B-PER=1, I-PER=2. Sequence 1: gold O B I, predicted
    O B O (the entity's end is wrong); sequence 2: gold B, predicted B. Tagged tokens: 3 of 4
    right; entities: 1 right of 2 predicted and of 2 gold."""
    from seqpack.nn.models.bert import token_class_output
    from seqpack.tasks.token_forward import add_token_metrics, with_tag_scheme
    from seqpack.train.step_loss import EvalTotals

    seg = torch.tensor([[1, 1, 1, 1, 1, 2, 2, 0]])
    labels = torch.tensor([[-100, 0, 1, 2, -100, -100, 1, -100]])
    pred = [0, 0, 1, 0, 0, 0, 1, 0]
    logits = torch.nn.functional.one_hot(torch.tensor([pred]), 3).float() * 10  # (1, 8, 3)
    out = with_tag_scheme(token_class_output(logits, labels, seg, "sequence"), ["O", "B-PER", "I-PER"])
    t = EvalTotals()
    add_token_metrics(t, out, {"labels": labels, "segment_ids": seg})
    r = t.result()
    assert r["token_accuracy"] == 0.75
    assert (r["entity_precision"], r["entity_recall"], r["entity_f1"]) == (0.5, 0.5, 0.5)


def test_cli_packs_and_trains_token_classification(datasets, tmp_path, capsys):
    from seqpack.cli.main import main

    f = tmp_path / "ner.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in ner_records(60, seed=3)))
    assert (
        main(
            [
                "pack",
                str(f),
                "--task",
                TASK,
                "--max-len",
                "48",
                "--tokenizer",
                str(datasets["tokenizer"]),
                "--out",
                str(tmp_path / "p"),
                "--label-all-subtokens",
                "--tags-field",
                "ner_tags",
            ]
        )
        == 0
    )
    m = json.loads((tmp_path / "p" / "manifest.json").read_text())
    assert m["task"] == TASK and m["task_info"]["label_all_subtokens"] is True and m["token_labels"] is True
    assert m["task_info"]["label_names"] == ["B-PER", "I-PER", "O"]
    assert (
        main(
            [
                "train",
                "--data",
                str(tmp_path / "p"),
                "--out",
                str(tmp_path / "run"),
                "--size",
                "tiny",
                "--steps",
                "2",
                "--batch-size",
                "4",
                "--quiet",
            ]
        )
        == 0
    )
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["model"] == "BertForTokenClassification" and "entity_f1" in summary["eval"]
    capsys.readouterr()
    assert (
        main(
            [
                "pack",
                str(f),
                "--task",
                TASK,
                "--max-len",
                "48",
                "--tokenizer",
                str(datasets["tokenizer"]),
                "--out",
                str(tmp_path / "q"),
                "--text-field",
                "x",
            ]
        )
        == 2
    )
    assert "--text-field does not apply to task token-classification" in capsys.readouterr().err


SMALL = {
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "intermediate_size": 64,
    "max_position_embeddings": 64,
    "vocab_size": 100,
    "num_labels": 3,
    "hidden_dropout_prob": 0.0,
    "attention_probs_dropout_prob": 0.0,
}
ENCODERS = {
    "bert": SMALL,
    "roberta": SMALL,
    "xlm-roberta": SMALL,
    "electra": {**SMALL, "embedding_size": 32},
    "albert": {**SMALL, "embedding_size": 16},
    "distilbert": {
        "dim": 32,
        "n_layers": 2,
        "n_heads": 2,
        "hidden_dim": 64,
        "max_position_embeddings": 64,
        "vocab_size": 100,
        "num_labels": 3,
        "dropout": 0.0,
        "attention_dropout": 0.0,
    },
}


@pytest.mark.parametrize("model_type", list(ENCODERS))
def test_a_transformers_token_classifier_on_a_packed_row_is_each_sequence_alone(model_type):
    """Two sequences and padding in one row: the token logits of each are the model's own on that
    sequence alone (its own positions: RoBERTa's and XLM-R's from padding_idx + 1, as a dataset
    packed with --position-offset 2 holds them). fp32 attention over another width reorders sums of
    ~10^2 terms of size ~1: ~1e-7; 1e-5 is far below what one attended token of the other sequence
    moves (~1e-1)."""
    import transformers as tf

    from seqpack.nn.masks import position_ids
    from seqpack.tasks.token_forward import hf_token_forward

    torch.manual_seed(0)
    config = tf.AutoConfig.for_model(model_type, attn_implementation="sdpa", **ENCODERS[model_type])
    model = tf.AutoModelForTokenClassification.from_config(config).eval()
    a, b = torch.randint(5, 100, (7,)), torch.randint(5, 100, (5,))
    ids = torch.cat([a, b, torch.zeros(4, dtype=torch.long)])[None]
    seg = torch.tensor([[1] * 7 + [2] * 5 + [0] * 4])
    offset = config.pad_token_id + 1 if model_type in ("roberta", "xlm-roberta") else 0
    batch = {
        "input_ids": ids,
        "segment_ids": seg,
        "position_ids": (position_ids(seg) + offset) * (seg > 0),
        "token_type_ids": torch.zeros_like(ids),
        "labels": torch.tensor([[0, 1, 2, -100, 1, 0, 2, 2, 1, 0, -100, 1] + [-100] * 4]),
    }
    with torch.no_grad():
        out = hf_token_forward(model, batch, reduction="sequence")
        alone = [model(x[None]).logits[0] for x in (a, b)]
    torch.testing.assert_close(out.logits[0, :7], alone[0], rtol=0, atol=1e-5)
    torch.testing.assert_close(out.logits[0, 7:12], alone[1], rtol=0, atol=1e-5)
    assert out.present.tolist() == [[True, True]] and torch.isfinite(out.loss)


LOCAL = {
    # local windows of 8 tokens on every layer but each second: a packed row must narrow them per sequence
    "modernbert": {
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "intermediate_size": 64,
        "max_position_embeddings": 64,
        "local_attention": 8,
        "global_attn_every_n_layers": 2,
    },
    # relative position buckets: a packed row must keep each sequence's distances and mask
    "deberta-v2": {
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "intermediate_size": 64,
        "max_position_embeddings": 64,
        "relative_attention": True,
        "position_buckets": 16,
        "pos_att_type": ["p2c", "c2p"],
        "hidden_dropout_prob": 0.0,
        "attention_probs_dropout_prob": 0.0,
    },
}


@pytest.mark.parametrize("model_type", list(LOCAL))
def test_windowed_and_relative_encoders_train_packed_as_padded(ner, tmp_path, model_type):
    """ModernBERT (local windows) and DeBERTa-v2 (relative positions) through the encoder door: the
    packed run's losses equal its ``--padded --match packs`` baseline's step by step (fp32 rounding
    through 3 Adam steps, ~1e-6 relative; a token seeing another sequence moves a loss by ~1e-2)."""
    f = tmp_path / "config.json"
    f.write_text(json.dumps({"model_type": model_type, **LOCAL[model_type]}))
    train(cfg(ner / "packed", tmp_path / "packed", hf_model=str(f)))
    train(cfg(ner / "packed", tmp_path / "padded", hf_model=str(f), padded=True, match="packs"))
    ra, rb = ([r for r in read_metrics(tmp_path / x) if "eval" not in r and "loss" in r] for x in ("packed", "padded"))
    assert len(ra) == len(rb) == 3
    for x, y in zip(ra, rb):
        assert abs(x["loss"] - y["loss"]) <= 1e-5 * abs(x["loss"]), (x["loss"], y["loss"])
