"""Padded vs packed training on the same sequences (``seqpack compare``).

    result = compare(TrainConfig(data="packed_mlm/", out="cmp", sequences=50_000), evals=10)
    result["final_eval_loss"], result["relative_loss_gap"], result["wall_time_ratio"]

Both runs see the same number of training sequences, drawn from the same held-in packs, and
are evaluated on the same held-out packs. The packed run uses ``match="sequences"`` by default
(as many sequences per optimiser step as the padded run, on average: the paper's first
setup), so the two take about the same number of optimiser steps and the packed run does
``1 / packing factor`` of the rows. Writes ``OUT/padded/``, ``OUT/packed/`` (runs),
``OUT/compare.png`` (eval loss vs sequences seen and vs training time) and
``OUT/compare.json``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from seqpack.train.checkpoint import read_metrics
from seqpack.train.config import TrainConfig


def compare(cfg: TrainConfig, *, evals: int = 10, overwrite: bool = False) -> dict[str, Any]:
    """Train ``cfg`` padded, then packed (``match`` as in ``cfg``, default sequences); plot both."""
    from seqpack.train.loop import train
    from seqpack.experiments.report import plot_curves

    out = Path(cfg.out)
    match = cfg.match if cfg.match != "none" or cfg.adjust_hparams else "sequences"
    runs = {
        "padded": cfg.replace(padded=True, out=str(out / "padded"), match="none", adjust_hparams=False),
        "packed": cfg.replace(padded=False, out=str(out / "packed"), match=match),
    }
    summaries = {}
    for name, c in runs.items():
        summaries[name] = train(c if cfg.eval_every else c.replace(evals=evals), overwrite=overwrite)
    curves = {name: [r for r in read_metrics(c.out) if "eval" in r] for name, c in runs.items()}
    plot_curves(curves, out / "compare.png", title=f"{summaries['packed']['model']} on {Path(cfg.data).name}")
    pad, pak = summaries["padded"], summaries["packed"]
    result = {
        "data": cfg.data, "model": pak["model"], "match": match, "adjust_hparams": cfg.adjust_hparams,
        "packing_factor": pak["packing_factor"],
        "sequences": {"padded": pad["sequences"], "packed": pak["sequences"]},
        "steps": {"padded": pad["steps"], "packed": pak["steps"]},
        "final_eval_loss": {"padded": pad["eval"]["loss"], "packed": pak["eval"]["loss"]},
        "final_eval": {"padded": pad["eval"], "packed": pak["eval"]},
        "relative_loss_gap": pak["eval"]["loss"] / pad["eval"]["loss"] - 1,
        "train_seconds": {"padded": pad["train_seconds"], "packed": pak["train_seconds"]},
        "wall_time_ratio": pak["train_seconds"] / pad["train_seconds"],
        "tokens_per_s": {"padded": pad["tokens_per_s"], "packed": pak["tokens_per_s"]},
        "plot": str(out / "compare.png"),
    }
    (out / "compare.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return result


def format_compare(r: dict[str, Any]) -> str:
    rows = [("", "padded", "packed")]
    rows.append(("sequences seen", f"{r['sequences']['padded']:,}", f"{r['sequences']['packed']:,}"))
    rows.append(("optimiser steps", f"{r['steps']['padded']:,}", f"{r['steps']['packed']:,}"))
    rows.append(("training time (s)", f"{r['train_seconds']['padded']:.1f}", f"{r['train_seconds']['packed']:.1f}"))
    rows.append(("real tokens/s", f"{r['tokens_per_s']['padded']:,.0f}", f"{r['tokens_per_s']['packed']:,.0f}"))
    rows.append(("final eval loss", f"{r['final_eval_loss']['padded']:.4f}", f"{r['final_eval_loss']['packed']:.4f}"))
    w = max(len(a) for a, _, _ in rows)
    lines = [f"{a:<{w}}  {b:>12}  {c:>12}" for a, b, c in rows]
    lines.append(f"packed / padded: eval loss {r['relative_loss_gap']:+.2%}, training time {r['wall_time_ratio']:.2f}x "
                 f"(packing factor {r['packing_factor']:.2f}, match={r['match']})")
    lines.append(f"plot: {r['plot']}")
    return "\n".join(lines)
