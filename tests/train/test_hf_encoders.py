"""``seqpack train --hf-model`` trains every encoder family the door finds exact (BERT, RoBERTa, XLM-R,
ELECTRA, DistilBERT, ALBERT, DeBERTa-v2, ModernBERT) on packed rows, for classification, multi-label,
QA and MLM; its losses are its ``--padded --match packs`` baseline's (the model's own padded forward:
a 2-D attention mask, its own positions and heads) step by step."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from seqpack.train import TrainConfig, train

pytest.importorskip("transformers")

SMALL = {
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "intermediate_size": 64,
    "max_position_embeddings": 80,
    "hidden_dropout_prob": 0.0,
    "attention_probs_dropout_prob": 0.0,
}
#: the encoder families, each as small as its config allows, dropout off (the two runs draw no masks);
#: ModernBERT's local layers in windows of 8 (rows of 64 tokens hold longer documents), mean pooling;
#: DeBERTa-v2 with relative buckets and no absolute positions, as its checkpoints
ENCODERS: dict[str, dict] = {
    "bert": {"model_type": "bert", **SMALL},
    "roberta": {"model_type": "roberta", **SMALL, "max_position_embeddings": 80, "pad_token_id": 1},
    "xlm-roberta": {"model_type": "xlm-roberta", **SMALL, "pad_token_id": 1},
    "electra": {"model_type": "electra", **SMALL, "embedding_size": 16},
    "distilbert": {
        "model_type": "distilbert",
        "dim": 32,
        "n_layers": 2,
        "n_heads": 2,
        "hidden_dim": 64,
        "max_position_embeddings": 80,
        "dropout": 0.0,
        "attention_dropout": 0.0,
        "seq_classif_dropout": 0.0,
        "qa_dropout": 0.0,
    },
    "albert": {"model_type": "albert", **SMALL, "embedding_size": 16, "classifier_dropout_prob": 0.0},
    "deberta-v2": {
        "model_type": "deberta-v2",
        **SMALL,
        "relative_attention": True,
        "pos_att_type": ["p2c", "c2p"],
        "position_biased_input": False,
        "position_buckets": 16,
        "norm_rel_ebd": "layer_norm",
        "pooler_dropout": 0.0,
    },
    # its config names a pad id (50283) past any small vocabulary: --hf-model gives it one of its own
    "modernbert": {
        "model_type": "modernbert",
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "intermediate_size": 64,
        "max_position_embeddings": 80,
        "local_attention": 8,
        "global_attn_every_n_layers": 2,
        "classifier_pooling": "mean",
    },
}
TASKS = ("classification", "multilabel", "qa", "mlm")
#: the pairs the unit tier runs (every family and every task once); the rest are slow
FAST = {
    ("modernbert", "classification"),
    ("roberta", "qa"),
    ("deberta-v2", "mlm"),
    ("distilbert", "multilabel"),
    ("bert", "classification"),
    ("xlm-roberta", "mlm"),
    ("electra", "multilabel"),
    ("albert", "qa"),
}


@pytest.fixture(scope="module")
def data(datasets, tmp_path_factory) -> dict[str, Path]:
    """Classification and multi-label examples packed with the session's tokenizer, beside its mlm and qa."""
    from seqpack.pipeline import PackConfig, build_packed_dataset
    from seqpack.tokenizer import Tokenizer
    from tests.train.conftest import synthetic_documents

    root = tmp_path_factory.mktemp("encoders")
    tok = Tokenizer.load(datasets["tokenizer"])
    docs = [d.replace("\n", " ") for d in synthetic_documents(200, seed=3)]
    rng = np.random.default_rng(0)
    build_packed_dataset(
        [{"text": d, "label": int(rng.integers(0, 3))} for d in docs],
        tok,
        root / "classification",
        PackConfig.for_task("classification", max_len=64),
    )
    tags = ["a", "b", "c"]
    multi = [{"text": d, "label": sorted({str(t) for t in rng.choice(tags, int(rng.integers(0, 3)))})} for d in docs]
    build_packed_dataset(multi, tok, root / "multilabel", PackConfig.for_task("multilabel", max_len=64))
    return {
        "classification": root / "classification",
        "multilabel": root / "multilabel",
        "qa": datasets["qa"],
        "mlm": datasets["mlm"],
    }


def _losses(run: Path) -> list[float]:
    return [
        r["loss"]
        for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())
        if "loss" in r and "eval" not in r
    ]


def _case(family: str, task: str):
    return pytest.param(family, task, marks=() if (family, task) in FAST else pytest.mark.slow, id=f"{family}-{task}")


@pytest.mark.parametrize(("family", "task"), [_case(f, t) for f in ENCODERS for t in TASKS])
def test_packed_losses_are_the_padded_baselines_step_by_step(data, tmp_path, family, task):
    """Both runs see the same sequences each step (``--match packs``) from the same initial weights:
    the packed run through seqpack's masks, positions and per-document heads, the padded one through
    the model's own padded forward. Their losses differ by float32 summation order alone (~1e-7
    relative a step, compounding through AdamW over 3 steps), far below another batch's (~1e-2)."""
    f = tmp_path / "config.json"
    f.write_text(json.dumps(ENCODERS[family]))
    opts = {
        "data": str(data[task]),
        "hf_model": str(f),
        "steps": 3,
        "batch_size": 4,
        "progress": False,
        "eval_fraction": 0.1,
        "lr": 1e-3,
        "threads": 1,
    }
    a = train(TrainConfig(out=str(tmp_path / "packed"), **opts))
    b = train(TrainConfig(out=str(tmp_path / "padded"), padded=True, match="packs", **opts))
    assert a["model"] == b["model"] and a["attention"]["implementation"] in ("sdpa", "eager")
    la, lb = _losses(tmp_path / "packed"), _losses(tmp_path / "padded")
    assert len(la) == len(lb) == 3
    for x, y in zip(la, lb):
        assert abs(x - y) <= 1e-5 * max(1.0, abs(x)), (la, lb)
    assert abs(a["eval"]["loss"] - b["eval"]["loss"]) <= 1e-5 * max(1.0, abs(a["eval"]["loss"]))


def test_a_pad_id_past_the_vocabulary_gets_a_row_of_its_own(data, tmp_path):
    """ModernBERT's config names pad id 50283; trained from scratch on a 323-token dataset, its
    embeddings get one more row for a pad id no data token is (it was an internal error)."""
    import torch

    f = tmp_path / "config.json"
    f.write_text(json.dumps(ENCODERS["modernbert"]))
    train(
        TrainConfig(
            data=str(data["classification"]),
            out=str(tmp_path / "run"),
            hf_model=str(f),
            steps=1,
            batch_size=4,
            progress=False,
            eval_fraction=0.1,
        )
    )
    config = json.loads((tmp_path / "run" / "config.json").read_text())["model"]["config"]
    vocab = json.loads((data["classification"] / "manifest.json").read_text())["vocab_size"]
    assert config["pad_token_id"] == vocab and config["vocab_size"] == vocab + 1
    assert "sep_token_id" not in config or config["sep_token_id"] is None  # another tokenizer's id, dropped
    state = torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=False)["model_state"]
    assert state["model.embeddings.tok_embeddings.weight"].shape[0] == vocab + 1


@pytest.mark.parametrize(
    ("config", "match"),
    [
        (
            {"model_type": "roberta", **SMALL, "max_position_embeddings": 64, "pad_token_id": 1},
            "counts from its pad id 1 \\+ 1: 66 > .* max_position_embeddings 64",
        ),
        (
            {"model_type": "funnel", "d_model": 32, "n_head": 2, "d_head": 16, "d_inner": 64, "block_sizes": [1, 1]},
            "FunnelForSequenceClassification makes its attention mask itself",
        ),
        ({"model_type": "convbert", **SMALL, "embedding_size": 32}, "convolution over the sequence"),
        (
            {
                "model_type": "modernbert",
                "hidden_size": 32,
                "num_hidden_layers": 2,
                "num_attention_heads": 2,
                "intermediate_size": 64,
                "attn_implementation": "flex_attention",
            },
            "flex_attention.*takes no 4-D mask",
        ),
    ],
)
def test_what_cannot_be_exact_is_refused_before_any_step(data, tmp_path, config, match):
    f = tmp_path / "config.json"
    f.write_text(json.dumps(config))
    with pytest.raises(ValueError, match=match):
        train(
            TrainConfig(
                data=str(data["classification"]), out=str(tmp_path / "run"), hf_model=str(f), steps=1, progress=False
            )
        )
    assert not (tmp_path / "run" / "checkpoint.pt").exists()
