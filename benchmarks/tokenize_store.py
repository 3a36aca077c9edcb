"""Corpus -> token store throughput (MB/s) and peak memory as the corpus grows.

Shakespeare (5 MB, split at <|endoftext|> into 42 documents, then into paragraphs so that
documents have realistic sizes), repeated 1x and 8x as a generator, encoded with the GPT-2
vocab/merges of the CS336 fixtures by ``build_store`` through the harness (each arm in processes of its own; the word cache
cleared before each call, as in a fresh `seqpack tokenize`). Peak RSS (the process and its workers) shows that
memory does not grow with the corpus: tokens stream to disk.

    python benchmarks/tokenize_store.py [--rounds 3] [--out results/tokenize_store.json]
"""

from __future__ import annotations

import argparse

from _common import (
    PEAK_MB,
    RESULTS,
    SHARED,
    compare_arms,
    shakespeare_file,
    write_result,
)

SETUP = (
    PEAK_MB
    + """
import tempfile
from seqpack.store import build_store
from seqpack.tokenizer import Tokenizer
text = open({path!r}, encoding="utf-8").read()
docs = [p for d in text.split("<|endoftext|>") for p in d.split("\\n\\n")]
def gen():
    for _ in range({copies}):
        yield from docs
tok = Tokenizer.from_files({vocab!r}, {merges!r}, ["<|endoftext|>"])
"""
)
# the word cache is cleared before each call: a cold run, as in a fresh `seqpack tokenize`
BODY = """
tok.clear_cache()
return build_store(gen(), tok, tempfile.mkdtemp() + "/s", workers={workers})
"""
INFO = '{{"mb": out.meta["input_bytes"] / 1e6, "docs": out.meta["num_documents"], "tokens": out.meta["num_tokens"], "peak_mb": peak_mb()}}'


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=str(RESULTS / "tokenize_store.json"))
    args = ap.parse_args()
    cs = SHARED / "cs336"
    path = shakespeare_file()
    print(f"## build_store, Shakespeare, GPT-2 BPE (harness: {args.rounds} processes per arm, a warm-up call, 2 timed)")
    print(f"{'arm':<22} {'MB':>7} {'documents':>10} {'tokens':>11} {'MB/s':>6} {'peak RSS MB':>11}")
    results = {}
    for copies in (1, 8):
        arms = {
            f"x{copies}, {w} thread{'s' * (w > 1)}": (
                SETUP.format(
                    path=str(path), copies=copies, vocab=str(cs / "gpt2_vocab.json"), merges=str(cs / "gpt2_merges.txt")
                ),
                BODY.format(workers=w),
                INFO.format(),
            )
            for w in (1, 2)
        }
        got = compare_arms(arms, rounds=args.rounds, repeats=2, threads=2)
        for name, r in got.items():
            i = r["info"]
            r["mb_per_s"] = i["mb"] / r["median_s"]
            print(
                f"{name:<22} {i['mb']:>7.1f} {i['docs']:>10,} {i['tokens']:>11,} {r['mb_per_s']:>6.1f} {i['peak_mb']:>11.0f}"
            )
        results.update(got)
    write_result(args.out, results)


if __name__ == "__main__":
    main()
