from __future__ import annotations

import json

import numpy as np
import pytest

from tests.cli.test_cli import run

KEYS = {
    "algorithm",
    "max_len",
    "max_depth",
    "packs",
    "sequences",
    "tokens",
    "efficiency",
    "packing_factor",
    "lower_bound",
    "gap_to_lower_bound",
    "theoretical_speedup",
    "seconds",
}


@pytest.fixture
def hist_file(tmp_path):
    h = np.bincount(np.random.default_rng(0).integers(1, 100, 3000) - 1, minlength=128)
    np.save(tmp_path / "h.npy", h)
    return tmp_path / "h.npy"


def test_plan_json_plot_and_out(capsys, tmp_path, hist_file):
    code, out, _ = run(
        capsys,
        "plan",
        "--histogram",
        str(hist_file),
        "--max-len",
        "128",
        "--json",
        "--plot",
        str(tmp_path / "p.png"),
        "--out",
        str(tmp_path / "plan.json"),
        "--max-depth",
        "3",
    )
    assert code == 0
    d = json.loads(out)
    assert set(d) == KEYS and d["max_depth"] == 3 and d["sequences"] == 3000
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"
    assert json.loads((tmp_path / "plan.json").read_text())["packs"] == d["packs"]


def test_plan_compare(capsys, tmp_path, hist_file):
    code, out, _ = run(capsys, "plan", "--histogram", str(hist_file), "--max-len", "128", "--compare", "--json")
    assert code == 0
    rows = json.loads(out)
    assert {(r["algorithm"], r["max_depth"]) for r in rows} >= {("best", None), ("spfhp", 16), ("nnlshp", 3)}
    assert all(set(r) == KEYS for r in rows)
    code, out, _ = run(capsys, "plan", "--histogram", str(hist_file), "--max-len", "128", "--compare")
    assert code == 0 and "spfhp" in out and "lower bound" in out


def test_stats(capsys, tmp_path, hist_file):
    np.save(tmp_path / "l.npy", np.array([1, 3, 3, 4]))
    code, out, _ = run(capsys, "stats", "--lengths", str(tmp_path / "l.npy"), "--max-len", "4", "--json")
    d = json.loads(out)
    assert code == 0 and d["sequences"] == 4 and d["tokens"] == 11
    assert d["theoretical_speedup"] == pytest.approx(16 / 11)
    code, out, _ = run(capsys, "stats", "--histogram", str(hist_file), "--max-len", "128")
    assert code == 0 and "padding" in out


@pytest.mark.parametrize(
    "content,args,match",
    [
        ("length,count\n1,-3\n", [], "count must be >= 0"),
        ("len,n\n1,3\n", [], "header"),
        ("length,count\n600,3\n", [], "3 sequences exceed max_len=512; pass --max-len 600"),
        ("length,count\n1,0\n", [], "empty"),
        ("length,count\n1,3\n", ["--max-depth", "0"], "--max-depth must be >= 1"),
        ("length,count\n1,3\n", ["--max-len", "x"], "--max-len must be an integer"),
    ],
)
def test_plan_bad_input(capsys, tmp_path, content, args, match):
    f = tmp_path / "h.csv"
    f.write_text(content)
    argv = ["plan", "--histogram", str(f)] + (args if "--max-len" in args else ["--max-len", "512"] + args)
    try:
        code, _, err = run(capsys, *argv)
    except SystemExit as e:  # argparse rejects the option itself
        code, (_, err) = e.code, capsys.readouterr()
    assert code == 2 and match in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_missing_and_bad_files(capsys, tmp_path):
    code, _, err = run(capsys, "plan", "--histogram", str(tmp_path / "nope.npy"), "--max-len", "8")
    assert code == 2 and "not found" in err
    np.save(tmp_path / "two.npy", np.ones((2, 2), dtype=np.int64))
    code, _, err = run(capsys, "stats", "--histogram", str(tmp_path / "two.npy"), "--max-len", "8")
    assert code == 2 and "1-D" in err
    np.save(tmp_path / "neg.npy", np.array([0, 5]))
    code, _, err = run(capsys, "stats", "--lengths", str(tmp_path / "neg.npy"), "--max-len", "8")
    assert code == 2 and "length <= 0" in err


def test_plan_and_stats_take_the_builtin_histogram_and_a_store(capsys, tmp_path):
    """``--histogram wikipedia`` (shipped) and a token store (its document lengths) besides files."""
    from seqpack.packing import builtin_histogram
    from seqpack.store import build_store, open_store
    from seqpack.tokenizer import Tokenizer

    code, out, _ = run(capsys, "stats", "--histogram", "wikipedia", "--max-len", "512", "--json")
    assert code == 0 and json.loads(out)["sequences"] == int(builtin_histogram("wikipedia").sum())
    tok = Tokenizer({i: bytes([i]) for i in range(256)} | {256: b"<|endoftext|>"}, [], ["<|endoftext|>"])
    tok.save(tmp_path / "tok")
    build_store(["ab", "abcd", "a" * 9], tok, tmp_path / "store")
    assert list(open_store(tmp_path / "store").lengths()) == [2, 4, 9]
    # a store plans what seqpack pack --task clm makes of it: an EOS each (3, 5, 10), longer ones split
    code, out, _ = run(capsys, "plan", "--histogram", str(tmp_path / "store"), "--max-len", "10", "--json")
    d = json.loads(out)
    assert code == 0 and (d["sequences"], d["tokens"], d["packs"]) == (3, 18, 2)  # {10}, {3, 5}
    code, out, _ = run(capsys, "stats", "--histogram", str(tmp_path / "store"), "--max-len", "8", "--json")
    assert code == 0 and (json.loads(out)["sequences"], json.loads(out)["tokens"]) == (4, 18)  # 10 -> 8 + 2
    code, _, _ = run(
        capsys,
        "pack",
        str(tmp_path / "store"),
        "--task",
        "clm",
        "--max-len",
        "8",
        "--tokenizer",
        str(tmp_path / "tok"),
        "--out",
        str(tmp_path / "packed"),
    )
    packed = json.loads((tmp_path / "packed" / "manifest.json").read_text())
    code, out, _ = run(capsys, "stats", "--histogram", str(tmp_path / "packed"), "--max-len", "8", "--json")
    assert code == 0 and (json.loads(out)["sequences"], json.loads(out)["tokens"]) == (4, 18) == (
        packed["num_sequences"],
        packed["num_tokens"],
    )
    code, _, err = run(capsys, "stats", "--histogram", str(tmp_path / "store"), "--max-len", "8", "--task", "mlm")
    assert code == 2 and "pack the store with seqpack pack --task mlm, then plan the packed dataset" in err
