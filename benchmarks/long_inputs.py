"""Inputs with no cut point: a text without separators, a run of one character.

Run: .venv/bin/python benchmarks/long_inputs.py [--rounds 3] [--out benchmarks/results/long_inputs.json]

1. ``read_text`` of a plain text with no separator at 50 / 100 / 200 MB (one document), against the
   reader it replaced (``buf += block; buf.split(sep)`` per block: quadratic in a run without a
   separator; only up to 100 MB), each in a fresh process, ``--rounds`` alternating, median.
2. ``seqpack tokenize`` and ``seqpack train-tokenizer`` on 200 MB of one letter, of spaces and of
   NUL bytes (one pre-token each, cut into 1 MiB pieces before BPE): wall time and the process's
   peak memory (VmHWM), one run each.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _common import PEAK_MB, RESULTS, run_child, scratch_dir, write_result

READ = (
    PEAK_MB
    + """
import json, time
from seqpack.corpus.readers import iter_decoded, read_text
def previous(path, sep="<|endoftext|>"):
    buf = ""
    for text in iter_decoded(path):
        buf += text
        parts = buf.split(sep)
        buf = parts.pop()
        yield from parts
    if buf:
        yield buf
t0 = time.perf_counter()
n = sum(len(d) for d in ({fn})({path!r}))
print(json.dumps({{"seconds": time.perf_counter() - t0, "chars": n, "peak_mb": peak_mb()}}))
"""
)


def read_rounds(work: Path, rounds: int) -> dict[str, dict[str, object]]:
    out: dict[str, dict[str, object]] = {}
    for mb in (50, 100, 200):
        path = work / f"plain{mb}.txt"
        path.write_text("a" * (mb << 20), encoding="utf-8")
        arms = {"read_text": "read_text"} | ({"previous reader": "previous"} if mb <= 100 else {})
        runs: dict[str, list[dict]] = {a: [] for a in arms}
        for _ in range(rounds):
            for arm, fn in arms.items():
                runs[arm].append(run_child(READ.format(fn=fn, path=str(path))))
        out[f"{mb} MB"] = {
            arm: {
                "median_s": statistics.median(r["seconds"] for r in rs),
                "runs_s": [r["seconds"] for r in rs],
                "peak_mb": max(r["peak_mb"] for r in rs),
            }
            for arm, rs in runs.items()
        }
        path.unlink()
    return out


def command_peak(argv: list[str]) -> dict[str, float]:
    """Wall seconds and peak resident MB of one seqpack command (GNU time's %M: the process's own)."""
    t0 = time.perf_counter()
    proc = subprocess.run(
        ["/usr/bin/time", "-f", "%M", sys.executable, "-m", "seqpack", *argv],
        capture_output=True,
        text=True,
        check=True,
    )
    return {"seconds": time.perf_counter() - t0, "peak_mb": int(proc.stderr.strip().splitlines()[-1]) / 1024}


def runs_of_one(work: Path) -> dict[str, dict[str, object]]:
    corpus = work / "words.txt"
    corpus.write_text("the quick brown fox jumps over the lazy dog. " * 2000, encoding="utf-8")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "seqpack",
            "train-tokenizer",
            str(corpus),
            "--vocab-size",
            "300",
            "--out",
            str(work / "tok"),
        ],
        check=True,
        capture_output=True,
    )
    out: dict[str, dict[str, object]] = {}
    for name, ch in (("one letter", "a"), ("spaces", " "), ("NUL bytes", "\x00")):
        path = work / "run.txt"
        path.write_text(ch * (200 << 20), encoding="utf-8")
        out[name] = {
            "tokenize": command_peak(
                ["tokenize", str(path), "--tokenizer", str(work / "tok"), "--out", str(work / "s"), "--overwrite"]
            ),
            "train-tokenizer": command_peak(
                ["train-tokenizer", str(path), "--vocab-size", "300", "--out", str(work / "t"), "--overwrite"]
            ),
        }
        path.unlink()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=str(RESULTS / "long_inputs.json"))
    args = ap.parse_args()
    work = scratch_dir("seqpack-long-")
    results = {
        "read_text, no separator": read_rounds(work, args.rounds),
        "200 MB runs of one character": runs_of_one(work),
    }
    for k, v in results.items():
        print(k)
        for case, r in v.items():
            print(f"  {case}: {r}")
    write_result(args.out, results)


if __name__ == "__main__":
    main()
