"""No argument makes memory grow past what the data needs: each command runs as a user would run it
(a fresh process) under an address-space cap, and an argument it cannot serve is refused in one line,
exit 2, before any work, with the inputs unchanged and no output that looks complete."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.reliability.test_outputs import tree_hash

ROOT = Path(__file__).resolve().parents[2]
#: the cap: far below what each case would take unguarded (4-24 GB), above what torch needs to import
CAP_BYTES = 6 << 30


def _cap() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (CAP_BYTES, CAP_BYTES))


def seqpack(*argv: str, cwd: Path) -> tuple[int, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}
    p = subprocess.run(
        [sys.executable, "-m", "seqpack", *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=_cap,
        env=env,
    )
    return p.returncode, p.stderr


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("memory")
    corpus = d / "corpus.txt"
    corpus.write_text(("the quick brown fox jumps over the lazy dog. " * 40 + "<|endoftext|>") * 8, encoding="utf-8")
    assert seqpack("train-tokenizer", str(corpus), "--vocab-size", "270", "--out", "tok", cwd=d)[0] == 0
    assert seqpack("tokenize", str(corpus), "--tokenizer", "tok", "--out", "store", cwd=d)[0] == 0
    assert (
        seqpack("pack", "store", "--task", "clm", "--max-len", "64", "--tokenizer", "tok", "--out", "packed", cwd=d)[0]
        == 0
    )
    h = np.zeros(512, np.int64)
    h[[9, 99, 511]] = [5, 3, 2]
    np.save(d / "h.npy", h)
    (d / "big_label.jsonl").write_text(json.dumps({"text": "a b", "label": 10**12}) + "\n", encoding="utf-8")
    (d / "big_multi.jsonl").write_text(json.dumps({"text": "a b", "label": [5 * 10**9]}) + "\n", encoding="utf-8")
    return {"dir": d}


CASES = {
    "pack clm, --max-len 1e9": (
        ["pack", "store", "--task", "clm", "--max-len", "1000000000", "--tokenizer", "tok", "--out", "o"],
        "more than the",
    ),
    "pack mlm, --max-len 1e9": (
        ["pack", "store", "--task", "mlm", "--max-len", "1000000000", "--tokenizer", "tok", "--out", "o"],
        "more than the",
    ),
    "plan, --max-len 1e9": (
        ["plan", "--histogram", "h.npy", "--max-len", "1000000000", "--out", "plan.json"],
        "more than the",
    ),
    "stats, --max-len 1e9": (["stats", "--histogram", "h.npy", "--max-len", "1000000000"], "more than the"),
    "bench, --batch-size 100000": (["bench", "--size", "tiny", "--batch-size", "100000"], "would take about"),
    "bench, --sequences 1e9": (["bench", "--size", "tiny", "--sequences", "1000000000"], "would take about"),
    "train, --batch-size past the data": (
        ["train", "--data", "packed", "--out", "run", "--batch-size", "100000", "--quiet"],
        "is more than the",
    ),
    "classification, a label of 1e12": (
        ["pack", "big_label.jsonl", "--task", "classification", "--max-len", "16", "--tokenizer", "tok", "--out", "o"],
        "the most one classifier takes",
    ),
    "multilabel, a label of 5e9": (
        ["pack", "big_multi.jsonl", "--task", "multilabel", "--max-len", "16", "--tokenizer", "tok", "--out", "o"],
        "the most one classifier takes",
    ),
    "pack, --shards-at-once 1000": (
        [
            "pack",
            "store",
            "--task",
            "clm",
            "--max-len",
            "64",
            "--tokenizer",
            "tok",
            "--out",
            "o",
            "--shards-at-once",
            "1000",
        ],
        "--shards-at-once 1000",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_an_argument_past_the_data_is_refused_under_a_memory_cap(case: str, made: dict[str, Path]) -> None:
    d = made["dir"]
    argv, message = CASES[case]
    before = tree_hash(d)
    code, err = seqpack(*argv, cwd=d)
    assert code == 2, err[-2000:]
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err[-2000:]
    assert tree_hash(d) == before  # inputs unchanged, nothing written (no o/, run/, plan.json, .partial)
