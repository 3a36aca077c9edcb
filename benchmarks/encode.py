"""Encoding throughput, MB/s per core, side by side: seqpack vs tiktoken vs HF tokenizers.

GPT-2's vocabulary and merges (the CS336 fixtures), so every encoder gives the same ids
(checked). Corpora: the CS336 text fixtures, Shakespeare, and the Python
documentation's reST sources (markup-heavy real text, the built-in corpus); documents
are paragraphs (split at blank lines), with <|endoftext|> removed so that
``encode_ordinary`` applies. Modes, each the median of --runs:

- seqpack ``Tokenizer.encode`` per document (one call each, 1 thread), cold cache;
- seqpack's corpus encoder ``encode_batches`` (flat uint32 ids + offsets per batch of
  documents, as the token store takes them) on 1 and on all threads, cold cache
  (cleared before each run) and warm;
- tiktoken ``encode_ordinary`` per document (1 thread) and ``encode_ordinary_batch``;
- HF ``tokenizers`` (seqpack's export): ``encode`` per document (1 thread) and
  ``encode_batch`` (all threads).

Per core = MB/s divided by the threads used.

    python benchmarks/encode.py [--runs 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

from _common import EOT, SHARED, shakespeare_file


def timed(fn, runs: int, before=None) -> tuple[float, object]:
    times, out = [], None
    for _ in range(runs):
        if before is not None:
            before()
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def corpora() -> dict[str, list[str]]:
    from seqpack.corpus import python_docs

    cs = SHARED / "cs336"
    fixtures = "".join(
        (cs / n).read_text(encoding="utf-8")
        for n in ("tinystories_sample.txt", "german.txt", "address.txt", "corpus.en")
    )
    texts = {
        "cs336": fixtures,
        "shakespeare": shakespeare_file().read_text(encoding="utf-8"),
        "python-docs (reST)": "\n\n".join(python_docs()),
    }
    return {k: [p for p in t.replace(EOT, "\n\n").split("\n\n") if p] for k, t in texts.items()}


def measure(docs: list[str], tok, enc, runs: int, threads: int) -> dict[str, float]:
    from seqpack.tokenizer.fast import encode_batches

    mb = sum(len(d.encode("utf-8")) for d in docs) / 1e6
    row: dict[str, float] = {}
    cold = tok.clear_cache
    t, ref = timed(lambda: [tok.encode(d) for d in docs], runs, cold)
    row["seqpack encode, 1 thread, cold"] = mb / t
    for n in sorted({1, threads}):
        t, got = timed(lambda n=n: list(encode_batches(tok, docs, workers=n)), runs, cold)
        assert [ids[o[i] : o[i + 1]].tolist() for ids, o in got for i in range(len(o) - 1)] == ref
        row[f"seqpack corpus encoder, {n} thread(s), cold"] = mb / t / n
        t, _ = timed(lambda n=n: list(encode_batches(tok, docs, workers=n)), runs)
        row[f"seqpack corpus encoder, {n} thread(s), warm"] = mb / t / n
    t, tk = timed(lambda: [enc.encode_ordinary(d) for d in docs], runs)
    assert tk == ref, "tiktoken disagrees"
    row["tiktoken encode_ordinary, 1 thread"] = mb / t
    t, _ = timed(lambda: enc.encode_ordinary_batch(docs, num_threads=threads), runs)
    row[f"tiktoken encode_ordinary_batch, {threads} threads"] = mb / t / threads
    hf = tok.to_hf()
    t, got = timed(lambda: [hf.encode(d, add_special_tokens=False).ids for d in docs], runs)
    assert got == ref, "HF disagrees"
    row["HF tokenizers encode, 1 thread"] = mb / t
    t, _ = timed(lambda: hf.encode_batch(docs, add_special_tokens=False), runs)
    row[f"HF tokenizers encode_batch, {threads} threads"] = mb / t / threads
    row["MB"] = mb
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(SHARED / "tiktoken_cache"))
    import tiktoken

    from seqpack._parallel import default_workers
    from seqpack.tokenizer import Tokenizer

    cs = SHARED / "cs336"
    tok = Tokenizer.from_files(cs / "gpt2_vocab.json", cs / "gpt2_merges.txt", [EOT])
    enc = tiktoken.get_encoding("gpt2")
    threads = default_workers()
    results = {name: measure(docs, tok, enc, args.runs, threads) for name, docs in corpora().items()}
    results = {k: {m: round(v, 2) for m, v in row.items()} for k, row in results.items()}
    if args.json:
        print(json.dumps({"threads": threads, "runs": args.runs, **results}))
        return
    print(f"GPT-2 vocabulary; MB/s per core; {threads} cores; median of {args.runs} runs")
    for name, row in results.items():
        print(f"  {name} ({row.pop('MB')} MB)")
        for k, v in row.items():
            print(f"    {k:<46} {v:8.2f}")


if __name__ == "__main__":
    main()
