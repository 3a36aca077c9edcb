"""A transformers model's vocabulary head in DPO: at every position (its full logits, sliced) or
only where a response token is predicted (``seqpack.tasks.preference.forward.HEAD_AT_TARGETS``).

Run: .venv/bin/python benchmarks/dpo_head.py [--out benchmarks/results/dpo_head.json]

A small Llama (256 hidden, 4 layers, GQA, ``seqpack_packed`` attention) with a 32,000-entry
vocabulary, fp32, 2 threads; 400 UltraFeedback-shaped pairs (``preference.py``'s data) packed at
2048 in the ``pairs`` layout, 4 rows a step; one forward + backward of ``policy_logps`` and the DPO
loss per step. Each arm in fresh processes, alternating, ``--rounds`` of each: the median step
after a first one, and the process's peak RSS (VmHWM).
"""

from __future__ import annotations

import argparse
import json
import statistics

from _common import PEAK_MB, RESULTS, run_child, scratch_dir, write_result

CHILD = (
    PEAK_MB
    + """
import json, statistics, sys, time, torch
sys.path.insert(0, {bench!r})
torch.set_num_threads(2)
import transformers as tf
from seqpack.data.torch_dataset import PackedDataset, collate_packed
from seqpack.nn.hf_attention import register_packed_attention
from seqpack.tasks.preference import forward
from preference import LLAMAS
if {full}:
    forward.HEAD_AT_TARGETS = ()  # the other arm: every position's logits, then a slice
register_packed_attention()
torch.manual_seed(0)
cfg = tf.LlamaConfig(**{{k: v for k, v in LLAMAS["small"].items() if k != "model_type"}}, vocab_size=32000,
                     attn_implementation="seqpack_packed")
model = tf.LlamaForCausalLM(cfg)
ds = PackedDataset({data!r})
times = []
for s in range({steps} + 1):
    b = collate_packed([ds[i] for i in range(4 * s, 4 * s + 4)])
    b.pop("example_ids")
    t0 = time.perf_counter()
    lp = forward.policy_logps(model, b)
    loss = -torch.nn.functional.logsigmoid(0.1 * (lp.chosen - lp.rejected))[lp.present].mean()
    loss.backward()
    model.zero_grad(set_to_none=True)
    times.append(time.perf_counter() - t0)
print(json.dumps({{"step_s": statistics.median(times[1:]), "times": times, "peak_mb": peak_mb()}}))
"""
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=str(RESULTS / "dpo_head.json"))
    args = ap.parse_args()
    from pathlib import Path

    from preference import pairs_data, word_tokenizer

    from seqpack.pipeline import PackConfig, build_packed_dataset
    from seqpack.tokenizer import open_tokenizer

    work = scratch_dir("seqpack-dpo-head-")
    tok = word_tokenizer(work / "tok")
    build_packed_dataset(
        pairs_data(400, 2048),
        open_tokenizer(tok),
        work / "pairs",
        PackConfig.for_task("preference", max_len=2048, layout="pairs"),
    )
    bench = str(Path(__file__).resolve().parent)
    runs: dict[str, list[dict]] = {"full logits": [], "head at targets": []}
    for _ in range(args.rounds):
        for arm, got in runs.items():
            r = run_child(
                CHILD.format(bench=bench, full=arm == "full logits", data=str(work / "pairs"), steps=args.steps)
            )
            got.append(r)
            print(arm, json.dumps({k: r[k] for k in ("step_s", "peak_mb")}), flush=True)
    res = {
        arm: {
            "step_s": statistics.median(r["step_s"] for r in v),
            "peak_mb": statistics.median(r["peak_mb"] for r in v),
            "runs": v,
        }
        for arm, v in runs.items()
    }
    res["time_ratio"] = res["head at targets"]["step_s"] / res["full logits"]["step_s"]
    res["peak_saved_mb"] = res["full logits"]["peak_mb"] - res["head at targets"]["peak_mb"]
    print(json.dumps({k: v for k, v in res.items() if not isinstance(v, dict)}))
    write_result(args.out, res, packages=("torch", "transformers"))


if __name__ == "__main__":
    main()
