"""The run plan: a run's sizes decided before it starts by one function, frozen, recorded in the
run's ``config.json``; the one-line refusals of a step the data or the ranks cannot hold."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

pytest.importorskip("torch")

from seqpack.errors import UserError
from seqpack.train import TrainConfig, train
from seqpack.train.data import TrainData
from seqpack.train.plan import RECORDED_APART, RunPlan, plan_run

GPT = {"library": "seqpack", "class": "GPT", "config": {"hidden": 64, "layers": 2}}


def _data(path) -> TrainData:
    return TrainData(str(path), eval_fraction=0.1, eval_tokens=0)


def test_the_plan_of_a_run(datasets) -> None:
    """Rows per micro-batch, steps, data-parallel groups and evaluations, as the options say: 4 rows,
    6 steps, evaluations every 6 // 3 = 2 steps; two ranks make two data-parallel groups."""
    cfg = TrainConfig(data=str(datasets["clm"]), out="o", batch_size=4, steps=6, evals=3, eval_tokens=0)
    data = _data(datasets["clm"])
    plan = plan_run(cfg, data, world_size=1, model=GPT)
    assert (plan.rows, plan.dp, plan.total, plan.eval_every) == (4, 1, 6, 2)
    assert plan.betas == cfg.betas and plan.balance is None and plan.options["steps"] == 6
    # about the real tokens of 6 steps of 4 packs: their mean fill times 24
    assert plan.train_tokens == int(24 * float(data.unit_tokens.mean()))
    assert plan_run(cfg, data, world_size=2, model=GPT).dp == 2
    # the model, its attention and where the run writes: as given (the run directory defaults to --out)
    assert plan.model == GPT and plan.attention == "auto" and plan.run_dir == plan.final == Path("o")
    assert not plan.resume
    # a resumed run keeps its first run's --init-from in its options and its record; the plan it came from is unchanged
    again = plan.resumed_from("runs/first")
    assert again.cfg.init_from == again.options["init_from"] == "runs/first" and plan.cfg.init_from is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.rows = 8  # type: ignore[misc]


def test_a_step_the_data_or_the_ranks_cannot_hold_is_refused(datasets) -> None:
    data = _data(datasets["clm"])
    too_many = TrainConfig(data=str(datasets["clm"]), out="o", batch_size=data.num_units + 1, steps=1)
    with pytest.raises(
        UserError, match=r"rows per step .* is more than the .* training packs of .*; pass --batch-size"
    ):
        plan_run(too_many, data, world_size=1, model=GPT)
    few = TrainConfig(data=str(datasets["clm"]), out="o", batch_size=2, steps=1)
    with pytest.raises(UserError, match="2 rows per micro-batch cannot be shared by 4 data-parallel ranks"):
        plan_run(few, data, world_size=4, model=GPT)


def test_the_run_records_its_plan(datasets, tmp_path) -> None:
    train(TrainConfig(data=str(datasets["clm"]), out=str(tmp_path / "run"), batch_size=4, steps=2, progress=False))
    saved = json.loads((tmp_path / "run" / "config.json").read_text())
    assert saved["plan"]["rows"] == saved["rows_per_batch"] == 4 and saved["plan"]["total"] == 2
    assert set(saved["plan"]) == {f.name for f in dataclasses.fields(RunPlan)} - set(RECORDED_APART)
    assert saved["plan"]["resume"] is False and saved["model"]["class"] == "GPT" and saved["attention"] == "auto"
