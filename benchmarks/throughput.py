"""Packed vs padded training throughput on CPU (issue 5 goals): forward + backward, fp32, 2 threads.

Run: .venv/bin/python benchmarks/throughput.py [--quick] [--repeats 3]

Lengths are sampled from ../shared/data/histograms/wikipedia_len512_histogram.npy (seed 0).
The same sequences are laid out twice, in the same process:
  padded   one sequence per row, padded to T
  packed   rows packed by ``best`` (no depth limit)
Throughput counts real (non-padding) tokens per second; each figure is the median over
``--repeats`` measurements of ``--steps`` steps after a warm-up step.

  bert   4-layer BERT, hidden 256, 4 heads, vocab 30,522, T=512, MLM on 15% of tokens
         (per-sequence loss): goal packed / padded >= 1.95
  gpt    the same size, causal LM, T=2048, rows of ~8 Wikipedia-length documents:
         goal packed / padded > the packing factor (the per-document attention path)

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

from _common import SHARED  # type: ignore[import-not-found]

from seqpack.nn.attention import plan_attention
from seqpack.nn.losses import token_loss
from seqpack.nn.models import GPT, BertConfig, BertForPreTraining, GPTConfig
from seqpack.packing import pack_lengths

VOCAB = 30522


def wiki_lengths(n: int, seed: int = 0) -> np.ndarray:
    h = np.load(SHARED / "histograms" / "wikipedia_len512_histogram.npy").astype(np.float64)
    return np.random.default_rng(seed).choice(np.arange(1, h.size + 1), size=n, p=h / h.sum())


def layout(seqs: list[np.ndarray], labels: list[np.ndarray], groups: list[np.ndarray], T: int) -> dict[str, torch.Tensor]:
    """Rows of ``groups`` (sequence indices per row): input_ids, labels, segment_ids."""
    B = len(groups)
    ids = np.zeros((B, T), np.int64)
    lab = np.full((B, T), -100, np.int64)
    seg = np.zeros((B, T), np.int64)
    for r, g in enumerate(groups):
        at = 0
        for k, i in enumerate(g):
            n = seqs[i].size
            ids[r, at : at + n], lab[r, at : at + n], seg[r, at : at + n] = seqs[i], labels[i], k + 1
            at += n
    return {"input_ids": torch.from_numpy(ids), "labels": torch.from_numpy(lab), "segment_ids": torch.from_numpy(seg)}


def make_batches(
    task: str, lengths: np.ndarray, T: int, batch: int, steps: int, repeats: int, seed: int
) -> dict:
    """Per measurement, ``steps`` packed batches and the full padded batches of the same sequences
    (a last, partial padded batch is left out: it would cost a step for a few rows)."""
    rng = np.random.default_rng(seed)
    seqs = [rng.integers(0, VOCAB, size=int(n)) for n in lengths]
    if task == "mlm":
        labels = [np.where(rng.random(s.size) < 0.15, s, -100) for s in seqs]
    else:  # causal LM, HF convention: the model shifts; no target for each sequence's first token
        labels = [np.concatenate([[-100], s[1:]]) for s in seqs]
    packing = pack_lengths(lengths, T, algorithm="best", seed=seed)
    packs = [packing.pack(i) for i in range(packing.num_packs)]
    per = batch * steps
    if len(packs) < per * (repeats + 1):
        raise SystemExit(f"only {len(packs)} packs for {per * (repeats + 1)} rows: pass more --sequences")
    rounds = []
    for r in range(repeats + 1):  # round 0 is the warm-up
        chunk = packs[r * per : (r + 1) * per]
        singles = [np.array([i]) for p in chunk for i in p]
        rounds.append({
            "packed": [layout(seqs, labels, chunk[j : j + batch], T) for j in range(0, per, batch)],
            "padded": [layout(seqs, labels, singles[j : j + batch], T) for j in range(0, len(singles) - batch + 1, batch)],
        })
    return {"rounds": rounds, "packing_factor": packing.plan.packing_factor, "efficiency": packing.plan.efficiency}


def step(model: torch.nn.Module, b: dict[str, torch.Tensor], head: str) -> None:
    if head == "targets":  # the model projects onto the vocabulary only at target tokens
        loss = model(b["input_ids"], b["segment_ids"], labels=b["labels"]).loss
    else:  # logits at every position, as Hugging Face models compute them
        logits = model(b["input_ids"], b["segment_ids"]).logits
        loss = token_loss(logits, b["labels"], b["segment_ids"], shift=isinstance(model, GPT))
    loss.backward()
    model.zero_grad(set_to_none=True)


def timed_pass(model: torch.nn.Module, batches: list[dict], head: str) -> tuple[int, float]:
    """Real tokens and seconds for one pass over ``batches``."""
    tokens = sum(int((b["segment_ids"] > 0).sum()) for b in batches)
    t0 = time.perf_counter()
    for b in batches:
        step(model, b, head)
    return tokens, time.perf_counter() - t0


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
        T, batch, task = 512, args.batch, "mlm"
        make = lambda attn: BertForPreTraining(  # noqa: E731
            BertConfig(vocab_size=VOCAB, hidden=256, layers=4, heads=4, max_position=T, dropout=0.0, attention=attn))
    else:
        T, batch, task = 2048, max(1, args.batch // 8), "clm"
        make = lambda attn: GPT(GPTConfig(vocab_size=VOCAB, hidden=256, layers=4, heads=4, max_position=T, attention=attn))  # noqa: E731
    lengths = wiki_lengths(args.sequences if name == "bert" else args.sequences * 2, seed=0)
    data = make_batches(task, lengths, T, batch, args.steps, args.repeats, seed=0)
    rounds = data["rounds"]
    result: dict = {"case": name, "T": T, "batch_rows": batch, "steps": args.steps,
                    "packing_factor": data["packing_factor"], "efficiency": data["efficiency"]}
    for head in args.heads:
        models = {"padded": make("sdpa").train(), "sdpa": make("sdpa").train(), "per_document": make("per_document").train()}
        rates: dict[str, list[float]] = {k: [] for k in models}
        for r, rd in enumerate(rounds):  # interleaved, so that drift hits every variant alike
            for k, m in models.items():
                tokens, secs = timed_pass(m, rd["padded" if k == "padded" else "packed"], head)
                if r:  # round 0 warms up
                    rates[k].append(tokens / secs)
        res: dict = {"padded_tokens_per_s": statistics.median(rates["padded"])}
        for backend in ("sdpa", "per_document"):
            speedups = [q / p for p, q in zip(rates["padded"], rates[backend])]  # same round, same pool
            rate = statistics.median(rates[backend])
            plan_s = plan_time(rounds[0]["packed"], task == "clm", backend)
            res[backend] = {
                "packed_tokens_per_s": rate,
                "realized_speedup": statistics.median(speedups),
                "speedups": speedups,
                "overhead": 1 - statistics.median(speedups) / data["packing_factor"],
                "plan_s": plan_s,
                "plan_share_of_step": plan_s * rate / (tokens / args.steps),
            }
        result[f"head_{head}"] = res
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer steps (a smoke run)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--steps", type=int, default=4, help="packed steps per measurement")
    ap.add_argument("--batch", type=int, default=16, help="rows per step at T=512 (GPT at T=2048 uses an eighth)")
    ap.add_argument("--sequences", type=int, default=4000)
    ap.add_argument("--case", choices=("bert", "gpt", "all"), default="all")
    ap.add_argument("--head", choices=("all", "targets", "both"), default="both",
                    help="vocabulary projection at every position (HF) or only at target tokens")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.quick:
        args.repeats, args.steps = 3, 1
    args.heads = ("all", "targets") if args.head == "both" else (args.head,)
    torch.set_num_threads(2)
    cases = ("bert", "gpt") if args.case == "all" else (args.case,)
    results = [run_case(c, args) for c in cases]
    if args.json:
        print(json.dumps(results, indent=1))
        return
    for r in results:
        print(f"\n{r['case']}: T={r['T']}, {r['batch_rows']} rows/step, packing factor {r['packing_factor']:.3f} "
              f"(efficiency {r['efficiency']:.3%})")
        for head in args.heads:
            h = r[f"head_{head}"]
            print(f" head={head}: padded {h['padded_tokens_per_s']:8.0f} real tokens/s")
            for backend in ("sdpa", "per_document"):
                x = h[backend]
                print(f"  packed {backend:12s} {x['packed_tokens_per_s']:8.0f} real tokens/s  "
                      f"speed-up {x['realized_speedup']:.3f}x  overhead {x['overhead']:+.2%}  "
                      f"plan {x['plan_s'] * 1e3:.1f} ms ({x['plan_share_of_step']:.2%} of a step)")

if __name__ == "__main__":
    main()
