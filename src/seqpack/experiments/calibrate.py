"""Measured coefficients of the row cost model (``seqpack bench --calibrate``).

    result = calibrate(BenchConfig(model="gpt", size="small", max_len=4096))
    result["cost"]          # {"per_token": s, "per_square": s, "per_sequence": s}: seconds per row
    result["fit"]           # rms / max relative error of the fit over the designed rows

Rows are *designed* to span the range of ``sum(l_i^2)`` at ``max_len``: full rows of 1, 2, 4 ...
equal sequences (``sum(l^2)`` from ``L^2`` down to ``L^2/64``), and long sequences beside many
short ones. All are full, as packed rows are: a model runs every position of a row, padding
included, so ``per_token * tokens`` is then the row's per-position work. Every design is
timed forward + backward (``rows`` copies per step, interleaved rounds, round 0 warms up; the
median per design), and `seqpack.packing.balance.fit_row_cost` fits
``seconds = a * tokens + b * sum(l^2) + c * sequences``. ``seqpack train --balance compute
--cost FILE`` and ``seqpack plan --cost FILE`` then balance by these measured seconds instead of
the FLOP model.
"""

from __future__ import annotations

import itertools
import statistics
from typing import Any

import numpy as np
import torch

from seqpack.experiments.bench import BenchConfig, bench_model, device_name, step_times
from seqpack.packing.balance import RowCost, fit_row_cost


def design_rows(max_len: int, *, shortest: int = 16) -> list[list[int]]:
    """Sequence lengths of the calibration rows: full rows (a model runs every position of a row,
    and packed rows are full) whose ``sum(l^2)`` spans ``max_len^2`` down to ``max_len^2 / 64``.

    >>> design_rows(64)
    [[64], [32, 32], [16, 16, 16, 16], [48, 16], [32, 16, 16], [24, 24, 16]]
    """
    L = max_len
    rows = [[L // k] * k for k in (1, 2, 4, 8, 16, 32, 64) if L // k >= shortest]
    for frac in (0.75, 0.5, 0.25):
        long = int(L * frac)
        if long > shortest:
            rows.append([long] + [shortest] * ((L - long) // shortest))
    rows.append([L // 2, L // 4, L // 4])
    third = 3 * L // 8
    rows.append([third, third] + [shortest] * ((L - 2 * third) // shortest))
    return [r for i, r in enumerate(rows) if r not in rows[:i]]


def design_batch(
    lengths: list[int], rows: int, max_len: int, *, vocab: int, causal: bool, seed: int
) -> dict[str, torch.Tensor]:
    """``rows`` copies of one packed row holding sequences of ``lengths``.  # (rows, max_len)"""
    rng = np.random.default_rng(seed)
    seg = np.zeros(max_len, np.int64)
    seg[: sum(lengths)] = np.repeat(np.arange(1, len(lengths) + 1), lengths)
    ids = rng.integers(0, vocab, size=max_len)
    labels = np.where(seg > 0, ids, -100)
    if causal:  # no target for each sequence's first token
        labels[np.concatenate([[0], np.cumsum(lengths)[:-1]])] = -100
    else:
        labels[rng.random(max_len) >= 0.15] = -100
    return {
        k: torch.from_numpy(np.tile(v, (rows, 1)))
        for k, v in (("input_ids", ids), ("segment_ids", seg), ("labels", labels))
    }


def calibrate(cfg: BenchConfig) -> dict[str, Any]:
    """Time the designed rows on ``cfg``'s model and fit the row cost model (see the module)."""
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    causal = cfg.model == "gpt"
    dev = torch.device(cfg.device)
    designs = design_rows(cfg.max_len)
    batches = [
        {
            k: v.to(dev)
            for k, v in design_batch(
                d, cfg.rows, cfg.max_len, vocab=cfg.vocab_size, causal=causal, seed=cfg.seed + i
            ).items()
        }
        for i, d in enumerate(designs)
    ]
    model = bench_model(cfg, cfg.attention).to(dev)
    times: list[list[float]] = [[] for _ in designs]
    for r in range(cfg.repeats + 1):  # round 0 warms up; rounds interleave the designs so drift hits all alike
        for i, b in enumerate(batches):
            got = step_times(model, [b] * cfg.steps, cfg.head, causal, cfg.dtype)
            if r:
                times[i] += got
    seconds = np.array([statistics.median(t) / cfg.rows for t in times])
    stats = np.array([[sum(d), sum(x * x for x in d), len(d)] for d in designs], np.float64)
    cost, fit = fit_row_cost(stats[:, 0], stats[:, 1], stats[:, 2], seconds)
    flops = model_flops(model, causal=causal)
    return {
        "model": cfg.model,
        "size": cfg.size,
        "max_len": cfg.max_len,
        "attention": cfg.attention,
        "head": cfg.head,
        "device": device_name(dev),
        "dtype": cfg.dtype,
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "rows_per_step": cfg.rows,
        "steps": cfg.steps,
        "repeats": cfg.repeats,
        "cost": cost.to_dict(),
        "fit": fit,
        "designs": [
            {
                "lengths": _short(d),
                "tokens": int(s[0]),
                "squares": int(s[1]),
                "sequences": int(s[2]),
                "measured_s": float(t),
                "predicted_s": float(cost.of(*s)),
            }
            for d, s, t in zip(designs, stats, seconds)
        ],
        # the FLOP model's attention share, scaled to these seconds (its per_square / per_token ratio)
        "flops_ratio": flops.per_square / flops.per_token,
        "measured_ratio": cost.per_square / max(cost.per_token, 1e-300),
    }


def model_flops(model: torch.nn.Module, *, causal: bool) -> RowCost:
    """`RowCost.from_flops` of a seqpack model (its config's hidden size and layers)."""
    c: Any = model.config
    return RowCost.from_flops(
        hidden=int(c.hidden), layers=int(c.layers), ffn=getattr(c, "intermediate", 0) or None, vocab=0, causal=causal
    )


def _short(lengths: list[int]) -> str:
    """``[3072, 16, 16]`` -> ``"3072 + 2 x 16"``."""
    runs = [(v, len(list(g))) for v, g in itertools.groupby(lengths)]
    return " + ".join(f"{n} x {v}" if n > 1 else str(v) for v, n in runs)


def format_calibration(r: dict[str, Any]) -> str:
    c, f = r["cost"], r["fit"]
    lines = [
        f"{r['model']} ({r['size']}), max_len {r['max_len']}, attention {r['attention']}, {r['device']} {r['dtype']}, "
        f"{r['threads']} threads; {r['repeats']} rounds x {r['steps']} steps of {r['rows_per_step']} rows",
        f"{'row (sequence lengths)':40s} {'sum l^2':>12s} {'measured s':>11s} {'predicted s':>12s} {'error':>7s}",
    ]
    for d in r["designs"]:
        lines.append(
            f"{d['lengths'][:40]:40s} {d['squares']:12,d} {d['measured_s']:11.4f} {d['predicted_s']:12.4f} "
            f"{(d['predicted_s'] / d['measured_s'] - 1):+7.1%}"
        )
    lines += [
        f"seconds per row = {c['per_token']:.3e} x tokens + {c['per_square']:.3e} x sum(l^2) + {c['per_sequence']:.3e} x sequences",
        f"fit error over {f['rows']} rows: rms {f['rms_rel_error']:.1%}, max {f['max_rel_error']:.1%}; "
        f"attention share per_square/per_token {r['measured_ratio']:.2e} measured, {r['flops_ratio']:.2e} by FLOPs",
    ]
    return "\n".join(lines)


__all__ = ["calibrate", "design_batch", "design_rows", "format_calibration", "model_flops"]
