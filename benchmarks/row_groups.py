"""Row group size of a packed dataset: what it costs the pack job and what it saves its readers.

A reader of the Parquet parts (seqpack's ``PackedRows``, so ``PackedDataset`` and training; ``datasets``)
decodes a whole row group to return any of its rows, and the pack job lays out and writes one row group
at a time. This packs the scale corpus (:func:`scale.corpus`: the Python docs' paragraphs recombined;
GPT-2's vocabulary; clm at 2048) with ``--row-group-packs`` R for several R, the CLI in fresh processes,
rounds alternating over R, and reports for each R (medians over the rounds):

- ``pack_s`` and ``pack_peak_mb`` (the largest process's peak RSS, sampled every 0.1 s);
- ``sequential_mtok_s``: ``PackedRows.take`` over every pack in order, 64 a call, in a fresh process
  (millions of tokens a second);
- ``random_ms``: one ``take`` of a single pack at a random index (seeded; ``--random`` of them), a
  fresh ``PackedRows`` (an empty row group cache), median milliseconds;
- ``group_mb``: what one decoded row group holds in memory (every column a reader returns), which
  ``PackedRows``' cache keeps ``cache_groups`` (4) of.

The default (``--row-group-packs`` not given) is about 2**20 tokens a row group: 512 packs at 2048.

    python benchmarks/row_groups.py [--size 200] [--groups 4096,1024,512,256] [--rounds 2] [--out results/row_groups.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from _common import EOT, RESULTS, SHARED, run_child, scratch_dir, write_result
from scale import corpus, run

READ = """
import json, time
import numpy as np
from seqpack.data.rows import PackedRows
path, k = {path!r}, {random}
rows = PackedRows(path)
n, got = len(rows), 0
t0 = time.perf_counter()
for lo in range(0, n, 64):
    got += rows.take(np.arange(lo, min(n, lo + 64)))["input_ids"].size
seq = time.perf_counter() - t0
group = rows._group(0)
group_mb = sum(v.nbytes for v in group.values()) / 2**20
rng, ms = np.random.default_rng(0), []
for i in rng.integers(0, n, k).tolist():
    fresh = PackedRows(path)
    t0 = time.perf_counter()
    fresh.take([i])
    ms.append((time.perf_counter() - t0) * 1e3)
print(json.dumps({{"sequential_mtok_s": got / seq / 1e6, "random_ms": float(np.median(ms)), "group_mb": group_mb,
                  "group_packs": len(group["input_ids"])}}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=int, default=200, help="corpus size in MB")
    ap.add_argument("--groups", default="4096,1024,512,256", help="row group sizes in packs (512: the default at 2048)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--random", type=int, default=20, help="random single-pack reads per round")
    ap.add_argument("--out", default=str(RESULTS / "row_groups.json"), help="the result file ('' for none)")
    args = ap.parse_args()
    from seqpack.tokenizer import Tokenizer

    work = scratch_dir("seqpack-rowgroups-")
    tok, store = work / "gpt2", work / "store"
    cs = SHARED / "cs336"
    Tokenizer.from_files(cs / "gpt2_vocab.json", cs / "gpt2_merges.txt", [EOT]).save(tok)
    exe = str(Path(sys.executable).with_name("seqpack"))
    run([exe, "tokenize", str(corpus(args.size)), "--tokenizer", str(tok), "--out", str(store)])
    sizes = [int(x) for x in args.groups.split(",")]
    got: dict[int, dict[str, list[float]]] = {r: {} for r in sizes}
    for _ in range(args.rounds):
        for r in sizes:
            out = work / f"packed-{r}"
            p = run(
                [
                    exe,
                    "pack",
                    str(store),
                    "--task",
                    "clm",
                    "--max-len",
                    "2048",
                    "--tokenizer",
                    str(tok),
                    "--out",
                    str(out),
                    "--overwrite",
                    "--row-group-packs",
                    str(r),
                ]
            )
            read = run_child(READ.format(path=str(out), random=args.random))
            for k, v in {"pack_s": p["wall"], "pack_peak_mb": p["peak_mb"], **read}.items():
                got[r].setdefault(k, []).append(v)
    rows = []
    for r in sizes:
        row: dict[str, Any] = {
            "row_group_packs": r,
            **{k: round(statistics.median(v), 3) for k, v in got[r].items() if k != "wall"},
            "rounds": args.rounds,
            "pack_s_runs": [round(x, 2) for x in got[r]["pack_s"]],
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
    subprocess.run(["rm", "-rf", str(work)], check=True)
    write_result(args.out or None, rows)
    print(
        "row group packs | pack s | pack peak MB | sequential M tokens/s | random single-pack read ms | decoded group MB"
    )
    for row in rows:
        print(
            f"{row['row_group_packs']} | {row['pack_s']} | {row['pack_peak_mb']:.0f} | {row['sequential_mtok_s']:.1f} | "
            f"{row['random_ms']:.0f} | {row['group_mb']:.1f}"
        )


if __name__ == "__main__":
    main()
