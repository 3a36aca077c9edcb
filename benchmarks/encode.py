"""Corpus encoding throughput (MB/s), median of --runs, on Shakespeare (5 MB).

Tokenizers: the GPT-2 vocab/merges of the CS336 fixtures (so tiktoken's "gpt2" is
a like-for-like anchor) and a 10K BPE trained here on the corpus. Paths:
``Tokenizer.encode`` in one process (cold cache, then warm), the parallel
``encode_documents`` (all cores, cold), the HF backend (Rust, threads), and
tiktoken (single thread, and its batch API on all cores). ids are checked equal.

    python benchmarks/encode.py [--runs 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

from _common import EOT, SHARED, shakespeare_file


def timed(fn, runs: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(runs):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(SHARED / "tiktoken_cache"))
    import tiktoken

    from seqpack.tokenizer import BPEConfig, Tokenizer, train_bpe_corpus
    from seqpack.tokenizer.fast import encode_documents

    path = shakespeare_file()
    text = path.read_text(encoding="utf-8")
    docs = text.split(EOT)
    mb = len(text.encode("utf-8")) / 1e6
    cs = SHARED / "cs336"
    gpt2 = Tokenizer.from_files(cs / "gpt2_vocab.json", cs / "gpt2_merges.txt", [EOT])
    r = train_bpe_corpus([path], config=BPEConfig(vocab_size=10_000, special_tokens=(EOT,)))
    trained = Tokenizer(r.vocab, r.merges, [EOT])
    results: dict[str, dict[str, float]] = {}
    for name, tok in (("gpt2", gpt2), ("trained10k", trained)):
        row: dict[str, float] = {}

        def cold_single(tok=tok):
            tok._cache.clear()
            return [tok.encode(d) for d in docs]

        t, ref = timed(cold_single, args.runs)
        row["encode_cold_1proc"] = mb / t
        t, _ = timed(lambda tok=tok: [tok.encode(d) for d in docs], args.runs)
        row["encode_warm_1proc"] = mb / t

        def cold_parallel(tok=tok):
            tok._cache.clear()
            return list(encode_documents(tok, docs))  # uint32 arrays, as the store takes them

        t, par = timed(cold_parallel, args.runs)
        assert [a.tolist() for a in par] == ref
        row["encode_documents_cold_all_cores"] = mb / t
        [tok.encode(d) for d in docs]  # warm the parent's cache; forked workers inherit it
        t, _ = timed(lambda tok=tok: list(encode_documents(tok, docs)), args.runs)
        row["encode_documents_warm_all_cores"] = mb / t
        t, hf = timed(lambda tok=tok: tok.encode_batch(docs, backend="hf"), args.runs)
        assert hf == ref
        row["hf_backend"] = mb / t
        if name == "gpt2":
            enc = tiktoken.get_encoding("gpt2")
            t, tk = timed(lambda: [enc.encode_ordinary(d) for d in docs], args.runs)
            assert tk == ref
            row["tiktoken_1thread"] = mb / t
            t, _ = timed(lambda: enc.encode_ordinary_batch(docs), args.runs)
            row["tiktoken_batch_all_cores"] = mb / t
        results[name] = {k: round(v, 2) for k, v in row.items()}
    if args.json:
        print(json.dumps({"corpus_mb": mb, "cores": len(os.sched_getaffinity(0)), **results}))
        return
    print(f"Shakespeare {mb:.2f} MB, {len(os.sched_getaffinity(0))} cores, MB/s (median of {args.runs}):")
    for name, row in results.items():
        print(f"  {name}")
        for k, v in row.items():
            print(f"    {k:<34} {v:7.2f}")


if __name__ == "__main__":
    main()
