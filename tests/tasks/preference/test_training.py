"""``seqpack train`` on preference data: every loss, seqpack's GPT and a transformers Llama, the
reference pass (step 1's DPO loss is exactly log 2), resume reusing the saved reference."""

from __future__ import annotations

import json
import math
import os
import signal
from pathlib import Path

import numpy as np
import pytest
import torch

from seqpack.pipeline import PackConfig, build_packed_dataset
from seqpack.tokenizer import open_tokenizer
from seqpack.train import TrainConfig, train
from seqpack.train.reference import REFERENCE
from tests.cli.test_cli import run
from tests.hf_tokenizers import bpe_tokenizer_dir, llama_config, preference_records

pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("preftrain")
    tok = bpe_tokenizer_dir(root / "tok")
    out = {"tok": tok, "llama": llama_config(root / "llama.json")}
    for layout in ("shared-prefix", "pairs"):
        build_packed_dataset(
            preference_records(160, seed=1),
            open_tokenizer(tok),
            root / layout,
            PackConfig.for_task("preference", max_len=128, layout=layout),
        )
        out[layout] = root / layout
    return out


def metrics(run_dir: Path) -> list[dict]:
    return [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]


def cfg(path: Path, out: Path, **kw: object) -> TrainConfig:
    return TrainConfig(data=str(path), out=str(out), **{"steps": 4, "batch_size": 8, "progress": False, **kw})  # type: ignore[arg-type]


@pytest.mark.parametrize("layout", ["shared-prefix", "pairs"])
def test_dpo_trains_from_log_2(data: dict[str, Path], tmp_path: Path, layout: str) -> None:
    s = train(cfg(data[layout], tmp_path / "r", steps=8, lr=3e-3))
    steps = [r for r in metrics(tmp_path / "r") if "eval" not in r]
    # step 1: the policy is the reference (same weights, same packed rows, same kernels) so every
    # log-ratio is 0 up to fp32 rounding of two identical computations: the loss is log 2
    assert abs(steps[0]["loss"] - math.log(2)) < 1e-6
    assert steps[-1]["loss"] < steps[0]["loss"]  # it learns (the policy moves off the reference)
    assert (tmp_path / "r" / REFERENCE).is_file() and set(s["eval"]) >= {"reward_accuracy", "reward_margin", "loss"}


@pytest.mark.parametrize("loss", ["ipo", "simpo", "orpo"])
def test_every_loss_trains(data: dict[str, Path], tmp_path: Path, loss: str) -> None:
    s = train(cfg(data["shared-prefix"], tmp_path / loss, preference_loss=loss))
    assert np.isfinite(s["eval"]["loss"])
    assert (tmp_path / loss / REFERENCE).is_file() == (loss == "ipo")  # only the reference losses pay the pass


def test_reward_model_and_llama(data: dict[str, Path], tmp_path: Path) -> None:
    s = train(cfg(data["pairs"], tmp_path / "rm", model="reward", preference_loss="bt"))
    assert np.isfinite(s["eval"]["loss"]) and s["model"] == "GPTReward"
    s = train(cfg(data["shared-prefix"], tmp_path / "llama", hf_model=str(data["llama"])))
    assert (
        s["model"] == "LlamaForCausalLM"
        and abs(next(r for r in metrics(tmp_path / "llama") if "eval" not in r)["loss"] - math.log(2)) < 1e-6
    )
    s = train(
        cfg(
            data["shared-prefix"],
            tmp_path / "llama_rm",
            hf_model=str(data["llama"]),
            model="reward",
            preference_loss="bt",
        )
    )
    assert s["model"] == "LlamaForSequenceClassification"


def test_resume_reuses_the_reference(data: dict[str, Path], tmp_path: Path) -> None:
    whole = tmp_path / "whole"
    train(cfg(data["shared-prefix"], whole, steps=6))

    def interrupt(step: int, rec: dict) -> None:
        if step == 3:
            os.kill(os.getpid(), signal.SIGINT)

    cut = tmp_path / "cut"
    with pytest.raises(KeyboardInterrupt):
        train(cfg(data["shared-prefix"], cut, steps=6), on_step=interrupt)
    train(cfg(data["shared-prefix"], cut, steps=6), resume=True)
    untimed = lambda rs: [{k: v for k, v in r.items() if "second" not in k and "per_s" not in k} for r in rs]  # noqa: E731
    assert untimed(metrics(whole)) == untimed(metrics(cut))
    assert np.array_equal(np.load(whole / REFERENCE), np.load(cut / REFERENCE))
    a, b = (torch.load(d / "checkpoint.pt", weights_only=True)["model_state"] for d in (whole, cut))
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_wrong_combinations_are_one_line(capsys, data, tmp_path):
    base = ["train", "--data", str(data["pairs"]), "--out", str(tmp_path / "x"), "--steps", "1", "--quiet"]
    for extra, message in (
        (["--preference-loss", "bt"], "pass --model reward"),
        (["--model", "reward"], "--preference-loss bt"),
        (["--padded"], "--padded is not offered"),
        (["--model", "bert"], "does not train a preference dataset"),
    ):
        code, _out, err = run(capsys, *base, *extra)
        assert code == 2 and message in err and len(err.strip().splitlines()) == 1, (extra, err)
