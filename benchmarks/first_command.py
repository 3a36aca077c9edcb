"""The first command after install, cold and warm: nothing may sit in a JIT compile.

Each command runs in a fresh process. "cold" = the first run right after install: the
package's __pycache__ folders deleted and an empty seqpack cache (SEQPACK_CACHE_DIR, which
holds the extracted built-in corpus); "warm" = the same command run again (reading the bytecode the cold run wrote). Commands (on the
built-in Python-docs corpus, as a new user would type them):

    seqpack train-tokenizer --vocab-size 2000 --out tok
    seqpack tokenize --tokenizer tok --out store
    seqpack pack store --task clm --max-len 512 --tokenizer tok --out packed
    seqpack demo --out demo --fresh            (with --demo; takes minutes)

    python benchmarks/first_command.py [--runs 3] [--demo] [--out results/first_command.json]

Each of --runs repetitions starts cold again (caches and __pycache__ deleted); medians, min, max.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import RESULTS, ROOT, summary, write_result

COMMANDS = {
    "train-tokenizer": ["train-tokenizer", "--vocab-size", "2000", "--out", "tok", "--overwrite"],
    "tokenize": ["tokenize", "--tokenizer", "tok", "--out", "store", "--overwrite"],
    "pack": [
        "pack",
        "store",
        "--task",
        "clm",
        "--max-len",
        "512",
        "--tokenizer",
        "tok",
        "--out",
        "packed",
        "--overwrite",
    ],
}


def run(args: list[str], cwd: Path, env: dict[str, str]) -> float:
    exe = Path(sys.executable).with_name("seqpack")
    t0 = time.perf_counter()
    subprocess.run([str(exe), *args], cwd=cwd, env=env, check=True, capture_output=True)
    return time.perf_counter() - t0


def once(commands: dict[str, list[str]]) -> dict[str, tuple[float, float]]:
    work = Path(tempfile.mkdtemp(prefix="seqpack-first-"))
    # the cold run writes the bytecode the warm run reads, as on a machine without
    # PYTHONDONTWRITEBYTECODE (this one sets it)
    env = {
        **{k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"},
        "SEQPACK_CACHE_DIR": str(work / "cache"),
    }
    for d in (ROOT / "src" / "seqpack").rglob("__pycache__"):
        shutil.rmtree(d)
    out = {name: (run(cmd, work, env), run(cmd, work, env)) for name, cmd in commands.items()}
    shutil.rmtree(work)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--demo", action="store_true")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", default=str(RESULTS / "first_command.json"))
    args = ap.parse_args()
    commands = dict(COMMANDS)
    if args.demo:
        commands["demo"] = ["demo", "--out", "demo", "--fresh"]
    runs = [once(commands) for _ in range(args.runs)]
    results = {}
    print(
        f"first command after install (fresh process each; cold = no __pycache__, empty seqpack cache); median of {args.runs}"
    )
    for name in commands:
        r = {}
        for i, kind in enumerate(("cold", "warm")):
            xs = [run_[name][i] for run_ in runs]
            r[kind] = summary(xs)
        results[name] = r
        print(f"  {name:<16} cold {r['cold']['median_s']:6.2f} s   warm {r['warm']['median_s']:6.2f} s")
    write_result(args.out, results)


if __name__ == "__main__":
    main()
