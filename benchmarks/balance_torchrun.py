"""Compute-balanced steps, measured: ``torchrun --nproc-per-node 2`` (gloo, CPU, one
thread per rank), seqpack's GPT at max_len 4096 on a long-tailed length mix, the same packs trained
in the sequential order (``--balance none``) and balanced (``--balance compute``).

Run: .venv/bin/python benchmarks/balance_torchrun.py [--steps 0 --sequences 1500] [--calibrate]
     [--out benchmarks/results/balance_torchrun.json]

``--steps 0`` trains one whole epoch in each arm: the same packs, each once, in two orders, so the
arms' final evaluation losses are comparable (not equal: the order differs). ``--calibrate`` first
fits the row cost on this CPU (``seqpack bench --calibrate``, the same model, one thread) and
predicts each run's time from it, beside the FLOP model's prediction.

Data: 6,000 sequences, lengths lognormal (median 300 tokens, sigma 1.3) capped at 4096, random token
ids (vocab 512), packed by ``best`` into clm rows (labels = ids, the first of each sequence -100).
Model: GPT small (256 hidden, 4 layers, 4 heads), per-document attention (``auto``), fp32. One row
per rank per step (batch 2). Step time = the step's wall time on rank 0 (every rank waits for the
slowest at the gradient all-reduce); mean over the steps after the first. Predicted saving: the FLOP
model's cost of each step's slowest rank, over the very steps each run took (each run's first
``--steps`` steps: not the same packs, so both are compared per step); and over the whole epoch
(:func:`seqpack.packing.balance.step_time_saving`, the same packs).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np
from _common import scratch_dir


def build(out: Path, *, n: int = 6000, max_len: int = 4096, seed: int = 0) -> None:
    from seqpack.data.columns import pack_sequences
    from seqpack.data.format import write_packed
    from seqpack.data.sequences import from_lists

    rng = np.random.default_rng(seed)
    lengths = np.minimum(max_len, np.ceil(rng.lognormal(np.log(300), 1.3, n))).astype(int)
    seqs = [rng.integers(1, 512, k) for k in lengths]
    s = from_lists(seqs, task="clm")
    s.token_fields["labels"] = s.token_fields["input_ids"].astype(np.int16)
    s.token_fields["labels"][s.offsets[:-1]] = -100
    pc = pack_sequences(s, max_len, algorithm="best")
    write_packed(pc, out, extra={"vocab_size": 512, "token_labels": True, "float_labels": False, "causal_lm": True})


def run(data: Path, out: Path, balance: str, steps: int | None, cost: Path | None = None) -> list[dict]:
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
        str(data),
        "--out",
        str(out),
        "--model",
        "gpt",
        "--size",
        "small",
        "--batch-size",
        "2",
        "--threads",
        "1",
        "--eval-fraction",
        "0.01",
        "--max-position",
        "4096",
        "--balance",
        balance,
        "--eval-every",
        "0",
        "--quiet",
        "--overwrite",
        *(["--steps", str(steps)] if steps else []),
        *(["--cost", str(cost)] if cost else []),
    ]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]


def calibrate(out: Path) -> dict:
    """``seqpack bench --calibrate`` on the model the runs train, one thread as each rank has."""
    cmd = [
        sys.executable,
        "-m",
        "seqpack.cli.main",
        "bench",
        "--calibrate",
        "--model",
        "gpt",
        "--size",
        "small",
        "--max-len",
        "4096",
        "--vocab-size",
        "512",
        "--threads",
        "1",
        "--batch-size",
        "1",
        "--steps",
        "1",
        "--repeats",
        "3",
        "--json",
        "--out",
        str(out),
    ]
    return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=24, help="steps per run (0: one whole epoch)")
    ap.add_argument("--sequences", type=int, default=6000)
    ap.add_argument("--calibrate", action="store_true", help="also fit the row cost on this CPU and predict with it")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    from seqpack.packing.balance import (
        RowCost,
        balanced_steps,
        load_row_cost,
        sequential_steps,
        step_time_saving,
    )
    from seqpack.train.data import TrainData

    work = scratch_dir("seqpack-balance-")
    build(work / "data", n=args.sequences)
    res: dict = {"sequences": args.sequences}
    costs_by = {"flops": RowCost.from_flops(hidden=256, layers=4)}
    if args.calibrate:
        res["calibration"] = calibrate(work / "cost.json")
        costs_by["calibrated"] = load_row_cost(work / "cost.json")
        print("calibration fit", res["calibration"]["fit"], flush=True)
    data = TrainData(work / "data", eval_fraction=0.01)
    n = args.steps or data.num_units // 2
    res["steps"] = n
    for balance in ("none", "compute"):
        recs = [r for r in run(work / "data", work / balance, balance, args.steps or None) if "eval" not in r]
        evals = [
            r["eval"]
            for r in (json.loads(x) for x in (work / balance / "metrics.jsonl").read_text().splitlines())
            if "eval" in r
        ]
        res[balance] = {
            "step_seconds": statistics.median(r["step_seconds"] for r in recs[1:]),
            "step_times": [r["step_seconds"] for r in recs],
            "total_seconds": sum(r["step_seconds"] for r in recs),
            "loss": [r["loss"] for r in recs],
            "final_eval": evals[-1],
            "config": json.loads((work / balance / "config.json").read_text())["balance"],
        }
        print(balance, res[balance]["step_seconds"], res[balance]["total_seconds"], flush=True)
    res["measured_saving"] = 1 - res["compute"]["total_seconds"] / res["none"]["total_seconds"]
    for name, cost in costs_by.items():  # each cost model's step cost (slowest rank) of the very steps each run took
        costs = cost.of(*data.pack_stats[data.train_packs].T)
        step_cost = {}
        for balance in ("none", "compute"):
            d = TrainData(work / "data", eval_fraction=0.01)
            if balance == "compute":
                d.balance(costs_by["flops"], world=2, rows=2)  # the order the run trained (FLOP-balanced)
            order = d.units_at(0, 0, 2 * n).reshape(n, 2)
            step_cost[balance] = float(costs[order].max(axis=1).sum())
        res[f"predicted_saving_{name}"] = 1 - step_cost["compute"] / step_cost["none"]
        if name == "calibrated":  # seconds: the predicted epoch time of each run
            res["predicted_total_seconds"] = step_cost
        res[f"predicted_saving_whole_epoch_{name}"] = step_time_saving(
            costs, sequential_steps(len(costs), world=2), balanced_steps(costs, world=2)
        )
    print(json.dumps({k: v for k, v in res.items() if "saving" in k or k == "predicted_total_seconds"}, indent=1))
    if args.out:
        args.out.write_text(json.dumps(res, indent=1) + "\n")


if __name__ == "__main__":
    main()
