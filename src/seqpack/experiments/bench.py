"""Padded vs packed training throughput, side by side in one process (``seqpack bench``).

    result = run_bench(BenchConfig(lengths="wikipedia", max_len=512, model="bert"))
    result["realized_speedup"], result["packing_factor"], result["overhead"]

A pool of sequence lengths is drawn from a histogram and laid out two ways: one sequence per
row, padded to ``max_len``, and rows packed by ``best``. Both run the same model (forward +
backward) on random batches, in interleaved rounds (round 0 warms up). Real tokens/s = the
pool's real tokens per row x rows / median step time; a per-batch token count would swing
with which few sequences the timed batches drew, while a row's step time barely depends on
its content. ``overhead = 1 - realised / theoretical`` is the paper's Table 1 column.

``head``: ``targets`` projects onto the vocabulary only at target tokens (seqpack's models);
``all`` at every position as Hugging Face models do. The first is cheaper, but its cost grows
with real tokens, which packing cannot remove, so its realised speed-up is lower.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from seqpack._resources import check_memory
from seqpack.errors import UserError

HEADS = ("targets", "all")
DEVICES = ("cpu", "cuda")
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}  # half: autocast


def bench_lengths(source: str, max_len: int | None = None) -> np.ndarray:
    """The length histogram ``--lengths`` names (index = length - 1): ``wikipedia`` (shipped with
    the package), a ``.npy`` / ``.csv`` file (`seqpack.packing.load_histogram`), or a packed
    dataset directory (its manifest's histogram); a file's length past ``max_len`` is refused as it is read."""
    from seqpack.packing import (
        BUILTIN_HISTOGRAMS,
        builtin_histogram,
        check_histogram,
        load_histogram,
    )

    if source in BUILTIN_HISTOGRAMS:
        return builtin_histogram(source)
    p = Path(source)
    if p.is_dir():
        from seqpack.data.format import manifest_histogram

        return manifest_histogram(p)
    if p.suffix not in (".npy", ".csv") or not p.is_file():
        raise UserError(
            f"--lengths {source}: give wikipedia, a .npy/.csv histogram (index = length - 1) or a packed dataset dir"
        )
    return check_histogram(load_histogram(p, max_len, hint="raise --max-len to {longest} or more"))


@dataclass(frozen=True, kw_only=True)
class BenchConfig:
    lengths: str = "wikipedia"
    max_len: int = 512
    model: str = "bert"
    size: str = "small"
    vocab_size: int = 30522
    batch_size: int | None = None  # None: 8192 // max_len rows
    sequences: int = 20_000
    steps: int = 4
    repeats: int = 3
    head: str = "targets"
    attention: str = "auto"
    threads: int | None = None
    seed: int = 0
    device: str = "cpu"
    dtype: str = "fp32"

    def __post_init__(self) -> None:
        if self.model not in ("bert", "gpt"):
            raise UserError(f"model must be bert|gpt, got {self.model!r}")
        if self.device not in DEVICES:
            raise UserError(f"device must be one of {'|'.join(DEVICES)}, got {self.device!r}")
        if self.dtype not in DTYPES:
            raise UserError(f"dtype must be one of {'|'.join(DTYPES)}, got {self.dtype!r}")
        if self.device == "cuda" and not torch.cuda.is_available():
            raise UserError("--device cuda: no CUDA device is visible to torch; use --device cpu")
        if self.head not in HEADS:
            raise UserError(f"head must be one of {'|'.join(HEADS)}, got {self.head!r}")
        for name in ("max_len", "vocab_size", "sequences", "steps", "repeats"):
            if getattr(self, name) < 1:
                raise UserError(f"{name} must be >= 1, got {getattr(self, name)}")

    @property
    def rows(self) -> int:
        return self.batch_size or max(1, 8192 // self.max_len)


def make_batches(
    lengths: np.ndarray, T: int, batch: int, count: int, *, seed: int, vocab: int, causal: bool
) -> dict[str, Any]:
    """``count`` batches of ``batch`` random packs and of ``batch`` random single sequences
    (padded), drawn from the same pool, plus the pool's real tokens per row. Rows come from the
    library: ``pack_sequences`` (``best``) and the padded view ``padded_rows``."""
    from seqpack.data.columns import pack_sequences
    from seqpack.data.padded import padded_rows, sequence_spans
    from seqpack.data.sequences import IGNORE_INDEX, from_lists

    rng = np.random.default_rng(seed)
    seqs = [rng.integers(0, vocab, size=int(n)) for n in lengths]
    if causal:  # HF convention: the model shifts; no target for each sequence's first token
        labels = [np.concatenate([[IGNORE_INDEX], s[1:]]) for s in seqs]
    else:  # masked LM: 15% of tokens are targets
        labels = [np.where(rng.random(s.size) < 0.15, s, IGNORE_INDEX) for s in seqs]
    pool = from_lists(seqs, task="clm" if causal else "mlm")
    pool.token_fields["labels"] = np.concatenate(labels).astype(np.int32)
    pc = pack_sequences(pool, T, algorithm="best", seed=seed)
    cols = {k: pc.columns[k] for k in ("input_ids", "labels", "segment_ids")}
    spans = sequence_spans(cols["segment_ids"])

    def tensors(c: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
        return {k: torch.from_numpy(np.ascontiguousarray(v, dtype=np.int64)) for k, v in c.items()}

    def pick(n: int) -> np.ndarray:
        return rng.choice(n, size=min(batch, n), replace=False)

    def packed_batch() -> dict[str, torch.Tensor]:
        rows = pick(pc.num_packs)
        return tensors({k: v[rows] for k, v in cols.items()})

    return {
        "packed": [packed_batch() for _ in range(count)],
        "padded": [tensors(padded_rows(cols, spans[pick(len(spans))], token_labels=True)) for _ in range(count)],
        "packed_tokens_per_row": float(lengths.sum() / pc.num_packs),
        "padded_tokens_per_row": float(lengths.mean()),
        "packs": pc.num_packs,
        "sequences": len(lengths),
        "packing_factor": pc.packing.plan.packing_factor,
        "efficiency": pc.packing.plan.efficiency,
    }


def hf_style_loss(logits: torch.Tensor, labels: torch.Tensor, seg: torch.Tensor, shift: bool) -> torch.Tensor:
    """Per-sequence mean loss from logits at every position (transformers' way of computing the
    logits), through `seqpack.nn.losses.sequence_token_losses`."""
    from seqpack.nn.losses import mean_over, sequence_token_losses

    per, present = sequence_token_losses(logits, labels, seg, shift=shift)
    return mean_over(per, present)


def step(model: torch.nn.Module, b: dict[str, torch.Tensor], head: str, causal: bool, dtype: str = "fp32") -> None:
    """One forward + backward; half precision runs under autocast (fp32 weights, as in training)."""
    half = DTYPES[dtype] != torch.float32
    device = b["input_ids"].device.type
    with torch.autocast(device, dtype=DTYPES[dtype], enabled=half):
        if head == "targets":
            loss = model(b["input_ids"], b["segment_ids"], labels=b["labels"]).loss
        else:
            logits = model(b["input_ids"], b["segment_ids"]).logits
            loss = hf_style_loss(logits.float(), b["labels"], b["segment_ids"], shift=causal)
    loss.backward()
    model.zero_grad(set_to_none=True)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def step_times(
    model: torch.nn.Module, batches: list[dict[str, torch.Tensor]], head: str, causal: bool, dtype: str = "fp32"
) -> list[float]:
    """Wall time of each step; on CUDA the device is synchronised before and after."""
    out = []
    for b in batches:
        dev = b["input_ids"].device
        _sync(dev)
        t0 = time.perf_counter()
        step(model, b, head, causal, dtype)
        _sync(dev)
        out.append(time.perf_counter() - t0)
    return out


def bench_model(cfg: BenchConfig, attention: str, shape: dict[str, int] | None = None) -> torch.nn.Module:
    """The benchmark's model: ``cfg.size``, or ``shape`` (hidden, layers, heads) over it."""
    from seqpack.nn.models import GPT, BertConfig, BertForPreTraining, GPTConfig

    kw: dict[str, Any] = {
        "vocab_size": cfg.vocab_size,
        "max_position": cfg.max_len,
        "attention": attention,
        **(shape or {}),
    }
    if cfg.model == "bert":
        return BertForPreTraining(BertConfig.of_size(cfg.size, dropout=0.0, **kw)).train()
    return GPT(GPTConfig.of_size(cfg.size, **kw)).train()


def run_bench(cfg: BenchConfig) -> dict[str, Any]:
    """Padded vs packed: tokens/s and sequences/s of each, realised and theoretical speed-up."""
    return run_bench_model(cfg)[0]


def _check_memory(cfg: BenchConfig, hist: np.ndarray) -> None:
    """Refuse a bench whose sequences and batches (int64 ids, labels and segments; packed and padded)
    would not fit the machine, before any is made."""
    mean = float((hist * np.arange(1, hist.size + 1)).sum() / hist.sum())
    batches = cfg.steps * (cfg.repeats + 1)
    check_memory(
        cfg.sequences * mean * 48 + batches * cfg.rows * cfg.max_len * 48,
        what=f"bench's {cfg.sequences:,} sequences and {batches} x 2 batches of {cfg.rows} x {cfg.max_len}",
        hint="lower --sequences, --batch-size, --max-len or --steps",
    )


def run_bench_model(
    cfg: BenchConfig, shape: dict[str, int] | None = None
) -> tuple[dict[str, Any], torch.nn.Module, dict[str, Any]]:
    """`run_bench` with the model shaped by ``shape``; also returns the packed model and the batches."""
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    hist = bench_lengths(cfg.lengths, cfg.max_len)
    longest = int(np.flatnonzero(hist)[-1]) + 1
    if longest > cfg.max_len:
        n = int(hist[cfg.max_len :].sum())
        raise UserError(
            f"{n:,} sequences in {cfg.lengths} exceed --max-len {cfg.max_len} (up to {longest}); raise --max-len"
        )
    _check_memory(cfg, hist)
    rng = np.random.default_rng(cfg.seed)
    lengths = rng.choice(np.arange(1, hist.size + 1), size=cfg.sequences, p=hist / hist.sum())
    torch.manual_seed(cfg.seed)
    causal = cfg.model == "gpt"
    data = make_batches(
        lengths,
        cfg.max_len,
        cfg.rows,
        cfg.steps * (cfg.repeats + 1),
        seed=cfg.seed,
        vocab=cfg.vocab_size,
        causal=causal,
    )
    dev = torch.device(cfg.device)
    for k in ("packed", "padded"):
        data[k] = [{n: x.to(dev) for n, x in b.items()} for b in data[k]]
    models = {
        "padded": bench_model(cfg, "sdpa", shape).to(dev),
        "packed": bench_model(cfg, cfg.attention, shape).to(dev),
    }
    times: dict[str, list[float]] = {k: [] for k in models}
    peak: dict[str, float] = {}
    rounds: list[float] = []
    from seqpack._progress import progress_bar

    for r in progress_bar(iterable=range(cfg.repeats + 1), desc="bench rounds", leave=False):  # interleaved, so that
        # drift hits both alike; round 0 warms up
        got = {}
        for k, m in models.items():
            if r == 0 and dev.type == "cuda":
                torch.cuda.reset_peak_memory_stats(dev)
            got[k] = step_times(m, data[k][r * cfg.steps : (r + 1) * cfg.steps], cfg.head, causal, cfg.dtype)
            if r == 0 and dev.type == "cuda":
                peak[k] = torch.cuda.max_memory_allocated(dev) / 2**30
        if r:
            for k in got:
                times[k] += got[k]
            rounds.append(statistics.median(got["padded"]) / statistics.median(got["packed"]))
    step_s = {k: statistics.median(v) for k, v in times.items()}
    tok = {k: data[f"{k}_tokens_per_row"] * cfg.rows / step_s[k] for k in models}
    seq_per_row = {"padded": 1.0, "packed": data["packing_factor"]}
    speedup = tok["packed"] / tok["padded"]
    result = {
        "model": cfg.model,
        "size": cfg.size,
        "max_len": cfg.max_len,
        "rows": cfg.rows,
        "head": cfg.head,
        "lengths": cfg.lengths,
        "sequences": data["sequences"],
        "packs": data["packs"],
        "efficiency": data["efficiency"],
        "padding_efficiency": float(lengths.mean() / cfg.max_len),
        "packing_factor": data["packing_factor"],
        "padded_tokens_per_s": tok["padded"],
        "packed_tokens_per_s": tok["packed"],
        "padded_sequences_per_s": seq_per_row["padded"] * cfg.rows / step_s["padded"],
        "packed_sequences_per_s": seq_per_row["packed"] * cfg.rows / step_s["packed"],
        "padded_step_s": step_s["padded"],
        "packed_step_s": step_s["packed"],
        "realized_speedup": speedup,
        "speedup_per_round": [r * data["packing_factor"] for r in rounds],
        "overhead": 1 - speedup / data["packing_factor"],
        "attention": cfg.attention,
        "steps": cfg.steps,
        "repeats": cfg.repeats,
        "threads": torch.get_num_threads(),
        "resolved_attention": resolved_backend(cfg, data["packed"][0]["segment_ids"]),
        "device": device_name(dev),
        "dtype": cfg.dtype,
        "torch": torch.__version__,
        "peak_memory_gib": peak,
    }
    return result, models["packed"], data


def time_split(model: Any, b: dict[str, torch.Tensor], repeats: int = 3) -> dict[str, float]:
    """Median seconds of a training step (forward + backward) of a ``BertForPreTraining`` and of its
    transformer body alone on the same batch; ``head`` is the rest (heads, loss, their gradients)."""

    def body() -> None:
        model.bert(b["input_ids"], b["segment_ids"]).sum().backward()
        model.zero_grad(set_to_none=True)

    def whole() -> None:
        step(model, b, "targets", causal=False)

    times = {}
    for name, fn in (("step", whole), ("body", body)):
        fn()  # warm
        runs = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn()
            runs.append(time.perf_counter() - t0)
        times[name] = statistics.median(runs)
    return {"step_s": times["step"], "body_s": times["body"], "head_s": max(times["step"] - times["body"], 0.0)}


def resolved_backend(cfg: BenchConfig, segment_ids: torch.Tensor) -> str:
    """The backend the packed run used (what ``auto`` chose on the first packed batch)."""
    if cfg.attention != "auto":
        return cfg.attention
    from seqpack.nn.attention import choose_backend

    return choose_backend(segment_ids, dtype=DTYPES[cfg.dtype])


def device_name(dev: torch.device) -> str:
    return torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"


def format_bench(r: dict[str, Any]) -> str:
    lines = [
        f"{r['model']} ({r['size']}), max_len {r['max_len']}, {r['rows']} rows/step, head={r['head']}, "
        f"{r['repeats']} rounds x {r['steps']} steps, {r['threads']} threads; lengths: {r['lengths']}",
        f"device {r['device']}, {r['dtype']}, packed attention {r['resolved_attention']} (asked: {r['attention']})",
        f"{'':8s} {'sequences/s':>12s} {'real tokens/s':>14s} {'s/step':>8s}",
    ]
    for k in ("padded", "packed"):
        lines.append(
            f"{k:8s} {r[f'{k}_sequences_per_s']:12.1f} {r[f'{k}_tokens_per_s']:14,.0f} {r[f'{k}_step_s']:8.3f}"
        )
    rounds = " ".join(f"{x:.2f}" for x in r["speedup_per_round"])
    lines += [
        f"packs {r['packs']:,} for {r['sequences']:,} sequences; efficiency {r['efficiency']:.2%} "
        f"(padded {r['padding_efficiency']:.2%}); packing factor (theoretical speed-up) {r['packing_factor']:.3f}",
        f"realised speed-up {r['realized_speedup']:.3f}x (rounds {rounds}); overhead {r['overhead']:+.2%}",
    ]
    return "\n".join(lines)
