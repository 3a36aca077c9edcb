"""TRL SFT end to end on a GPU (issue 29): ``SFTTrainer(padding_free=True)`` on a Llama-shaped model,
fed rows packed by seqpack's ``pack_dataset`` (``best``: one global plan) against rows packed by
TRL's own ``pack_dataset(strategy="bfd")`` (what ``SFTConfig(packing=True)`` calls), same
conversations, same model, same trainer.

Three steps, so that the lent GPU's time goes to training and the packing is timed on the 2-core
machine of the other CPU figures:

    .venv/bin/python benchmarks/trl_sft.py prepare --out DIR        # CPU: tokenize, pack both ways
    python3 benchmarks/trl_sft.py train --data DIR --out result.json   # GPU: train an epoch per arm
    .venv/bin/python benchmarks/trl_sft.py pack --data DIR           # CPU: time both packers again

``prepare`` makes the synthetic SFT conversations of ``chat_sft.py`` (ChatML, a 4,096-token BPE
tokenizer trained on them), builds each conversation's ``input_ids`` and ``labels`` (assistant
tokens only, seqpack's chat task), and writes ``ids.parquet`` plus the two packed tables
(``seqpack.parquet``, ``trl.parquet``: ``input_ids``, ``labels``, ``seq_lengths``) with each packer's
rows and seconds. ``train`` runs one epoch of each arm (bf16, AdamW, ``seqpack_varlen``
attention: PyTorch's flash varlen kernel, fed ``cu_seq_lens`` by TRL's padding-free collator), in
rounds, and reports rows, steps, real tokens/s, time per epoch, final loss and peak memory.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))


def prepare(out: Path, conversations: int, max_len: int) -> dict[str, Any]:
    import datasets
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    from chat_sft import conversations as make_conversations  # type: ignore[import-not-found]
    from chat_sft import tokenizer_dir  # type: ignore[import-not-found]
    from trl.data_utils import pack_dataset as trl_pack

    from seqpack.hf import pack_dataset
    from seqpack.pipeline import PackConfig, build_sequences
    from seqpack.tokenizer import open_tokenizer

    datasets.disable_progress_bars()
    out.mkdir(parents=True, exist_ok=True)
    records = make_conversations(conversations)
    tok = open_tokenizer(tokenizer_dir(out, records))
    seqs = build_sequences(records, tok, PackConfig.for_task("chat", max_len=max_len))
    o = seqs.offsets
    ids = [seqs.token_fields["input_ids"][a:b].astype(np.int32).tolist() for a, b in zip(o[:-1], o[1:])]
    labels = [seqs.token_fields["labels"][a:b].astype(np.int32).tolist() for a, b in zip(o[:-1], o[1:])]
    ds = datasets.Dataset.from_dict({"input_ids": ids, "labels": labels})
    pq.write_table(pa.table({"input_ids": ids, "labels": labels}), out / "ids.parquet")
    info: dict[str, Any] = {"conversations": len(ids), "max_len": max_len, "tokens": int(seqs.lengths.sum()),
                            "truncated": int(seqs.info["truncated"]), "vocab": tok.vocab_size}
    for name, fn in (("seqpack", lambda: pack_dataset(ds, seq_length=max_len)),
                     ("trl", lambda: trl_pack(ds, max_len, strategy="bfd"))):
        t0 = time.perf_counter()
        packed = fn()
        info[f"{name}_pack_s"] = time.perf_counter() - t0
        info[f"{name}_rows"] = len(packed)
        packed.to_parquet(str(out / f"{name}.parquet"))
    (out / "prepare.json").write_text(json.dumps(info, indent=1))
    return info


def pack_times(data: Path, repeats: int) -> dict[str, Any]:
    """Both packers on ``ids.parquet`` again, median seconds of ``repeats`` calls (rows unchanged)."""
    import datasets
    import pyarrow.parquet as pq
    from trl.data_utils import pack_dataset as trl_pack

    from seqpack.hf import pack_dataset

    datasets.disable_progress_bars()
    info = json.loads((data / "prepare.json").read_text())
    ds = datasets.Dataset(pq.read_table(data / "ids.parquet"))
    out: dict[str, Any] = {"repeats": repeats}
    for name, fn in (("seqpack", lambda: pack_dataset(ds, seq_length=info["max_len"])),
                     ("trl", lambda: trl_pack(ds, info["max_len"], strategy="bfd"))):
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            rows = len(fn())
            times.append(time.perf_counter() - t0)
        out[f"{name}_rows"], out[f"{name}_pack_s"] = rows, statistics.median(times)
    return out


def llama(max_len: int):  # type: ignore[no-untyped-def]
    """Llama-shaped, ~150M parameters with a 32,000-token embedding (the tokenizer uses the first ids)."""
    import torch
    import transformers as tf

    from seqpack.nn.hf_padding_free import register_varlen_attention

    torch.manual_seed(0)
    cfg = tf.LlamaConfig(vocab_size=32000, hidden_size=1024, intermediate_size=2816, num_hidden_layers=12,
                         num_attention_heads=16, num_key_value_heads=4, max_position_embeddings=max_len,
                         attn_implementation=register_varlen_attention())
    return tf.LlamaForCausalLM(cfg)


def train_arm(data: Path, arm: str, rows: int, info: dict[str, Any]) -> dict[str, Any]:
    import datasets
    import torch
    import transformers as tf
    import trl

    datasets.disable_progress_bars()
    tok = tf.AutoTokenizer.from_pretrained(str(data / "tok"))
    ds = datasets.load_dataset("parquet", data_files=str(data / f"{arm}.parquet"), split="train")
    model = llama(info["max_len"])
    args = trl.SFTConfig(output_dir=str(data / f"run-{arm}"), padding_free=True, max_length=None, bf16=True,
                         per_device_train_batch_size=rows, num_train_epochs=1, learning_rate=3e-4, warmup_steps=10,
                         report_to=[], save_strategy="no", logging_steps=10**9, disable_tqdm=True, seed=0,
                         dataset_kwargs={"skip_prepare_dataset": True}, dataloader_drop_last=False)
    trainer = trl.SFTTrainer(model=model, args=args, train_dataset=ds, processing_class=tok)
    torch.cuda.reset_peak_memory_stats()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = trainer.train()
    torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    real = sum(sum(x) for x in ds["seq_lengths"])
    targets = sum(sum(1 for v in lab if v != -100) for lab in ds["labels"])
    return {"arm": arm, "rows": len(ds), "steps": int(out.global_step), "epoch_s": wall,
            "train_runtime_s": float(out.metrics["train_runtime"]), "real_tokens": real, "target_tokens": targets,
            "tokens_per_s": real / wall, "train_loss": float(out.training_loss),
            "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30}


def train(data: Path, rows: int, rounds: int) -> dict[str, Any]:
    import torch
    import transformers
    import trl

    info = json.loads((data / "prepare.json").read_text())
    runs: dict[str, list[dict[str, Any]]] = {"trl": [], "seqpack": []}
    for _ in range(rounds):
        for arm in runs:
            runs[arm].append(train_arm(data, arm, rows, info))
            print(json.dumps(runs[arm][-1]), flush=True)
    med = {arm: {k: statistics.median(r[k] for r in rs) for k in ("epoch_s", "tokens_per_s", "peak_memory_gib")}
           for arm, rs in runs.items()}
    return {"prepare": info, "rows_per_step": rows, "rounds": rounds, "runs": runs, "median": med,
            "epoch_time_ratio_seqpack_over_trl": med["seqpack"]["epoch_s"] / med["trl"]["epoch_s"],
            "gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "transformers": transformers.__version__,
            "trl": trl.__version__}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--conversations", type=int, default=5000)
    p.add_argument("--max-len", type=int, default=2048)
    k = sub.add_parser("pack", help="time both packers again on the prepared conversations")
    k.add_argument("--data", type=Path, required=True)
    k.add_argument("--repeats", type=int, default=5)
    t = sub.add_parser("train")
    t.add_argument("--data", type=Path, required=True)
    t.add_argument("--rows", type=int, default=8, help="packed rows per step (per_device_train_batch_size)")
    t.add_argument("--rounds", type=int, default=2)
    t.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    if a.cmd == "prepare":
        print(json.dumps(prepare(a.out, a.conversations, a.max_len), indent=1))
        return
    if a.cmd == "pack":
        print(json.dumps(pack_times(a.data, a.repeats)))
        return
    res = train(a.data, a.rows, a.rounds)
    print(json.dumps(res["median"], indent=1), res["epoch_time_ratio_seqpack_over_trl"])
    if a.out:
        a.out.write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
