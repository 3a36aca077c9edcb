"""Gradient checkpointing (``seqpack train --gradient-checkpointing``): memory and step time.

Run: .venv/bin/python benchmarks/checkpointing.py [--out benchmarks/results/checkpointing.json]

Packed GPT rows (clm, causal, lengths from the Wikipedia histogram x 4, packed by ``best``),
forward + backward + AdamW, fp32, 2 threads, each arm in fresh processes (alternating, ``--rounds``
of each). Memory: the process's high-water mark (VmHWM) over the training steps, less its resident
size after a first step (weights, gradients and AdamW's state all exist by then): what the
activations of a step add. Time: the median step after that first one.
"""

from __future__ import annotations

import argparse
import json
import statistics

from _common import PEAK_MB, RESULTS, run_child, write_result

CHILD = (
    PEAK_MB
    + """
import json, statistics, time, torch, numpy as np
torch.set_num_threads(2)
from seqpack.experiments.bench import make_batches
from seqpack.nn.models import GPT, GPTConfig
from seqpack.packing import builtin_histogram
h = builtin_histogram("wikipedia").astype(np.float64)
lengths = np.random.default_rng(0).choice(np.arange(1, h.size + 1), size=4000, p=h / h.sum()) * 4
data = make_batches(lengths, {T}, {rows}, {steps} + 1, seed=0, vocab=512, causal=True)
torch.manual_seed(0)
model = GPT(GPTConfig(vocab_size=512, hidden={hidden}, layers={layers}, heads={heads}, max_position={T}, attention="sdpa"))
model.checkpoint_blocks = {on}
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
def step(b):
    model(b["input_ids"], b["segment_ids"], labels=b["labels"]).loss.backward()
    opt.step(); opt.zero_grad(set_to_none=True)
batches = data["packed"]
step(batches[0])
def rss():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmRSS:")) / 1024
base = rss()
times = []
for b in batches[1:]:
    t0 = time.perf_counter(); step(b); times.append(time.perf_counter() - t0)
print(json.dumps({{"step_s": statistics.median(times), "times": times, "peak_mb": peak_mb(), "base_mb": round(base, 1)}}))
"""
)

MODELS = {  # name: (hidden, layers, heads, T, rows)
    "gpt-small-2048": (256, 4, 4, 2048, 4),
    "gpt-deep-2048": (256, 16, 4, 2048, 4),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=str(RESULTS / "checkpointing.json"))
    args = ap.parse_args()
    results = {}
    for name, (hidden, layers, heads, T, rows) in MODELS.items():
        runs: dict[bool, list[dict]] = {False: [], True: []}
        for _ in range(args.rounds):
            for on in (False, True):
                r = run_child(
                    CHILD.format(T=T, rows=rows, steps=args.steps, hidden=hidden, layers=layers, heads=heads, on=on)
                )
                r["activations_mb"] = round(r["peak_mb"] - r["base_mb"], 1)
                runs[on].append(r)
                print(
                    name,
                    "checkpointing" if on else "plain",
                    json.dumps({k: r[k] for k in ("step_s", "peak_mb", "base_mb")}),
                    flush=True,
                )
        arms = {
            ("checkpointing" if on else "plain"): {
                "step_s": statistics.median(r["step_s"] for r in v),
                "activations_mb": statistics.median(r["activations_mb"] for r in v),
                "peak_mb": statistics.median(r["peak_mb"] for r in v),
                "runs": v,
            }
            for on, v in runs.items()
        }
        p, c = arms["plain"], arms["checkpointing"]
        results[name] = {
            "hidden": hidden,
            "layers": layers,
            "T": T,
            "rows": rows,
            **arms,
            "time_ratio": c["step_s"] / p["step_s"],
            "activation_ratio": c["activations_mb"] / p["activations_mb"],
        }
        print(
            name,
            json.dumps({k: v for k, v in results[name].items() if k not in ("plain", "checkpointing")}),
            flush=True,
        )
    write_result(args.out, results, packages=("torch",))


if __name__ == "__main__":
    main()
