"""The CLI figures in the benchmark tables (`seqpack bench`, `seqpack compare`, `seqpack demo`), each command run as a
user would type it, its ``--json`` stored with the command, machine and versions.

    python benchmarks/cli_runs.py [--only bench_bert,bench_gpt,compare,demo]

Writes ``results/cli_<name>.json``. ``bench`` alternates padded and packed rounds in one process
(round 0 warms up) and stores every round's ratio; ``compare`` trains padded then packed on the same
sequences; ``demo`` is ``make demo``'s job with a fresh output folder.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from _common import RESULTS, SHARED, scratch_dir, write_result

BENCH = ["bench", "--lengths", "wikipedia", "--threads", "2"]
RUNS = {
    "bench_bert": [
        [*BENCH, "--max-len", "512", "--model", "bert", "--head", "all"],
        [*BENCH, "--max-len", "512", "--model", "bert", "--head", "targets"],
    ],
    "bench_gpt": [[*BENCH, "--max-len", "2048", "--model", "gpt", "--head", "all"]],
    "demo": [["demo", "--out", "{work}/demo", "--fresh"]],
}
# compare: Shakespeare's paragraphs, an 8K BPE, MLM + NSP at 128, a tiny BERT, 60,000 sequences
COMPARE_PREP = [
    ["train-tokenizer", "{text}", "--vocab-size", "8000", "--out", "{work}/tok"],
    ["tokenize", "{text}", "--tokenizer", "{work}/tok", "--out", "{work}/store", "--separator", "\n\n"],
    [
        "pack",
        "{work}/store",
        "--task",
        "mlm",
        "--max-len",
        "128",
        "--tokenizer",
        "{work}/tok",
        "--out",
        "{work}/packed",
    ],
]
COMPARE = [
    "compare",
    "--data",
    "{work}/packed",
    "--size",
    "tiny",
    "--sequences",
    "60000",
    "--batch-size",
    "32",
    "--threads",
    "2",
    "--out",
    "{work}/cmp",
]


def seqpack(args: list[str], fill: dict[str, str]) -> tuple[str, str, float]:
    """Run ``seqpack ARGS`` (``{work}``-style fields filled): the command as typed, its stdout, seconds."""
    args = [a.format(**fill) for a in args]
    typed = " ".join(["seqpack", *args])
    print("$", typed, flush=True)
    t0 = time.perf_counter()
    proc = subprocess.run(
        [str(Path(sys.executable).with_name("seqpack")), *args], check=True, capture_output=True, text=True
    )
    return typed, proc.stdout, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default="bench_bert,bench_gpt,compare,demo")
    ap.add_argument("--out-dir", default=str(RESULTS))
    args = ap.parse_args()
    work = str(scratch_dir("seqpack-cli-"))
    fill = {"work": work}
    for name in args.only.split(","):
        runs = []
        if name == "compare":
            src = SHARED / "corpora" / "shakespeare"
            if not src.is_dir():
                sys.exit(f"compare needs {src} (the shared data folder)")
            fill["text"] = str(Path(work) / "shakespeare.txt")
            Path(fill["text"]).write_text(
                "\n\n".join(p.read_text(encoding="utf-8") for p in sorted(src.glob("*.txt"))), encoding="utf-8"
            )
            for prep in COMPARE_PREP:
                seqpack(prep, fill)
            commands = [COMPARE]
        else:
            commands = RUNS[name]
        for cmd in commands:
            typed, out, wall = seqpack([*cmd, "--json"], fill)
            runs.append({"command": typed, "wall_s": wall, "json": json.loads(out.strip().splitlines()[-1])})
            print(f"  {wall:.1f} s", flush=True)
        write_result(Path(args.out_dir) / f"cli_{name}.json", runs, packages=("torch",))


if __name__ == "__main__":
    main()
