"""The first command after install, cold and warm: nothing may sit in a JIT compile.

Each command runs in a fresh process. "cold" = the first run right after install: the
package's __pycache__ folders deleted and an empty seqpack cache (SEQPACK_CACHE_DIR, which
holds the extracted built-in corpus); "warm" = the same command run again. Commands (on the
built-in Python-docs corpus, as a new user would type them):

    seqpack train-tokenizer --vocab-size 2000 --out tok
    seqpack tokenize --tokenizer tok --out store
    seqpack pack store --task clm --max-len 512 --tokenizer tok --out packed
    seqpack demo --out demo --fresh            (with --demo; takes minutes)

    python benchmarks/first_command.py [--demo] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import ROOT

COMMANDS = {
    "train-tokenizer": ["train-tokenizer", "--vocab-size", "2000", "--out", "tok", "--overwrite"],
    "tokenize": ["tokenize", "--tokenizer", "tok", "--out", "store", "--overwrite"],
    "pack": ["pack", "store", "--task", "clm", "--max-len", "512", "--tokenizer", "tok", "--out", "packed", "--overwrite"],
}


def run(args: list[str], cwd: Path, env: dict[str, str]) -> float:
    exe = Path(sys.executable).with_name("seqpack")
    t0 = time.perf_counter()
    subprocess.run([str(exe), *args], cwd=cwd, env=env, check=True, capture_output=True)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--demo", action="store_true")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    commands = dict(COMMANDS)
    if args.demo:
        commands["demo"] = ["demo", "--out", "demo", "--fresh"]
    work = Path(tempfile.mkdtemp(prefix="seqpack-first-"))
    env = {**os.environ, "SEQPACK_CACHE_DIR": str(work / "cache")}
    for d in (ROOT / "src" / "seqpack").rglob("__pycache__"):
        shutil.rmtree(d)
    out = {}
    for name, cmd in commands.items():
        cold = run(cmd, work, env)
        warm = run(cmd, work, env)
        out[name] = {"cold_s": round(cold, 2), "warm_s": round(warm, 2)}
    shutil.rmtree(work)
    if args.json:
        print(json.dumps(out))
        return
    print("first command after install (fresh process each; cold = no __pycache__, empty seqpack cache)")
    for name, r in out.items():
        print(f"  {name:<16} cold {r['cold_s']:6.2f} s   warm {r['warm_s']:6.2f} s")


if __name__ == "__main__":
    main()
