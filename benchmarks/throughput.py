"""Packed vs padded training throughput on CPU (issue 5 goals): forward + backward, fp32, 2 threads.

Run: .venv/bin/python benchmarks/throughput.py [--quick] [--repeats 3]

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

from _common import wikipedia_lengths  # type: ignore[import-not-found]

from seqpack.nn.attention import packed_attention, plan_attention
from seqpack.nn.models import GPT, BertConfig, BertForPreTraining, GPTConfig
from seqpack.packing import pack_lengths

VOCAB = 30522


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


def make_batches(task: str, lengths: np.ndarray, T: int, batch: int, count: int, seed: int) -> dict:
    """``count`` batches of ``batch`` random packs and ``count`` of ``batch`` random single
    sequences (padded), drawn from the same pool, plus the pool's real tokens per row."""
    rng = np.random.default_rng(seed)
    seqs = [rng.integers(0, VOCAB, size=int(n)) for n in lengths]
    if task == "mlm":
        labels = [np.where(rng.random(s.size) < 0.15, s, -100) for s in seqs]
    else:  # causal LM, HF convention: the model shifts; no target for each sequence's first token
        labels = [np.concatenate([[-100], s[1:]]) for s in seqs]
    packing = pack_lengths(lengths, T, algorithm="best", seed=seed)
    packs = [packing.pack(i) for i in range(packing.num_packs)]
    pick = lambda n: rng.choice(n, size=batch, replace=False)  # noqa: E731
    return {
        "packed": [layout(seqs, labels, [packs[i] for i in pick(len(packs))], T) for _ in range(count)],
        "padded": [layout(seqs, labels, [np.array([i]) for i in pick(len(seqs))], T) for _ in range(count)],
        "packed_tokens_per_row": float(lengths.sum() / len(packs)),
        "padded_tokens_per_row": float(lengths.mean()),
        "packing_factor": packing.plan.packing_factor,
        "efficiency": packing.plan.efficiency,
    }


def hf_style_loss(logits: torch.Tensor, labels: torch.Tensor, seg: torch.Tensor, shift: bool) -> torch.Tensor:
    """Per-sequence mean of a cross-entropy taken at every position, as transformers computes
    it (``ignore_index`` zeroes the loss, the log-softmax still runs everywhere)."""
    B, T, V = logits.shape
    if shift:  # as transformers' ForCausalLMLoss: shift the labels, not the logits
        pad = torch.full((B, 1), -100, dtype=labels.dtype)
        labels, seg = torch.cat([labels[:, 1:], pad], 1), torch.cat([seg[:, 1:], torch.zeros_like(pad)], 1)
    ce = torch.nn.functional.cross_entropy(logits.reshape(B * T, V), labels.reshape(-1), reduction="none")
    D = int(seg.max())
    slot = (torch.arange(B)[:, None] * (D + 1) + seg).reshape(-1)
    is_target = (labels != -100).reshape(-1).float()
    total = torch.zeros(B * (D + 1)).index_add(0, slot, ce * is_target)
    count = torch.zeros(B * (D + 1)).index_add(0, slot, is_target)
    return (total / count.clamp(min=1))[count > 0].mean()


def step(model: torch.nn.Module, b: dict[str, torch.Tensor], head: str) -> None:
    if head == "targets":  # the model projects onto the vocabulary only at target tokens
        loss = model(b["input_ids"], b["segment_ids"], labels=b["labels"]).loss
    else:  # logits and cross-entropy at every position, as Hugging Face models compute them
        logits = model(b["input_ids"], b["segment_ids"]).logits
        loss = hf_style_loss(logits, b["labels"], b["segment_ids"], shift=isinstance(model, GPT))
    loss.backward()
    model.zero_grad(set_to_none=True)


def step_times(model: torch.nn.Module, batches: list[dict], head: str) -> list[float]:
    out = []
    for b in batches:
        t0 = time.perf_counter()
        step(model, b, head)
        out.append(time.perf_counter() - t0)
    return out


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
        T, batch, task = 2048, max(1, args.batch // 4), "clm"
        make = lambda attn: GPT(GPTConfig(vocab_size=VOCAB, hidden=256, layers=4, heads=4, max_position=T, attention=attn))  # noqa: E731
    lengths = wikipedia_lengths(args.sequences, np.random.default_rng(0))
    per = args.steps
    data = make_batches(task, lengths, T, batch, per * (args.repeats + 1), seed=0)
    result: dict = {"case": name, "T": T, "batch_rows": batch, "steps": per, "repeats": args.repeats,
                    "packing_factor": data["packing_factor"], "efficiency": data["efficiency"]}
    for head in args.heads:
        models = {"padded": make("sdpa").train(), "sdpa": make("sdpa").train(), "per_document": make("per_document").train()}
        times: dict[str, list[list[float]]] = {k: [] for k in models}
        for r in range(args.repeats + 1):  # interleaved rounds, so that drift hits every variant alike
            for k, m in models.items():
                chunk = data["padded" if k == "padded" else "packed"][r * per : (r + 1) * per]
                t = step_times(m, chunk, head)
                if r:  # round 0 warms up
                    times[k].append(t)
        def rate(k: str, ts: list[float]) -> float:  # real tokens per row (whole pool) x rows / step time
            row = data["padded_tokens_per_row" if k == "padded" else "packed_tokens_per_row"]
            return row * batch / statistics.median(ts)
        flat = {k: [x for t in v for x in t] for k, v in times.items()}
        res: dict = {"padded_tokens_per_s": rate("padded", flat["padded"]),
                     "padded_step_s": statistics.median(flat["padded"])}
        for backend in ("sdpa", "per_document"):
            speedup = rate(backend, flat[backend]) / res["padded_tokens_per_s"]
            rounds = [rate(backend, q) / rate("padded", p) for p, q in zip(times["padded"], times[backend])]
            plan_s = plan_time(data["packed"], task == "clm", backend)
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
    ap.add_argument("--head", choices=("all", "targets", "both"), default="both",
                    help="vocabulary projection at every position (HF) or only at target tokens")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.quick:
        args.repeats, args.steps = 3, 2
    args.heads = ("all", "targets") if args.head == "both" else (args.head,)
    torch.set_num_threads(2)
    cases = ("attention", "bert", "gpt") if args.case == "all" else (args.case,)
    results = [attention_case(args) if c == "attention" else run_case(c, args) for c in cases]
    if args.json:
        print(json.dumps(results, indent=1))
        return
    for r in results:
        if r["case"] == "attention":
            print(f"attention alone, fwd+bwd, {r['rows']} rows x T={r['T']}, {r['documents_per_row']} documents per row:")
            for kind in ("causal", "bidirectional"):
                x = r[kind]
                print(f"  {kind:13s} dense sdpa {x['sdpa'] * 1e3:6.1f} ms, per-document {x['per_document'] * 1e3:6.1f} ms: "
                      f"{x['speedup']:.2f}x")
            continue
        print(f"\n{r['case']}: T={r['T']}, {r['batch_rows']} rows/step, packing factor {r['packing_factor']:.3f} "
              f"(efficiency {r['efficiency']:.3%}), {r['repeats']} rounds x {r['steps']} steps")
        for head in args.heads:
            h = r[f"head_{head}"]
            print(f" head={head}: padded {h['padded_tokens_per_s']:7.0f} real tokens/s ({h['padded_step_s']:.2f} s/step)")
            for backend in ("sdpa", "per_document"):
                x = h[backend]
                rounds = " ".join(f"{v:.2f}" for v in x["speedup_per_round"])
                print(f"  packed {backend:12s} {x['packed_tokens_per_s']:7.0f} real tokens/s ({x['packed_step_s']:.2f} s/step)  "
                      f"speed-up {x['realized_speedup']:.3f}x (rounds {rounds})  overhead {x['overhead']:+.2%}  "
                      f"plan {x['plan_s'] * 1e3:.1f} ms ({x['plan_share_of_step']:.2%} of a step)")


if __name__ == "__main__":
    main()
