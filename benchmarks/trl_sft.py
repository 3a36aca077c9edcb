"""Chat SFT end to end on a GPU: TRL's ``SFTTrainer`` with its own packing (``packing=True``, best
fit decreasing, ``padding_free=True``) against seqpack's rows and step, on the same conversations,
the same model and the same optimiser.

Three steps, so that the lent GPU's time goes to training and the packing is timed on the 2-core
machine of the other CPU figures:

    .venv/bin/python benchmarks/trl_sft.py prepare --out DIR        # CPU: tokenize, pack both ways
    python3 benchmarks/trl_sft.py train --data DIR --out result.json   # GPU: warm every arm, then rounds
    .venv/bin/python benchmarks/trl_sft.py pack --data DIR           # CPU: time both packers again

``prepare`` makes the synthetic SFT conversations of ``chat_sft.py`` (ChatML, a BPE tokenizer
trained on them), builds each conversation's ``input_ids`` and ``labels`` (assistant tokens only,
seqpack's chat task), and writes ``ids.parquet`` (what the TRL arm packs itself) plus the two
packed tables (``seqpack.parquet``, ``trl.parquet``). ``train`` builds the model of ``--model``
(``llama1b``: Llama-3.2-1B's shape, random init; ``llama150m``: the earlier 1024/12 model) with
the ``seqpack_varlen`` attention for every arm (PyTorch's flash varlen kernel; no flash-attn wheel
fits the machine), bf16 autocast, fused AdamW, and runs the arms:

  ``trl``               ``trl.SFTTrainer(packing=True, padding_free=True)`` on ``ids.parquet``
                        (TRL 1.16's fused head at the targets, its entropy/accuracy metrics);
  ``seqpack``           ``seqpack.train.trl_sft.PackedSFTTrainer`` on seqpack's rows, eager;
  ``seqpack_compiled``  the same with ``compile_blocks`` (norms and MLPs through inductor).

Every arm first runs ``--warmup-steps`` steps (compiles, kernels' autotuning, the allocator), not
timed; then ``--rounds`` rounds, each a full epoch of every arm from the same initial weights, in
turn. Per run: the epoch's wall time, steady-state seconds per step (from step 3 to the end,
synchronised only there), real tokens/s, the final loss and the peak memory. ``--check`` first
compares the losses of one batch with the same weights: the model's own (full logits), TRL's
fused head and seqpack's; ``--profile`` writes the top kernels of 3 steps of each arm.
"""

from __future__ import annotations

import argparse
import itertools
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
    from chat_sft import conversations as make_conversations
    from chat_sft import tokenizer_dir
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
    ids = [seqs.token_fields["input_ids"][a:b].astype(np.int32).tolist() for a, b in itertools.pairwise(o)]
    labels = [seqs.token_fields["labels"][a:b].astype(np.int32).tolist() for a, b in itertools.pairwise(o)]
    ds = datasets.Dataset.from_dict({"input_ids": ids, "labels": labels})
    pq.write_table(pa.table({"input_ids": ids, "labels": labels}), out / "ids.parquet")
    info: dict[str, Any] = {
        "conversations": len(ids),
        "max_len": max_len,
        "tokens": int(seqs.lengths.sum()),
        "truncated": int(seqs.info["truncated"]),
        "vocab": tok.vocab_size,
    }
    for name, fn in (
        ("seqpack", lambda: pack_dataset(ds, seq_length=max_len)),
        ("trl", lambda: trl_pack(ds, max_len, strategy="bfd")),
    ):
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
    for name, fn in (
        ("seqpack", lambda: pack_dataset(ds, seq_length=info["max_len"])),
        ("trl", lambda: trl_pack(ds, info["max_len"], strategy="bfd")),
    ):
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            rows = len(fn())
            times.append(time.perf_counter() - t0)
        out[f"{name}_rows"], out[f"{name}_pack_s"] = rows, statistics.median(times)
    return out


MODELS: dict[str, dict[str, Any]] = {
    # Llama-3.2-1B's shape (1.24B parameters, 262M of them the tied 128,256-token embedding)
    "llama1b": dict(
        vocab_size=128256,
        hidden_size=2048,
        intermediate_size=8192,
        num_hidden_layers=16,
        num_attention_heads=32,
        num_key_value_heads=8,
        rope_theta=500000.0,
        tie_word_embeddings=True,
    ),
    # the earlier harness's model (~150M with a 32,000-token embedding)
    "llama150m": dict(
        vocab_size=32000,
        hidden_size=1024,
        intermediate_size=2816,
        num_hidden_layers=12,
        num_attention_heads=16,
        num_key_value_heads=4,
        tie_word_embeddings=False,
    ),
}
MODELS["tiny"] = dict(
    vocab_size=512,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    tie_word_embeddings=True,
)  # --model tiny --device cpu: a smoke test of the harness
ARMS = ("trl", "seqpack", "seqpack_compiled")
DEVICE = "cuda"


def _sync() -> None:
    import torch

    if DEVICE == "cuda":
        torch.cuda.synchronize()


def _peak_gib(reset: bool = False) -> float:
    import torch

    if DEVICE != "cuda":
        return 0.0
    if reset:
        torch.cuda.reset_peak_memory_stats()
    return torch.cuda.max_memory_allocated() / 2**30


def llama(name: str, max_len: int):  # type: ignore[no-untyped-def]
    """A randomly initialised Llama of ``MODELS[name]`` on the GPU (seeded), ``seqpack_varlen`` attention."""
    import torch
    import transformers as tf

    from seqpack.nn.hf_padding_free import register_varlen_attention

    torch.manual_seed(0)
    cfg = tf.LlamaConfig(
        **MODELS[name], max_position_embeddings=max_len, attn_implementation=register_varlen_attention()
    )  # type: ignore[call-arg]  # every config takes it
    with torch.device(DEVICE):
        return tf.LlamaForCausalLM(cfg)


def sft_args(data: Path, arm: str, rows: int, info: dict[str, Any], max_steps: int = -1):  # type: ignore[no-untyped-def]
    import trl

    packs_itself = arm == "trl"
    return trl.SFTConfig(
        output_dir=str(data / f"run-{arm}"),
        padding_free=True,
        packing=packs_itself,
        max_length=info["max_len"] if packs_itself else None,
        bf16=DEVICE == "cuda",
        use_cpu=DEVICE != "cuda",
        optim="adamw_torch_fused" if DEVICE == "cuda" else "adamw_torch",
        per_device_train_batch_size=rows,
        num_train_epochs=1,
        max_steps=max_steps,
        learning_rate=1e-4,
        warmup_steps=5,
        report_to=[],
        save_strategy="no",
        logging_steps=10**9,
        disable_tqdm=True,
        seed=0,
        dataloader_drop_last=False,
        dataset_kwargs=None if packs_itself else {"skip_prepare_dataset": True},
    )


def make_trainer(data: Path, arm: str, model: Any, rows: int, info: dict[str, Any], max_steps: int = -1) -> Any:
    import datasets
    import transformers as tf
    import trl

    from seqpack.train.trl_sft import PackedSFTTrainer

    datasets.disable_progress_bars()
    tok = tf.AutoTokenizer.from_pretrained(str(data / "tok"))
    file = "ids.parquet" if arm == "trl" else "seqpack.parquet"
    ds = datasets.load_dataset("parquet", data_files=str(data / file), split="train")
    args = sft_args(data, arm, rows, info, max_steps)
    if arm == "trl":
        return trl.SFTTrainer(model=model, args=args, train_dataset=ds, processing_class=tok)
    return PackedSFTTrainer(
        model=model, args=args, train_dataset=ds, processing_class=tok, compile_blocks=arm == "seqpack_compiled"
    )


class _Clock:
    """A ``TrainerCallback``: synchronise and read the clock after step ``first`` and at the end."""

    def __init__(self, first: int) -> None:
        import transformers as tf

        self.first, self.t0, self.t1, self.steps = first, None, None, 0
        clock = self

        class CB(tf.TrainerCallback):
            def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
                clock.steps = state.global_step
                if state.global_step == clock.first:
                    _sync()
                    clock.t0 = time.perf_counter()

            def on_train_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
                _sync()
                clock.t1 = time.perf_counter()

        self.callback = CB()

    def per_step(self) -> float | None:
        if self.t0 is None or self.t1 is None or self.steps <= self.first:
            return None
        return (self.t1 - self.t0) / (self.steps - self.first)


def _release() -> float:
    """Collect what the last arm left (trainers hold reference cycles) and return the cache to the
    device; the GiB still allocated after it (0 when nothing leaked)."""
    import gc

    import torch

    gc.collect()
    if DEVICE != "cuda":
        return 0.0
    torch.cuda.empty_cache()
    return torch.cuda.memory_allocated() / 2**30


def train_arm(
    data: Path, arm: str, model_name: str, rows: int, info: dict[str, Any], max_steps: int = -1
) -> dict[str, Any]:
    left = _release()
    model = llama(model_name, info["max_len"])
    t0 = time.perf_counter()
    trainer = make_trainer(data, arm, model, rows, info, max_steps)
    setup = time.perf_counter() - t0
    clock = _Clock(first=2)
    trainer.add_callback(clock.callback)
    _sync()
    _peak_gib(reset=True)
    t0 = time.perf_counter()
    out = trainer.train()
    _sync()
    wall = time.perf_counter() - t0
    ds = trainer.train_dataset
    real = sum(sum(x) for x in ds["seq_lengths"])
    res = {
        "arm": arm,
        "rows": len(ds),
        "steps": int(out.global_step),
        "epoch_s": wall,
        "setup_s": setup,
        "step_s": clock.per_step(),
        "real_tokens": real,
        "tokens_per_s": real / wall,
        "train_loss": float(out.training_loss),
        "peak_memory_gib": _peak_gib(),
        "compiled_modules": getattr(trainer, "compiled_blocks", 0),
        "allocated_before_gib": left,
    }
    trainer.accelerator.free_memory()
    del trainer, model, out
    return res


def loss_check(data: Path, model_name: str, rows: int, info: dict[str, Any]) -> dict[str, Any]:
    """One padding-free batch (the first ``rows`` of seqpack's rows), the same weights: the model's own
    loss (full logits, bf16), TRL's fused head, seqpack's head at the targets (eager and compiled),
    and how far apart their parameter gradients are."""
    import datasets
    import torch
    from trl.trainer.sft_trainer import DataCollatorForLanguageModeling
    from trl.trainer.utils import add_fused_lm_head

    from seqpack.nn.hf_causal_lm import causal_lm_loss, compile_blocks

    ds = datasets.load_dataset("parquet", data_files=str(data / "seqpack.parquet"), split="train")
    batch = DataCollatorForLanguageModeling(pad_token_id=0, padding_free=True)([ds[i] for i in range(rows)])
    batch = {k: v.to(DEVICE) if torch.is_tensor(v) else v for k, v in batch.items()}
    model = llama(model_name, info["max_len"])
    add_fused_lm_head(model, outputs=("log_probs",))
    labels = batch["labels"]
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    res: dict[str, Any] = {"tokens": int(labels.numel()), "targets": int((labels[:, 1:] != -100).sum())}
    grads: dict[str, torch.Tensor] = {}
    runs = {  # each takes the model (deleted below, after the runs)
        "hf_full_logits": lambda m: m(**inputs, labels=labels, use_cache=False).loss,
        "trl_fused_head": lambda m: m(**inputs, labels=labels, fused_lm_head=True).loss,
        "seqpack": lambda m: causal_lm_loss(m, batch).loss,
        "seqpack_compiled": lambda m: causal_lm_loss(m, batch).loss,  # after compile_blocks (below)
    }
    for name, fn in runs.items():
        if name == "seqpack_compiled":
            compile_blocks(model)  # forward and backward compiled here, as the trainer's steps will use them
        with torch.autocast(DEVICE, dtype=torch.bfloat16):
            loss = fn(model)
        loss.backward()
        res[f"{name}_loss"] = float(loss)
        grads[name] = torch.cat([p.grad.float().flatten() for p in model.parameters()])
        model.zero_grad(set_to_none=True)
    ref = grads["hf_full_logits"]
    for name in ("trl_fused_head", "seqpack", "seqpack_compiled"):
        g = grads[name]
        res[f"{name}_grad_rel_err"] = float((g - ref).norm() / ref.norm())
        res[f"{name}_grad_cos"] = float(torch.nn.functional.cosine_similarity(g, ref, dim=0))
    del model, grads, g, ref
    return res


def profile_arms(data: Path, model_name: str, rows: int, info: dict[str, Any], out_file: Path) -> dict[str, Any]:
    """torch.profiler over 3 training steps of each arm (after 3 untimed): kernel time per step and
    the kernels that take the most (their table goes to ``out_file``)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    res: dict[str, Any] = {}
    for arm in ARMS:
        _release()
        model = llama(model_name, info["max_len"])
        trainer = make_trainer(data, arm, model, rows, info, max_steps=6)
        state: dict[str, Any] = {}
        import transformers as tf

        class CB(tf.TrainerCallback):
            def __init__(self, out: dict[str, Any]) -> None:
                self.out = out

            def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
                if state.global_step == 3:
                    _sync()
                    self.out["prof"] = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
                    self.out["prof"].__enter__()
                    self.out["t0"] = time.perf_counter()

            def on_train_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
                _sync()
                self.out["wall"] = (time.perf_counter() - self.out["t0"]) / 3
                self.out["prof"].__exit__(None, None, None)

        trainer.add_callback(CB(state))
        trainer.train()
        ev = state["prof"].key_averages()
        kernels = sorted(
            (e for e in ev if e.device_type == torch.autograd.DeviceType.CUDA), key=lambda e: -e.self_device_time_total
        )
        gpu_ms = sum(e.self_device_time_total for e in kernels) / 1e3 / 3
        res[arm] = {
            "wall_ms": 1e3 * state["wall"],
            "gpu_kernel_ms": gpu_ms,
            "top": [(e.key[:90], round(e.self_device_time_total / 1e3 / 3, 3), e.count // 3) for e in kernels[:20]],
        }
        with open(out_file, "a", encoding="utf-8") as f:
            f.write(
                f"\n== {model_name} {rows} x {info['max_len']}, {arm}: wall {1e3 * state['wall']:.1f} ms/step, "
                f"kernels {gpu_ms:.1f} ms/step\n"
            )
            f.write(ev.table(sort_by="self_device_time_total", row_limit=40, max_name_column_width=90))
        trainer.accelerator.free_memory()
        del trainer, model, state
    _release()
    return res


def train(
    data: Path,
    model_name: str,
    rows: int,
    rounds: int,
    warmup_steps: int,
    arms: tuple[str, ...],
    check: bool,
    profile_file: Path | None,
    emit: Any,
) -> dict[str, Any]:
    import torch
    import transformers
    import trl

    info = json.loads((data / "prepare.json").read_text())
    res: dict[str, Any] = {
        "prepare": info,
        "model": model_name,
        "model_config": MODELS[model_name],
        "rows_per_step": rows,
        "rounds": rounds,
        "warmup_steps": warmup_steps,
        "gpu": torch.cuda.get_device_name() if DEVICE == "cuda" else "cpu",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "trl": trl.__version__,
    }
    if check:
        res["loss_check"] = loss_check(data, model_name, rows, info)
        emit({"loss_check": res["loss_check"]})
    res["warmup"] = {}
    for arm in arms:  # every arm warmed before any is timed
        res["warmup"][arm] = train_arm(data, arm, model_name, rows, info, max_steps=warmup_steps)
        emit({"warmup": res["warmup"][arm]})
    runs: dict[str, list[dict[str, Any]]] = {arm: [] for arm in arms}
    res["runs"] = runs
    for _ in range(rounds):
        for arm in arms:
            runs[arm].append(train_arm(data, arm, model_name, rows, info))
            emit(runs[arm][-1])
    keys = ("epoch_s", "step_s", "tokens_per_s", "peak_memory_gib", "train_loss")
    res["median"] = {
        arm: {k: statistics.median(r[k] for r in rs if r[k] is not None) for k in keys} for arm, rs in runs.items()
    }
    if "trl" in arms:
        base = res["median"]["trl"]
        res["speedup_over_trl"] = {
            arm: {"tokens_per_s": m["tokens_per_s"] / base["tokens_per_s"], "step_s": base["step_s"] / m["step_s"]}
            for arm, m in res["median"].items()
        }
    if profile_file is not None:
        res["profile"] = profile_arms(data, model_name, rows, info, profile_file)
        emit({"profile": {a: {k: v for k, v in p.items() if k != "top"} for a, p in res["profile"].items()}})
    return res


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
    t.add_argument("--model", choices=tuple(MODELS), default="llama1b")
    t.add_argument("--rows", type=int, default=8, help="packed rows per step (per_device_train_batch_size)")
    t.add_argument("--rounds", type=int, default=2)
    t.add_argument("--warmup-steps", type=int, default=4)
    t.add_argument("--arms", default=",".join(ARMS))
    t.add_argument("--check", action="store_true", help="compare the three losses on one batch first")
    t.add_argument("--profile", type=Path, default=None, help="append each arm's top kernels to this file")
    t.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help="cpu: a smoke test (with --model tiny)")
    t.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    if a.cmd == "prepare":
        print(json.dumps(prepare(a.out, a.conversations, a.max_len), indent=1))
        return
    if a.cmd == "pack":
        print(json.dumps(pack_times(a.data, a.repeats)))
        return
    log = a.out.with_suffix(".jsonl") if a.out else None

    def emit(r: dict[str, Any]) -> None:  # each result as it comes (a run cut short keeps what it made)
        print(json.dumps(r, default=str), flush=True)
        if log:
            with open(log, "a", encoding="utf-8") as f:
                f.write(json.dumps(r, default=str) + "\n")

    global DEVICE
    DEVICE = a.device
    arms = tuple(x for x in a.arms.split(",") if x)
    unknown = set(arms) - set(ARMS)
    if unknown:
        ap.error(f"unknown arms {sorted(unknown)}; choose from {', '.join(ARMS)}")
    res = train(a.data, a.model, a.rows, a.rounds, a.warmup_steps, arms, a.check, a.profile, emit)
    print(json.dumps({"median": res["median"], "speedup_over_trl": res.get("speedup_over_trl")}, indent=1))
    if a.out:
        a.out.write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
