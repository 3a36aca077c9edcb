"""``seqpack bench --calibrate``: designed rows span sum(l^2), the fit is written as a cost file
that ``plan``/``train --cost`` read, and the coefficients are the fit of the printed times."""

from __future__ import annotations

import json

import numpy as np
import pytest

from seqpack.cli.main import main
from seqpack.experiments.calibrate import design_rows
from seqpack.packing.balance import fit_row_cost, load_row_cost


@pytest.mark.parametrize("max_len", [64, 512, 8192])
def test_designs_fit_and_span_the_squares(max_len: int) -> None:
    rows = design_rows(max_len)
    assert all(sum(r) == max_len and min(r) >= 16 for r in rows)  # full rows, as packed rows are
    squares = [sum(x * x for x in r) for r in rows]
    assert max(squares) == max_len**2 and min(squares) <= max_len**2 // 4
    stats = np.array([[sum(r), s, len(r)] for r, s in zip(rows, squares)], float)
    assert np.linalg.matrix_rank(stats) == 3  # the three coefficients are identifiable


def test_calibrate_writes_the_fit_of_its_own_times(tmp_path, capsys) -> None:
    out = tmp_path / "cost.json"
    args = [
        "bench",
        "--calibrate",
        "--model",
        "gpt",
        "--size",
        "tiny",
        "--max-len",
        "64",
        "--vocab-size",
        "64",
        "--batch-size",
        "2",
        "--steps",
        "1",
        "--repeats",
        "1",
        "--threads",
        "1",
        "--json",
        "--out",
        str(out),
    ]
    assert main(args) == 0
    r = json.loads(capsys.readouterr().out)
    cost = load_row_cost(out)
    stats = np.array([[d["tokens"], d["squares"], d["sequences"]] for d in r["designs"]], float)
    tokens, squares, sequences = stats.T
    refit, fit = fit_row_cost(tokens, squares, sequences, np.array([d["measured_s"] for d in r["designs"]]))
    assert cost == refit and fit == r["fit"]  # the same numbers through the same arithmetic
    assert main(args) == 2  # never replaced silently
    assert "--overwrite" in capsys.readouterr().err
    assert main(["bench", "--out", str(tmp_path / "x.json")]) == 2


def test_plan_and_train_read_a_cost_file(tmp_path, capsys, datasets) -> None:
    from pathlib import Path

    from seqpack.packing.balance import RowCost
    from seqpack.train import TrainConfig, train

    RowCost(per_token=1e-4, per_square=1e-6).save(tmp_path / "c.json")
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
                "4",
                "--cost",
                str(tmp_path / "c.json"),
                "--json",
            ]
        )
        == 0
    )
    b = json.loads(capsys.readouterr().out)["balance"]
    assert b["cost"]["per_square"] == 1e-6 and b["cost_source"] == str(tmp_path / "c.json")
    assert main(["plan", "--histogram", str(csv), "--max-len", "512", "--cost", str(tmp_path / "c.json")]) == 2
    cfg = TrainConfig(
        data=str(datasets["clm"]),
        out=str(tmp_path / "run"),
        steps=2,
        batch_size=4,
        eval_fraction=0.1,
        threads=1,
        progress=False,
        balance="compute",
        balance_world=2,
        balance_cost=str(tmp_path / "c.json"),
    )
    train(cfg)
    info = json.loads((tmp_path / "run" / "config.json").read_text())["balance"]
    assert info["cost"]["per_square"] == 1e-6 and info["cost_source"] == str(tmp_path / "c.json")
    with pytest.raises(ValueError, match="pass --balance compute"):
        TrainConfig(data="d", out="o", balance_cost="c.json")
