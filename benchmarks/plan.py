"""Packing plans and assignment on the BERT Wikipedia histogram, plus other shapes.

Run: .venv/bin/python benchmarks/plan.py [--quick] [--out FILE]
Timings go through the harness (each plan in processes of its own, a warm-up call, median);
pack counts are deterministic. Writes benchmarks/results/plan.json.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from _common import RESULTS, compare_arms, write_result

from seqpack.packing import StreamPacker, builtin_histogram, plan

SETUP = """
import numpy as np
from seqpack.packing import builtin_histogram, pack_lengths, plan
from seqpack.packing.assign import assign
h = builtin_histogram("wikipedia")
lengths = np.random.default_rng(0).choice(np.arange(1, 513), size=1_000_000, p=h / h.sum())
"""


def table1(h: np.ndarray, quick: bool) -> dict:
    """Every plan as an arm of the harness: a process of its own, a warm-up call, alternating rounds."""
    print("## Table 1 analogue: Wikipedia, max_len 512 (harness: 3 processes per plan, median)")
    # the LP bounds at depth 3 and unlimited, computed (``best`` reports the LP's proven lower bound)
    bounds = {d: int(plan(h, 512, algorithm="best", max_depth=d).info["lp_bound"]) for d in (3, None)}  # type: ignore[call-overload]
    print(f"LP bounds (computed): depth 3 {bounds[3]:,}, no limit {bounds[None]:,}")
    rows = [("spfhp", d) for d in (2, 3, 4, 8, 16, None)] + [("lpfhp", 3), ("lpfhp", None)]
    rows += [("best", d) for d in (2, 3, 4, 8, 16, None)]
    if not quick:
        rows.insert(8, ("nnlshp", 3))
    arms = {
        f"{a} depth {d or 'max'}": (
            SETUP,
            f"return plan(h, 512, algorithm={a!r}, max_depth={d})",
            "[out.num_packs, out.efficiency]",
        )
        for a, d in rows
    }
    got = compare_arms(arms, rounds=3)
    print(f"{'plan':<16} {'packs':>12} {'efficiency':>10} {'vs LP bound':>11} {'median s':>9}")
    for (name, r), (_, depth) in zip(got.items(), rows):
        packs, eff = r["info"]
        r["packs"], r["efficiency"] = packs, eff
        if depth in (3, None):
            r["over_lp_bound"] = packs - bounds[depth]
        gap = f"+{packs - bounds[depth]:,}" if depth in (3, None) else ""
        print(f"{name:<16} {packs:>12,} {100 * eff:>9.3f}% {gap:>11} {r['median_s']:>9.3f}")
    return {"lp_bound_depth3": bounds[3], "lp_bound": bounds[None], "plans": got}


def assignment() -> dict:
    print("\n## pack_lengths: 1,000,000 lengths sampled from the histogram (harness: 3 processes x 2 calls)")
    arms: dict[str, tuple[str, str, str | None]] = {}
    for algorithm in ("lpfhp", "best", "spfhp"):
        arms[f"pack_lengths {algorithm}"] = (
            SETUP,
            f"return pack_lengths(lengths, 512, algorithm={algorithm!r})",
            "[out.num_packs, out.plan.efficiency]",
        )
    arms["assign alone (lpfhp plan)"] = (
        SETUP + "p = pack_lengths(lengths, 512, algorithm='lpfhp').plan\n",
        "return assign(p, lengths)",
        None,
    )
    got = compare_arms(arms, rounds=3, repeats=2)
    for name, r in got.items():
        print(f"{name:<28} median {r['median_s']:.3f}s (min {r['min_s']:.3f}, max {r['max_s']:.3f}) {r['info'] or ''}")
    return got


def stream(h: np.ndarray) -> dict:
    lengths = np.random.default_rng(1).choice(np.arange(1, 513), size=300_000, p=h / h.sum()).tolist()
    out = {}
    print("\n## StreamPacker: 300,000 streamed lengths, efficiency vs buffer size (lpfhp per buffer)")
    for buffer in (100, 1_000, 10_000, 50_000):
        sp = StreamPacker(512, buffer_size=buffer)
        t0 = time.perf_counter()
        n = sum(1 for _ in sp.pack(lengths))
        print(
            f"buffer {buffer:>6}: {n:,} packs, efficiency {100 * sp.efficiency:.3f}%, {time.perf_counter() - t0:.2f}s"
        )
        out[buffer] = {"packs": n, "efficiency_percent": 100 * sp.efficiency}
    return out


def other_shapes() -> dict:
    rng = np.random.default_rng(1)

    def clip(x, n):  # type: ignore[no-untyped-def]
        return np.clip(np.round(x).astype(int), 1, n)

    shapes = {
        "short skewed (lognormal), L=128": (clip(rng.lognormal(3.0, 0.6, 60_000), 128), 128),
        "QA-like (normal 160+-60), L=384": (clip(rng.normal(160, 60, 80_000), 384), 384),
        "bimodal 20 / 900, L=1024": (
            np.concatenate([clip(rng.normal(20, 5, 50_000), 1024), clip(rng.normal(900, 60, 20_000), 1024)]),
            1024,
        ),
        "long tail (pareto), L=2048": (clip(rng.pareto(1.2, 100_000) * 40 + 5, 2048), 2048),
        "chat (geometric mean 250), L=4096": (clip(rng.geometric(1 / 250, 200_000), 4096), 4096),
    }
    print("\n## Other shapes: best vs its LP bound; depth 3 vs the greedy plans")
    out = {}
    for name, (lengths, max_len) in shapes.items():
        h = np.bincount(lengths - 1, minlength=max_len)
        t0 = time.perf_counter()
        b = plan(h, max_len)
        tb = time.perf_counter() - t0
        lb = int(b.info["lp_bound"])  # type: ignore[call-overload]  # the plan's info values are untyped
        t0 = time.perf_counter()
        d3 = plan(h, max_len, max_depth=3)
        t3 = time.perf_counter() - t0
        greedy = {a: plan(h, max_len, algorithm=a, max_depth=3).num_packs for a in ("spfhp", "lpfhp")}
        print(
            f"{name}: best {b.num_packs:,} (LP bound {lb:,}, gap {100 * (b.num_packs - lb) / lb:.4f}%, {tb:.2f}s, "
            f"lpfhp {plan(h, max_len, algorithm='lpfhp').num_packs:,}); depth 3: best {d3.num_packs:,} "
            f"({t3:.2f}s, LP bound {d3.info['lp_bound']:,}) spfhp {greedy['spfhp']:,} lpfhp {greedy['lpfhp']:,}"
        )
        out[name] = {
            "best": b.num_packs,
            "lp_bound": int(lb),
            "gap_percent": 100 * (b.num_packs - lb) / lb,
            "best_s_one_run": tb,
            "best_depth3": d3.num_packs,
            "lp_bound_depth3": int(d3.info["lp_bound"]),  # type: ignore[call-overload]
            "spfhp_depth3": greedy["spfhp"],
            "lpfhp_depth3": greedy["lpfhp"],
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="leave out NNLSHP (15 s a call)")
    parser.add_argument("--out", default=str(RESULTS / "plan.json"))
    args = parser.parse_args()
    h = builtin_histogram("wikipedia")  # the paper's histogram, shipped in the package
    results = {
        "table1": table1(h, args.quick),
        "pack_lengths": assignment(),
        "stream": stream(h),
        "other_shapes": other_shapes(),
    }
    write_result(args.out, results)


if __name__ == "__main__":
    main()
