"""Compute-balanced steps: simulated imbalance of data-parallel steps.

Run: .venv/bin/python benchmarks/balance.py [--cost FILE] [--out benchmarks/results/balance.json]

Length mixes at max_len 8192, packed by ``best`` (the pack count does not change: balancing only
orders and groups the packs):

  wikipedia-x16  the shipped BERT Wikipedia lengths (max 512) times 16, 200,000 sequences drawn
  long-sft       a long-context SFT mix: lognormal (median 600 tokens, sigma 1.2), capped at 8192
  bimodal        ours: 90% short (lognormal median 300), 10% long (uniform 4096-8192)

Row cost: FLOPs of a 1024-hidden, 8-layer causal transformer (``RowCost.from_flops``), and with
``--cost FILE`` also the measured coefficients of a calibration (``seqpack bench --calibrate``). For
W = 8, 64, 512 ranks and micro-batch 1 and 4: the imbalance (mean over full steps of the slowest
rank's cost over the mean rank's) of the sequential plan (a shuffled epoch, as DistributedSampler),
of a greedy per-batch balancer (each shuffled batch dealt heaviest-first to the lightest rank: the
rule of TRL's GRPO PR), and of seqpack's whole-epoch balancing; and the step time it saves.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from seqpack.packing import builtin_histogram, pack_lengths
from seqpack.packing.balance import (
    RowCost,
    balanced_steps,
    greedy_batch_steps,
    imbalance,
    load_row_cost,
    pack_costs,
    sequential_steps,
    step_time_saving,
)

MAX_LEN = 8192


def mixes(n: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    h = builtin_histogram("wikipedia")
    wiki = rng.choice(np.arange(1, h.size + 1), size=n, p=h / h.sum()) * 16
    sft = np.minimum(MAX_LEN, np.ceil(rng.lognormal(np.log(600), 1.2, n)))
    short = np.minimum(MAX_LEN, np.ceil(rng.lognormal(np.log(300), 0.8, n)))
    bimodal = np.where(rng.random(n) < 0.1, rng.integers(4096, MAX_LEN + 1, n), short)
    return {
        "wikipedia-x16": wiki.astype(np.int64),
        "long-sft": sft.astype(np.int64),
        "bimodal": bimodal.astype(np.int64),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sequences", type=int, default=200_000)
    ap.add_argument("--cost", type=Path, default=None, help="a calibration (seqpack bench --calibrate --out FILE)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    models = {"flops": RowCost.from_flops(hidden=1024, layers=8)}
    if args.cost:
        models["calibrated"] = load_row_cost(args.cost)
    results: dict[str, dict] = {"cost_models": {k: v.to_dict() for k, v in models.items()}}
    for name, lengths in mixes(args.sequences).items():
        t0 = time.perf_counter()
        packing = pack_lengths(lengths, MAX_LEN, algorithm="best")
        pack_seconds = time.perf_counter() - t0
        for model, cost in models.items():
            costs = pack_costs(lengths, packing.pack_offsets, packing.sequence_index, cost)
            key = name if model == "flops" else f"{name} ({model})"
            results[key] = simulate(
                costs,
                {
                    "packs": packing.num_packs,
                    "pack_seconds": pack_seconds,
                    "cost_max_over_mean": float(costs.max() / costs.mean()),
                    "by_world": {},
                },
            )
            print(key, json.dumps(results[key], indent=1), flush=True)
    if args.out:
        args.out.write_text(json.dumps(results, indent=1) + "\n")


def simulate(costs: np.ndarray, r: dict) -> dict:
    """Imbalance of the sequential, greedy per-batch and balanced steps at every (W, B)."""
    for world in (8, 64, 512):
        for micro in (1, 4):
            seq = sequential_steps(len(costs), world=world, micro_batch=micro)
            greedy = greedy_batch_steps(costs, world=world, micro_batch=micro)
            t1 = time.perf_counter()
            bal = balanced_steps(costs, world=world, micro_batch=micro)
            r["by_world"][f"W={world},B={micro}"] = {
                "sequential": imbalance(costs, seq),
                "greedy_per_batch": imbalance(costs, greedy),
                "balanced": imbalance(costs, bal),
                "balance_seconds": time.perf_counter() - t1,
                "saving_vs_sequential": step_time_saving(costs, seq, bal),
                "saving_vs_greedy": step_time_saving(costs, greedy, bal),
            }
    return r


if __name__ == "__main__":
    main()
