"""Corpus -> token store throughput (MB/s) and peak memory as the corpus grows.

Shakespeare (5 MB, split at <|endoftext|> into 42 documents, then into paragraphs so that
documents have realistic sizes), repeated 1x and 8x as a generator, encoded with the GPT-2
vocab/merges of the CS336 fixtures by ``build_store`` in a fresh process each time (cold
BPE cache: every process starts empty). Peak RSS (the process and its workers) shows that
memory does not grow with the corpus: tokens stream to disk.

    python benchmarks/tokenize_store.py [--runs 3]
"""

from __future__ import annotations

import argparse
import statistics

from _common import PEAK_MB, SHARED, run_child, shakespeare_file

CODE = PEAK_MB + """
import json, tempfile
from seqpack.store import build_store
from seqpack.tokenizer import Tokenizer
tok = Tokenizer.from_files({vocab!r}, {merges!r}, ["<|endoftext|>"])
text = open({path!r}, encoding="utf-8").read()
docs = [p for d in text.split("<|endoftext|>") for p in d.split("\\n\\n")]
def gen():
    for _ in range({copies}):
        yield from docs
s = build_store(gen(), tok, tempfile.mkdtemp() + "/s", workers={workers})
m = s.meta
print(json.dumps({{"mb": m["input_bytes"] / 1e6, "mb_per_s": m["mb_per_s"], "docs": m["num_documents"],
                  "tokens": m["num_tokens"], "peak_mb": peak_mb()}}))
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    cs = SHARED / "cs336"
    path = shakespeare_file()
    print(f"## build_store, Shakespeare, GPT-2 BPE (median of {args.runs} fresh processes)")
    print(f"{'copies':>6} {'workers':>7} {'MB':>7} {'documents':>10} {'tokens':>11} {'MB/s':>6} {'peak RSS MB':>11}")
    for copies in (1, 8):
        for workers in (1, 2):
            code = CODE.format(vocab=str(cs / "gpt2_vocab.json"), merges=str(cs / "gpt2_merges.txt"),
                               path=str(path), copies=copies, workers=workers)
            rs = [run_child(code) for _ in range(args.runs)]
            r = rs[0]
            print(f"{copies:>6} {workers:>7} {r['mb']:>7.1f} {r['docs']:>10,} {r['tokens']:>11,} "
                  f"{statistics.median(x['mb_per_s'] for x in rs):>6.1f} {statistics.median(x['peak_mb'] for x in rs):>11.0f}")


if __name__ == "__main__":
    main()
