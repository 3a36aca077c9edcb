"""A GRPO-shaped log-probability step: TRL's padded micro-batches against seqpack's packed rows, in
the pairs layout (prompt + completion per sequence) and the shared-prefix layout (the prompt once, its G
completions after it, never seeing each other).

Run: .venv/bin/python benchmarks/rl_rollouts.py [--quick] [--out benchmarks/results/rl_rollouts.json]

Data (seed 0): ``--prompts`` prompts of 100-1,500 tokens (uniform), G = 8 completions each, lognormal
lengths (median 300, sigma 1.0) clipped to 20-3,000; random token ids of a 2,048-entry vocabulary.
Model: a small Llama (256 hidden, 4 layers, 8 heads / 4 kv heads), fp32, 2 threads, random init.

Arms, each one forward + backward of every completion token's log-probability (the loss: their sum
weighted by random advantages), over the whole generation batch:

  trl     ``trl.GRPOTrainer._get_per_token_logps_and_entropies`` (TRL's own pass, its fused head), on
          micro-batches of one group (8 rows: ``per_device_train_batch_size=8``), each padded as TRL
          pads it (prompts on the left to the longest prompt, completions on the right to the longest);
          ``sdpa`` with the padding mask
  pairs          ``seqpack.rl.rollout_logprobs`` on rows of at most ``--max-len`` tokens, layout ``pairs``
  shared-prefix  the same, layout ``shared-prefix``

seqpack's arms run ``attn_implementation="seqpack_packed"`` (``auto``: per-document buckets on CPU)
and the head only at completion targets. The arms alternate, ``--rounds`` times after a warm-up
round; the median time per arm. Also: tokens processed (rows x width) and rows per arm, and the
imbalance (slowest rank's row cost over the mean, per micro-batch) of ``rank_rows`` at 8 and 64
ranks on a larger generation batch (``--balance-prompts``), with the FLOP row cost of this model.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from _common import scratch_dir, write_result

VOCAB = 2048
LLAMA: dict[str, Any] = {
    "hidden_size": 256,
    "intermediate_size": 688,
    "num_hidden_layers": 4,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "max_position_embeddings": 8192,
}


def rollouts(prompts: int, g: int, seed: int = 0) -> tuple[list[list[int]], list[list[list[int]]]]:
    rng = np.random.default_rng(seed)
    p = [rng.integers(3, VOCAB, int(n)).tolist() for n in rng.integers(100, 1501, prompts)]
    c = [
        [rng.integers(3, VOCAB, int(n)).tolist() for n in np.clip(rng.lognormal(np.log(300), 1.0, g), 20, 3000)]
        for _ in range(prompts)
    ]
    return p, c


def trl_trainer(root: Path, impl: str) -> Any:
    import datasets
    import transformers as tf
    import trl

    from seqpack.nn.hf_attention import register_packed_attention

    register_packed_attention()
    path = root / f"llama-{impl}"
    if not path.exists():
        torch.manual_seed(0)
        tf.LlamaForCausalLM(tf.LlamaConfig(vocab_size=VOCAB, **LLAMA, pad_token_id=0, eos_token_id=1)).save_pretrained(
            path
        )
    tok_dir = root / "tok"
    if not tok_dir.exists():
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from preference import word_tokenizer

        word_tokenizer(tok_dir)
    tok = tf.AutoTokenizer.from_pretrained(str(tok_dir))
    args = trl.GRPOConfig(
        output_dir=str(root / "out"),
        per_device_train_batch_size=8,
        num_generations=8,
        report_to=[],
        use_cpu=True,
        bf16=False,
        save_strategy="no",
        disable_tqdm=True,
        model_init_kwargs={"attn_implementation": impl, "dtype": torch.float32},
    )

    def no_reward(completions: list[Any], **kw: Any) -> list[float | None]:
        return [0.0] * len(completions)

    return trl.GRPOTrainer(
        model=str(path),
        reward_funcs=no_reward,
        args=args,
        train_dataset=datasets.Dataset.from_dict({"prompt": ["x"] * 8}),
        processing_class=tok,
    )


def padded_batches(
    prompts: list[list[int]], comps: list[list[list[int]]]
) -> list[tuple[torch.Tensor, torch.Tensor, int]]:
    """TRL's micro-batches: one group each, prompts left-padded, completions right-padded."""
    out = []
    for p, group in zip(prompts, comps):
        C = max(map(len, group))
        ids = torch.zeros(len(group), len(p) + C, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for r, c in enumerate(group):
            ids[r, : len(p)], mask[r, : len(p)] = torch.tensor(p), 1
            ids[r, len(p) : len(p) + len(c)], mask[r, len(p) : len(p) + len(c)] = torch.tensor(c), 1
        out.append((ids, mask, C))
    return out


def trl_arm(trainer: Any, batches: list[tuple[torch.Tensor, torch.Tensor, int]], adv: torch.Tensor) -> float:
    t0 = time.perf_counter()
    for k, (ids, mask, C) in enumerate(batches):
        logps, _, _ = trainer._get_per_token_logps_and_entropies(trainer.model, ids, mask, C)
        (logps * mask[:, -C:] * adv[k * 8 : (k + 1) * 8, None]).sum().backward()
    return time.perf_counter() - t0


def seqpack_arm(model: Any, packed: Any, adv: torch.Tensor) -> float:
    from seqpack.rl import rollout_logprobs

    weights = torch.from_numpy(np.repeat(adv.numpy(), packed.completion_lengths))
    t0 = time.perf_counter()
    logps, _ = rollout_logprobs(model, packed)
    (logps * weights).sum().backward()
    return time.perf_counter() - t0


def balance(prompts: int, max_len: int) -> dict[str, Any]:
    from seqpack.packing.balance import RowCost, rank_costs
    from seqpack.rl import pack_rollouts

    p, c = rollouts(prompts, 8, seed=1)
    cost = RowCost.from_flops(
        hidden=LLAMA["hidden_size"],
        layers=LLAMA["num_hidden_layers"],
        ffn=LLAMA["intermediate_size"] * 3 // 2,
        vocab=VOCAB,
    )
    out: dict[str, Any] = {"fewest_rows": pack_rollouts(p, c, max_len=max_len).num_rows}
    for world in (8, 64):
        r = pack_rollouts(p, c, max_len=max_len, world_size=world, cost=cost)
        steps = r.rank_rows(world, cost=cost)
        per = rank_costs(r.row_costs(cost), steps[:, :, None])
        ratio = per.max(axis=1) / per.mean(axis=1)
        out[str(world)] = {
            "rows": r.num_rows,
            "micro_batches_per_rank": int(steps.shape[0]),
            "imbalance_mean": float(ratio.mean()),
            "imbalance_max": float(ratio.max()),
        }
        print(f"balance at {world} ranks: {out[str(world)]}", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--max-len", type=int, default=8192)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--balance-prompts", type=int, default=1024)
    ap.add_argument("--quick", action="store_true", help="2 prompts, 1 round")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    if args.quick:
        args.prompts, args.rounds, args.balance_prompts = 2, 1, 128
    torch.set_num_threads(2)
    from seqpack.rl import pack_rollouts

    root = scratch_dir("seqpack-rl-")
    trl_t, packed_t = trl_trainer(root, "sdpa"), trl_trainer(root, "seqpack_packed")
    prompts, comps = rollouts(args.prompts, 8)
    adv = torch.from_numpy(np.random.default_rng(2).normal(size=8 * args.prompts)).float()
    batches = padded_batches(prompts, comps)
    layouts = {k: pack_rollouts(prompts, comps, max_len=args.max_len, layout=k) for k in ("pairs", "shared-prefix")}
    shape = {
        "trl": {"rows": sum(b[0].shape[0] for b in batches), "tokens": sum(b[0].numel() for b in batches)},
        **{
            k: {"rows": v.num_rows, "tokens": int(v.input_ids.size), "real_tokens": v.num_tokens}
            for k, v in layouts.items()
        },
    }
    real = sum(len(p) + len(c) for p, g in zip(prompts, comps) for c in g)
    shape["trl"]["real_tokens"] = real
    print(f"rows and tokens: {shape}", flush=True)
    arms = {
        "trl": lambda: trl_arm(trl_t, batches, adv),
        "pairs": lambda: seqpack_arm(packed_t.model, layouts["pairs"], adv),
        "shared-prefix": lambda: seqpack_arm(packed_t.model, layouts["shared-prefix"], adv),
    }
    times: dict[str, list[float]] = {k: [] for k in arms}
    for r in range(args.rounds + 1):
        for name, fn in arms.items():
            trl_t.model.zero_grad(set_to_none=True)
            packed_t.model.zero_grad(set_to_none=True)
            t = fn()
            if r:
                times[name].append(t)
            print(f"round {r} {name}: {t:.2f} s", flush=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    result = {
        "prompts": args.prompts,
        "g": 8,
        "max_len": args.max_len,
        "vocab": VOCAB,
        "llama": LLAMA,
        "rounds": args.rounds,
        "shape": shape,
        "seconds": times,
        "median_seconds": med,
        "speedup_vs_trl": {k: med["trl"] / med[k] for k in ("pairs", "shared-prefix")},
        "balance": balance(args.balance_prompts, 16384),
        "torch": torch.__version__,
    }
    print(result["speedup_vs_trl"], flush=True)
    write_result(args.out, result, packages=("torch", "transformers", "trl"))


if __name__ == "__main__":
    main()
