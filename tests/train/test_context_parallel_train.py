"""``seqpack pack --context-parallel C`` and ``seqpack train --context-parallel C`` under torchrun
(gloo, fp32): C = 2 on 2 ranks (seqpack's GPT and a transformers Llama), and 2 data-parallel groups of
C = 2 on 4 ranks, train as one process does on the same rows (tolerances as tests/train/test_distributed.py: Adam after 3 steps, float
summation order across ranks)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from seqpack.cli.main import main
from seqpack.train import TrainConfig, train
from seqpack.train.checkpoint import read_metrics
from tests.train.conftest import assert_adam_weights_close, torchrun_train

OPTS = ["--steps", "3", "--batch-size", "4", "--dropout", "0", "--eval-fraction", "0.1", "--threads", "1", "--quiet"]


@pytest.fixture(scope="module")
def cp_data(datasets, tmp_path_factory):
    """The suite's clm store packed for 2 CP ranks (and, to refuse, the plain clm dataset)."""
    root = tmp_path_factory.mktemp("cp-data")
    store, tok = datasets["tokenizer"].parent / "store", datasets["tokenizer"]
    assert (
        main(
            [
                "pack",
                str(store),
                "--task",
                "clm",
                "--max-len",
                "64",
                "--tokenizer",
                str(tok),
                "--out",
                str(root / "cp2"),
                "--context-parallel",
                "2",
                "--json",
            ]
        )
        == 0
    )
    return root / "cp2"


def test_pack_plans_rounded_lengths_and_reports_the_padding(cp_data, datasets):
    m = json.loads((cp_data / "manifest.json").read_text())
    plain = json.loads((datasets["clm"] / "manifest.json").read_text())
    assert m["num_tokens"] == plain["num_tokens"] and m["num_sequences"] == plain["num_sequences"]  # nothing truncated
    lengths = np.repeat(np.arange(1, 65), m["histogram"]["counts"])  # the plan's (rounded) lengths
    assert (lengths % 4 == 0).all()
    assert (
        m["context_parallel"]["size"] == 2
        and m["context_parallel"]["padding_tokens"] == int(lengths.sum()) - m["num_tokens"]
    )
    assert m["efficiency"] == pytest.approx(m["num_tokens"] / (m["num_packs"] * 64))


def steps_of(run):
    return [
        (r["step"], r["step_sequences"], r["step_tokens"], round(r["loss"], 4))
        for r in read_metrics(run)
        if "loss" in r
    ]


@pytest.mark.parametrize("ranks, model", [(2, "gpt"), (4, "gpt"), (2, "llama")])  # 4: 2 data-parallel groups of CP 2
def test_cp_ranks_train_as_one_process(cp_data, tmp_path, ranks, model):
    extra = []
    if model == "llama":  # a transformers causal LM through seqpack's attention hook
        transformers = pytest.importorskip("transformers")
        transformers.LlamaConfig(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=64,
        ).save_pretrained(tmp_path / "llama")
        extra = ["--hf-model", str(tmp_path / "llama")]
    torchrun_train(cp_data, tmp_path / "cp", *OPTS, "--context-parallel", "2", *extra, ranks=ranks)
    train(
        TrainConfig(
            data=str(cp_data),
            out=str(tmp_path / "one"),
            steps=3,
            batch_size=4,
            dropout=0.0,
            eval_fraction=0.1,
            threads=1,
            progress=False,
            hf_model=extra[1] if extra else None,
        )
    )
    p2 = torch.load(tmp_path / "cp" / "checkpoint.pt", weights_only=True)["model_state"]
    p1 = torch.load(tmp_path / "one" / "checkpoint.pt", weights_only=True)["model_state"]
    assert_adam_weights_close(p2, p1, lr=1e-3, steps=3)  # the default AdamW, 3 steps
    assert steps_of(tmp_path / "cp") == steps_of(tmp_path / "one")


@pytest.mark.parametrize(
    "args, message",
    [
        (["--context-parallel", "2"], "does not divide the 1 ranks"),
        (["--context-parallel", "2", "--padded"], "drop --padded"),
        (["--context-parallel", "2", "--attention", "per_document"], "drop --attention per_document"),
    ],
)
def test_refusals_are_one_line(cp_data, tmp_path, capsys, args, message):
    code = main(["train", "--data", str(cp_data), "--out", str(tmp_path / "run"), "--steps", "1", "--quiet", *args])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and message in err and "Traceback" not in err, err
    assert not (tmp_path / "run").exists()


def test_data_packed_for_another_size_is_refused(datasets, tmp_path):
    """Under torchrun, 2 ranks with --context-parallel 2 on rows packed without it: one line, nothing trained."""
    import subprocess
    import sys

    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "2",
        "-m",
        "seqpack.cli.main",
        "train",
        "--data",
        str(datasets["clm"]),
        "--out",
        str(tmp_path / "run"),
        *OPTS,
        "--context-parallel",
        "2",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0 and "re-pack it with seqpack pack --context-parallel 2" in proc.stderr
    assert not (tmp_path / "run").exists()


def test_cp_with_balanced_data_parallel_steps(cp_data, tmp_path):
    """4 ranks = 2 data-parallel groups of CP 2 with --balance compute: the groups get the packs the
    compute-balanced order deals 2 ranks, the same steps as one process replaying that order."""
    torchrun_train(cp_data, tmp_path / "cp", *OPTS, "--context-parallel", "2", "--balance", "compute", ranks=4)
    train(
        TrainConfig(
            data=str(cp_data),
            out=str(tmp_path / "one"),
            steps=3,
            batch_size=4,
            dropout=0.0,
            eval_fraction=0.1,
            threads=1,
            progress=False,
            balance="compute",
            balance_world=2,
        )
    )
    cfg = json.loads((tmp_path / "cp" / "config.json").read_text())
    assert cfg["balance"]["world"] == 2 and cfg["world_size"] == 4
    p2 = torch.load(tmp_path / "cp" / "checkpoint.pt", weights_only=True)["model_state"]
    p1 = torch.load(tmp_path / "one" / "checkpoint.pt", weights_only=True)["model_state"]
    assert_adam_weights_close(p2, p1, lr=1e-3, steps=3)  # the default AdamW, 3 steps
    assert steps_of(tmp_path / "cp") == steps_of(tmp_path / "one")
