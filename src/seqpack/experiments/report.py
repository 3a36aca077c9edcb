"""PNG plots (matplotlib, Agg) and the demo's ``report.html``."""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

COLORS = {"padded": "#c0504d", "packed": "#4f81bd"}


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _finish(fig: Any, ax: Any, path: Path, *, xlabel: str, ylabel: str, title: str, legend: str = "best") -> Path:
    """Labels, legend, save as PNG, close."""
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
    ax.legend(loc=legend)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    _plt().close(fig)
    return path


def plot_curves(curves: Mapping[str, Sequence[Mapping[str, Any]]], path: Path, *, title: str = "") -> Path:
    """Eval loss vs sequences seen (left) and vs training seconds (right), one line per run."""
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for name, recs in curves.items():
        x = [r["sequences"] for r in recs]
        t = [r["train_seconds"] for r in recs]
        y = [r["eval"]["loss"] for r in recs]
        axes[0].plot(x, y, "o-", label=name, color=COLORS.get(name), ms=3)
        axes[1].plot(t, y, "o-", label=name, color=COLORS.get(name), ms=3)
    axes[0].set(xlabel="training sequences seen", ylabel="eval loss")
    axes[0].legend()
    axes[0].grid(alpha=0.3)
    axes[1].grid(alpha=0.3)
    fig.suptitle(title)
    return _finish(fig, axes[1], path, xlabel="training time (s)", ylabel="eval loss", title="")


def plot_histogram(counts: np.ndarray, max_len: int, path: Path, *, title: str = "", log: bool = False) -> Path:
    """Sequences per length; ``log``: a log count axis, so that a pile at max_len (truncated or
    split documents) does not hide the rest."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.bar(np.arange(1, counts.size + 1), counts, width=1.0, color="#4f81bd")
    if log:
        ax.set_yscale("log")
    ax.axvline(max_len, color="#c0504d", ls="--", label=f"max_len {max_len}")
    return _finish(fig, ax, path, xlabel="sequence length (tokens)", ylabel="sequences", title=title)


def plot_fill(fills: Mapping[str, np.ndarray], path: Path, *, title: str = "") -> Path:
    """Distribution of row fill (real tokens / max_len) for padded rows and packed rows."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 3.5))
    bins = np.linspace(0, 1, 41)
    for name, f in fills.items():
        ax.hist(
            f,
            bins=bins,
            alpha=0.6,
            label=f"{name} (mean {np.mean(f):.1%})",
            color=COLORS.get(name),
            weights=np.full(len(f), 1 / max(len(f), 1)),
        )
    return _finish(fig, ax, path, xlabel="row fill (real tokens / max_len)", ylabel="share of rows", title=title)


def plot_throughput(rates: Mapping[str, Mapping[str, float]], path: Path, *, title: str = "") -> Path:
    """Grouped bars: real tokens/s of padded vs packed, one group per model."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 3.5))
    groups = list(rates)
    x = np.arange(len(groups))
    for i, kind in enumerate(("padded", "packed")):
        vals = [rates[g][kind] for g in groups]
        bars = ax.bar(x + (i - 0.5) * 0.38, vals, width=0.38, label=kind, color=COLORS[kind])
        if kind == "packed":
            for b, g in zip(bars, groups):
                ax.annotate(
                    f"{rates[g]['packed'] / rates[g]['padded']:.2f}x",
                    (b.get_x() + b.get_width() / 2, b.get_height()),
                    ha="center",
                    va="bottom",
                    fontsize=9,
                )
    ax.set_xticks(x, groups)
    return _finish(fig, ax, path, xlabel="", ylabel="real tokens / s (training)", title=title)


def plot_split(splits: Mapping[str, Mapping[str, float]], path: Path, *, title: str = "") -> Path:
    """Horizontal stacked bars: a training step's seconds in the body and in the rest (heads, loss)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 0.5 * len(splits) + 1.5))
    names = list(splits)
    body = np.array([splits[n]["body_s"] for n in names])
    rest = np.array([splits[n]["head_s"] for n in names])
    ax.barh(names, body, color="#4f81bd", label="transformer body")
    ax.barh(names, rest, left=body, color="#9bbb59", label="heads, loss, their gradients")
    for i, (b, r) in enumerate(zip(body, rest)):
        ax.annotate(
            f"body {b / max(b + r, 1e-12):.0%}",
            (b + r, i),
            xytext=(4, 0),
            textcoords="offset points",
            va="center",
            fontsize=9,
        )
    ax.invert_yaxis()
    ax.set_xlim(0, float((body + rest).max()) * 1.3 if len(names) else 1)
    return _finish(fig, ax, path, xlabel="seconds per step", ylabel="", title=title, legend="lower right")


def plot_speedups(items: Mapping[str, tuple[float, float]], path: Path, *, title: str = "") -> Path:
    """Realised speed-up (packed / padded throughput) per run, with its packing factor (the
    theoretical speed-up) marked: horizontal bars, so long labels stay legible."""
    plt = _plt()
    names = list(items)
    fig, ax = plt.subplots(figsize=(7, 0.55 * len(names) + 1.6))
    y = np.arange(len(names))
    realised = [items[n][0] for n in names]
    factor = [items[n][1] for n in names]
    ax.barh(y, realised, color=COLORS["packed"], label="realised speed-up")
    ax.scatter(factor, y, marker="|", s=400, color="#222", zorder=3, label="packing factor")
    for i, (r, f) in enumerate(zip(realised, factor)):
        ax.annotate(
            f"{r:.2f}x of {f:.2f}", (max(r, f), i), xytext=(8, 0), textcoords="offset points", va="center", fontsize=9
        )
    ax.axvline(1.0, color=COLORS["padded"], ls="--", lw=1, label="padded (1x)")
    ax.set_yticks(y, names)
    ax.invert_yaxis()
    ax.set_xlim(0, max(factor + realised) * 1.7)
    return _finish(
        fig,
        ax,
        path,
        xlabel="packed / padded training throughput (real tokens/s)",
        ylabel="",
        title=title,
        legend="lower right",
    )


def write_html(path: Path, title: str, sections: Sequence[tuple[str, str | list[list[str]] | Path]]) -> Path:
    """A self-contained page: each section is a heading and a paragraph, a table or an image."""
    parts = [
        f"<!doctype html><meta charset='utf-8'><title>{html.escape(title)}</title>",
        "<style>body{font:15px sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}"
        "table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}"
        "th{background:#f3f3f3}td:first-child{text-align:left}img{max-width:100%}h2{margin-top:1.6em}</style>",
        f"<h1>{html.escape(title)}</h1>",
    ]
    for head, body in sections:
        parts.append(f"<h2>{html.escape(head)}</h2>")
        if isinstance(body, Path):
            parts.append(f"<img src='{html.escape(body.name)}' alt='{html.escape(head)}'>")
        elif isinstance(body, list):
            rows = [f"<tr>{''.join(f'<th>{html.escape(c)}</th>' for c in body[0])}</tr>"]
            rows += [f"<tr>{''.join(f'<td>{html.escape(c)}</td>' for c in r)}</tr>" for r in body[1:]]
            parts.append(f"<table>{''.join(rows)}</table>")
        elif "\n" in body:
            parts.append(f"<pre>{html.escape(body)}</pre>")
        else:
            parts.append(f"<p>{html.escape(body)}</p>")
    path.write_text("\n".join(parts) + "\n", encoding="utf-8")
    return path
