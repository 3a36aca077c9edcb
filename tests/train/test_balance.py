"""``--balance compute``: each micro-batch's packs dealt so every data-parallel rank has even work;
every pack still once per epoch, the order a pure function of (seed, epoch), and two gloo ranks
equal one process replaying the same order."""

from __future__ import annotations

import json

import numpy as np
import pytest

from seqpack.data.format import write_manifest
from seqpack.packing.balance import RowCost, imbalance
from seqpack.train import TrainConfig, train
from seqpack.train.checkpoint import read_metrics
from seqpack.train.data import TrainData
from tests.train.conftest import torchrun_train


def test_balanced_epochs_hold_every_pack_once_and_even_ranks(datasets):
    data = TrainData(datasets["clm"], eval_fraction=0.1)
    cost = RowCost.from_flops(hidden=128, layers=2)
    report = data.balance(cost, world=2, rows=4)
    assert report["imbalance_balanced"] <= report["imbalance_sequential"]
    n = data.num_units
    order = data.units_at(3, 0, n)
    assert sorted(order.tolist()) == list(range(n))
    again = TrainData(datasets["clm"], eval_fraction=0.1)
    again.balance(cost, world=2, rows=4)
    assert np.array_equal(again.units_at(3, 5, 2 * n), data.units_at(3, 5, 2 * n))  # a resume reads the same rows
    costs = cost.of(*data.pack_stats[data.train_packs].T)
    full = (n // 4) * 4
    steps = order[:full].reshape(-1, 2, 2).transpose(0, 2, 1)  # micro-batch rows b*W + r -> (step, rank, b)
    assert imbalance(costs, steps) <= report["imbalance_balanced"] + 1e-12


def test_two_ranks_balanced_equal_one_process_replaying_them(datasets, tmp_path):
    opts = [
        "--steps",
        "3",
        "--batch-size",
        "4",
        "--dropout",
        "0",
        "--eval-fraction",
        "0.1",
        "--threads",
        "1",
        "--balance",
        "compute",
        "--quiet",
        "--json",
    ]
    two = tmp_path / "two"
    torchrun_train(datasets["clm"], two, *opts)
    cfg = json.loads((two / "config.json").read_text())
    assert (
        cfg["balance"]["world"] == 2 and cfg["balance"]["imbalance_balanced"] <= cfg["balance"]["imbalance_sequential"]
    )
    train(
        TrainConfig(
            data=str(datasets["clm"]),
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
    a, b = ([r for r in read_metrics(run) if "loss" in r] for run in (two, tmp_path / "one"))
    assert [r["step_sequences"] for r in a] == [r["step_sequences"] for r in b]  # the same packs in every step
    for ra, rb in zip(a, b):
        # the same terms, gradients summed over 2 ranks instead of 1 process: fp32 order, ~1e-7 per operation;
        # Adam divides small gradients by their own size, so later steps carry that rounding at up to ~1e-4
        assert abs(ra["loss"] - rb["loss"]) <= 1e-4 * abs(rb["loss"]), (ra, rb)
        assert abs(ra["grad_norm"] - rb["grad_norm"]) <= 1e-4 * abs(rb["grad_norm"]), (ra, rb)


def test_step_loss_weights_uneven_ranks_and_micro_batches_as_one_global_mean():
    """Balanced ranks hold different numbers of targets: 2 ranks x 2 micro-batches holding 1, 2, 3 and 4
    target tokens. Each part's mean, weighted by step_loss and averaged over ranks as DDP does, must be
    the global batch's mean."""
    import torch

    from seqpack.train.step_loss import step_loss

    losses = torch.arange(1.0, 11.0, dtype=torch.float64)  # 10 per-token losses
    parts = [losses[:1], losses[1:3], losses[3:6], losses[6:]]  # rank 0: parts 0, 1; rank 1: parts 2, 3
    total = torch.tensor([10.0, 0.0, 0.0], dtype=torch.float64)
    per_rank = [0.0, 0.0]
    for i, p in enumerate(parts):
        local = torch.tensor([float(len(p)), 0.0, 0.0], dtype=torch.float64)
        per_rank[i // 2] += float(step_loss([p.mean(), None, None], local, total, world=2))
    # float64 sums of 10 small integers' means: exact to ~1e-15
    assert abs(sum(per_rank) / 2 - float(losses.mean())) < 1e-12
    assert abs(sum(float(p.mean()) for p in parts) / 4 - float(losses.mean())) > 0.1  # a plain mean of means is wrong


def _scheduled_clm(datasets, root, world=2, micro=2):
    """The clm fixture's documents packed again with a (world x micro) schedule."""
    from seqpack.packing.balance import ScheduleOptions
    from seqpack.pipeline import OutputOptions, PackConfig, build_packed_dataset
    from seqpack.store import build_store
    from seqpack.tokenizer import Tokenizer
    from tests.train.conftest import synthetic_documents

    tok = Tokenizer.load(datasets["tokenizer"])
    store = build_store(synthetic_documents(240), tok, root / "store", workers=1)
    build_packed_dataset(
        store,
        tok,
        root / "sched",
        PackConfig(task="clm", max_len=64),
        output=OutputOptions(schedule=ScheduleOptions(world_size=world, micro_batch=micro)),
    )
    return root / "sched"


def test_training_reads_the_datasets_steps(datasets, tmp_path):
    from seqpack.data import read_schedule

    path = _scheduled_clm(datasets, tmp_path)
    steps = read_schedule(path)
    data = TrainData(path, eval_fraction=0.1, by_schedule=True)
    assert data.schedule_shape == (2, 2)
    assert sorted(np.concatenate([data.train_packs, data.eval_packs]).tolist()) == list(range(int((steps >= 0).sum())))
    as_sets = {frozenset(s[s >= 0].tolist()) for s in steps}
    n = data.num_units
    order = data.units_at(5, 0, 2 * n)  # two epochs
    for m in range(2 * n // 4):  # every micro-batch of 4 rows is one of the dataset's steps, rank r at [r::2]
        rows = data.train_packs[order[4 * m : 4 * m + 4]]
        assert frozenset(rows.tolist()) in as_sets
        step = next(s for s in steps if frozenset(s.reshape(-1).tolist()) == frozenset(rows.tolist()))
        assert sorted(rows[0::2].tolist()) == sorted(step[0].tolist())  # rank 0's packs are the schedule's rank 0
    again = TrainData(path, eval_fraction=0.1, by_schedule=True)
    assert np.array_equal(again.units_at(5, 7, n), data.units_at(5, 7, n))  # a resume reads the same rows
    with pytest.raises(ValueError, match="--batch-size 4"):
        train(
            TrainConfig(
                data=str(path),
                out=str(tmp_path / "r"),
                steps=1,
                batch_size=6,
                balance="schedule",
                balance_world=2,
                progress=False,
            )
        )
    with pytest.raises(ValueError, match="no balanced schedule"):
        TrainData(datasets["clm"], by_schedule=True)


def test_two_ranks_on_the_datasets_schedule_equal_one_process(datasets, tmp_path):
    path = _scheduled_clm(datasets, tmp_path)
    opts = [
        "--steps",
        "3",
        "--batch-size",
        "4",
        "--dropout",
        "0",
        "--eval-fraction",
        "0.1",
        "--threads",
        "1",
        "--balance",
        "schedule",
        "--quiet",
        "--json",
    ]
    two = tmp_path / "two"
    torchrun_train(path, two, *opts)
    cfg = json.loads((two / "config.json").read_text())
    assert cfg["balance"]["world_size"] == 2 and cfg["balance"]["cost_source"] == "the dataset's schedule"
    train(
        TrainConfig(
            data=str(path),
            out=str(tmp_path / "one"),
            steps=3,
            batch_size=4,
            dropout=0.0,
            eval_fraction=0.1,
            threads=1,
            progress=False,
            balance="schedule",
            balance_world=2,
        )
    )
    a, b = ([r for r in read_metrics(run) if "loss" in r] for run in (two, tmp_path / "one"))
    assert [r["step_sequences"] for r in a] == [r["step_sequences"] for r in b]
    for ra, rb in zip(a, b):  # as in the test above: fp32 summation order, carried by Adam
        assert abs(ra["loss"] - rb["loss"]) <= 1e-4 * abs(rb["loss"]), (ra, rb)


def test_schedule_run_resumes_exactly_and_refuses_a_changed_schedule(datasets, tmp_path):
    import os
    import shutil
    import signal

    import torch

    path = _scheduled_clm(datasets, tmp_path)
    c = dict(steps=4, batch_size=4, eval_fraction=0.1, threads=1, progress=False, balance="schedule", balance_world=2)
    train(TrainConfig(data=str(path), out=str(tmp_path / "whole"), **c))

    def interrupt(step, rec):
        if step == 2:
            os.kill(os.getpid(), signal.SIGINT)

    with pytest.raises(KeyboardInterrupt):
        train(TrainConfig(data=str(path), out=str(tmp_path / "cut"), **c), on_step=interrupt)
    other = tmp_path / "other"  # the same packs, another schedule seed: a resume must not reuse the run
    shutil.copytree(path, other)
    m = json.loads((other / "manifest.json").read_text())
    m["schedule"]["seed"] += 1
    write_manifest(other, m)  # as a writer would record it: its own checksum agrees
    with pytest.raises(ValueError, match="other options"):
        train(TrainConfig(data=str(other), out=str(tmp_path / "cut"), **c), resume=True)
    train(TrainConfig(data=str(path), out=str(tmp_path / "cut"), **c), resume=True)
    a = torch.load(tmp_path / "whole" / "checkpoint.pt", weights_only=False)["model_state"]
    b = torch.load(tmp_path / "cut" / "checkpoint.pt", weights_only=False)["model_state"]
    assert all(torch.equal(a[k], b[k]) for k in a)  # the same steps, bit for bit


def test_row_squares_equals_a_loop():
    from seqpack.train.data import row_squares

    rng = np.random.default_rng(0)
    rows = []
    for _ in range(200):  # packed rows: contiguous runs of ids 1, 2, ..., then padding
        lengths = rng.integers(1, 9, rng.integers(0, 6))
        row = np.repeat(np.arange(1, len(lengths) + 1), lengths)[:32]
        rows.append(np.pad(row, (0, 32 - len(row))))
    seg = np.stack(rows)
    want = [sum(int((r == k).sum()) ** 2 for k in range(1, int(r.max()) + 1)) for r in seg]
    assert row_squares(seg).tolist() == want
