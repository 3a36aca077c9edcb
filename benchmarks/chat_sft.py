"""Chat fine-tuning: packing a synthetic SFT set, against TRL, and packed vs padded training.

Run: .venv/bin/python benchmarks/chat_sft.py [--quick] [--out benchmarks/results/chat_sft.json]

Data: ``--conversations`` synthetic conversations with an SFT-like shape: 1-6 exchanges
(geometric), user turns ~ lognormal (median 25 words), assistant turns ~ lognormal (median
90 words, sigma 1.1: many short answers, a long tail). Rendered with ChatML and tokenized by a
byte-level BPE tokenizer (vocab 4,096) trained here and saved as a Hugging Face directory, so
seqpack reads it as a pretrained tokenizer. Conversations longer than ``max_len`` are truncated
after the last assistant turn that fits (seqpack's default), so every packer sees the same
sequences.

1. Packing at max_len 1024 and 4096: seqpack's ``best`` (LP-optimal over the whole set),
   ``lpfhp`` and ``spfhp`` against TRL's ``pack_dataset(strategy="bfd")`` on the same token
   lists, in TRL's default 1,000-row chunks and whole-table. Efficiency = real tokens /
   (packs x max_len); factor = sequences / pack. Times: median of ``--repeats``.
2. Training at max_len 1024, a small Llama (hidden 256, 4 layers, 8 heads / 4 kv heads, sdpa,
   fp32, 2 threads): forward + backward + AdamW on steady-state steps (two warm-up steps per
   variant are not timed, rounds interleaved). Real (non-padding) tokens per second for
     packed   rows of the ``best`` plan, through ``seqpack.nn.hf_adapter.packed_forward``
     padded   one conversation per row, padded to max_len (the fixed-shape baseline)
     dynamic  one conversation per row, padded to the longest in its batch (TRL's default
              without packing)
   Each step of every variant carries about the same number of conversations.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from _common import median_time, scratch_dir

from seqpack.packing import pack_lengths
from seqpack.pipeline import PackConfig, build_packed_dataset, build_sequences
from seqpack.tokenizer import open_tokenizer

WORDS = (
    "the a of to and in is was for on with as that this it be are by from at or an not can will you we they "
    "code python function value list return error file data model train loss token sequence batch "
    "please explain why how what example result step first then finally"
).split()


def conversations(n: int, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)

    def words(median: float, sigma: float) -> str:
        k = max(1, int(rng.lognormal(np.log(median), sigma)))
        return " ".join(rng.choice(WORDS, size=k))

    out = []
    for _ in range(n):
        msgs = [{"role": "system", "content": words(12, 0.5)}] if rng.random() < 0.3 else []
        for _ in range(min(6, int(rng.geometric(0.45)))):
            msgs.append({"role": "user", "content": words(25, 0.9)})
            msgs.append({"role": "assistant", "content": words(90, 1.1)})
        out.append({"messages": msgs})
    return out


def tokenizer_dir(root: Path, records: list[dict]) -> Path:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from seqpack.tasks.chat.template import CHATML

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    texts = [m["content"] for r in records[:2000] for m in r["messages"]]
    tok.train_from_iterator(
        texts,
        trainers.BpeTrainer(
            vocab_size=4096,
            special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        ),
    )
    PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>", chat_template=CHATML
    ).save_pretrained(str(root / "tok"))
    return root / "tok"


def trl_bfd(token_lists: list[list[int]], max_len: int, whole: bool) -> tuple[int, float]:
    import datasets
    from trl.data_utils import pack_dataset

    datasets.disable_progress_bars()
    ds = datasets.Dataset.from_dict({"input_ids": token_lists})
    t0 = time.perf_counter()
    out = pack_dataset(ds, max_len, strategy="bfd", map_kwargs={"batch_size": len(ds)} if whole else None)
    return len(out), time.perf_counter() - t0


def seqpack_hf(token_lists: list[list[int]], max_len: int) -> tuple[int, float]:
    """The drop-in ``seqpack.hf.pack_dataset`` on the same HF Dataset as TRL's arm, timed the same way."""
    import datasets

    from seqpack.hf import pack_dataset

    datasets.disable_progress_bars()
    ds = datasets.Dataset.from_dict({"input_ids": token_lists})
    t0 = time.perf_counter()
    out = pack_dataset(ds, max_len)
    return len(out), time.perf_counter() - t0


def packing_rows(records: list[dict], tok, max_len: int, repeats: int) -> list[dict]:  # type: ignore[no-untyped-def]
    seqs = build_sequences(records, tok, PackConfig.for_task("chat", max_len=max_len))
    lengths = seqs.lengths
    real = int(lengths.sum())
    lists = [
        seqs.token_fields["input_ids"][a:b].astype(np.int64).tolist()
        for a, b in zip(seqs.offsets[:-1], seqs.offsets[1:])
    ]
    rows: list[dict[str, Any]] = []
    for algo in ("best", "lpfhp", "spfhp"):
        plan, s = median_time(functools.partial(pack_lengths, lengths, max_len, algorithm=algo), repeats)
        rows.append({"max_len": max_len, "packer": f"seqpack {algo}", "packs": int(plan.num_packs), "seconds": s})
    times = [seqpack_hf(lists, max_len) for _ in range(repeats)]
    rows.append(
        {
            "max_len": max_len,
            "packer": "seqpack.hf.pack_dataset (best)",
            "packs": times[0][0],
            "seconds": statistics.median(t for _, t in times),
        }
    )
    for whole in (False, True):
        times = [trl_bfd(lists, max_len, whole) for _ in range(repeats)]
        rows.append(
            {
                "max_len": max_len,
                "packer": f"TRL bfd ({'whole table' if whole else '1,000-row chunks'})",
                "packs": times[0][0],
                "seconds": statistics.median(t for _, t in times),
            }
        )
    for r in rows:
        r.update(
            sequences=int(lengths.size),
            tokens=real,
            efficiency=real / (r["packs"] * max_len),
            factor=lengths.size / r["packs"],
            truncated=int(seqs.info["truncated"]),
        )
    return rows


def llama(vocab: int, max_len: int) -> torch.nn.Module:
    import transformers

    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(
        vocab_size=vocab,
        hidden_size=256,
        intermediate_size=688,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=4,
        max_position_embeddings=max_len,
        attn_implementation="sdpa",
    )  # type: ignore[call-arg]  # every config takes it; its typed signature does not list it
    return transformers.LlamaForCausalLM(cfg).train()


def batches(data, rows: int, count: int, seed: int, dynamic: bool) -> list[dict]:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        b = data.batch(rng.choice(data.num_units, size=rows, replace=False))
        b = {k: v for k, v in b.items() if k not in ("example_ids", "num_sequences")}
        if dynamic:
            width = int((b["segment_ids"] > 0).sum(1).max())
            b = {k: v[:, :width] if v.ndim == 2 and v.shape[1] == data.max_len else v for k, v in b.items()}
        out.append(b)
    return out


def training_rows(sft: Path, steps: int, rounds: int, packed_rows: int) -> list[dict]:
    from seqpack.nn.hf_adapter import packed_forward
    from seqpack.train.data import TrainData

    torch.set_num_threads(2)
    packed, padded = TrainData(sft), TrainData(sft, padded=True)
    per_step = max(1, round(packed_rows * packed.packing_factor))  # conversations per step, padded variants
    variants = {
        "packed": (packed, packed_rows, False),
        "padded": (padded, per_step, False),
        "dynamic": (padded, per_step, True),
    }
    model = llama(int(packed.manifest["vocab_size"]), packed.max_len)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    times: dict[str, list[float]] = {k: [] for k in variants}
    tokens: dict[str, list[int]] = {k: [] for k in variants}
    for r in range(rounds):
        for name, (data, rows, dynamic) in variants.items():
            bs = batches(data, rows, steps + 2, seed=r, dynamic=dynamic)
            for i, b in enumerate(bs):
                t0 = time.perf_counter()
                packed_forward(model, b, reduction="token").loss.backward()  # type: ignore[union-attr]  # PackedOutput.loss: set when the batch has targets
                opt.step()
                opt.zero_grad(set_to_none=True)
                if i >= 2:  # two warm-up steps per variant and round are not timed
                    times[name].append(time.perf_counter() - t0)
                    tokens[name].append(int((b["segment_ids"] > 0).sum()))
    out: list[dict[str, Any]] = []
    for name, (_, rows, _) in variants.items():
        tps = [t / s for t, s in zip(tokens[name], times[name])]
        out.append(
            {
                "variant": name,
                "rows_per_step": rows,
                "tokens_per_s": statistics.median(tps),
                "step_seconds": statistics.median(times[name]),
                "steps_timed": len(tps),
                "packing_factor": packed.packing_factor,
            }
        )
    base = {r["variant"]: r["tokens_per_s"] for r in out}
    for row in out:
        row["speedup_vs_padded"] = row["tokens_per_s"] / base["padded"]
        row["speedup_vs_dynamic"] = row["tokens_per_s"] / base["dynamic"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--conversations", type=int, default=20_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--steps", type=int, default=6, help="timed steps per variant and round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-training", action="store_true", help="the packing table only")
    ap.add_argument("--out", default=None, help="write the rows as JSON here")
    args = ap.parse_args()
    if args.quick:
        args.conversations, args.repeats, args.steps, args.rounds = 2000, 1, 2, 1
    root = scratch_dir("seqpack-chat-bench-")
    records = conversations(args.conversations)
    tok = open_tokenizer(tokenizer_dir(root, records))
    result: dict = {"conversations": args.conversations, "packing": [], "training": []}
    print(f"{'max_len':>7}  {'packer':<30} {'packs':>8} {'efficiency':>10} {'factor':>7} {'seconds':>8}")
    for max_len in (1024, 4096):
        for r in packing_rows(records, tok, max_len, args.repeats):
            result["packing"].append(r)
            print(
                f"{max_len:>7}  {r['packer']:<30} {r['packs']:>8,} {r['efficiency']:>10.4%} {r['factor']:>7.2f} {r['seconds']:>8.3f}"
            )
    if args.no_training:
        if args.out:
            Path(args.out).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
        return
    sft = root / "sft"
    n_train = min(len(records), 4000)
    build_packed_dataset(records[:n_train], tok, sft, PackConfig.for_task("chat", max_len=1024))
    print(
        f"\ntraining at 1024 on {n_train:,} conversations (small Llama, sdpa, fp32, 2 threads; median real tokens/s):"
    )
    for r in training_rows(sft, args.steps, args.rounds, packed_rows=2):
        result["training"].append(r)
        print(
            f"  {r['variant']:<8} {r['rows_per_step']:>3} rows/step  {r['tokens_per_s']:>9,.0f} tokens/s  "
            f"x{r['speedup_vs_padded']:.2f} vs padded, x{r['speedup_vs_dynamic']:.2f} vs dynamic padding  "
            f"(packing factor {r['packing_factor']:.2f})"
        )
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
