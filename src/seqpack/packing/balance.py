"""Packs grouped into data-parallel steps so that every rank does the same work (numpy, no torch).

Packing gives every row the same tokens, not the same work: attention grows with the sum of
squared sequence lengths. A row's cost is modelled as ::

    cost = per_token * tokens + per_square * sum(l_i^2) + per_sequence * sequences

(`RowCost`; defaults from FLOP counts, `RowCost.from_flops`). A data-parallel step
takes ``world * micro_batch`` packs, ``micro_batch`` per rank, and lasts as long as its slowest
rank. `balanced_steps` sorts all packs of the epoch by cost, gives each step packs of
neighbouring cost, and deals them to ranks in alternating order so their sums are even; the
steps are then shuffled.
It sees the whole epoch at once (a greedy per-batch balancer sees one batch).

    >>> steps = balanced_steps(np.array([10.0, 1, 9, 1]), world=2, micro_batch=2, seed=0)
    >>> sorted(sorted(np.array([10.0, 1, 9, 1])[steps[0, r]].tolist()) for r in range(2))
    [[1.0, 9.0], [1.0, 10.0]]
    >>> round(imbalance(np.array([10.0, 1, 9, 1]), steps), 4)
    1.0476
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from seqpack.errors import UserError

if TYPE_CHECKING:
    from seqpack.packing.plan_types import PackingPlan


@dataclass(frozen=True, kw_only=True)
class RowCost:
    """Cost of a packed row (any unit: FLOPs, seconds) from its tokens, sum of squared sequence
    lengths and sequence count."""

    per_token: float
    per_square: float
    per_sequence: float = 0.0

    def __post_init__(self) -> None:
        if min(self.per_token, self.per_square, self.per_sequence) < 0:
            raise UserError("RowCost coefficients must be >= 0")

    @classmethod
    def from_flops(
        cls, *, hidden: int, layers: int, ffn: int | None = None, vocab: int = 0, causal: bool = True
    ) -> RowCost:
        """Training FLOPs (forward + backward = 3x forward) of a transformer.

        Per token: 2 FLOPs per weight of the layers (4h^2 attention projections, 2 h ffn MLP) and of
        the LM head (h V). Per (query, key) pair: q.k and the weighted sum of v, 4h per layer, half
        the pairs when causal.

        >>> c = RowCost.from_flops(hidden=256, layers=4, vocab=0)
        >>> c.per_token, c.per_square
        (18874368.0, 6144.0)
        """
        f = 4 * hidden if ffn is None else ffn
        per_token = 3 * 2 * (layers * (4 * hidden * hidden + 2 * hidden * f) + hidden * vocab)
        per_square = 3 * 4 * hidden * layers * (0.5 if causal else 1.0)
        return cls(per_token=float(per_token), per_square=float(per_square))

    def of(self, tokens: np.ndarray | float, squares: np.ndarray | float, sequences: np.ndarray | float) -> np.ndarray:
        """Costs of rows given their three statistics.  # (P,)"""
        return (
            self.per_token * np.asarray(tokens, np.float64)
            + self.per_square * np.asarray(squares, np.float64)
            + self.per_sequence * np.asarray(sequences, np.float64)
        )

    def to_dict(self) -> dict[str, float]:
        return {"per_token": self.per_token, "per_square": self.per_square, "per_sequence": self.per_sequence}

    def save(self, path: str | os.PathLike[str], **info: Any) -> None:
        """Write the coefficients (and ``info``: the model, the fit) as JSON, atomically; `load_row_cost`
        reads them back."""
        from seqpack._atomic import write_text_atomic

        doc = {"format": COST_FORMAT, "version": 1, **self.to_dict(), **info}
        write_text_atomic(Path(path), json.dumps(doc, indent=1) + "\n")


COST_FORMAT = "seqpack-row-cost"


def load_row_cost(path: str | os.PathLike[str]) -> RowCost:
    """The `RowCost` a calibration wrote (``seqpack bench --calibrate --out FILE``)."""
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise UserError(
            f"--cost {path}: cannot read a cost file ({e}); write one with seqpack bench --calibrate --out FILE"
        ) from e
    if not isinstance(doc, dict) or doc.get("format") != COST_FORMAT:
        raise UserError(f"--cost {path}: not a seqpack cost file; write one with seqpack bench --calibrate --out FILE")
    return RowCost(
        per_token=float(doc["per_token"]),
        per_square=float(doc["per_square"]),
        per_sequence=float(doc.get("per_sequence", 0.0)),
    )


def fit_row_cost(
    tokens: np.ndarray, squares: np.ndarray, sequences: np.ndarray, seconds: np.ndarray
) -> tuple[RowCost, dict[str, float]]:
    """The `RowCost` (coefficients >= 0) that best predicts measured row times, least squares on
    the *relative* error (rows of every size count alike), and how well it fits.

    Exact non-negative least squares for three unknowns: every subset of coefficients held at 0 is
    solved and the best one with no negative coefficient kept.

    >>> t = np.array([8, 8, 8, 4.0]); q = np.array([64, 32, 16, 16.0]); n = np.array([1, 2, 4, 1.0])
    >>> cost, fit = fit_row_cost(t, q, n, 2 * t + 0.5 * q + 0 * n)
    >>> round(cost.per_token, 6), round(cost.per_square, 6), round(fit["max_rel_error"], 6)
    (2.0, 0.5, 0.0)
    """
    X = np.stack([np.asarray(a, np.float64) for a in (tokens, squares, sequences)], axis=1)  # (R, 3)
    y = np.asarray(seconds, np.float64)
    if X.shape[0] < 3 or (y <= 0).any():
        raise UserError("fit_row_cost needs at least 3 rows with positive times")
    w = 1.0 / y  # relative error: each row's residual divided by its own time
    best: tuple[float, np.ndarray] | None = None
    for mask in range(1, 8):
        cols = [j for j in range(3) if mask >> j & 1]
        coef = np.zeros(3)
        coef[cols] = np.linalg.lstsq(X[:, cols] * w[:, None], y * w, rcond=None)[0]
        if (coef < 0).any():
            continue
        err = float((((X @ coef) - y) * w) ** 2 @ np.ones(len(y)))
        if best is None or err < best[0]:
            best = (err, coef)
    assert best is not None  # a single non-negative column always fits with a coefficient >= 0
    coef = best[1]
    rel = (X @ coef - y) / y
    cost = RowCost(per_token=float(coef[0]), per_square=float(coef[1]), per_sequence=float(coef[2]))
    return cost, {
        "rows": len(y),
        "rms_rel_error": float(np.sqrt((rel**2).mean())),
        "max_rel_error": float(np.abs(rel).max()),
    }


def pack_costs(lengths: np.ndarray, pack_offsets: np.ndarray, sequence_index: np.ndarray, cost: RowCost) -> np.ndarray:
    """Cost of every pack of a packing (``Packing.pack_offsets`` / ``sequence_index``).  # (P,)"""
    lens = np.asarray(lengths, np.int64)[np.asarray(sequence_index)]
    starts = np.asarray(pack_offsets)[:-1]
    if lens.size == 0:
        return np.zeros(starts.size)
    tokens = np.add.reduceat(lens, starts) if starts.size else np.zeros(0)
    squares = np.add.reduceat(lens * lens, starts) if starts.size else np.zeros(0)
    return cost.of(tokens, squares, np.diff(pack_offsets))


def plan_costs(plan: PackingPlan, cost: RowCost) -> np.ndarray:
    """Cost of every pack of a `PackingPlan` (strategy by strategy, no
    sequences needed).  # (P,)"""
    per = np.array([cost.of(sum(s), sum(x * x for x in s), len(s)) for s in plan.strategies], dtype=np.float64)
    return np.repeat(per, plan.counts)


def _check(world: int, micro_batch: int, packs: int | None = None) -> None:
    """Both ints >= 1, and (given the packs) no more slots a step than packs: the steps' arrays are
    as large as the packs, whatever the arguments."""
    for name, v in (("world", world), ("micro_batch", micro_batch)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise UserError(f"{name} must be an int >= 1, got {v!r}")
    if packs and world * micro_batch > packs:  # (no packs: no steps, nothing made)
        raise UserError(
            f"{world:,} ranks x {micro_batch:,} packs a step is more than the {packs:,} packs there are: "
            "no step could be filled; lower --world-size or --micro-batch"
        )


def _deal(costs: np.ndarray, packs: np.ndarray, world: int, micro_batch: int) -> np.ndarray:
    """``packs`` (at most world * micro_batch) dealt to ranks, ``micro_batch`` each, sums even:
    heaviest first, each to the lightest rank with room (LPT with a cardinality cap).  # (W, B)"""
    out = np.full((world, micro_batch), -1, dtype=np.int64)
    load = np.zeros(world)
    room = np.full(world, micro_batch)
    for p in packs[np.argsort(-costs[packs], kind="stable")]:
        r = int(np.argmin(np.where(room > 0, load, np.inf)))
        out[r, micro_batch - room[r]] = p
        load[r] += costs[p]
        room[r] -= 1
    return out


def balanced_steps(costs: np.ndarray, *, world: int, micro_batch: int = 1, seed: int = 0) -> np.ndarray:
    """Every pack in one slot of ``(steps, world, micro_batch)`` (-1: an empty slot of the last step),
    each step's ranks as even as the packs allow; the order of the full steps shuffled by ``seed``
    (a partial one, the lightest packs, stays last).

    The packs sorted by cost are cut into steps of ``world * micro_batch`` neighbours; inside a step,
    round ``k`` gives ranks ``0 .. W-1`` the next ``W`` packs, in reverse on odd rounds (a
    boustrophedon: the heaviest rank of one round takes the lightest of the next). Vectorised: 8M
    packs in about a second.
    """
    costs = np.asarray(costs, np.float64)
    _check(world, micro_batch, costs.size)
    per_step = world * micro_batch
    order = np.argsort(-costs, kind="stable")
    n_steps = -(-order.size // per_step)
    slots = np.full(n_steps * per_step, -1, np.int64)
    slots[: order.size] = order
    rounds = slots.reshape(n_steps, micro_batch, world)
    rounds[:, 1::2] = rounds[:, 1::2, ::-1]
    out = rounds.transpose(0, 2, 1).copy()  # (steps, world, micro_batch)
    full = n_steps - int(order.size % per_step > 0)  # a partial step stays last: the stream keeps its alignment
    out[:full] = out[np.random.default_rng(seed).permutation(full)]
    return out


def sequential_steps(num_packs: int, *, world: int, micro_batch: int = 1, seed: int = 0) -> np.ndarray:
    """What a ``DistributedSampler`` does: a shuffled epoch cut into steps, rank ``r`` taking every
    ``world``-th pack.  # (steps, world, micro_batch)"""
    _check(world, micro_batch, num_packs)
    per_step = world * micro_batch
    order = np.random.default_rng(seed).permutation(num_packs)
    padded = np.full(-(-num_packs // per_step) * per_step, -1, np.int64)
    padded[:num_packs] = order
    return padded.reshape(-1, micro_batch, world).transpose(0, 2, 1)


def greedy_batch_steps(costs: np.ndarray, *, world: int, micro_batch: int = 1, seed: int = 0) -> np.ndarray:
    """The per-batch rule (balance inside each shuffled batch of ``world * micro_batch`` packs, as the
    greedy balancers of TRL's GRPO PR and torchtitan do), for comparison.  # (steps, world, micro_batch)"""
    seq = sequential_steps(len(costs), world=world, micro_batch=micro_batch, seed=seed)
    costs = np.asarray(costs, np.float64)
    return np.stack([_deal(costs, s[s >= 0], world, micro_batch) for s in seq]) if len(seq) else seq


def rank_costs(costs: np.ndarray, steps: np.ndarray) -> np.ndarray:
    """Each rank's cost in each step.  # (steps, world)"""
    c = np.where(steps >= 0, np.asarray(costs, np.float64)[np.maximum(steps, 0)], 0.0)
    return c.sum(axis=2)


def imbalance(costs: np.ndarray, steps: np.ndarray) -> float:
    """Mean over full steps of the slowest rank's cost over the mean rank's (1.0: perfectly even).
    A last step with empty slots is left out (a sampler drops or pads it)."""
    full = (steps >= 0).all(axis=(1, 2))
    r = rank_costs(costs, steps[full])
    mean = r.mean(axis=1)
    ok = mean > 0
    return float((r.max(axis=1)[ok] / mean[ok]).mean()) if ok.any() else 1.0


#: the hidden size of the FLOP model when none is given (its attention share: per_square / per_token = 1 / 12h)
DEFAULT_HIDDEN = 1024


@dataclass(frozen=True, kw_only=True)
class ScheduleOptions:
    """A dataset's packs grouped into balanced data-parallel steps when it is written
    (``seqpack pack --world-size W --micro-batch B [--cost FILE]``).

    >>> ScheduleOptions(world_size=8, micro_batch=2).cost.per_square > 0
    True
    """

    world_size: int
    micro_batch: int = 1
    cost: RowCost = field(default_factory=lambda: RowCost.from_flops(hidden=DEFAULT_HIDDEN, layers=1))
    seed: int = 0

    def __post_init__(self) -> None:
        _check(self.world_size, self.micro_batch)
        if self.seed < 0:
            raise UserError(f"seed must be >= 0, got {self.seed}")


def packing_schedule(
    lengths: np.ndarray, pack_offsets: np.ndarray, sequence_index: np.ndarray, options: ScheduleOptions
) -> tuple[np.ndarray, dict[str, Any]]:
    """Balanced steps of a packing, ``(steps, world, micro_batch)`` pack indices (-1: an empty
    slot of a last, partial step), and what a manifest records of them."""
    costs = pack_costs(lengths, pack_offsets, sequence_index, options.cost)
    steps, report = balance_report(costs, world=options.world_size, micro_batch=options.micro_batch, seed=options.seed)
    info = {
        "world_size": options.world_size,
        "micro_batch": options.micro_batch,
        "seed": options.seed,
        "steps": int(steps.shape[0]),
        "full_steps": int((steps >= 0).all(axis=(1, 2)).sum()),
        "cost": options.cost.to_dict(),
        **report,
    }
    return steps, info


def balance_report(
    costs: np.ndarray, *, world: int, micro_batch: int = 1, seed: int = 0
) -> tuple[np.ndarray, dict[str, float]]:
    """Balanced steps of ``costs`` and how they compare with a shuffled epoch (what ``plan``, ``pack``
    and ``train`` report): ``imbalance_sequential``, ``imbalance_balanced``, ``step_time_saving``.

    >>> _, r = balance_report(np.array([10.0, 1, 9, 1]), world=2, micro_batch=2)
    >>> round(r["imbalance_balanced"], 4)
    1.0476
    """
    steps = balanced_steps(costs, world=world, micro_batch=micro_batch, seed=seed)
    seq = sequential_steps(len(costs), world=world, micro_batch=micro_batch, seed=seed)
    return steps, {
        "imbalance_sequential": imbalance(costs, seq),
        "imbalance_balanced": imbalance(costs, steps),
        "step_time_saving": step_time_saving(costs, seq, steps),
    }


def step_time_saving(costs: np.ndarray, before: np.ndarray, after: np.ndarray) -> float:
    """Share of the epoch's time saved when every step lasts as long as its slowest rank."""
    t0, t1 = rank_costs(costs, before).max(axis=1).sum(), rank_costs(costs, after).max(axis=1).sum()
    return float(1.0 - t1 / t0) if t0 > 0 else 0.0


__all__ = [
    "COST_FORMAT",
    "DEFAULT_HIDDEN",
    "RowCost",
    "ScheduleOptions",
    "balance_report",
    "balanced_steps",
    "packing_schedule",
    "fit_row_cost",
    "load_row_cost",
    "greedy_batch_steps",
    "imbalance",
    "pack_costs",
    "plan_costs",
    "rank_costs",
    "sequential_steps",
    "step_time_saving",
]
