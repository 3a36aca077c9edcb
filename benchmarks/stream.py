"""Streaming packing: fill at buffer 1k / 10k / 100k against one global plan, TRL's windowed BFD and a
greedy streaming packer; throughput on one core.

Run: .venv/bin/python benchmarks/stream.py [--quick] [--out benchmarks/results/stream.json]

Two length mixes, each a stream in a seeded random order:
  wikipedia  --sequences lengths drawn from the paper's BERT Wikipedia histogram, max_len 512
  chat       --sequences chat-SFT-shaped lengths (1-6 exchanges, geometric; user turns ~ lognormal
             median 33 tokens, assistant turns ~ lognormal median 120, sigma 1.1), max_len 2048,
             longer conversations split
Arms (rows; fill = tokens / (rows x max_len)):
  seqpack stream   ``PackedStream`` (lpfhp per buffer, half the buffer carried), buffer 1k / 10k / 100k
  global plan      seqpack's ``best`` over the whole set at once (what the offline job does)
  TRL bfd          ``trl.pack_dataset(strategy="bfd")``: best fit decreasing per 1,000-row ``map`` batch
  greedy           a row filled in stream order, a new row when the next sequence does not fit
                   (torchtitan's streaming packer: its rows are the same)
seqpacker (PyPI) is measured where it installs; it did not build here (a Rust extension).

Throughput, one core (the process pinned to CPU 0), median of ``--repeats``:
  planned     the buffers' plans alone (lengths in, packs out): tokens / s
  rows        ``PackedStream`` over token arrays, rows with every column made: tokens / s
  tokenized   ``PackedStream`` over Shakespeare cut into ~2 KB texts, tokenized by an 8K BPE trained on
              them (clm; a cold tokenizer cache each pass): tokens / s
"""

from __future__ import annotations

import argparse
import functools
import os
import time
from typing import Any

import numpy as np
from _common import median_time, write_result

from seqpack.packing import pack_lengths
from seqpack.packing.histogram import builtin_histogram
from seqpack.pipeline import PackedStream, StreamConfig
from seqpack.pipeline.streaming import drain

BUFFERS = (1_000, 10_000, 100_000)


def wikipedia(n: int, seed: int = 0) -> np.ndarray:
    h = builtin_histogram("wikipedia").astype(np.float64)
    return np.random.default_rng(seed).choice(np.arange(1, h.size + 1), size=n, p=h / h.sum())


def chat(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    turns = np.minimum(6, rng.geometric(0.45, size=n))
    out = np.empty(n, dtype=np.int64)
    for i, t in enumerate(turns.tolist()):
        out[i] = (
            int(rng.lognormal(np.log(33), 0.9, size=t).sum() + rng.lognormal(np.log(120), 1.1, size=t).sum()) + 4 * t
        )
    return np.maximum(out, 1)


def split(lengths: np.ndarray, max_len: int) -> np.ndarray:
    """Every sequence longer than max_len cut into pieces (the clm rule), in stream order."""
    pieces = [np.full(int(n) // max_len, max_len) for n in lengths] + [None]
    out: list[np.ndarray] = []
    for n, full in zip(lengths.tolist(), pieces):
        out.extend(full.tolist() if full is not None else [])
        if n % max_len:
            out.append(n % max_len)
    return np.asarray(out, dtype=np.int64)


def docs(lengths: np.ndarray):  # type: ignore[no-untyped-def]
    return (np.ones(int(n), dtype=np.int32) for n in lengths)


def stream_rows(lengths: np.ndarray, max_len: int, buffer: int) -> int:
    cfg = StreamConfig(max_len=max_len, buffer_size=buffer, chunk=256)
    return sum(1 for _ in PackedStream(docs(lengths), config=cfg))


def planned(lengths: np.ndarray, max_len: int, buffer: int, chunk: int = 256) -> tuple[int, float]:
    """Rows and seconds of the buffers' plans alone: what ``PackedStream`` plans (buffers filled a
    chunk at a time, the same seeds), without building or laying out the rows."""
    t0, rows, pool, at, d = time.perf_counter(), 0, np.zeros(0, np.int64), 0, 0
    while True:
        take = 0
        while pool.size + take < buffer and at + take < lengths.size:
            take = min(take + chunk, lengths.size - at)
        pool = np.concatenate([pool, lengths[at : at + take]])
        at += take
        final = at >= lengths.size
        if not pool.size:
            break
        seed = int(np.random.SeedSequence([0, 0, 0, d]).generate_state(1)[0])
        packing, carried = drain(pool, max_len=max_len, algorithm="lpfhp", keep=0 if final else buffer // 2, seed=seed)
        rows += packing.num_packs
        pool, d = pool[carried], d + 1
        if final and not pool.size:
            break
    return rows, time.perf_counter() - t0


def greedy_rows(lengths: np.ndarray, max_len: int) -> int:
    rows, fill = 0, max_len
    for n in lengths.tolist():
        if fill + n > max_len:
            rows, fill = rows + 1, 0
        fill += n
    return rows


def trl_rows(lengths: np.ndarray, max_len: int) -> int:
    import datasets
    import pyarrow as pa
    from trl.data_utils import pack_dataset

    datasets.disable_progress_bars()
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    ids = pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(np.zeros(int(offsets[-1]), np.int8)))
    ds = datasets.Dataset(pa.table({"input_ids": ids}))
    return len(pack_dataset(ds, max_len, strategy="bfd"))


def tokenized(repeats: int) -> dict:
    """clm over texts: Shakespeare's works cut into ~2 KB documents, a byte-level BPE (8K) trained on
    them, the stream tokenizing each document once per pass (nothing repeated, so no cache helps)."""
    from _common import EOT, shakespeare_file

    from seqpack.tokenizer import Tokenizer, train_bpe

    path = shakespeare_file()
    vocab, merges = train_bpe(path, 8000, [EOT])
    tok = Tokenizer(vocab, merges, special_tokens=[EOT])
    text = path.read_text(encoding="utf-8").replace(EOT, "\n")
    texts = [text[a : a + 2048] for a in range(0, len(text), 2048)]
    tokens = sum(len(tok.encode(t)) + 1 for t in texts)

    def run() -> int:
        fresh = Tokenizer(vocab, merges, special_tokens=[EOT])  # a cold cache each pass
        return sum(
            1
            for _ in PackedStream(
                texts, config=StreamConfig(max_len=2048, buffer_size=10_000, chunk=256), tokenizer=fresh
            )
        )

    _, seconds = median_time(run, repeats)
    return {"documents": len(texts), "tokens": tokens, "seconds": seconds, "tokens_per_s": tokens / seconds}


def mix(name: str, lengths: np.ndarray, max_len: int, repeats: int, buffers: tuple[int, ...]) -> dict:
    pieces = split(lengths, max_len)
    tokens = int(pieces.sum())
    fill = lambda rows: tokens / (rows * max_len)  # noqa: E731
    glob = pack_lengths(pieces, max_len, algorithm="best").num_packs
    out: dict[str, Any] = {
        "mix": name,
        "max_len": max_len,
        "sequences": int(pieces.size),
        "tokens": tokens,
        "rows": {
            "global plan (best)": glob,
            "trl bfd (1,000-row windows)": trl_rows(pieces, max_len),
            "greedy (torchtitan)": greedy_rows(pieces, max_len),
        },
        "throughput": {},
    }
    for b in buffers:
        rows, secs = median_time(functools.partial(planned, pieces, max_len, b), repeats)
        out["rows"][f"seqpack stream, buffer {b:,}"] = stream_rows(pieces, max_len, b)
        assert rows[0] == out["rows"][f"seqpack stream, buffer {b:,}"], "the plan-only loop and PackedStream disagree"
        out["throughput"][f"planned, buffer {b:,}"] = tokens / secs
    _, secs = median_time(lambda: stream_rows(pieces, max_len, 10_000), repeats)
    out["throughput"]["rows, buffer 10,000"] = tokens / secs
    out["fill"] = {k: fill(v) for k, v in out["rows"].items()}
    out["fill_below_global"] = {k: out["fill"]["global plan (best)"] - v for k, v in out["fill"].items()}
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sequences", type=int, default=200_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    if args.quick:
        args.sequences, args.repeats = 20_000, 1
    os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})  # one core, the compiled kernels too
    buffers = tuple(b for b in BUFFERS if b <= args.sequences)
    result: dict[str, Any] = {"seed": 0, "one_core": True, "mixes": []}
    for name, lengths, max_len in (
        ("wikipedia", wikipedia(args.sequences), 512),
        ("chat", chat(args.sequences // 4), 2048),
    ):
        m = mix(name, lengths, max_len, args.repeats, buffers)
        result["mixes"].append(m)
        print(f"{name} at {max_len}: {m['sequences']:,} sequences, {m['tokens']:,} tokens")
        for k, rows in m["rows"].items():
            print(
                f"  {k:<32} {rows:>8,} rows  fill {m['fill'][k]:.3%}  ({100 * m['fill_below_global'][k]:+.3f} points below the plan)"
            )
        for k, v in m["throughput"].items():
            print(f"  {k:<32} {v / 1e6:>8.1f} M tokens/s")
    result["tokenized"] = t = tokenized(args.repeats)
    print(f"clm over texts, tokenizing (8K BPE): {t['tokens_per_s'] / 1e6:.2f} M tokens/s")
    write_result(args.out, result, packages=("trl", "datasets"))


if __name__ == "__main__":
    main()
