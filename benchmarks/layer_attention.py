"""What a layer's attention arguments cost in packed rows: one architecture shape, four attention
kinds, the same packed rows, through ``seqpack_packed`` (the backend ``auto`` picks for them).

Run: .venv/bin/python benchmarks/layer_attention.py [--quick] [--out benchmarks/results/layer_attention.json]

Rows (seed 0): ``--rows`` rows of 2,048 tokens packed from documents of lognormal lengths (median
300, sigma 1.0, clipped to 16-2,048) with the ``best`` plan; random token ids of a 2,048 vocabulary.
Model: 256 hidden, 4 layers, 8 heads / 4 kv heads, fp32, 2 threads, random init. Arms, each a
forward + backward of the per-sequence loss through ``seqpack.nn.packed_forward``:

  llama     no layer arguments (``auto``: ``per_document`` on these rows)
  mistral   a sliding window of 256 tokens on every layer (``per_document`` with a band per bucket)
  llama4    chunks of 256 tokens on alternate layers (``per_document``)
  gemma2    windows of 256 on alternate layers and soft-capping 50 (``per_document``: SDPA cannot
            soft-cap, so each bucket runs the reference attention)
  gemma2_eager   the same model with the plan forced to ``eager`` (the dense reference over the
            whole row: what ``auto`` picked before buckets could soft-cap)

The arms alternate, ``--rounds`` times after a warm-up; the median seconds per step and tokens/s.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import write_result

T, VOCAB = 2048, 2048
SHAPE = {
    "vocab_size": VOCAB,
    "hidden_size": 256,
    "intermediate_size": 688,
    "num_hidden_layers": 4,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "max_position_embeddings": T,
    "attention_dropout": 0.0,
}
ARMS: dict[str, tuple[str, dict[str, Any]]] = {
    "llama": ("LlamaForCausalLM", {}),
    "mistral": ("MistralForCausalLM", {"sliding_window": 256}),
    "llama4": (
        "Llama4ForCausalLM",
        {
            "attention_chunk_size": 256,
            "head_dim": 32,
            "intermediate_size_mlp": 688,
            "num_local_experts": 1,
            "layer_types": ["chunked_attention", "full_attention"] * 2,
        },
    ),
    "gemma2": ("Gemma2ForCausalLM", {"sliding_window": 256, "attn_logit_softcapping": 50.0, "head_dim": 32}),
    "gemma2_eager": ("Gemma2ForCausalLM", {"sliding_window": 256, "attn_logit_softcapping": 50.0, "head_dim": 32}),
}
#: arms whose plan is made with this backend instead of ``auto``
FORCED = {"gemma2_eager": "eager"}
CONFIGS = {
    "LlamaForCausalLM": "LlamaConfig",
    "MistralForCausalLM": "MistralConfig",
    "Llama4ForCausalLM": "Llama4TextConfig",
    "Gemma2ForCausalLM": "Gemma2Config",
}


def batch(rows: int) -> dict[str, Any]:
    import torch

    from seqpack.packing import pack_lengths

    rng = np.random.default_rng(0)
    lengths = np.clip(rng.lognormal(np.log(300), 1.0, size=rows * 12), 16, T).astype(np.int64)
    packing = pack_lengths(lengths, max_len=T)
    seg = np.zeros((rows, T), dtype=np.int64)
    for r, members in enumerate(packing.pack(i) for i in range(rows)):
        at = 0
        for k, i in enumerate(members, start=1):
            seg[r, at : at + lengths[i]] = k
            at += int(lengths[i])
    ids = rng.integers(2, VOCAB, size=(rows, T))
    labels = np.where(seg > 0, ids, -100)
    return {
        "input_ids": torch.from_numpy(ids),
        "segment_ids": torch.from_numpy(seg).int(),
        "labels": torch.from_numpy(labels),
    }


def model(name: str) -> Any:
    import torch
    import transformers as tf

    from seqpack.nn.hf_attention import register_packed_attention

    cls_name, extra = ARMS[name]
    torch.manual_seed(0)
    config = getattr(tf, CONFIGS[cls_name])(**SHAPE, **extra)
    config._attn_implementation = "eager"
    m = getattr(tf, cls_name)(config)
    register_packed_attention()
    m.set_attn_implementation("seqpack_packed")
    return m


def step(m: Any, b: dict[str, Any], backend: str = "auto") -> tuple[float, str]:
    import torch

    from seqpack.nn.attention import count_backends, plan_attention
    from seqpack.nn.hf_adapter import hf_inputs
    from seqpack.nn.hf_support import packing_support
    from seqpack.nn.losses import sequence_token_losses

    t0 = time.perf_counter()
    with count_backends() as ran:
        inputs = hf_inputs(m, b)
    if backend != "auto":
        inputs["seqpack_plan"] = plan_attention(
            b["segment_ids"],
            causal=True,
            backend=backend,
            needs=packing_support(m).needs,
            position_ids=inputs["position_ids"],
        )
        ran = Counter({backend: 1})
    with torch.enable_grad():
        per, present = sequence_token_losses(m(**inputs).logits, b["labels"], b["segment_ids"], shift=True)
        (per * present).sum().backward()
    m.zero_grad(set_to_none=True)
    return time.perf_counter() - t0, ",".join(sorted(ran))


def main() -> None:
    import torch

    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="2 rows, 1 round")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    rows, rounds = (2, 1) if a.quick else (a.rows, a.rounds)
    torch.set_num_threads(2)
    b = batch(rows)
    real = int((b["segment_ids"] > 0).sum())
    models = {name: model(name) for name in ARMS}
    backends = {name: step(m, b, FORCED.get(name, "auto"))[1] for name, m in models.items()}  # warm-up
    times: dict[str, list[float]] = {name: [] for name in ARMS}
    for _ in range(rounds):
        for name, m in models.items():
            times[name].append(step(m, b, FORCED.get(name, "auto"))[0])
    med = {name: statistics.median(ts) for name, ts in times.items()}
    out = {
        "rows": rows,
        "row_length": T,
        "real_tokens": real,
        "shape": SHAPE,
        "arms": {n: ARMS[n][1] for n in ARMS},
        "backend": backends,
        "seconds": times,
        "median_seconds": med,
        "tokens_per_second": {n: real / s for n, s in med.items()},
        "relative_to_llama": {n: med[n] / med["llama"] for n in med},
    }
    for n in ARMS:
        print(
            f"{n:12s} {backends[n]:14s} {med[n]:7.2f} s  {real / med[n]:9,.0f} tokens/s  x{med[n] / med['llama']:.2f}"
        )
    write_result(a.out, out, packages=("torch", "transformers"))


if __name__ == "__main__":
    main()
