"""Encoders packed against padded on the CPU: a tiny ModernBERT-style and a tiny DeBERTa-v3-style
sequence classifier, the same sequences either way, on two length distributions.

Run: OMP_NUM_THREADS=1 .venv/bin/python benchmarks/encoders.py [--quick] [--out benchmarks/results/encoders.json]

Distributions (seed 0):

  wikipedia  lengths drawn from the paper's Wikipedia histogram (shipped with seqpack:
             ``builtin_histogram("wikipedia")``, lengths 1-512), rows of 512 tokens
  glue       GLUE-like sentence (pair) classification: lognormal lengths (median 28, sigma 0.6,
             clipped to 5-128), rows of 128 tokens

packed into rows with the ``best`` plan. Models: 128 wide, 4 layers, fp32, random init, one thread
(``--threads``). ModernBERT-style: rotary positions, local attention in windows of 128 (|i - j| <= 64)
on every other layer, ``sdpa``. DeBERTa-v3-style: relative attention in 64 log buckets (content to
position and back), no absolute positions, its own (eager) attention. Arms, each a forward + backward
of the per-sequence classification loss through ``seqpack.nn.packed_forward``:

  packed   the packed rows (a block-diagonal mask narrowed per layer kind; each document's own
           first token through the model's pooler and classifier)
  padded   one sequence a row, padded to the row length: the model's own padded forward (a 2-D
           attention mask), what ``seqpack train --padded`` runs

Both arms cover the same sequences and tokens; they alternate, ``--rounds`` times after a warm-up.
Reported: the median seconds per step over all the sequences, real tokens per second, the ratio, and
the largest difference of the two arms' per-sequence losses (the same sequences: float32 rounding).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import wikipedia_lengths, write_result

VOCAB, LABELS = 2048, 3
COMMON = {
    "vocab_size": VOCAB,
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_attention_heads": 4,
    "num_hidden_layers": 4,
    "max_position_embeddings": 512,
    "num_labels": LABELS,
}
MODELS: dict[str, tuple[str, str, dict[str, Any]]] = {
    "modernbert": (
        "ModernBertConfig",
        "sdpa",
        {"local_attention": 128, "global_attn_every_n_layers": 2, "classifier_pooling": "cls", "pad_token_id": 0},
    ),
    "deberta-v3": (
        "DebertaV2Config",
        "eager",
        {
            "relative_attention": True,
            "pos_att_type": ["p2c", "c2p"],
            "position_biased_input": False,
            "position_buckets": 64,
            "max_relative_positions": -1,
            "norm_rel_ebd": "layer_norm",
            "share_att_key": True,
            "hidden_dropout_prob": 0.0,
            "attention_probs_dropout_prob": 0.0,
            "pooler_dropout": 0.0,
        },
    ),
}
#: distribution -> (row length, sequences, sequences in --quick)
DISTRIBUTIONS: dict[str, tuple[int, int, int]] = {"wikipedia": (512, 64, 16), "glue": (128, 256, 64)}


def lengths(name: str, n: int) -> np.ndarray:
    rng = np.random.default_rng(0)
    if name == "wikipedia":
        return wikipedia_lengths(n, rng).astype(np.int64)
    return np.clip(rng.lognormal(np.log(28), 0.6, size=n), 5, 128).astype(np.int64)


def batches(lens: np.ndarray, T: int) -> dict[str, dict[str, Any]]:
    """The packed rows and the padded ones (one sequence each) of the same sequences and labels."""
    import torch

    from seqpack.packing import pack_lengths

    rng = np.random.default_rng(1)
    seqs = [rng.integers(2, VOCAB, size=int(x)) for x in lens]
    labels = rng.integers(0, LABELS, size=len(seqs))
    packing = pack_lengths(lens, max_len=T)
    rows = [packing.pack(i) for i in range(packing.num_packs)]
    D = max(len(r) for r in rows)

    def make(groups: list[list[int]]) -> dict[str, Any]:
        ids = np.zeros((len(groups), T), dtype=np.int64)
        seg = np.zeros((len(groups), T), dtype=np.int64)
        lab = np.full((len(groups), max(len(g) for g in groups)), -100, dtype=np.int64)
        for r, members in enumerate(groups):
            at = 0
            for k, i in enumerate(members):
                ids[r, at : at + lens[i]] = seqs[i]
                seg[r, at : at + lens[i]] = k + 1
                lab[r, k] = labels[i]
                at += int(lens[i])
        return {
            "input_ids": torch.from_numpy(ids),
            "segment_ids": torch.from_numpy(seg),
            "labels": torch.from_numpy(lab),
        }

    assert D >= 1
    return {"packed": make([list(r) for r in rows]), "padded": make([[i] for r in rows for i in r])}


def build(name: str) -> Any:
    import torch
    import transformers as tf

    config_name, impl, extra = MODELS[name]
    torch.manual_seed(0)
    config = getattr(tf, config_name)(**COMMON, **extra)
    return tf.AutoModelForSequenceClassification.from_config(config, attn_implementation=impl).float()


def step(m: Any, b: dict[str, Any]) -> tuple[float, Any]:
    from seqpack.nn.hf_adapter import packed_forward

    t0 = time.perf_counter()
    out = packed_forward(m, b)
    assert out.loss is not None
    out.loss.backward()
    m.zero_grad(set_to_none=True)
    return time.perf_counter() - t0, out


def per_sequence(out: Any, b: dict[str, Any]) -> np.ndarray:
    """The arm's per-sequence losses in the sequences' packed order (rows, then slots)."""
    present = b["labels"] != -100
    return out.per_sequence[present].detach().numpy()


def main() -> None:
    import warnings

    import torch

    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--quick", action="store_true", help="a quarter of the sequences, 1 round")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    rounds = 1 if a.quick else a.rounds
    torch.set_num_threads(a.threads)
    warnings.simplefilter("ignore")
    out: dict[str, Any] = {
        "threads": a.threads,
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "load_average": list(os.getloadavg()),  # other work on the machine while it ran
        "shape": COMMON,
        "models": {k: {"config": v[0], "attn_implementation": v[1], **v[2]} for k, v in MODELS.items()},
        "distributions": {},
        "results": {},
    }
    for dist, (T, n_full, n_quick) in DISTRIBUTIONS.items():
        lens = lengths(dist, n_quick if a.quick else n_full)
        bs = batches(lens, T)
        real = int(lens.sum())
        out["distributions"][dist] = {
            "row_length": T,
            "sequences": len(lens),
            "real_tokens": real,
            "mean_length": float(lens.mean()),
            "rows": {k: int(b["input_ids"].shape[0]) for k, b in bs.items()},
            "packing_factor": len(lens) / int(bs["packed"]["input_ids"].shape[0]),
        }
        for name in MODELS:
            m = build(name)
            outs = {k: step(m, b)[1] for k, b in bs.items()}  # warm-up
            diff = float(
                np.abs(per_sequence(outs["packed"], bs["packed"]) - per_sequence(outs["padded"], bs["padded"])).max()
            )
            times: dict[str, list[float]] = {k: [] for k in bs}
            for _ in range(rounds):
                for k, b in bs.items():
                    times[k].append(step(m, b)[0])
            med = {k: statistics.median(ts) for k, ts in times.items()}
            out["results"][f"{name}/{dist}"] = {
                "seconds": times,
                "median_seconds": med,
                "tokens_per_second": {k: real / s for k, s in med.items()},
                "padded_over_packed": med["padded"] / med["packed"],
                "max_per_sequence_loss_difference": diff,
            }
            print(
                f"{name:10s} {dist:9s} packed {med['packed']:6.2f} s ({real / med['packed']:7,.0f} tok/s)   padded "
                f"{med['padded']:6.2f} s ({real / med['padded']:7,.0f} tok/s)   packed x{med['padded'] / med['packed']:.2f}"
                f"   |loss diff| {diff:.1e}"
            )
    write_result(a.out, out, packages=("torch", "transformers"))


if __name__ == "__main__":
    main()
