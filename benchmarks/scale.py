"""Corpus scale: tokenize + pack (clm, 2048, GPT-2 vocabulary) with both engines, memory-bounded.

The corpus is generated deterministically by sampling and recombining the paragraphs of the
built-in Python-docs corpus (documents of 1-30 paragraphs, separated by <|endoftext|>), so the
vocabulary stays varied. For each size and engine, in fresh processes (the CLI, as a user runs
it): wall time of ``seqpack tokenize`` and ``seqpack pack``, MB/s end to end, the peak RSS of
the largest process (sampled every 0.1 s over the CLI and every process it starts, Ray's
included), the pack count and efficiency, and - where one store still fits - the pack count of
the single-process plan on the same sequences (``pack_lengths`` on all lengths at once).

    python benchmarks/scale.py [--sizes 200,2000] [--engines local,ray] [--limit-gb 1] [--repeats 3] [--out results/scale.json]

``--repeats`` runs each local configuration without a memory limit that many times (tokenize then pack, in
turn): its row gives the median wall times (and every run's), the largest peak, and ``pack_over_tokenize``, the
median of each run's pack time over its tokenize time (this VM's speed drifts between runs: one run decides nothing).

``--limit-gb`` also re-runs the local engine in a memory cgroup (v1, ``memory.limit_in_bytes``)
limited below the corpus size, to show that the job completes when the corpus does not fit
in memory (page cache is charged to the cgroup too, and reclaimed under the limit); its row
says its speed against the unconstrained run (the goal: at least half).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import psutil
from _common import EOT, RESULTS, SHARED, scratch_dir, write_result


def corpus(megabytes: int, seed: int = 0) -> Path:
    out = Path(tempfile.gettempdir()) / f"seqpack-scale-{megabytes}mb-{seed}.txt"
    if out.exists():
        return out
    from seqpack.corpus import python_docs

    paras = [p for d in python_docs() for p in d.split("\n\n") if p.strip()]
    rng = np.random.default_rng(seed)
    written = 0
    with open(out.with_suffix(".tmp"), "w", encoding="utf-8") as f:
        while written < megabytes * 10**6:
            ks = rng.integers(1, 31, 2000)
            picks = rng.integers(0, len(paras), int(ks.sum()))
            cuts = np.cumsum(ks)[:-1]
            docs = ["\n\n".join(paras[i] for i in part) for part in np.split(picks, cuts)]
            block = EOT.join(docs) + EOT
            f.write(block)
            written += len(block.encode("utf-8"))
    out.with_suffix(".tmp").rename(out)
    return out


CGROUP = Path("/sys/fs/cgroup/memory/seqpack-scale")


def limited(limit_gb: float) -> str:
    """A shell prefix that moves the command into a memory cgroup limited to ``limit_gb``."""
    CGROUP.mkdir(exist_ok=True)
    (CGROUP / "memory.limit_in_bytes").write_text(str(int(limit_gb * 2**30)))
    (CGROUP / "memory.max_usage_in_bytes").write_text("0")  # reset the peak
    return f"echo $$ > {CGROUP}/cgroup.procs; "


def run(cmd: list[str], limit_gb: float | None = None) -> dict:
    """Run a command; wall time and the peak RSS of its largest process (any descendant)."""
    pre = limited(limit_gb) if limit_gb else ""
    os.sync()  # the previous command's dirty pages written back first, not charged to this one
    shell = pre + " ".join(f"'{c}'" for c in cmd)
    t0 = time.perf_counter()
    proc = subprocess.Popen(["bash", "-c", shell], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak = [0, 0]
    done = threading.Event()

    def sample() -> None:
        root = psutil.Process(proc.pid)
        while not done.is_set():
            try:
                procs = [root, *root.children(recursive=True)]
                rss = [p.memory_info().rss for p in procs if p.is_running()]
                peak[0] = max(peak[0], max(rss, default=0))
                peak[1] = max(peak[1], sum(rss))
            except psutil.Error:
                pass
            time.sleep(0.1)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    out, err = proc.communicate()
    done.set()
    th.join()
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}): {err.strip().splitlines()[-1:]}")
    return {"wall": time.perf_counter() - t0, "peak_mb": peak[0] / 2**20, "peak_sum_mb": peak[1] / 2**20, "stdout": out}


def one(size: int, engine: str, tok: Path, work: Path, limit_gb: float | None = None, repeats: int = 1) -> dict:
    exe = str(Path(sys.executable).with_name("seqpack"))
    src = corpus(size)
    store, packed = work / f"store-{size}-{engine}", work / f"packed-{size}-{engine}"
    eng = ["--engine", engine]
    ts, ps = [], []
    for _ in range(repeats):
        ts.append(
            run(
                [exe, "tokenize", str(src), "--tokenizer", str(tok), "--out", str(store), "--overwrite", *eng], limit_gb
            )
        )
        ps.append(
            run(
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
                    str(packed),
                    "--overwrite",
                    "--json",
                    *eng,
                ],
                limit_gb,
            )
        )
    summary = json.loads(ps[-1]["stdout"].strip().splitlines()[-1])
    mb = src.stat().st_size / 1e6
    t_s, p_s = statistics.median(t["wall"] for t in ts), statistics.median(p["wall"] for p in ps)
    row = {
        "size_mb": round(mb, 1),
        "engine": engine,
        "limit_gb": limit_gb,
        "tokenize_s": round(t_s, 2),
        "pack_s": round(p_s, 2),
        "mb_per_s": round(mb / (t_s + p_s), 2),
        "peak_rss_mb": round(max(max(t["peak_mb"], p["peak_mb"]) for t, p in zip(ts, ps)), 1),
        "peak_rss_mb_tokenize": round(max(t["peak_mb"] for t in ts), 1),
        "peak_rss_mb_pack": round(max(p["peak_mb"] for p in ps), 1),
        "peak_rss_sum_mb": round(max(max(t["peak_sum_mb"], p["peak_sum_mb"]) for t, p in zip(ts, ps)), 1),
        "num_packs": summary["num_packs"],
        "num_sequences": summary["num_sequences"],
        "efficiency": round(summary["efficiency"], 6),
    }
    if repeats > 1:
        row["runs"] = repeats
        row["tokenize_s_runs"] = [round(t["wall"], 2) for t in ts]
        row["pack_s_runs"] = [round(p["wall"], 2) for p in ps]
        ratios = [p["wall"] / t["wall"] for t, p in zip(ts, ps)]
        row["pack_over_tokenize_runs"] = [round(r, 3) for r in ratios]
        row["pack_over_tokenize"] = round(statistics.median(ratios), 3)
    if limit_gb:  # the cgroup's own peak (anonymous memory and page cache charged to it)
        row["cgroup_peak_mb_pack"] = round(int((CGROUP / "memory.max_usage_in_bytes").read_text()) / 2**20, 1)
        row["cgroup_limit_hits"] = int((CGROUP / "memory.failcnt").read_text())
    return row


def single_process_packs(store: Path) -> int:
    """The one-process plan on the same sequences: every length at once, no shards."""
    from seqpack.packing import pack_lengths
    from seqpack.store import ShardedTokenStore, open_store
    from seqpack.tasks.clm import clm_sequences

    s = open_store(store)
    assert isinstance(s, ShardedTokenStore), "the scale run writes a sharded store"
    lengths = []
    for shard in s.shards:
        seqs = clm_sequences(
            np.asarray(shard.tokens), np.asarray(shard.offsets), max_len=2048, eos_id=50256, vocab_size=s.vocab_size
        )
        lengths.append(seqs.lengths)
    return pack_lengths(np.concatenate(lengths), 2048).num_packs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="200,2000", help="corpus sizes in MB")
    ap.add_argument("--engines", default="local,ray")
    ap.add_argument("--limit-gb", type=float, default=1.0, help="memory cgroup limit for the extra run (0: none)")
    ap.add_argument("--repeats", type=int, default=3, help="runs of each local configuration without a memory limit")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--out", default=str(RESULTS / "scale.json"), help="the result file ('' for none)")
    args = ap.parse_args()
    from seqpack.tokenizer import Tokenizer

    work = scratch_dir("seqpack-scale-")
    tok = work / "gpt2"
    cs = SHARED / "cs336"
    Tokenizer.from_files(cs / "gpt2_vocab.json", cs / "gpt2_merges.txt", [EOT]).save(tok)
    rows = []
    for size in (int(x) for x in args.sizes.split(",")):
        for engine in args.engines.split(","):
            row = one(size, engine, tok, work, repeats=args.repeats if engine == "local" else 1)
            if engine == "local":
                row["single_process_packs"] = single_process_packs(work / f"store-{size}-local")
            rows.append(row)
            print(json.dumps(row), flush=True)
        if args.limit_gb and size / 1000 > args.limit_gb:
            row = one(size, "local", tok, work, limit_gb=args.limit_gb)
            free = next(
                (r for r in rows if r["size_mb"] == row["size_mb"] and r["engine"] == "local" and not r["limit_gb"]),
                None,
            )
            if free:  # the goal: at least half the unconstrained speed
                row["speed_vs_unlimited"] = round(row["mb_per_s"] / free["mb_per_s"], 3)
            rows.append(row)
            print(json.dumps(row), flush=True)
        for p in work.glob(f"*-{size}-*"):
            subprocess.run(["rm", "-rf", str(p)], check=True)
    write_result(args.out or None, rows, packages=("ray",))
    if not args.json:
        print(
            "size MB | engine | tokenize s | pack s | pack / tokenize | MB/s end to end | peak RSS (largest process) MB | packs | "
            "single-process packs | efficiency"
        )
        for r in rows:
            lim = f" (memory cgroup {r['limit_gb']} GB)" if r["limit_gb"] else ""
            print(
                f"{r['size_mb']} | {r['engine']}{lim} | {r['tokenize_s']} | {r['pack_s']} | {r.get('pack_over_tokenize', '-')} | "
                f"{r['mb_per_s']} | "
                f"{r['peak_rss_mb']} | {r['num_packs']:,} | {r.get('single_process_packs', '-')} | {r['efficiency']:.4%}"
            )


if __name__ == "__main__":
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    main()
