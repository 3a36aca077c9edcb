"""Packed vs padded training throughput on CPU against its goals: forward + backward, fp32, 2 threads.

Run: .venv/bin/python benchmarks/throughput.py [--quick] [--repeats 3] [--out results/throughput.json]

Not through the subprocess harness: padded and packed are the same package and model, and what is
compared is the step, so they share one process and alternate round by round (round 0 warms up),
which cancels drift better than separate processes would; medians and per-round ratios are stored.

A pool of ``--sequences`` lengths is sampled from
../shared/data/histograms/wikipedia_len512_histogram.npy (seed 0) and laid out two ways:
  padded   one sequence per row, padded to T (batches of random sequences)
  packed   rows packed by ``best``, no depth limit (batches of random packs)
Every variant runs ``--steps`` steps per round, rounds interleaved (round 0 warms up).
Real tokens/s = real tokens per row over the whole pool x rows / median step time: a
per-batch token count would make the figure swing with which sequences a few batches drew,
while the step time of a row barely depends on its content.

Two conventions for the vocabulary projection (``--head``):
  all      logits and cross-entropy at every position (ignore_index for non-targets),
           as Hugging Face models compute them; the per-sequence mean is taken after
  targets  logits only at target tokens (what seqpack's models do when given labels);
           that work grows with real tokens, so packing cannot remove it and the
           realised speed-up is bounded below the packing factor

  bert   4-layer BERT, hidden 256, 4 heads, vocab 30,522, T=512, MLM on 15% of tokens
         (per-sequence loss): goal packed / padded >= 1.95
  gpt    the same size, causal LM, T=2048, rows of ~8 Wikipedia-length documents:
         goal packed / padded > the packing factor (the per-document attention path)

``attention`` times the attention op alone (4 rows x T=2048, 6 documents per row).
Also reported: the theoretical speed-up (packing factor), the overhead
(1 - realised / theoretical, the paper's Table 1 column) and the time to build the
attention plan (masks / indices) as a share of a packed step.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np
import torch
from _common import RESULTS, wikipedia_lengths, write_result

from seqpack.experiments.bench import make_batches, step_times
from seqpack.nn.attention import packed_attention, plan_attention
from seqpack.nn.models import GPT, BertConfig, BertForPreTraining, GPTConfig

VOCAB = 30522


def plan_time(batches: list[dict], causal: bool, backend: str) -> float:
    times = []
    for b in batches[:5]:
        t0 = time.perf_counter()
        plan_attention(b["segment_ids"], causal=causal, backend=backend)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def run_case(name: str, args: argparse.Namespace) -> dict:
    torch.manual_seed(0)
    if name == "bert":
        T, batch, causal = 512, args.batch, False
    else:
        T, batch, causal = 2048, max(1, args.batch // 4), True

    def make(attn: str) -> torch.nn.Module:
        if name == "bert":
            config = BertConfig(
                vocab_size=VOCAB, hidden=256, layers=4, heads=4, max_position=T, dropout=0.0, attention=attn
            )
            return BertForPreTraining(config)
        return GPT(GPTConfig(vocab_size=VOCAB, hidden=256, layers=4, heads=4, max_position=T, attention=attn))

    lengths = wikipedia_lengths(args.sequences, np.random.default_rng(0))
    per = args.steps
    data = make_batches(lengths, T, batch, per * (args.repeats + 1), seed=0, vocab=VOCAB, causal=causal)
    result: dict = {
        "case": name,
        "T": T,
        "batch_rows": batch,
        "steps": per,
        "repeats": args.repeats,
        "packing_factor": data["packing_factor"],
        "efficiency": data["efficiency"],
    }
    for head in args.heads:
        models = {
            "padded": make("sdpa").train(),
            "sdpa": make("sdpa").train(),
            "per_document": make("per_document").train(),
        }
        times: dict[str, list[list[float]]] = {k: [] for k in models}
        for r in range(args.repeats + 1):  # interleaved rounds, so that drift hits every variant alike
            for k, m in models.items():
                chunk = data["padded" if k == "padded" else "packed"][r * per : (r + 1) * per]
                t = step_times(m, chunk, head, causal)
                if r:  # round 0 warms up
                    times[k].append(t)

        def rate(k: str, ts: list[float]) -> float:  # real tokens per row (whole pool) x rows / step time
            row = data["padded_tokens_per_row" if k == "padded" else "packed_tokens_per_row"]
            return row * batch / statistics.median(ts)

        flat = {k: [x for t in v for x in t] for k, v in times.items()}
        res: dict = {
            "padded_tokens_per_s": rate("padded", flat["padded"]),
            "padded_step_s": statistics.median(flat["padded"]),
        }
        for backend in ("sdpa", "per_document"):
            speedup = rate(backend, flat[backend]) / res["padded_tokens_per_s"]
            rounds = [rate(backend, q) / rate("padded", p) for p, q in zip(times["padded"], times[backend])]
            plan_s = plan_time(data["packed"], causal, backend)
            res[backend] = {
                "packed_tokens_per_s": rate(backend, flat[backend]),
                "packed_step_s": statistics.median(flat[backend]),
                "realized_speedup": speedup,
                "speedup_per_round": rounds,
                "overhead": 1 - speedup / data["packing_factor"],
                "plan_s": plan_s,
                "plan_share_of_step": plan_s / statistics.median(flat[backend]),
            }
        result[f"head_{head}"] = res
    return result


def attention_case(args: argparse.Namespace) -> dict:
    """Attention alone, fwd + bwd: B=4 rows of T=2048 holding 6 documents each, 4 heads of 64."""
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    B, T, H, d, docs = 4, 2048, 4, 64, 6
    seg = torch.zeros(B, T, dtype=torch.long)
    for b in range(B):
        cuts = np.sort(rng.choice(np.arange(1, T), docs - 1, replace=False))
        seg[b] = torch.from_numpy(np.repeat(np.arange(1, docs + 1), np.diff(np.r_[0, cuts, T])))
    q, k, v = (torch.randn(B, H, T, d, requires_grad=True) for _ in range(3))
    out: dict = {"case": "attention", "T": T, "rows": B, "documents_per_row": docs}
    for causal in (True, False):
        times = {}
        for backend in ("sdpa", "per_document"):
            ts = []
            for _ in range(args.repeats + 1):
                t0 = time.perf_counter()
                packed_attention(q, k, v, plan_attention(seg, causal=causal, backend=backend)).sum().backward()
                ts.append(time.perf_counter() - t0)
            times[backend] = statistics.median(ts[1:])
        out["causal" if causal else "bidirectional"] = {**times, "speedup": times["sdpa"] / times["per_document"]}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer steps (a smoke run)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--steps", type=int, default=4, help="steps per variant per round")
    ap.add_argument("--batch", type=int, default=16, help="rows per step at T=512 (GPT at T=2048 uses a quarter)")
    ap.add_argument("--sequences", type=int, default=20000, help="pool of sampled lengths")
    ap.add_argument("--case", choices=("attention", "bert", "gpt", "all"), default="all")
    ap.add_argument(
        "--head",
        choices=("all", "targets", "both"),
        default="both",
        help="vocabulary projection at every position (HF) or only at target tokens",
    )
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--out", default=str(RESULTS / "throughput.json"), help="the result file ('' for none)")
    args = ap.parse_args()
    if args.quick:
        args.repeats, args.steps = 3, 2
    args.heads = ("all", "targets") if args.head == "both" else (args.head,)
    torch.set_num_threads(2)
    cases = ("attention", "bert", "gpt") if args.case == "all" else (args.case,)
    results = [attention_case(args) if c == "attention" else run_case(c, args) for c in cases]
    write_result(args.out or None, results, packages=("torch",))
    if args.json:
        print(json.dumps(results, indent=1))
        return
    for r in results:
        if r["case"] == "attention":
            print(
                f"attention alone, fwd+bwd, {r['rows']} rows x T={r['T']}, {r['documents_per_row']} documents per row:"
            )
            for kind in ("causal", "bidirectional"):
                x = r[kind]
                print(
                    f"  {kind:13s} dense sdpa {x['sdpa'] * 1e3:6.1f} ms, per-document {x['per_document'] * 1e3:6.1f} ms: "
                    f"{x['speedup']:.2f}x"
                )
            continue
        print(
            f"\n{r['case']}: T={r['T']}, {r['batch_rows']} rows/step, packing factor {r['packing_factor']:.3f} "
            f"(efficiency {r['efficiency']:.3%}), {r['repeats']} rounds x {r['steps']} steps"
        )
        for head in args.heads:
            h = r[f"head_{head}"]
            print(
                f" head={head}: padded {h['padded_tokens_per_s']:7.0f} real tokens/s ({h['padded_step_s']:.2f} s/step)"
            )
            for backend in ("sdpa", "per_document"):
                x = h[backend]
                rounds = " ".join(f"{v:.2f}" for v in x["speedup_per_round"])
                print(
                    f"  packed {backend:12s} {x['packed_tokens_per_s']:7.0f} real tokens/s ({x['packed_step_s']:.2f} s/step)  "
                    f"speed-up {x['realized_speedup']:.3f}x (rounds {rounds})  overhead {x['overhead']:+.2%}  "
                    f"plan {x['plan_s'] * 1e3:.1f} ms ({x['plan_share_of_step']:.2%} of a step)"
                )


if __name__ == "__main__":
    main()
