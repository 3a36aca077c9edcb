"""Training on a stream against training on the same examples packed first: what packing on the fly costs.

Run: .venv/bin/python benchmarks/stream_train.py [--quick] [--out benchmarks/results/stream_train.json]

Data: the built-in Python-docs corpus (the demo's) as JSONL records with ``text``, a 2,000-token BPE
trained on it, causal LM at max_len 512, seqpack's tiny GPT on 2 CPU threads, 8 rows a step.

Arms, each a whole ``seqpack train`` run (``--steps`` steps, interleaved over ``--rounds`` rounds):
  packed   ``seqpack tokenize`` + ``seqpack pack`` once (timed apart), then ``seqpack train --data PACKED``
  stream   ``seqpack train --stream --data RECORDS`` (tokenized and packed as it reads, buffer 10,000)
Reported: tokens/s of the steps after the first (median of each run's median, then over rounds),
the share of step time spent making batches (``data_seconds``), the fill of the rows trained on, and
the time tokenizing and packing took offline. The stream holds out its first 200 records for evaluation; the packed
dataset its default 5% of packs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import write_result

from seqpack.corpus import python_docs
from seqpack.pipeline import PackConfig, build_packed_dataset
from seqpack.store import build_store
from seqpack.tokenizer import BPEConfig, Tokenizer, open_tokenizer
from seqpack.tokenizer.train import train_bpe_corpus
from seqpack.train import TrainConfig, train
from seqpack.train.checkpoint import read_metrics

MAX_LEN = 512
BATCH = 8


def prepare(root: Path) -> tuple[Path, Path]:
    docs = python_docs()
    res = train_bpe_corpus(
        documents=docs, config=BPEConfig(vocab_size=2000, special_tokens=("<|endoftext|>",), workers=2)
    )
    Tokenizer(res.vocab, res.merges, list(res.special_tokens)).save(root / "tok")
    with open(root / "docs.jsonl", "w", encoding="utf-8") as f:
        for d in docs:
            f.write(json.dumps({"text": d}) + "\n")
    return root / "docs.jsonl", root / "tok"


def run_arm(name: str, records: Path, tok: Path, packed: Path, out: Path, steps: int) -> dict:
    common: dict[str, Any] = dict(
        out=str(out), steps=steps, batch_size=BATCH, progress=False, threads=2, size="tiny", eval_tokens=8192
    )
    if name == "stream":
        cfg = TrainConfig(
            data=str(records), stream=True, tokenizer=str(tok), max_len=MAX_LEN, eval_examples=200, **common
        )
    else:
        cfg = TrainConfig(data=str(packed), **common)
    train(cfg)
    recs = [r for r in read_metrics(out) if "eval" not in r and r["step"] > 1]
    fill = sum(r["step_tokens"] for r in recs) / (len(recs) * BATCH * MAX_LEN)
    return {
        "tokens_per_s": statistics.median(r["tokens_per_s"] for r in recs),
        "data_share": sum(r["data_seconds"] for r in recs) / sum(r["step_seconds"] for r in recs),
        "fill": fill,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    if args.quick:
        args.steps, args.rounds = 6, 1
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        records, tok = prepare(root)
        t0 = time.perf_counter()
        tokenizer = open_tokenizer(tok)
        store = build_store(python_docs(), tokenizer, root / "store", workers=2)
        m = build_packed_dataset(store, tokenizer, root / "packed", PackConfig.for_task("clm", max_len=MAX_LEN))
        pack_s = time.perf_counter() - t0
        runs: dict[str, list[dict]] = {"packed": [], "stream": []}
        for r in range(args.rounds):
            for name in runs:
                runs[name].append(run_arm(name, records, tok, root / "packed", root / f"{name}-{r}", args.steps))
    result = {
        "max_len": MAX_LEN,
        "batch": BATCH,
        "steps": args.steps,
        "rounds": args.rounds,
        "pack_seconds": pack_s,
        "packed_efficiency": m["efficiency"],
        "num_tokens": m["num_tokens"],
        "runs": runs,
    }
    for name, rs in runs.items():
        result[name] = {k: statistics.median(x[k] for x in rs) for k in ("tokens_per_s", "data_share", "fill")}
    result["stream_over_packed"] = result["stream"]["tokens_per_s"] / result["packed"]["tokens_per_s"]
    print(f"tokenize + pack: {pack_s:.1f} s for {m['num_tokens']:,} tokens (efficiency {m['efficiency']:.2%})")
    for name in runs:
        x = result[name]
        print(
            f"  {name:<7} {x['tokens_per_s']:>9,.0f} tokens/s  batches {x['data_share']:.1%} of step time  fill {x['fill']:.2%}"
        )
    print(f"stream / packed tokens/s: {result['stream_over_packed']:.3f}")
    write_result(args.out, result, packages=("torch",))


if __name__ == "__main__":
    main()
