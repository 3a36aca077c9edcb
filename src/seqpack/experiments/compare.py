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
import os
from pathlib import Path
from typing import Any

from seqpack._atomic import OutputKind
from seqpack.errors import UserError
from seqpack.train.checkpoint import CONFIG, RUN_KIND, read_metrics
from seqpack.train.config import TrainConfig

PAIRINGS = ("sequences", "packs")
#: what a comparison's directory is: one of its two runs, finished or not, says so
COMPARISON = OutputKind(
    "comparison",
    *((f"{d}/{CONFIG}", "kind", RUN_KIND) for d in ("padded", "packed", ".padded.partial", ".packed.partial")),
)
WARMUP_STEPS = 2


def _refuse_held(out: Path, runs: list[str]) -> None:
    """Refuse run directories that hold a run, finished or not (compare has no --resume: say what it has)."""
    from seqpack._stages import partial_dir
    from seqpack.train.checkpoint import CHECKPOINT, SUMMARY

    held = [
        r for r in runs for d in (Path(r), partial_dir(Path(r))) if (d / CHECKPOINT).exists() or (d / SUMMARY).exists()
    ]
    held += [str(out / f) for f in ("compare.json", "compare.png") if (out / f).exists()]
    if held:
        raise UserError(
            f"{out} already holds a comparison ({held[0]}); pass --overwrite to run it again, or a new --out"
        )


def compare(
    cfg: TrainConfig,
    *,
    evals: int = 10,
    overwrite: bool = False,
    pairing: str = "sequences",
    warmup: int = WARMUP_STEPS,
) -> dict[str, Any]:
    """Train ``cfg`` padded, then packed; plot both.

    ``pairing="sequences"``: the packed run matches the padded run's sequences per step on average
    (``match`` as in ``cfg``, default ``sequences``). ``pairing="packs"``: the padded run takes the
    packed run's steps, each step's sequences one per row (``--match packs``), so both learn the same
    thing and differ only in time. ``steady_speedup`` compares the two runs' compute time per real
    token (forward, backward and optimiser; building batches is left to a data loader) after the
    first ``warmup`` steps (one-off costs left out of both); with ``packs`` the steps hold the same
    sequences, so it is the realised speed-up itself."""
    from seqpack.experiments.report import plot_curves
    from seqpack.train.loop import train

    if pairing not in PAIRINGS:
        raise UserError(f"pairing must be one of {'|'.join(PAIRINGS)}, got {pairing!r}")
    out = Path(cfg.out)
    from seqpack._atomic import check_not_input, check_writable, foreign_directory

    check_not_input(out, [cfg.data, cfg.hf_model, cfg.init_from])
    check_writable(out)
    entries = sorted(os.listdir(out)) if out.is_dir() else []
    if entries and not COMPARISON.made(out):  # its runs and plot go there: never beside what it did not make
        raise UserError(foreign_directory(out, entries, COMPARISON))
    if pairing == "packs":
        runs = {
            "padded": cfg.replace(padded=True, out=str(out / "padded"), match="packs", adjust_hparams=False),
            "packed": cfg.replace(padded=False, out=str(out / "packed"), match="none"),
        }
        match = "packs"
    else:
        match = cfg.match if cfg.match != "none" or cfg.adjust_hparams else "sequences"
        runs = {
            "padded": cfg.replace(padded=True, out=str(out / "padded"), match="none", adjust_hparams=False),
            "packed": cfg.replace(padded=False, out=str(out / "packed"), match=match),
        }
    if not overwrite:
        _refuse_held(out, [c.out for c in runs.values()])
    summaries = {}
    for name, c in runs.items():
        c = c.replace(eval_at_start=True)  # both curves start at the initial weights
        summaries[name] = train(c if cfg.eval_every else c.replace(evals=evals), overwrite=overwrite)
    curves = {name: [r for r in read_metrics(c.out) if "eval" in r] for name, c in runs.items()}
    plot_curves(curves, out / "compare.png", title=f"{summaries['packed']['model']} on {Path(cfg.data).name}")
    pad, pak = summaries["padded"], summaries["packed"]
    steps = {
        name: [r for r in read_metrics(c.out) if "eval" not in r and "step_seconds" in r] for name, c in runs.items()
    }
    warmup = warmup if min(len(v) for v in steps.values()) > warmup else 0  # a run too short to leave any out
    # compute only (forward, backward, optimiser): building a batch is a data loader's work, off the step's path
    steady = {
        name: sum(r.get("compute_seconds", r["step_seconds"]) for r in recs[warmup:]) for name, recs in steps.items()
    }
    steady_tokens = {name: sum(r["step_tokens"] for r in recs[warmup:]) for name, recs in steps.items()}
    rates = {name: steady_tokens[name] / max(steady[name], 1e-9) for name in steps}
    result = {
        "data": cfg.data,
        "model": pak["model"],
        "match": match,
        "adjust_hparams": cfg.adjust_hparams,
        "init_from": pak.get("init_from"),
        "packing_factor": pak["packing_factor"],
        "sequences": {"padded": pad["sequences"], "packed": pak["sequences"]},
        "steps": {"padded": pad["steps"], "packed": pak["steps"]},
        "final_eval_loss": {"padded": pad["eval"]["loss"], "packed": pak["eval"]["loss"]},
        "final_eval": {"padded": pad["eval"], "packed": pak["eval"]},
        "relative_loss_gap": pak["eval"]["loss"] / pad["eval"]["loss"] - 1,
        "train_seconds": {"padded": pad["train_seconds"], "packed": pak["train_seconds"]},
        "wall_time_ratio": pak["train_seconds"] / pad["train_seconds"],
        "tokens_per_s": {"padded": pad["tokens_per_s"], "packed": pak["tokens_per_s"]},
        "pairing": pairing,
        "warmup_steps": warmup,
        "steady_seconds": steady,
        "steady_tokens_per_s": rates,
        "steady_speedup": rates["packed"] / max(rates["padded"], 1e-9),
        "plot": str(out / "compare.png"),
    }
    (out / "compare.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return result


def interleaved_speedup(cfg: TrainConfig, *, steps: int = 5, rounds: int = 3) -> dict[str, Any]:
    """Packed vs padded training steps timed in alternation on the same packs (the padded arm lays
    each pack's sequences out one per row), so that a machine that speeds up or slows down during
    the measurement hits both arms alike. Round 0 warms up; each later round times ``steps``
    optimiser steps (forward, backward, AdamW) per arm on the same batches, built beforehand: rounds
    differ by the machine alone (batches of other packs would differ by their rows too, so a spread
    of rounds could not tell a busy machine). Returns real tokens/s per arm and the median over
    rounds of the packed / padded ratio."""
    import statistics
    import time

    import torch

    from seqpack.train.data import TrainData
    from seqpack.train.models import build_model, forward
    from seqpack.train.step_loss import component_means, loss_units, step_loss

    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    arms = {"padded": TrainData(cfg.data, padded=True, by_pack=True), "packed": TrainData(cfg.data)}
    task, B = arms["packed"].task, cfg.batch_size
    torch.manual_seed(cfg.seed)
    model, _ = build_model(arms["packed"].manifest, cfg)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr)
    rates: dict[str, list[float]] = {k: [] for k in arms}
    units = arms["packed"].units_at(cfg.seed + 1, 0, steps * B)
    batches = {name: [data.batch(units[i * B : (i + 1) * B]) for i in range(steps)] for name, data in arms.items()}
    for r in range(rounds + 1):
        for name, data in arms.items():
            t0 = time.perf_counter()
            for b in batches[name]:
                n = loss_units(b, task, cfg.reduction)
                step_loss(component_means(forward(model, b, task=task, reduction=cfg.reduction), task), n, n).backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
            seconds = time.perf_counter() - t0
            if r:
                rates[name].append(int(data.unit_tokens[units].sum()) / seconds)
    ratios = [p / d for p, d in zip(rates["packed"], rates["padded"])]
    return {
        "tokens_per_s": {k: statistics.median(v) for k, v in rates.items()},
        "speedup": statistics.median(ratios),
        "speedup_per_round": ratios,
        "steps": steps,
        "rounds": rounds,
    }


def format_compare(r: dict[str, Any]) -> str:
    rows = [("", "padded", "packed")]
    rows.append(("sequences seen", f"{r['sequences']['padded']:,}", f"{r['sequences']['packed']:,}"))
    rows.append(("optimiser steps", f"{r['steps']['padded']:,}", f"{r['steps']['packed']:,}"))
    rows.append(("training time (s)", f"{r['train_seconds']['padded']:.1f}", f"{r['train_seconds']['packed']:.1f}"))
    rows.append(("real tokens/s", f"{r['tokens_per_s']['padded']:,.0f}", f"{r['tokens_per_s']['packed']:,.0f}"))
    rows.append(("final eval loss", f"{r['final_eval_loss']['padded']:.4f}", f"{r['final_eval_loss']['packed']:.4f}"))
    w = max(len(a) for a, _, _ in rows)
    lines = [f"{a:<{w}}  {b:>12}  {c:>12}" for a, b, c in rows]
    lines.append(
        f"packed / padded: eval loss {r['relative_loss_gap']:+.2%}, training time {r['wall_time_ratio']:.2f}x "
        f"(packing factor {r['packing_factor']:.2f}, match={r['match']})"
    )
    if r.get("init_from"):
        lines.append(f"both runs started from {r['init_from']['run']} ({r['init_from']['tensors']} tensors)")
    lines.append(f"plot: {r['plot']}")
    return "\n".join(lines)
