"""Compute-balanced steps: every pack once, ranks even, and the cost model's arithmetic."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqpack.packing import pack_lengths
from seqpack.packing.balance import (
    RowCost,
    balanced_steps,
    greedy_batch_steps,
    imbalance,
    pack_costs,
    plan_costs,
    rank_costs,
    sequential_steps,
    step_time_saving,
)


def test_pack_costs_equal_a_loop() -> None:
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 200, 500)
    packing = pack_lengths(lengths, 256)
    cost = RowCost(per_token=2.0, per_square=0.5, per_sequence=7.0)
    got = pack_costs(lengths, packing.pack_offsets, packing.sequence_index, cost)
    want = [sum(2.0 * n + 0.5 * n * n + 7.0 for n in packing.lengths_of(p).tolist()) for p in range(packing.num_packs)]
    np.testing.assert_allclose(got, want, rtol=1e-12)  # float64 sums of integers < 2^53: exact up to order


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.floats(0.0, 1e6), min_size=0, max_size=120),
    st.integers(1, 9),
    st.integers(1, 4),
    st.sampled_from([balanced_steps, greedy_batch_steps]),
)
def test_every_pack_in_exactly_one_slot(costs, world, micro, rule) -> None:
    c = np.array(costs)
    if 0 < len(costs) < world * micro:  # not one step could be filled: refused (its arrays would follow the arguments)
        with pytest.raises(ValueError, match="no step could be filled"):
            rule(c, world=world, micro_batch=micro, seed=1)
        return
    steps = rule(c, world=world, micro_batch=micro, seed=1)
    assert steps.shape[1:] == (world, micro)
    used = steps[steps >= 0]
    assert sorted(used.tolist()) == list(range(len(costs)))
    assert len(steps) == -(-len(costs) // (world * micro))


def long_tail(n: int, max_len: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.minimum(max_len, np.ceil(rng.lognormal(np.log(600), 1.2, n))).astype(np.int64)


@pytest.mark.parametrize("world", [8, 64])
def test_balanced_beats_per_batch_and_sequential(world: int) -> None:
    lengths = long_tail(20_000, 8192)
    packing = pack_lengths(lengths, 8192, algorithm="lpfhp")
    costs = pack_costs(lengths, packing.pack_offsets, packing.sequence_index, RowCost.from_flops(hidden=1024, layers=8))
    seq = sequential_steps(len(costs), world=world, micro_batch=1)
    greedy = greedy_batch_steps(costs, world=world, micro_batch=1)
    bal = balanced_steps(costs, world=world, micro_batch=1)
    ib = imbalance(costs, bal)
    assert ib <= 1.02 < imbalance(costs, greedy) <= imbalance(costs, seq)
    assert step_time_saving(costs, seq, bal) > 0


def test_even_costs_are_even_and_arguments_checked() -> None:
    assert imbalance(np.ones(12), balanced_steps(np.ones(12), world=3, micro_batch=2)) == 1.0
    assert rank_costs(np.ones(4), np.array([[[0, 1], [2, -1]]])).tolist() == [[2.0, 1.0]]
    with pytest.raises(ValueError, match="world"):
        balanced_steps(np.ones(3), world=0)
    with pytest.raises(ValueError, match=">= 0"):
        RowCost(per_token=-1.0, per_square=0.0)


def test_plan_costs_are_the_packed_rows_costs() -> None:
    from seqpack.packing import histogram, plan

    lengths = long_tail(3_000, 2048, seed=2)
    cost = RowCost.from_flops(hidden=64, layers=2)
    p = plan(histogram(lengths, 2048), 2048, algorithm="lpfhp")
    packing = pack_lengths(lengths, 2048, algorithm="lpfhp")
    got = np.sort(plan_costs(p, cost))
    want = np.sort(pack_costs(lengths, packing.pack_offsets, packing.sequence_index, cost))
    np.testing.assert_allclose(got, want, rtol=1e-12)  # the same integers summed: float64, exact up to order


def test_plan_command_reports_the_balance(capsys) -> None:
    import json
    from pathlib import Path

    from seqpack.cli.main import main

    csv = Path(__file__).resolve().parents[2] / "src" / "seqpack" / "packing" / "data" / "wikipedia_len512.csv"
    assert (
        main(
            [
                "plan",
                "--histogram",
                str(csv),
                "--max-len",
                "512",
                "--algorithm",
                "lpfhp",
                "--world-size",
                "8",
                "--micro-batch",
                "2",
                "--json",
            ]
        )
        == 0
    )
    b = json.loads(capsys.readouterr().out)["balance"]
    assert b["world"] == 8 and b["micro_batch"] == 2 and 1.0 <= b["imbalance_balanced"] < b["imbalance_sequential"]


def test_fit_recovers_exact_coefficients_and_matches_nnls() -> None:
    from seqpack.packing.balance import fit_row_cost

    rng = np.random.default_rng(0)
    tokens = rng.integers(100, 4096, 40).astype(float)
    squares = tokens**2 / rng.integers(1, 32, 40)
    seqs = rng.integers(1, 32, 40).astype(float)
    cost, fit = fit_row_cost(tokens, squares, seqs, 3e-4 * tokens + 2e-8 * squares + 1e-3 * seqs)
    # noise-free: float64 least squares on values ~1e-1 recovers the coefficients to ~1e-12 relative
    np.testing.assert_allclose([cost.per_token, cost.per_square, cost.per_sequence], [3e-4, 2e-8, 1e-3], rtol=1e-8)
    assert fit["max_rel_error"] < 1e-9
    # times that a negative per-sequence coefficient would fit best: NNLS holds it at 0
    y = 3e-4 * tokens + 2e-8 * squares - 1e-4 * seqs  # all > 0: tokens >= 100, seqs < 32
    cost, _ = fit_row_cost(tokens, squares, seqs, y)
    assert min(cost.per_token, cost.per_square, cost.per_sequence) >= 0 and cost.per_sequence == 0
    optimize = pytest.importorskip("scipy.optimize")
    X = np.stack([tokens, squares, seqs], 1) / y[:, None]  # the same relative weighting
    want = optimize.nnls(X * np.array([1, 1e4, 1]), np.ones_like(y))[0] * np.array([1, 1e4, 1])  # column-scaled
    got = np.array([cost.per_token, cost.per_square, cost.per_sequence])
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-12)  # two exact solvers, float64 rounding apart


def test_cost_file_round_trip_and_bad_files(tmp_path) -> None:
    from seqpack.packing.balance import fit_row_cost, load_row_cost

    c = RowCost(per_token=1e-4, per_square=3e-9, per_sequence=2e-5)
    c.save(tmp_path / "c.json", model="gpt")
    assert load_row_cost(tmp_path / "c.json") == c
    (tmp_path / "x.json").write_text('{"per_token": 1}')
    for bad in ("x.json", "missing.json"):
        with pytest.raises(ValueError, match="seqpack bench --calibrate"):
            load_row_cost(tmp_path / bad)
    with pytest.raises(ValueError, match="at least 3 rows"):
        fit_row_cost(np.ones(2), np.ones(2), np.ones(2), np.ones(2))


def test_packing_schedule_holds_every_pack_once() -> None:
    from seqpack.packing.balance import ScheduleOptions, packing_schedule

    lengths = np.random.default_rng(1).integers(1, 512, 2000)
    packing = pack_lengths(lengths, 512, algorithm="best")
    opts = ScheduleOptions(world_size=8, micro_batch=2)
    steps, info = packing_schedule(lengths, packing.pack_offsets, packing.sequence_index, opts)
    assert sorted(steps[steps >= 0].tolist()) == list(range(packing.num_packs))
    assert info["steps"] == len(steps) and info["imbalance_balanced"] <= info["imbalance_sequential"]
    with pytest.raises(ValueError, match="world must be"):
        ScheduleOptions(world_size=0)
