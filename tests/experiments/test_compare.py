from __future__ import annotations

import json

from seqpack.cli.main import main

KEYS = {"padded_tokens_per_s", "packed_tokens_per_s", "realized_speedup", "packing_factor", "overhead"}


def test_compare_trains_both_and_plots(datasets, tmp_path, capsys):
    out = tmp_path / "cmp"
    code = main(
        [
            "compare",
            "--data",
            str(datasets["mlm"]),
            "--out",
            str(out),
            "--sequences",
            "60",
            "--batch-size",
            "6",
            "--evals",
            "2",
            "--eval-fraction",
            "0.1",
            "--quiet",
            "--json",
        ]
    )
    r = json.loads(capsys.readouterr().out)
    assert code == 0 and r["match"] == "sequences"
    assert abs(r["sequences"]["packed"] - r["sequences"]["padded"]) <= 12  # same budget, rows of ~p sequences
    assert r["steps"]["padded"] == 10 and (out / "compare.png").stat().st_size > 1000
    assert set(r["final_eval_loss"]) == {"padded", "packed"} and r["wall_time_ratio"] > 0
