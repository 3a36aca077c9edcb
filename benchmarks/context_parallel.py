"""Context-parallel rows: the padding the 2C rounding adds, the rows it costs, and how even the
per-rank attention work is, against a contiguous split; a CPU step-time sanity check under gloo.

Run: .venv/bin/python benchmarks/context_parallel.py [--quick] [--out benchmarks/results/context_parallel.json]

Length mixes (seeded), each packed at max_len 8k / 32k / 128k with ``lpfhp`` (sequences longer than
max_len split into max_len pieces):
  wikipedia  the paper's BERT Wikipedia lengths (1-512)
  sft        chat-SFT-shaped lengths (benchmarks/stream.py's chat mix: 1-6 exchanges, median ~400)
  long       long documents, log-uniform 1k-128k tokens (long-context pre-training)
For CP = 1, 2, 4, 8, 16: lengths rounded up to a multiple of 2C before planning (what ``seqpack pack
--context-parallel C`` does): padding (share of the planned tokens), rows against C = 1, and the
attention work of each rank under the per-document causal mask (pairs: sum over its real tokens of
position + 1), per row max rank / mean rank, averaged over rows and the worst row, for
  seqpack    per-document chunks r and 2C-1-r (the load-balancing split), rotated over the documents
  contiguous rank r takes the row's tokens [r T/C, (r+1) T/C) (what a plain sequence split does)

Step time: ``seqpack train`` of the tiny GPT on clm rows of 2048 (the Python-docs corpus), CP = 2 on
2 gloo ranks against 1 process, same rows, tokens/s (median of the steps after the first; median of
``--rounds`` interleaved runs of each).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from _common import ROOT, write_result

from seqpack.data.context_parallel import cp_lengths
from seqpack.packing import pack_lengths
from seqpack.packing.histogram import builtin_histogram

LENS = (8192, 32768, 131072)
CPS = (1, 2, 4, 8, 16)


def mixes(tokens: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    h = builtin_histogram("wikipedia").astype(np.float64)
    wiki = rng.choice(np.arange(1, h.size + 1), size=tokens // 230, p=h / h.sum())
    n = tokens // 450
    turns = np.minimum(6, rng.geometric(0.45, size=n))
    sft = np.array(
        [
            int(rng.lognormal(np.log(33), 0.9, size=t).sum() + rng.lognormal(np.log(120), 1.1, size=t).sum()) + 4 * t
            for t in turns.tolist()
        ]
    )
    long = np.exp(rng.uniform(np.log(1024), np.log(131072), size=max(8, tokens // 30000))).astype(np.int64)
    return {"wikipedia": wiki, "sft": np.maximum(sft, 1), "long": long}


def split(lengths: np.ndarray, max_len: int) -> np.ndarray:
    full, rest = lengths // max_len, lengths % max_len
    return np.concatenate([np.full(int(full.sum()), max_len), rest[rest > 0]]).astype(np.int64)


def chunk_pairs(n: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Pairs of positions a..b-1 of documents of real length n: sum of (p + 1) over p < n."""
    hi = np.minimum(b, n)
    lo = np.minimum(a, hi)
    return (hi * (hi + 1) - lo * (lo + 1)) // 2


def balanced_pairs(lengths: np.ndarray, cp: int) -> np.ndarray:
    """(cp,) pairs of each rank for one row's documents, split per document (chunks r, 2C-1-r of
    document k for rank (r - k) mod C: seqpack.data.context_parallel.cp_shard_index's rotation)."""
    R = cp_lengths(lengths, cp)
    c = R // (2 * cp)
    rank = np.arange(cp)[:, None]
    r = (rank + np.arange(lengths.size)[None, :]) % cp  # the chunk pair rank `rank` takes of each document
    return (
        chunk_pairs(lengths, r * c, (r + 1) * c) + chunk_pairs(lengths, (2 * cp - 1 - r) * c, (2 * cp - r) * c)
    ).sum(1)


def contiguous_pairs(lengths: np.ndarray, max_len: int, cp: int) -> np.ndarray:
    """(cp,) pairs of each rank when rank r takes the row's tokens [r T/C, (r+1) T/C)."""
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    out = np.zeros(cp, np.int64)
    w = max_len // cp
    for r in range(cp):
        a = np.clip(r * w - starts, 0, lengths)
        b = np.clip((r + 1) * w - starts, 0, lengths)
        out[r] = int(chunk_pairs(lengths, a, b).sum())
    return out


def imbalance(per_row: list[np.ndarray]) -> dict[str, float]:
    ratios = [float(p.max() / p.mean()) for p in per_row if p.sum() > 0]
    return {"mean": float(np.mean(ratios)), "worst": float(np.max(ratios))}


def one(lengths: np.ndarray, max_len: int, rows_at_1: int | None, cp: int) -> dict:
    packing = pack_lengths(lengths, max_len, algorithm="lpfhp", round_to=2 * cp if cp > 1 else 1)
    planned = cp_lengths(lengths, cp) if cp > 1 else lengths
    rows = [packing.lengths_of(i) for i in range(packing.num_packs)]
    out: dict[str, Any] = {
        "rows": packing.num_packs,
        "padding": float(1 - lengths.sum() / planned.sum()),
        "extra_rows": 0.0 if rows_at_1 is None else packing.num_packs / rows_at_1 - 1,
    }
    if cp > 1:
        out["seqpack"] = imbalance([balanced_pairs(r.astype(np.int64), cp) for r in rows])
        out["contiguous"] = imbalance([contiguous_pairs(r.astype(np.int64), max_len, cp) for r in rows])
    return out


def layouts(tokens: int) -> dict:
    result: dict = {}
    for name, raw in mixes(tokens).items():
        for L in LENS:
            lengths = split(raw, L)
            base = one(lengths, L, None, 1)
            cell: dict[str, Any] = {"sequences": int(lengths.size), "tokens": int(lengths.sum()), "1": base}
            for cp in CPS[1:]:
                cell[str(cp)] = one(lengths, L, base["rows"], cp)
            result[f"{name}@{L}"] = cell
            worst = cell[str(CPS[-1])]
            print(
                f"{name:<9} {L:>6}: {lengths.size:>7,} seqs; CP 16 padding {worst['padding']:.2%}, rows +{worst['extra_rows']:.2%}, "
                f"rank work max/mean seqpack {worst['seqpack']['mean']:.4f} (worst {worst['seqpack']['worst']:.4f}) vs "
                f"contiguous {worst['contiguous']['mean']:.3f} (worst {worst['contiguous']['worst']:.3f})",
                flush=True,
            )
    return result


def step_time(steps: int, rounds: int) -> dict:
    """``seqpack train`` at 2048: 1 process against CP = 2 on 2 gloo ranks, the same rows."""
    from seqpack.corpus import python_docs
    from seqpack.pipeline import PackConfig, build_packed_dataset
    from seqpack.store import build_store
    from seqpack.tokenizer import BPEConfig, Tokenizer
    from seqpack.tokenizer.train import train_bpe_corpus
    from seqpack.train.checkpoint import read_metrics

    out: dict = {}
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        docs = python_docs()
        res = train_bpe_corpus(
            documents=docs, config=BPEConfig(vocab_size=2000, special_tokens=("<|endoftext|>",), workers=2)
        )
        tok = Tokenizer(res.vocab, res.merges, list(res.special_tokens))
        store = build_store(docs, tok, root / "store", workers=2)
        build_packed_dataset(store, tok, root / "packed", PackConfig.for_task("clm", max_len=2048, context_parallel=2))
        opts = [
            "--data",
            str(root / "packed"),
            "--steps",
            str(steps),
            "--batch-size",
            "2",
            "--size",
            "tiny",
            "--threads",
            "1",
            "--eval-tokens",
            "4096",
            "--quiet",
            "--json",
        ]
        arms: tuple[tuple[str, list[str], list[str]], ...] = (
            ("1 process", [sys.executable, "-m", "seqpack.cli.main"], []),
            (
                "CP 2 on 2 ranks",
                [
                    sys.executable,
                    "-m",
                    "torch.distributed.run",
                    "--standalone",
                    "--nproc-per-node",
                    "2",
                    "-m",
                    "seqpack.cli.main",
                ],
                ["--context-parallel", "2"],
            ),
        )
        rates: dict[str, list[float]] = {name: [] for name, _, _ in arms}
        for k in range(rounds):  # interleaved rounds
            for name, prefix, extra in arms:
                run = root / f"{name.replace(' ', '-')}-{k}"
                subprocess.run(
                    [*prefix, "train", *opts, "--out", str(run), *extra],
                    check=True,
                    cwd=ROOT,
                    capture_output=True,
                    text=True,
                )
                recs = [r for r in read_metrics(run) if "eval" not in r and r["step"] > 1]
                rates[name].append(statistics.median(r["tokens_per_s"] for r in recs))
        for name, got in rates.items():
            out[name] = {"tokens_per_s": statistics.median(got), "rounds": got}
            print(
                f"  {name:<16} {out[name]['tokens_per_s']:>9,.0f} tokens/s (rounds {', '.join(f'{x:,.0f}' for x in got)})",
                flush=True,
            )
    out["ratio"] = out["CP 2 on 2 ranks"]["tokens_per_s"] / out["1 process"]["tokens_per_s"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=4_000_000, help="tokens per mix (before splitting)")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    if args.quick:
        args.tokens, args.steps, args.rounds = 600_000, 4, 1
    result = {"tokens": args.tokens, "layouts": layouts(args.tokens), "step_time": step_time(args.steps, args.rounds)}
    print(f"step time: CP 2 / 1 process = {result['step_time']['ratio']:.2f}")
    write_result(args.out, result, packages=("torch",))


if __name__ == "__main__":
    main()
