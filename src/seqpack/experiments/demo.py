"""The main job (``seqpack demo`` / ``make demo``): the whole pipeline, and each claim shown on data where it applies.

Stages (each recorded with the hash of its inputs in ``OUT/stages/`` and reused while that hash and
its outputs stay the same, `seqpack._stages`; ``fresh`` re-runs all):

1. train a byte-level BPE tokenizer (checked against the oracle encoder) and build the token store;
2. pack the corpus for MLM + NSP (128 tokens) and causal LM (512 tokens), and the fine-tuning set:
   which standard-library package a docstring comes from (labels from the built-in corpus, 128 tokens);
3. **Table 1**: every packing algorithm at depths 1/2/3/unlimited on the paper's Wikipedia lengths
   (beside the paper's figures) and on the fine-tuning set;
4. **the paper's regime**: Wikipedia lengths at 512, a body-dominated BERT, MLM head only at masked
   tokens: the realised speed-up in throughput;
5-6. **convergence** of BERT (MLM) and GPT (CLM): padded and packed runs on the same sequences in the
   same optimiser steps, so eval losses must agree;
7. **fine-tuning with real labels**, padded vs packed, both starting from the MLM stage's BERT
   (``--init-from``: its encoder under a new classification head): speed-up and accuracy;
8. ``OUT/report.html`` with the tables and PNG plots (see `seqpack.experiments.demo_report`).

Realised speed-ups come from packed and padded steps timed in alternation on the same packs after a
warm-up round (`seqpack.experiments.compare.interleaved_speedup`), so one-off costs and the
machine's drift hit both arms alike; the stage functions live in `seqpack.experiments.demo_stages`.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from seqpack._atomic import OutputKind
from seqpack._stages import StageLog, content_hash, corpus_hash
from seqpack.errors import UserError
from seqpack.experiments.demo_stages import CONVERGE, FINETUNE, REGIME

TOTAL_STAGES = 11
#: the largest --budget (it scales each stage's training and timing work: 100x the defaults is hours)
MAX_BUDGET = 100.0
#: the file that marks a directory as the demo's own: a later run may reuse and replace what is in it
MARKER = ".seqpack-demo.json"
DEMO_KIND = "seqpack.demo"
DEMO = OutputKind("demo directory", (MARKER, "kind", DEMO_KIND))
GOALS = {"regime_speedup": 1.85, "finetune_ratio": 0.8, "loss_gap": 0.01, "seconds": 180.0}  # accuracy: accuracy_points


class Stages:
    """The demo's stages in order, numbered and timed as they run; each one resumable
    (`seqpack._stages.StageLog` in ``OUT/stages/``)."""

    def __init__(self, out: Path, *, fresh: bool, total: int, echo: Callable[[str], None]) -> None:
        self.log, self.fresh, self.total, self.echo = StageLog(out / "stages"), fresh, total, echo
        self.done = 0
        self.seconds: dict[str, float] = {}  # this run's time per stage (0 when reused); OUT is made by its first stage
        self.reused: list[str] = []  # the stages an earlier run's results stood in for

    def run(self, name: str, key: str | None, fn: Callable[[], Any], *, outputs: Sequence[Path] = ()) -> Any:
        """``fn()``, or the result recorded under the same ``key``; ``key=None`` always runs (unrecorded)."""
        self.done += 1
        label = f"[{self.done}/{self.total}] {name}"
        if key is not None and not self.fresh and (prev := self.log.result(name, key, outputs=outputs)) is not None:
            self.echo(f"{label}: cached ({key[:12]})")
            self.seconds[name] = 0.0
            self.reused.append(name)
            return prev
        self.echo(f"{label} ...")
        t0 = time.perf_counter()
        result = fn()
        self.seconds[name] = time.perf_counter() - t0
        self.echo(f"{label}: done in {self.seconds[name]:.1f} s")
        if key is not None:
            self.log.finish(name, key, result)
        return result


def claim_output(out: Path, *, inputs: Sequence[str] = ()) -> None:
    """Make ``out`` the demo's directory, or refuse it: a new or empty directory, or one an earlier
    demo marked (`DEMO`), is the demo's; a directory holding anything else is refused (the demo
    writes ``tokenizer/``, ``store/``, ``packed_*/``, ``runs/`` and ``stages/`` there, replacing
    folders of those names)."""
    from seqpack._atomic import check_not_input, check_writable, foreign_directory, write_text_atomic

    check_not_input(out, inputs)
    check_writable(out)
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out}: exists and is not a directory; pick another --out")
    entries = sorted(os.listdir(out)) if out.is_dir() else []
    # an earlier version's demo left no marker, only its stage records
    ours = DEMO.made(out) or any((out / "stages").glob("*.stage.json"))
    if entries and not ours:
        raise UserError(foreign_directory(out, entries, DEMO))
    if not DEMO.made(out):
        out.mkdir(parents=True, exist_ok=True)
        write_text_atomic(out / MARKER, json.dumps({"kind": DEMO_KIND, "format_version": 1}) + "\n")


def run_demo(
    out_dir: str | Path = "demo_out",
    *,
    corpus: Sequence[str] = (),
    vocab_size: int = 8192,
    workers: int | None = None,
    progress: bool = True,
    fresh: bool = False,
    threads: int | None = None,
    budget: float = 1.0,
) -> dict[str, Any]:
    """Run (or reuse) every stage; returns the summary `format_summary` prints.

    ``budget`` scales the training and timing work of each stage (1.0: the defaults in
    `seqpack.experiments.demo_stages`). ``out_dir`` must be new, empty or an earlier demo's
    (`claim_output`)."""
    if not 0 < budget <= MAX_BUDGET:  # nan and inf too: refused before any stage runs
        raise UserError(f"budget must be > 0 and at most {MAX_BUDGET}, got {budget}")
    from seqpack._parallel import default_workers

    if (
        threads is not None and not 1 <= threads <= default_workers()
    ):  # the training stages' TrainConfig would refuse it
        raise UserError(f"threads must be between 1 and this machine's {default_workers()} cores, got {threads}")
    from seqpack.corpus import python_docs, read_documents
    from seqpack.experiments import demo_stages as ds

    out = Path(out_dir)
    echo = (lambda s: print(s, flush=True)) if progress else (lambda s: None)
    t0 = time.perf_counter()
    docs = list(read_documents(corpus)) if corpus else python_docs()
    if not docs:
        raise UserError("the corpus has no documents; pass --corpus FILE... with some text")
    claim_output(out, inputs=corpus)
    stages = Stages(out, fresh=fresh, total=TOTAL_STAGES, echo=echo)
    key = content_hash(corpus_hash(docs), vocab_size)
    s: dict[str, Any] = {
        "corpus": ", ".join(corpus) if corpus else "built-in Python docs",
        "documents": len(docs),
        "megabytes": sum(len(d.encode("utf-8", "surrogatepass")) for d in docs) / 1e6,
        "corpus_seconds": time.perf_counter() - t0,
        "budget": budget,
        "goals": GOALS,
    }
    s.update(
        stages.run(
            "tokenizer", key, lambda: _tokenizer(docs, out, vocab_size, workers, progress), outputs=[out / "tokenizer"]
        )
    )
    key = content_hash(key, "store")
    s.update(stages.run("token store", key, lambda: _store(docs, out, workers), outputs=[out / "store"]))
    keys = {}
    for task, spec in CONVERGE.items():
        keys[task] = content_hash(key, task, spec["max_len"])
        s[task] = stages.run(
            f"pack {task}",
            keys[task],
            lambda t=task: _pack(out, t, workers),  # type: ignore[misc]  # the default binds the loop variable
            outputs=[out / f"packed_{task}"],
        )
    keys["cls"] = content_hash(key, FINETUNE)
    s["finetune"] = dict(
        stages.run(
            "pack fine-tune",
            keys["cls"],
            lambda: ds.pack_finetune(out, out / "tokenizer"),
            outputs=[out / "packed_cls"],
        )
    )
    s["table1"] = stages.run(
        "table 1",
        content_hash(keys["cls"], "table1", budget >= ds.NNLSHP_BUDGET),
        lambda: ds.table1(out / "packed_cls", FINETUNE["max_len"], budget),
    )
    s["regime"] = stages.run(
        "paper regime", content_hash(REGIME, threads, budget), lambda: ds.paper_regime(threads, budget)
    )
    trained = {}
    for task, spec in CONVERGE.items():
        trained[task] = content_hash(keys[task], spec, threads, budget, ds.TIMING_ROUNDS)
        s[task]["training"] = stages.run(
            f"convergence {task}",
            trained[task],
            lambda t=task: ds.convergence(out, t, threads, progress, budget),  # type: ignore[misc]  # the default binds the loop variable
            outputs=[out / "runs" / task / "compare.json"],
        )
    # fine-tuned from the MLM stage's packed run (--init-from): a new MLM run is a new start
    s["finetune"].update(
        stages.run(
            "fine-tune",
            content_hash(keys["cls"], threads, budget, ds.TIMING_ROUNDS, trained["mlm"], ds.PRETRAINED),
            lambda: ds.finetune(out, threads, progress, budget),
            outputs=[out / "runs" / "cls" / "compare.json", out / "runs" / "mlm" / ds.PRETRAINED],
        )
    )
    s["stage_seconds"] = dict(stages.seconds)
    s["reused_stages"] = list(stages.reused)  # a time claim holds only for a run that ran its stages
    # the time the claim judges: every stage, read once, so that the report and the printed summary say the same
    s["total_seconds"] = time.perf_counter() - t0
    stages.run("report", None, lambda: {"report": str(_report(out, s))})
    s["report_seconds"] = s["stage_seconds"]["report"] = stages.seconds["report"]  # after the claim's time, said apart
    s["report"] = str(out / "report.html")
    return s


def _tokenizer(docs: list[str], out: Path, vocab_size: int, workers: int | None, progress: bool) -> dict[str, Any]:
    from seqpack.tokenizer import BPEConfig
    from seqpack.tokenizer.train import train_bpe_corpus

    config = BPEConfig(vocab_size=vocab_size, special_tokens=("<|endoftext|>",), workers=workers, progress=progress)
    result = train_bpe_corpus(documents=docs, config=config)
    tok = result.tokenizer()
    t1 = time.perf_counter()
    fast = tok.encode_batch(docs)
    t_fast = time.perf_counter() - t1
    step = max(1, len(docs) // 50)  # check ~50 documents against the oracle encoder
    exact = all(tok.encode(docs[i]) == fast[i] for i in range(0, len(docs), step))
    n_bytes = sum(len(d.encode("utf-8", "surrogatepass")) for d in docs)
    n_tokens = sum(len(ids) for ids in fast)
    tok.save(out / "tokenizer", overwrite=True)
    return {
        "vocab_size": tok.vocab_size,
        "merges": len(tok.merges),
        "pretokenize_seconds": result.pretokenize_seconds,
        "merge_seconds": result.merge_seconds,
        "tokens": n_tokens,
        "bytes_per_token": n_bytes / max(1, n_tokens),
        "encode_mb_per_s": n_bytes / 1e6 / max(t_fast, 1e-9),
        "fast_path_exact_on_sample": exact,
        "tokenizer_dir": str(out / "tokenizer"),
    }


def _store(docs: list[str], out: Path, workers: int | None) -> dict[str, Any]:
    from seqpack.store import build_store
    from seqpack.tokenizer import Tokenizer

    store = build_store(docs, Tokenizer.load(out / "tokenizer"), out / "store", workers=workers, overwrite=True)
    return {"store_dir": str(store.path), "store_mb_per_s": store.meta["mb_per_s"]}


def _pack(out: Path, task: str, workers: int | None) -> dict[str, Any]:
    from seqpack.pipeline import OutputOptions, PackConfig, build_packed_dataset
    from seqpack.store import TokenStore
    from seqpack.tokenizer import Tokenizer

    max_len = CONVERGE[task]["max_len"]
    t0 = time.perf_counter()
    m = build_packed_dataset(
        TokenStore(out / "store"),
        Tokenizer.load(out / "tokenizer"),
        out / f"packed_{task}",
        PackConfig(task=task, max_len=max_len),
        output=OutputOptions(overwrite=True),
    )
    return {
        "max_len": max_len,
        "sequences": m["num_sequences"],
        "packs": m["num_packs"],
        "efficiency": m["efficiency"],
        "padding_efficiency": m["num_tokens"] / (m["num_sequences"] * max_len),
        "packing_factor": m["packing_factor"],
        "seconds": time.perf_counter() - t0,
        "dir": str(out / f"packed_{task}"),
    }


def _report(out: Path, s: dict[str, Any]) -> Path:
    from seqpack.experiments.demo_report import write_report

    return write_report(out, s)


def format_summary(s: dict[str, Any]) -> str:
    from seqpack.experiments.demo_report import summary_text

    return summary_text(s)
