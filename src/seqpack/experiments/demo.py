"""The main job (``seqpack demo`` / ``make demo``): the whole pipeline on one corpus.

Stages (each cached by the hash of its inputs in ``OUT/stages.json``; ``fresh`` re-runs all):

1. train a byte-level BPE tokenizer and check the fast encoder against the reference;
2. tokenize into a token store;
3-4. pack BERT pre-training rows (MLM + NSP, 128 tokens) and causal-LM rows (512 tokens);
5. plan every algorithm on both length histograms (the paper's Table 1 for this corpus);
6-7. train tiny BERT (MLM) and tiny GPT (CLM), padded then packed, on the same sequences;
8. write ``OUT/report.html`` with PNG plots (lengths, row fill, eval loss, throughput).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from seqpack.experiments.stages import Stages, content_hash, corpus_hash

TASKS = {"mlm": {"max_len": 128, "model": "BERT tiny", "batch_size": 32, "sequences": 6000},
         "clm": {"max_len": 512, "model": "GPT tiny", "batch_size": 8, "sequences": 1600}}
TOTAL_STAGES = 8
WHY = ("The realised speed-up is below the packing factor here: tiny models spend much of a step on work that "
       "grows with real tokens, not rows (the vocabulary projection, which seqpack computes only at target tokens "
       "in both runs, and the embedding gradients), so packing removes only the transformer body's padding work. "
       "Larger bodies and shorter sequences gain more: see seqpack bench and seqpack compare.")


def run_demo(
    out_dir: str | Path = "demo_out", *, corpus: Sequence[str] = (), vocab_size: int = 8192,
    workers: int | None = None, progress: bool = True, fresh: bool = False, threads: int | None = None,
    budget: float = 1.0,
) -> dict[str, Any]:
    """Run (or reuse) every stage; returns the summary :func:`format_summary` prints.

    ``budget`` scales the training sequences of each model (1.0: the defaults in :data:`TASKS`)."""
    if not budget > 0:
        raise ValueError(f"budget must be > 0, got {budget}")
    from seqpack.corpus import python_docs, read_documents

    out = Path(out_dir)
    echo = (lambda s: print(s, flush=True)) if progress else (lambda s: None)
    stages = Stages(out, fresh=fresh, total=TOTAL_STAGES, echo=echo)
    t0 = time.perf_counter()
    docs = list(read_documents(corpus)) if corpus else python_docs()
    if not docs:
        raise ValueError("the corpus has no documents; pass --corpus FILE... with some text")
    key = content_hash(corpus_hash(docs), vocab_size)
    s: dict[str, Any] = {"corpus": ", ".join(corpus) if corpus else "built-in Python docs", "documents": len(docs),
                         "megabytes": sum(len(d.encode("utf-8", "surrogatepass")) for d in docs) / 1e6,
                         "corpus_seconds": time.perf_counter() - t0}
    s.update(stages.run("tokenizer", key, lambda: _tokenizer(docs, out, vocab_size, workers, progress),
                        outputs=[out / "tokenizer"]))
    key = content_hash(key, "store")
    s.update(stages.run("token store", key, lambda: _store(docs, out, workers), outputs=[out / "store"]))
    keys = {}
    for task, spec in TASKS.items():
        keys[task] = content_hash(key, task, spec["max_len"])
        s[task] = stages.run(f"pack {task}", keys[task], lambda t=task: _pack(out, t, workers),  # type: ignore[misc]
                             outputs=[out / f"packed_{task}"])
    s["plans"] = stages.run("plans", content_hash(keys), lambda: _plans(out))
    for task, spec in TASKS.items():
        train_key = content_hash(keys[task], spec, threads, budget)
        s[task]["training"] = stages.run(f"train {task}", train_key, lambda t=task: _train(out, t, threads, progress, budget),  # type: ignore[misc]
                                         outputs=[out / "runs" / task / "compare.json"])
    stages.run("report", None, lambda: {"report": str(_report(out, s))})
    s["report"] = str(out / "report.html")
    return s


def _tokenizer(docs: list[str], out: Path, vocab_size: int, workers: int | None, progress: bool) -> dict[str, Any]:
    from seqpack.tokenizer import BPEConfig, Tokenizer
    from seqpack.tokenizer.train import train_bpe_corpus

    config = BPEConfig(vocab_size=vocab_size, special_tokens=("<|endoftext|>",), workers=workers, progress=progress)
    result = train_bpe_corpus(documents=docs, config=config)
    tok = Tokenizer(result.vocab, result.merges, list(result.special_tokens))
    t1 = time.perf_counter()
    fast = tok.encode_batch(docs)
    t_fast = time.perf_counter() - t1
    step = max(1, len(docs) // 50)  # check ~50 documents against the reference encoder
    exact = all(tok.encode(docs[i]) == fast[i] for i in range(0, len(docs), step))
    n_bytes = sum(len(d.encode("utf-8", "surrogatepass")) for d in docs)
    n_tokens = sum(len(ids) for ids in fast)
    tok.save(out / "tokenizer", overwrite=True)
    return {"vocab_size": tok.vocab_size, "merges": len(tok.merges), "pretokenize_seconds": result.pretokenize_seconds,
            "merge_seconds": result.merge_seconds, "tokens": n_tokens, "bytes_per_token": n_bytes / max(1, n_tokens),
            "encode_mb_per_s": n_bytes / 1e6 / max(t_fast, 1e-9), "fast_path_exact_on_sample": exact,
            "tokenizer_dir": str(out / "tokenizer")}


def _store(docs: list[str], out: Path, workers: int | None) -> dict[str, Any]:
    from seqpack.store import build_store
    from seqpack.tokenizer import Tokenizer

    store = build_store(docs, Tokenizer.load(out / "tokenizer"), out / "store", workers=workers, overwrite=True)
    return {"store_dir": str(store.path), "store_mb_per_s": store.meta["mb_per_s"]}


def _pack(out: Path, task: str, workers: int | None) -> dict[str, Any]:
    from seqpack.data import PackConfig, build_packed_dataset
    from seqpack.store import TokenStore
    from seqpack.tokenizer import Tokenizer

    max_len = TASKS[task]["max_len"]
    t0 = time.perf_counter()
    m = build_packed_dataset(TokenStore(out / "store"), Tokenizer.load(out / "tokenizer"), out / f"packed_{task}",
                             PackConfig(task=task, max_len=max_len), overwrite=True)
    return {"max_len": max_len, "sequences": m["num_sequences"], "packs": m["num_packs"], "efficiency": m["efficiency"],
            "padding_efficiency": m["num_tokens"] / (m["num_sequences"] * max_len), "packing_factor": m["packing_factor"],
            "seconds": time.perf_counter() - t0, "dir": str(out / f"packed_{task}")}


def _plans(out: Path) -> dict[str, Any]:
    from seqpack.data.io import manifest_histogram
    from seqpack.packing.report import compare_plans, format_table

    res = {}
    for task, spec in TASKS.items():
        hist = manifest_histogram(out / f"packed_{task}")
        plans = compare_plans(hist, spec["max_len"], depths=(1, 3, None))
        res[task] = {"table": format_table(plans), "plans": [p.summary() for p in plans]}
    return res


def _train(out: Path, task: str, threads: int | None, progress: bool, budget: float) -> dict[str, Any]:
    from seqpack.train import TrainConfig
    from seqpack.experiments.compare import compare

    spec = TASKS[task]
    cfg = TrainConfig(data=str(out / f"packed_{task}"), out=str(out / "runs" / task), size="tiny",
                      batch_size=spec["batch_size"], sequences=max(1, round(spec["sequences"] * budget)), threads=threads, progress=progress)
    return compare(cfg, evals=5, overwrite=True)


def _report(out: Path, s: dict[str, Any]) -> Path:
    from seqpack.data import load_packed
    from seqpack.train.checkpoint import read_metrics
    from seqpack.experiments.report import plot_curves, plot_fill, plot_histogram, plot_throughput, write_html

    sections: list[Any] = [("Corpus", f"{s['corpus']}: {s['documents']:,} documents, {s['megabytes']:.2f} MB, "
                 f"{s['tokens']:,} tokens (byte-level BPE, {s['vocab_size']:,} tokens)."),
                ("Padded vs packed", _table_rows(s)), ("Why not the full packing factor", WHY)]
    rates = {}
    for task, spec in TASKS.items():
        m, cols = load_packed(out / f"packed_{task}", columns=["segment_ids"])
        hist = np.asarray(m["histogram"]["counts"])
        L = spec["max_len"]
        lengths = np.repeat(np.arange(1, hist.size + 1), hist)
        fills = {"padded": lengths / L, "packed": (np.asarray(cols["segment_ids"]) != 0).sum(1) / L}
        tr = s[task]["training"]
        curves = {k: [r for r in read_metrics(out / "runs" / task / k) if "eval" in r] for k in ("padded", "packed")}
        name = f"{task} (max_len {L})"
        sections += [
            (f"{name}: sequence lengths", plot_histogram(hist, L, out / f"{task}_lengths.png", title=name)),
            (f"{name}: row fill", plot_fill(fills, out / f"{task}_fill.png", title=name)),
            (f"{name}: plans of every algorithm", s["plans"][task]["table"]),
            (f"{name}: eval loss, {spec['model']}", plot_curves(curves, out / f"{task}_loss.png", title=f"{spec['model']}, {name}")),
        ]
        rates[f"{spec['model']} ({task})"] = tr["tokens_per_s"]
    sections.append(("Training throughput", plot_throughput(rates, out / "throughput.png", title="tiny models, CPU")))
    return write_html(out / "report.html", "seqpack demo", sections)


def _table_rows(s: dict[str, Any]) -> list[list[str]]:
    rows = [["task", "max_len", "sequences", "padded rows full", "packed rows full", "packing factor",
             "realised speed-up", "train s padded / packed", "eval loss padded", "eval loss packed"]]
    for task, spec in TASKS.items():
        t, tr = s[task], s[task]["training"]
        rows.append([f"{task} ({spec['model']})", str(t["max_len"]), f"{t['sequences']:,}", f"{t['padding_efficiency']:.1%}",
                     f"{t['efficiency']:.2%}", f"{t['packing_factor']:.2f}",
                     f"{tr['tokens_per_s']['packed'] / tr['tokens_per_s']['padded']:.2f}x",
                     f"{tr['train_seconds']['padded']:.1f} / {tr['train_seconds']['packed']:.1f}",
                     f"{tr['final_eval_loss']['padded']:.3f}", f"{tr['final_eval_loss']['packed']:.3f}"])
    return rows


def format_summary(s: dict[str, Any], *, table_only: bool = False) -> str:
    rows = _table_rows(s)
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    table = "\n".join("  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))) for r in rows)
    if table_only:
        return table
    lines = [
        f"corpus             {s['corpus']}: {s['documents']:,} documents, {s['megabytes']:.2f} MB",
        f"tokenizer          byte-level BPE, {s['vocab_size']:,} tokens; pre-tokenize {s['pretokenize_seconds']:.2f} s "
        f"+ merges {s['merge_seconds']:.2f} s; {s['bytes_per_token']:.2f} bytes/token; fast == reference: "
        f"{'yes' if s['fast_path_exact_on_sample'] else 'NO'}",
        f"token store        {s['store_dir']} ({s['tokens']:,} tokens)",
    ]
    for task in TASKS:
        lines += ["", f"plans for {task} (max_len {s[task]['max_len']}):", s["plans"][task]["table"]]
    lines += ["", "padded vs packed training (same sequences; packed: as many sequences per step, fewer rows):", table,
              "", WHY, "", f"report: {s['report']}"]
    return "\n".join(lines)
