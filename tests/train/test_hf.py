from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path
from typing import Any

import pytest

from seqpack.train import TrainConfig, train

ROOT = Path(__file__).resolve().parents[2]


def test_hf_trainer_example_trains_bert_mlm(datasets, tmp_path):
    pytest.importorskip("accelerate", reason="transformers.Trainer needs accelerate (the dev extra)")
    spec = importlib.util.spec_from_file_location("hf_trainer_mlm", ROOT / "examples" / "hf_trainer_mlm.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    s = mod.main(["--data", str(datasets["mlm"]), "--out", str(tmp_path / "hf"), "--steps", "4", "--batch-size", "4"])
    assert s["steps"] == 4 and math.isfinite(s["train_loss"]) and s["log"]


@pytest.mark.parametrize(
    ("task", "config"),
    [
        (
            "mlm",
            {
                "model_type": "bert",
                "hidden_size": 32,
                "num_hidden_layers": 1,
                "num_attention_heads": 2,
                "intermediate_size": 64,
                "max_position_embeddings": 64,
            },
        ),
        ("clm", {"model_type": "gpt2", "n_embd": 32, "n_layer": 1, "n_head": 2, "n_positions": 64}),
    ],
)
def test_train_hf_model_from_a_config_file(datasets, tmp_path, task, config):
    f = tmp_path / "config.json"
    f.write_text(json.dumps(config))
    s = train(
        TrainConfig(
            data=str(datasets[task]),
            out=str(tmp_path / "run"),
            hf_model=str(f),
            steps=3,
            batch_size=4,
            progress=False,
            eval_fraction=0.1,
        )
    )
    assert s["model"] == ("BertForPreTraining" if task == "mlm" else "GPT2LMHeadModel")
    assert math.isfinite(s["eval"]["loss"]) and s["eval"]["lm_accuracy"] >= 0
    f.write_text(json.dumps({**config, ("n_positions" if task == "clm" else "max_position_embeddings"): 32}))
    with pytest.raises(ValueError, match="need 64 positions"):
        train(
            TrainConfig(data=str(datasets[task]), out=str(tmp_path / "run2"), hf_model=str(f), steps=1, progress=False)
        )


def test_gradient_checkpointing_of_a_transformers_model_trains_the_same_weights(datasets, tmp_path):
    """``gradient_checkpointing`` on a transformers model is its own (non-reentrant); recomputing the
    layers repeats the same float operations with the RNG replayed (GPT-2's dropout is on), so the
    weights after 3 steps are bitwise those of the plain run."""
    import torch

    f = tmp_path / "config.json"
    f.write_text(json.dumps({"model_type": "gpt2", "n_embd": 32, "n_layer": 2, "n_head": 2, "n_positions": 64}))
    for on in (False, True):
        train(
            TrainConfig(
                data=str(datasets["clm"]),
                out=str(tmp_path / str(on)),
                hf_model=str(f),
                steps=3,
                batch_size=4,
                progress=False,
                eval_fraction=0.1,
                gradient_checkpointing=on,
            )
        )
    a, b = (torch.load(tmp_path / str(on) / "checkpoint.pt", weights_only=True)["model_state"] for on in (False, True))
    assert all(torch.equal(a[k], b[k]) for k in a)
    import transformers as tf

    from seqpack.train.models import enable_checkpointing

    for on in (False, True):  # and it does recompute: a layer's MLP runs twice per step
        m = tf.GPT2LMHeadModel(tf.GPT2Config(n_embd=32, n_layer=2, n_head=2, n_positions=64))
        if on:
            enable_checkpointing(m)
        calls = []
        m.transformer.h[0].mlp.register_forward_pre_hook(lambda *a, calls=calls: calls.append(1))
        m.train()
        ids = torch.randint(0, 100, (2, 16))
        m(ids, labels=ids).loss.backward()
        assert len(calls) == (2 if on else 1)


LLAMA = {
    "model_type": "llama",
    "hidden_size": 32,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "intermediate_size": 64,
    "max_position_embeddings": 64,
}


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        (
            LLAMA,
            "seqpack_packed",
        ),  # no attn_implementation (LlamaConfig().to_json_file() writes none): seqpack's packed attention
        ({**LLAMA, "attn_implementation": "sdpa"}, "sdpa"),  # a named one is kept
        (
            {"model_type": "gpt2", "n_embd": 32, "n_layer": 1, "n_head": 2, "n_positions": 64},
            "sdpa",
        ),  # attention dropout 0.1
        (
            {"model_type": "gpt2", "n_embd": 32, "n_layer": 1, "n_head": 2, "n_positions": 64, "attn_pdrop": 0.0},
            "seqpack_packed",
        ),
        (
            {
                "model_type": "bert",
                "hidden_size": 32,
                "num_hidden_layers": 1,
                "num_attention_heads": 2,  # encoders: a 4-D mask
                "intermediate_size": 64,
                "max_position_embeddings": 64,
                "attention_probs_dropout_prob": 0.0,
            },
            "sdpa",
        ),
    ],
)
def test_hf_model_runs_packed_attention_unless_named_and_records_it(datasets, tmp_path, capsys, config, expected):
    """``--hf-model`` gives a causal LM ``seqpack_packed`` when its config names no attention (and
    puts no dropout on it); the run's first line, ``config.json`` and summary say what ran."""
    f = tmp_path / "config.json"
    f.write_text(json.dumps(config))
    task = "mlm" if config["model_type"] == "bert" else "clm"
    s = train(
        TrainConfig(
            data=str(datasets[task]),
            out=str(tmp_path / "run"),
            hf_model=str(f),
            steps=2,
            batch_size=4,
            eval_fraction=0.1,
        )
    )
    first = capsys.readouterr().err.splitlines()[0]
    assert f", attention {expected}" in first
    assert json.loads((tmp_path / "run" / "config.json").read_text())["attention"] == expected
    assert s["attention"]["implementation"] == expected
    if expected == "seqpack_packed":  # seqpack's plans ran, one per batch: 2 steps and the final evaluation
        assert sum(s["attention"]["plans"].values()) >= 3
    else:  # transformers' own attention: no seqpack plan
        assert s["attention"]["plans"] == {} and "a dense T x T mask per row" in first


#: a sliding window of 4 on every layer (Mistral), on alternate layers (Gemma 2, with soft-capping), in
#: chunks (Llama 4's text model): rows of 64 tokens hold documents longer than each
WINDOWED: list[dict[str, Any]] = [
    {
        "model_type": "mistral",
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "intermediate_size": 64,
        "max_position_embeddings": 64,
        "sliding_window": 4,
    },
    {
        "model_type": "gemma2",
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "head_dim": 16,
        "intermediate_size": 64,
        "max_position_embeddings": 64,
        "sliding_window": 4,
        "attn_logit_softcapping": 1.0,
    },
    {
        "model_type": "llama4_text",
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "head_dim": 16,
        "intermediate_size": 64,
        "intermediate_size_mlp": 64,
        "max_position_embeddings": 64,
        "attention_chunk_size": 4,
        "num_local_experts": 2,
    },
]


@pytest.mark.parametrize("config", WINDOWED, ids=[c["model_type"] for c in WINDOWED])
def test_hf_model_takes_windowed_models_with_seqpack_attention(datasets, tmp_path, config):
    """``--hf-model`` trains any causal LM the model matrix marks exact; its layers' windows, chunks
    and caps are asked of the attention plan (``auto`` picks a backend that computes them)."""
    f = tmp_path / "config.json"
    f.write_text(json.dumps(config))
    s = train(
        TrainConfig(
            data=str(datasets["clm"]),
            out=str(tmp_path / "run"),
            hf_model=str(f),
            steps=2,
            batch_size=4,
            progress=False,
            eval_fraction=0.1,
        )
    )
    assert s["attention"]["implementation"] == "seqpack_packed"
    assert math.isfinite(s["eval"]["loss"])
    if "attn_logit_softcapping" in config:  # soft-capping: SDPA has none; the reference per document bucket
        assert set(s["attention"]["plans"]) == {"per_document"}


def test_hf_model_trains_a_hybrid(datasets, tmp_path):
    """Gated DeltaNet layers run on each packed document (seqpack.nn.hf_mixers): --hf-model trains
    a Qwen3-Next config as it trains any attention-only model."""
    f = tmp_path / "config.json"
    f.write_text(
        json.dumps(
            {
                "model_type": "qwen3_next",
                "hidden_size": 32,
                "num_hidden_layers": 2,
                "num_attention_heads": 2,
                "num_key_value_heads": 1,
                "head_dim": 16,
                "intermediate_size": 64,
                "max_position_embeddings": 64,
                "layer_types": ["linear_attention", "full_attention"],
                "linear_num_value_heads": 2,
                "linear_num_key_heads": 1,
                "linear_key_head_dim": 16,
                "linear_value_head_dim": 16,
            }
        )
    )
    s = train(
        TrainConfig(
            data=str(datasets["clm"]),
            out=str(tmp_path / "run"),
            hf_model=str(f),
            steps=1,
            batch_size=4,
            progress=False,
            eval_fraction=0.1,
        )
    )
    assert s["attention"]["implementation"] == "seqpack_packed"
    assert math.isfinite(s["eval"]["loss"])
    assert (tmp_path / "run" / "checkpoint.pt").exists()
