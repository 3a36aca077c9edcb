"""The main job (``seqpack demo`` / ``make demo``).

It runs the pipeline so far on the built-in corpus: train a byte-level BPE
tokenizer, check the fast corpus encoder against the reference encoder, save the
tokenizer, write the token store, and pack it for causal-LM (max_len 512) and BERT
pre-training (MLM + NSP, max_len 128). Training (issue 6) will extend it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def run_demo(
    out_dir: str | Path = "demo_out",
    *,
    corpus: Sequence[str] = (),
    vocab_size: int = 8192,
    workers: int | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Train, check and save a tokenizer; returns the summary it prints."""
    from seqpack.corpus import python_docs, read_documents
    from seqpack.tokenizer import BPEConfig, Tokenizer
    from seqpack.tokenizer.train import train_bpe_corpus

    t0 = time.perf_counter()
    docs = list(read_documents(corpus)) if corpus else python_docs()
    t_corpus = time.perf_counter() - t0
    config = BPEConfig(
        vocab_size=vocab_size, special_tokens=("<|endoftext|>",), workers=workers, progress=progress
    )
    result = train_bpe_corpus(documents=docs, config=config)
    tok = Tokenizer(result.vocab, result.merges, list(result.special_tokens))
    t1 = time.perf_counter()
    fast = tok.encode_batch(docs)
    t_fast = time.perf_counter() - t1
    step = max(1, len(docs) // 50)  # check ~50 documents against the reference encoder
    exact = all(tok.encode(docs[i]) == fast[i] for i in range(0, len(docs), step))
    n_bytes = sum(len(d.encode("utf-8")) for d in docs)
    n_tokens = sum(len(ids) for ids in fast)
    out = Path(out_dir) / "tokenizer"
    tok.save(out, overwrite=True)
    packed = _store_and_pack(docs, tok, Path(out_dir), workers)
    return {
        "corpus": "built-in Python docs" if not corpus else ", ".join(corpus),
        "documents": len(docs),
        "megabytes": n_bytes / 1e6,
        "corpus_seconds": t_corpus,
        "vocab_size": tok.vocab_size,
        "merges": len(tok.merges),
        "pretokenize_seconds": result.pretokenize_seconds,
        "merge_seconds": result.merge_seconds,
        "tokens": n_tokens,
        "bytes_per_token": n_bytes / max(1, n_tokens),
        "encode_mb_per_s": n_bytes / 1e6 / max(t_fast, 1e-9),
        "fast_path_exact_on_sample": exact,
        "tokenizer_dir": str(out),
        **packed,
    }


def _store_and_pack(docs: Sequence[str], tok: Any, out: Path, workers: int | None) -> dict[str, Any]:
    from seqpack.data import PackConfig, build_packed_dataset
    from seqpack.store import build_store

    store = build_store(docs, tok, out / "store", workers=workers, overwrite=True)
    result: dict[str, Any] = {"store_dir": str(store.path), "store_mb_per_s": store.meta["mb_per_s"]}
    for task, max_len in (("clm", 512), ("mlm", 128)):
        t0 = time.perf_counter()
        m = build_packed_dataset(store, tok, out / f"packed_{task}", PackConfig(task=task, max_len=max_len), overwrite=True)
        result[task] = {
            "max_len": max_len, "sequences": m["num_sequences"], "packs": m["num_packs"],
            "efficiency": m["efficiency"],
            "padding_efficiency": m["num_tokens"] / (m["num_sequences"] * max_len),
            "seconds": time.perf_counter() - t0, "dir": str(out / f"packed_{task}"),
        }
    return result


def format_summary(s: dict[str, Any]) -> str:
    rows = [
        ("corpus", f"{s['corpus']}: {s['documents']:,} documents, {s['megabytes']:.2f} MB"),
        ("tokenizer", f"byte-level BPE, {s['vocab_size']:,} tokens ({s['merges']:,} merges)"),
        ("training", f"pre-tokenize {s['pretokenize_seconds']:.2f} s + merges {s['merge_seconds']:.2f} s"),
        ("encoded", f"{s['tokens']:,} tokens, {s['bytes_per_token']:.2f} bytes/token, {s['encode_mb_per_s']:.1f} MB/s"),
        ("fast == reference", "yes" if s["fast_path_exact_on_sample"] else "NO"),
        ("saved to", s["tokenizer_dir"]),
        ("token store", f"{s['store_dir']} ({s['store_mb_per_s']:.1f} MB/s)"),
    ]
    for task in ("clm", "mlm"):
        t = s[task]
        rows.append((
            f"packed {task}",
            f"{t['sequences']:,} sequences -> {t['packs']:,} rows of {t['max_len']} ({t['efficiency']:.2%} full; "
            f"padded: {t['sequences']:,} rows, {t['padding_efficiency']:.1%} full; "
            f"{t['sequences'] / t['packs']:.2f}x fewer rows) in {t['seconds']:.2f} s -> {t['dir']}",
        ))
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)
