"""Text tables and plots of plans (matplotlib is imported only when plotting)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from seqpack.packing.plan_types import PackingPlan

COMPARE_DEPTHS: tuple[int | None, ...] = (1, 2, 3, 4, 8, 16, None)


def compare_plans(
    hist: np.ndarray,
    max_len: int,
    depths: Sequence[int | None] = COMPARE_DEPTHS,
    algorithms: Sequence[str] = ("spfhp", "lpfhp", "nnlshp", "best"),
) -> list[PackingPlan]:
    """Every algorithm at each depth (nnlshp only up to depth 3); a refusal becomes a warning."""
    import warnings

    from seqpack.packing.plan import plan

    plans = []
    for algorithm in algorithms:
        for depth in depths:
            if algorithm == "nnlshp" and (depth is None or depth > 3):
                continue
            try:
                plans.append(plan(hist, max_len, algorithm=algorithm, max_depth=depth))
            except ValueError as e:  # nnlshp refuses large max_len: say so, keep the rest
                warnings.warn(f"skipped {algorithm} at depth {depth}: {e}", stacklevel=2)
    return plans


def format_table(plans: Sequence[PackingPlan]) -> str:
    """The paper's Table 1 analogue: one row per plan."""
    head = f"{'algorithm':<8} {'depth':>5} {'packs':>12} {'efficiency':>10} {'pack.factor':>11} {'gap to LB':>10} {'seconds':>8}"
    rows = [head, "-" * len(head)]
    for p in plans:
        depth = "max" if p.max_depth is None else str(p.max_depth)
        rows.append(
            f"{p.algorithm:<8} {depth:>5} {p.num_packs:>12,} {100 * p.efficiency:>9.2f}% {p.packing_factor:>11.3f} "
            f"{100 * p.gap_to_lower_bound:>9.4f}% {p.seconds:>8.3f}"
        )
    if plans:
        p = plans[0]
        rows.append(
            f"{p.num_sequences:,} sequences, {p.num_tokens:,} tokens, lower bound {p.lower_bound:,} packs, "
            f"theoretical speed-up {p.theoretical_speedup:.3f}"
        )
    return "\n".join(rows)


def plot_plan(hist: np.ndarray, p: PackingPlan, path: str | Path) -> None:
    """Two panels: the length histogram and the distribution of pack fill (tokens per pack)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    lengths = np.arange(1, len(hist) + 1)
    a.bar(lengths, hist, width=1.0, color="#4477aa")
    a.set(title="sequence lengths", xlabel="length (tokens)", ylabel="sequences")
    fills = np.repeat(p.fills, p.counts)
    b.hist(fills, bins=min(100, p.max_len), color="#cc6677")
    b.set(
        title=f"{p.algorithm}: {p.num_packs:,} packs, {100 * p.efficiency:.2f}% full",
        xlabel="tokens per pack",
        ylabel="packs",
    )
    b.set_yscale("log")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
