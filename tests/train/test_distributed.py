from __future__ import annotations

import json
from pathlib import Path

import torch

from seqpack.train import TrainConfig, train
from seqpack.train.checkpoint import read_metrics
from tests.train.conftest import assert_adam_weights_close, torchrun_train


def test_two_cpu_ranks_agree_with_one_process(datasets, tmp_path):
    """torchrun, 2 gloo ranks, each half of every micro-batch == 1 process on the global batch."""
    opts = [
        "--steps",
        "3",
        "--batch-size",
        "6",
        "--accumulation",
        "2",
        "--dropout",
        "0",
        "--eval-fraction",
        "0.1",
        "--threads",
        "1",
        "--quiet",
        "--json",
    ]
    two = tmp_path / "two"
    torchrun_train(datasets["mlm"], two, *opts)
    assert json.loads((two / "config.json").read_text())["world_size"] == 2
    train(
        TrainConfig(
            data=str(datasets["mlm"]),
            out=str(tmp_path / "one"),
            steps=3,
            batch_size=6,
            accumulation=2,
            dropout=0.0,
            eval_fraction=0.1,
            threads=1,
            progress=False,
        )
    )
    p2 = torch.load(two / "checkpoint.pt", weights_only=False)["model_state"]
    p1 = torch.load(tmp_path / "one" / "checkpoint.pt", weights_only=False)["model_state"]
    assert_adam_weights_close(p2, p1, lr=1e-3, steps=3)  # the default AdamW, 3 steps

    def steps(run: Path) -> list[tuple[int, int, float]]:
        return [(r["step"], r["step_sequences"], round(r["loss"], 4)) for r in read_metrics(run) if "loss" in r]

    assert steps(two) == steps(tmp_path / "one")
