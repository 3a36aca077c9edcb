"""Packing plans and assignment on the BERT Wikipedia histogram (issue 3 goals), plus other shapes.

Run: .venv/bin/python benchmarks/plan.py [--quick]
Prints medians of several runs (after one warm-up run, so HiGHS is loaded).
"""

from __future__ import annotations

import statistics
import sys
import time

import numpy as np
from _common import SHARED  # type: ignore[import-not-found]

from seqpack.packing import StreamPacker, pack_lengths, plan
from seqpack.packing.assign import assign

RUNS = 5


def timed(fn, runs=RUNS):  # type: ignore[no-untyped-def]
    fn()  # warm-up
    times, out = [], None
    for _ in range(runs):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return out, statistics.median(times)


def table1(h: np.ndarray, quick: bool) -> None:
    print("## Table 1 analogue: Wikipedia, max_len 512 (median of 5 runs)")
    print(f"{'algorithm':<8} {'depth':>5} {'packs':>12} {'efficiency':>10} {'vs LP bound':>11} {'seconds':>8}")
    # the LP bounds at depth 3 and unlimited, computed (``best`` reports the LP's proven lower bound)
    bounds = {d: int(plan(h, 512, algorithm="best", max_depth=d).info["lp_bound"]) for d in (3, None)}  # type: ignore[call-overload]
    print(f"LP bounds (computed): depth 3 {bounds[3]:,}, no limit {bounds[None]:,}")
    rows = [("spfhp", d) for d in (2, 3, 4, 8, 16, None)] + [("lpfhp", 3), ("lpfhp", None)]
    rows += [("best", d) for d in (2, 3, 4, 8, 16, None)]
    if not quick:
        rows.insert(8, ("nnlshp", 3))
    for algorithm, depth in rows:
        runs = 1 if algorithm == "nnlshp" else RUNS
        p, t = timed(lambda: plan(h, 512, algorithm=algorithm, max_depth=depth), runs=runs) if runs > 1 else (None, 0.0)
        if p is None:
            t0 = time.perf_counter()
            p = plan(h, 512, algorithm=algorithm, max_depth=depth)
            t = time.perf_counter() - t0
        lb = bounds.get(depth if depth in (3, None) else None)
        gap = f"+{p.num_packs - lb:,}" if depth in (3, None) else ""
        print(f"{algorithm:<8} {depth or 'max':>5} {p.num_packs:>12,} {100 * p.efficiency:>9.3f}% {gap:>11} {t:>8.3f}")


def assignment(h: np.ndarray) -> None:
    lengths = np.random.default_rng(0).choice(np.arange(1, 513), size=1_000_000, p=h / h.sum())
    print("\n## pack_lengths: 1,000,000 lengths sampled from the histogram (median of 5)")
    for algorithm in ("lpfhp", "best", "spfhp"):
        packing, whole = timed(lambda: pack_lengths(lengths, 512, algorithm=algorithm))
        _, just_assign = timed(lambda: assign(packing.plan, lengths))
        print(
            f"{algorithm:<6} packs {packing.num_packs:,}  efficiency {100 * packing.plan.efficiency:.3f}%  "
            f"whole call {whole:.3f}s  assignment alone {just_assign:.3f}s"
        )


def stream(h: np.ndarray) -> None:
    lengths = np.random.default_rng(1).choice(np.arange(1, 513), size=300_000, p=h / h.sum()).tolist()
    print("\n## StreamPacker: 300,000 streamed lengths, efficiency vs buffer size (lpfhp per buffer)")
    for buffer in (100, 1_000, 10_000, 50_000):
        sp = StreamPacker(512, buffer_size=buffer)
        t0 = time.perf_counter()
        n = sum(1 for _ in sp.pack(lengths))
        print(f"buffer {buffer:>6}: {n:,} packs, efficiency {100 * sp.efficiency:.3f}%, {time.perf_counter() - t0:.2f}s")


def other_shapes() -> None:
    rng = np.random.default_rng(1)

    def clip(x, n):  # type: ignore[no-untyped-def]
        return np.clip(np.round(x).astype(int), 1, n)

    shapes = {
        "short skewed (lognormal), L=128": (clip(rng.lognormal(3.0, 0.6, 60_000), 128), 128),
        "QA-like (normal 160+-60), L=384": (clip(rng.normal(160, 60, 80_000), 384), 384),
        "bimodal 20 / 900, L=1024": (np.concatenate([clip(rng.normal(20, 5, 50_000), 1024), clip(rng.normal(900, 60, 20_000), 1024)]), 1024),
        "long tail (pareto), L=2048": (clip(rng.pareto(1.2, 100_000) * 40 + 5, 2048), 2048),
        "chat (geometric mean 250), L=4096": (clip(rng.geometric(1 / 250, 200_000), 4096), 4096),
    }
    print("\n## Other shapes: best vs its LP bound; depth 3 vs the greedy plans")
    for name, (lengths, max_len) in shapes.items():
        h = np.bincount(lengths - 1, minlength=max_len)
        t0 = time.perf_counter()
        b = plan(h, max_len)
        tb = time.perf_counter() - t0
        lb = b.info["lp_bound"]
        t0 = time.perf_counter()
        d3 = plan(h, max_len, max_depth=3)
        t3 = time.perf_counter() - t0
        greedy = {a: plan(h, max_len, algorithm=a, max_depth=3).num_packs for a in ("spfhp", "lpfhp")}
        print(
            f"{name}: best {b.num_packs:,} (LP bound {lb:,}, gap {100 * (b.num_packs - lb) / lb:.4f}%, {tb:.2f}s, "
            f"lpfhp {plan(h, max_len, algorithm='lpfhp').num_packs:,}); depth 3: best {d3.num_packs:,} "
            f"({t3:.2f}s, LP bound {d3.info['lp_bound']:,}) spfhp {greedy['spfhp']:,} lpfhp {greedy['lpfhp']:,}"
        )


def main() -> None:
    quick = "--quick" in sys.argv
    path = SHARED / "histograms" / "wikipedia_len512_histogram.npy"
    if not path.is_file():
        sys.exit(f"benchmark needs {path} (the shared data folder)")
    h = np.load(path)
    table1(h, quick)
    assignment(h)
    stream(h)
    other_shapes()


if __name__ == "__main__":
    main()
