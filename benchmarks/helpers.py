"""Batch encoding on 1 thread and on 2, with a pause between calls: what the helper threads cost.

Run: .venv/bin/python benchmarks/helpers.py [--rounds 3] [--out benchmarks/results/helpers.json]

``encode_lists`` on 2 threads uses a helper thread (``csrc/helpers.h``) that lingers 200 us after
its share for the next call's, then ends. So calls that come one right after another reuse it, and a
call after a longer pause starts a new one (on an idle core, with none of the tables in its
caches). Batches of the mixed held-out-like set (``encode.mixed``) and four 11-byte texts, each
forced onto 2 threads (``thread_bytes=1``) and on 1, with 0, 1 and 10 ms between calls, GPT-2's
vocabulary, warm word caches. Each arm in fresh processes (``--rounds`` of each, alternating); the
median call over 300 calls a process. The default ``thread_bytes`` (32 KB) gives batches this small
one thread: this measures why.
"""

from __future__ import annotations

import argparse
import json
import statistics
from typing import Any

from _common import RESULTS, SHARED, run_child, scratch_dir, write_result

CHILD = """
import json, os, statistics, time
texts = json.load(open({path!r}, encoding="utf-8"))
from seqpack.tokenizer import Tokenizer
cs = {cs!r}
tok = Tokenizer.from_files(cs + "/gpt2_vocab.json", cs + "/gpt2_merges.txt", ["<|endoftext|>"])
tok.native.encode_lists(texts, {threads}, 1)
out = {{}}
for gap in (0, 0.001, 0.01):
    times = []
    for _ in range(300):
        if gap:
            time.sleep(gap)
        t0 = time.perf_counter()
        tok.native.encode_lists(texts, {threads}, 1)
        times.append(time.perf_counter() - t0)
    out[str(gap)] = statistics.median(times)
print(json.dumps(out))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=str(RESULTS / "helpers.json"))
    args = ap.parse_args()
    from encode import mixed

    docs = [p for p in "\n\n".join(mixed().values()).split("\n\n") if p]
    batches = {
        "4 texts of 11 bytes": ["hello world"] * 4,
        **{f"{n} mixed documents": docs[1000 : 1000 + n] for n in (64, 256)},
    }
    work = scratch_dir("seqpack-helpers-")
    env = {"OPENBLAS_NUM_THREADS": "1"}
    results = {}
    for name, texts in batches.items():
        path = work / f"{len(texts)}.json"
        path.write_text(json.dumps(texts), encoding="utf-8")
        runs: dict[int, list[dict]] = {1: [], 2: []}
        for _ in range(args.rounds):
            for threads in (1, 2):
                code = CHILD.format(path=str(path), cs=str(SHARED / "cs336"), threads=threads)
                runs[threads].append(run_child(code, env=env))
        row: dict[str, Any] = {"bytes": sum(len(t.encode()) for t in texts)}
        for gap in ("0", "0.001", "0.01"):
            one = statistics.median(r[gap] for r in runs[1])
            two = statistics.median(r[gap] for r in runs[2])
            row[f"gap {gap} s"] = {"1 thread us": one * 1e6, "2 threads us": two * 1e6, "2 threads vs 1": one / two}
        results[name] = row
        print(name, json.dumps(row), flush=True)
    write_result(args.out, results)


if __name__ == "__main__":
    main()
