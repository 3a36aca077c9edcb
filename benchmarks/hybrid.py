"""Hybrid models packed against padded on the CPU: a tiny Qwen3.5 (Gated DeltaNet + attention) and a
tiny Nemotron-H (Mamba2 + attention + MLP), the same sequences either way.

Run: .venv/bin/python benchmarks/hybrid.py [--quick] [--out benchmarks/results/hybrid.json]

Sequences (seed 0): lognormal lengths (median 220, sigma 0.6, clipped to 16-512), packed into rows of
512 tokens with the ``best`` plan (a packing factor of about 2). Models: 128 wide, 4 layers (two
state-carrying, two attention; Nemotron-H's pattern ``M*M-``), fp32, random init, 2 threads. Arms, each
a forward + backward of the per-sequence loss through ``seqpack.nn.packed_forward``:

  packed   the packed rows (``seqpack_packed`` attention; each state-carrying layer on the row's
           documents, `seqpack.nn.hf_mixers`)
  padded   one sequence a row, padded to 512 (what ``seqpack train --padded`` runs)

Both arms cover the same sequences and tokens; they alternate, ``--rounds`` times after a warm-up.
Reported: the median seconds per step over all the sequences, real tokens per second, the ratio.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import write_result

T, VOCAB = 512, 2048
COMMON = {
    "vocab_size": VOCAB,
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "max_position_embeddings": T,
    "attention_dropout": 0.0,
    "use_cache": False,
}
MODELS: dict[str, tuple[str, str, dict[str, Any]]] = {
    "qwen3_5": (
        "Qwen3_5TextConfig",
        "Qwen3_5ForCausalLM",
        {
            "num_hidden_layers": 4,
            "layer_types": ["linear_attention", "full_attention"] * 2,
            "linear_num_value_heads": 4,
            "linear_num_key_heads": 2,
            "linear_key_head_dim": 32,
            "linear_value_head_dim": 32,
        },
    ),
    "nemotron_h": (
        "NemotronHConfig",
        "NemotronHForCausalLM",
        {
            "num_hidden_layers": 4,
            "hybrid_override_pattern": "M*M-",
            "mamba_num_heads": 4,
            "mamba_head_dim": 32,
            "ssm_state_size": 16,
            "n_groups": 1,
            "chunk_size": 64,
        },
    ),
}


def sequences(n: int) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    lengths = np.clip(rng.lognormal(np.log(220), 0.6, size=n), 16, T).astype(np.int64)
    return [rng.integers(2, VOCAB, size=int(x)) for x in lengths]


def packed_batch(seqs: list[np.ndarray]) -> dict[str, Any]:
    import torch

    from seqpack.packing import pack_lengths

    lengths = np.array([len(s) for s in seqs])
    packing = pack_lengths(lengths, max_len=T)
    rows = [packing.pack(i) for i in range(packing.num_packs)]
    ids = np.zeros((len(rows), T), dtype=np.int64)
    seg = np.zeros((len(rows), T), dtype=np.int64)
    for r, members in enumerate(rows):
        at = 0
        for k, i in enumerate(members, start=1):
            ids[r, at : at + lengths[i]] = seqs[i]
            seg[r, at : at + lengths[i]] = k
            at += int(lengths[i])
    labels = np.where(seg > 0, ids, -100)
    return {
        "input_ids": torch.from_numpy(ids),
        "segment_ids": torch.from_numpy(seg).int(),
        "labels": torch.from_numpy(labels),
    }


def padded_batch(seqs: list[np.ndarray]) -> dict[str, Any]:
    import torch

    ids = np.zeros((len(seqs), T), dtype=np.int64)
    seg = np.zeros((len(seqs), T), dtype=np.int64)
    for r, s in enumerate(seqs):
        ids[r, : len(s)], seg[r, : len(s)] = s, 1
    labels = np.where(seg > 0, ids, -100)
    return {
        "input_ids": torch.from_numpy(ids),
        "segment_ids": torch.from_numpy(seg).int(),
        "labels": torch.from_numpy(labels),
    }


def build(name: str) -> Any:
    import torch
    import transformers as tf

    from seqpack.nn.hf_attention import register_packed_attention

    config_name, cls_name, extra = MODELS[name]
    torch.manual_seed(0)
    config = getattr(tf, config_name)(**COMMON, **extra)
    config._attn_implementation = "eager"
    m = getattr(tf, cls_name)(config).float()
    register_packed_attention()
    m.set_attn_implementation("seqpack_packed")
    return m


def step(m: Any, b: dict[str, Any]) -> float:
    from seqpack.nn.hf_adapter import packed_forward

    t0 = time.perf_counter()
    out = packed_forward(m, b)
    assert out.loss is not None
    out.loss.backward()
    m.zero_grad(set_to_none=True)
    return time.perf_counter() - t0


def main() -> None:
    import warnings

    import torch

    ap = argparse.ArgumentParser()
    ap.add_argument("--sequences", type=int, default=48)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="16 sequences, 1 round")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    n, rounds = (16, 1) if a.quick else (a.sequences, a.rounds)
    torch.set_num_threads(2)
    warnings.simplefilter("ignore")  # transformers' notes that its PyTorch fallbacks are slower than CUDA kernels
    seqs = sequences(n)
    batches = {"packed": packed_batch(seqs), "padded": padded_batch(seqs)}
    real = sum(len(s) for s in seqs)
    out: dict[str, Any] = {
        "sequences": n,
        "row_length": T,
        "real_tokens": real,
        "rows": {k: int(b["input_ids"].shape[0]) for k, b in batches.items()},
        "packing_factor": n / int(batches["packed"]["input_ids"].shape[0]),
        "shape": COMMON,
        "models": {k: v[2] for k, v in MODELS.items()},
        "results": {},
    }
    for name in MODELS:
        m = build(name)
        for b in batches.values():
            step(m, b)  # warm-up
        times: dict[str, list[float]] = {k: [] for k in batches}
        for _ in range(rounds):
            for k, b in batches.items():
                times[k].append(step(m, b))
        med = {k: statistics.median(ts) for k, ts in times.items()}
        out["results"][name] = {
            "seconds": times,
            "median_seconds": med,
            "tokens_per_second": {k: real / s for k, s in med.items()},
            "padded_over_packed": med["padded"] / med["packed"],
        }
        print(
            f"{name:11s} packed {med['packed']:6.2f} s ({real / med['packed']:7,.0f} tok/s)   padded "
            f"{med['padded']:6.2f} s ({real / med['padded']:7,.0f} tok/s)   packed x{med['padded'] / med['packed']:.2f}"
        )
    write_result(a.out, out, packages=("torch", "transformers"))


if __name__ == "__main__":
    main()
