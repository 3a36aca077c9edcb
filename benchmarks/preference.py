"""Preference data: TRL ``DPOTrainer`` padded against seqpack's ``pairs`` and
``shared-prefix`` layouts, packed: tokens processed per pair, rows, and DPO training throughput.

Run: .venv/bin/python benchmarks/preference.py [--quick] [--out benchmarks/results/preference.json]

Data (synthetic; ``--mix``, each length lognormal, words drawn uniformly from a 2,000-word vocabulary):

  ultrafeedback  shaped like UltraFeedback: long prompts, two responses of different lengths:
                 prompt median 120 tokens (sigma 0.9), chosen 260 (0.7), rejected 220 (0.8)
  long-answers   short prompts, long responses of about equal length (the least padding for TRL's
                 rows, the least prompt for the shared prefix to save): prompt 40 (0.6), chosen
                 420 (0.5), rejected 400 (0.5)

The tokenizer is word-level (one token per word, built here and saved as a Hugging Face
directory), so TRL and seqpack read the same token ids from the same text. At each ``max_len``
only pairs that fit whole in the ``pairs`` layout (2 * prompt + chosen + rejected <= max_len) are
kept, so no arm truncates anything and every arm sees the same pairs.

Arms, DPO (sigmoid, beta 0.1), reference log-probabilities precomputed in every arm (TRL's
``precompute_ref_log_probs=True``; seqpack's packed pass), fp32, 2 threads, AdamW:

  trl      ``trl.DPOTrainer.train()``: each response its own row, padded to the longest in the batch
  pairs    ``seqpack train``: prompt+chosen and prompt+rejected, packed by the ``best`` plan
  shared   ``seqpack train``: the prompt once, both responses after it (``shared-prefix``)

on a small Llama (hidden 256, 4 layers, 8 heads / 4 kv heads) for all three (TRL: ``sdpa`` with its
padding mask; seqpack: ``attn_implementation="seqpack_packed"``, seqpack's attention plan inside the
model, ``auto`` backend), and on seqpack's GPT (hidden 256, 4 layers, 4 heads, ``auto``) for the two
packed layouts and a ``padded`` arm (TRL's row layout, the same loss, in a plain loop). Every step carries about ``--pairs`` pairs.
Throughput = pairs / step time over steady-state steps (the first step of each run is not
timed), median over ``--rounds`` interleaved rounds.
"""

from __future__ import annotations

import argparse
import copy
import json
import shutil
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from _common import scratch_dir

LLAMAS: dict[
    str, dict[str, Any]
] = {  # "1b": TinyLlama's shape (22 layers of 2048, 32 heads / 4 kv heads): ~0.97B parameters besides embeddings
    "small": {
        "model_type": "llama",
        "hidden_size": 256,
        "intermediate_size": 688,
        "num_hidden_layers": 4,
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
        "max_position_embeddings": 4096,
    },
    "1b": {
        "model_type": "llama",
        "hidden_size": 2048,
        "intermediate_size": 5632,
        "num_hidden_layers": 22,
        "num_attention_heads": 32,
        "num_key_value_heads": 4,
        "max_position_embeddings": 4096,
    },
}


def packed_llama(size: str) -> dict[str, Any]:
    """The Llama config seqpack trains: seqpack's attention plans inside the model."""
    return {**LLAMAS[size], "attn_implementation": "seqpack_packed"}


class Setup:
    """Where and how the arms run: ``device`` (cpu|cuda), ``dtype`` (fp32|bf16 autocast), the Llama size."""

    def __init__(self, device: str = "cpu", dtype: str = "fp32", llama: str = "small") -> None:
        self.device, self.dtype, self.llama = device, dtype, LLAMAS[llama]

    def measure(self, arm: Any) -> dict[str, Any]:
        """``arm()``'s result, with its peak GPU memory (GiB) on CUDA."""
        if self.device != "cuda":
            return arm()
        import gc

        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        return {**arm(), "peak_gib": torch.cuda.max_memory_allocated() / 2**30}


#: (median tokens, sigma) of the lognormal lengths of prompt, chosen and rejected, by --mix
MIXES: dict[str, dict[str, tuple[float, float]]] = {
    "ultrafeedback": {"prompt": (120, 0.9), "chosen": (260, 0.7), "rejected": (220, 0.8)},
    "long-answers": {"prompt": (40, 0.6), "chosen": (420, 0.5), "rejected": (400, 0.5)},
}


def pairs_data(n: int, max_len: int, seed: int = 0, mix: str = "ultrafeedback") -> list[dict[str, str]]:
    rng = np.random.default_rng(seed)
    shape = MIXES[mix]
    out: list[dict[str, str]] = []

    def words(k: int) -> str:
        return " ".join(f"w{i}" for i in rng.integers(0, 2000, k))

    while len(out) < n:
        p, c, r = (
            max(1, int(rng.lognormal(np.log(shape[k][0]), shape[k][1]))) for k in ("prompt", "chosen", "rejected")
        )
        if 2 * p + c + r + 2 > max_len:  # + the EOS of each response
            continue
        chosen, rejected = " " + words(c), " " + words(r)
        if chosen != rejected:
            out.append({"prompt": words(p), "chosen": chosen, "rejected": rejected})
    return out


def word_tokenizer(path: Path) -> Path:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "<eos>": 1, "<unk>": 2, **{f"w{i}": i + 3 for i in range(2000)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>", pad_token="<pad>", unk_token="<unk>")
    fast.save_pretrained(str(path))
    return path


class StepTimer:
    """A transformers callback keeping each optimiser step's wall time."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self._t = 0.0

    def hook(self) -> Any:
        import transformers

        timer = self

        class _CB(transformers.TrainerCallback):
            def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
                timer._t = time.perf_counter()

            def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
                timer.times.append(time.perf_counter() - timer._t)

        return _CB()


def trl_arm(
    records: list[dict],
    tok_dir: Path,
    pairs: int,
    steps: int,
    work: Path,
    setup: Setup | None = None,
    checkpointing: bool = False,
) -> dict[str, float]:
    import datasets
    import transformers as tf
    import trl

    tok = tf.AutoTokenizer.from_pretrained(str(tok_dir))
    torch.manual_seed(0)
    setup = setup or Setup()
    cfg = tf.LlamaConfig(
        **{k: v for k, v in setup.llama.items() if k != "model_type"},
        vocab_size=len(tok),  # type: ignore[call-arg]  # attn_implementation: every config takes it
        attn_implementation="sdpa",
    )
    model = tf.LlamaForCausalLM(cfg)
    timer = StepTimer()
    args = trl.DPOConfig(
        output_dir=str(work / "trl"),
        per_device_train_batch_size=pairs,
        max_steps=steps,
        report_to=[],
        use_cpu=setup.device == "cpu",
        bf16=setup.dtype == "bf16",
        max_length=None,
        save_strategy="no",
        precompute_ref_log_probs=True,
        learning_rate=1e-4,
        logging_steps=10_000,
        disable_tqdm=True,
        dataloader_num_workers=0,
        gradient_checkpointing=checkpointing,
    )  # TRL's default is on; the plain arms do not recompute
    trainer = trl.DPOTrainer(
        model=model,
        ref_model=copy.deepcopy(model),
        args=args,
        processing_class=tok,
        train_dataset=datasets.Dataset.from_list(records),
        callbacks=[timer.hook()],
    )
    trainer.train()
    t = statistics.median(timer.times[1:])
    return {"step_s": t, "pairs_per_s": pairs / t, "pairs_per_step": pairs}


def trl_tokens(records: list[dict], tok_dir: Path, pairs: int) -> dict[str, float]:
    """TRL's padded layout: rows and tokens processed per pair, over shuffled batches of ``pairs``."""
    from seqpack.tokenizer import open_tokenizer

    t = open_tokenizer(tok_dir)
    lens = []
    for r in records:
        p = len(t.encode_batch([r["prompt"]])[0])
        lens.append((p + len(t.encode_batch([r["chosen"]])[0]) + 1, p + len(t.encode_batch([r["rejected"]])[0]) + 1))
    order = np.random.default_rng(0).permutation(len(lens))
    width, rows = 0, 0
    for lo in range(0, len(order), pairs):
        batch = [lens[i] for i in order[lo : lo + pairs]]
        w = max(max(a, b) for a, b in batch)
        width += w * 2 * len(batch)
        rows += 2 * len(batch)
    return {
        "tokens_per_pair": width / len(lens),
        "rows_per_1000_pairs": 1000 * rows / len(lens),
        "real_tokens_per_pair": float(np.mean([a + b for a, b in lens])),
    }


def packed_tokens(path: Path) -> dict[str, float]:
    m = json.loads((path / "manifest.json").read_text())
    n, P, L = int(m["num_sequences"]), int(m["num_packs"]), int(m["max_len"])
    return {
        "tokens_per_pair": P * L / n,
        "rows_per_1000_pairs": 1000 * P / n,
        "pairs_per_row": n / P,
        "real_tokens_per_pair": float(m["num_tokens"]) / n if "num_tokens" in m else float("nan"),
    }


def seqpack_arm(
    path: Path,
    work: Path,
    pairs: int,
    steps: int,
    hf_model: Path | None,
    setup: Setup | None = None,
    checkpointing: bool = False,
) -> dict[str, float]:
    from seqpack.train import TrainConfig, train

    m = json.loads((path / "manifest.json").read_text())
    per_row = int(m["num_sequences"]) / int(m["num_packs"])
    rows = max(1, round(pairs / per_row))
    out = work / f"run-{path.name}-{time.monotonic_ns()}"
    cfg = TrainConfig(
        data=str(path),
        out=str(out),
        steps=steps,
        batch_size=rows,
        lr=1e-4,
        progress=False,
        threads=2,
        eval_fraction=0.02,
        hf_model=str(hf_model) if hf_model else None,
        size="small",
        max_position=4096,
        dtype=(setup or Setup()).dtype,
        gradient_checkpointing=checkpointing,
    )
    train(cfg)
    recs = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    shutil.rmtree(out)  # a 1B model's checkpoint is ~12 GB: a run's arms would fill a 64 GB disk
    steps_ = [r for r in recs if "eval" not in r][1:]
    t = statistics.median(r["step_seconds"] for r in steps_)
    seqs = statistics.median(r["step_sequences"] for r in steps_)
    return {"step_s": t, "pairs_per_s": seqs / t, "pairs_per_step": seqs}


def gpt_padded_arm(records: list[dict], tok_dir: Path, pairs: int, steps: int) -> dict[str, float]:
    """seqpack's GPT on TRL's row layout (each response its own row, padded to the batch's longest)."""
    from seqpack.nn.models import GPT, GPTConfig
    from seqpack.tokenizer import open_tokenizer

    t = open_tokenizer(tok_dir)
    torch.manual_seed(0)
    model = GPT(GPTConfig.of_size("small", vocab_size=t.vocab_size, max_position=4096, attention="sdpa"))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    eos = t.token_to_id("<eos>")
    assert eos is not None, "the word tokenizer has <eos>"
    rows = []
    for r in records:
        p = t.encode_batch([r["prompt"]])[0]
        rows.append([(p + t.encode_batch([r[k]])[0] + [eos], len(p)) for k in ("chosen", "rejected")])
    order = np.random.default_rng(0).permutation(len(rows))
    batches = []
    for s in range(steps):
        batch = [rows[i] for i in order[s * pairs : (s + 1) * pairs]]
        flat = [b[0] for b in batch] + [b[1] for b in batch]
        T = max(len(f) for f, _ in flat)
        ids = torch.zeros(len(flat), T, dtype=torch.long)
        seg = torch.zeros_like(ids)
        comp = torch.zeros(len(flat), T)
        for i, (f, k) in enumerate(flat):
            ids[i, : len(f)], seg[i, : len(f)], comp[i, k : len(f)] = torch.tensor(f), 1, 1
        batches.append((ids, seg, comp))

    def logps(ids: torch.Tensor, seg: torch.Tensor, comp: torch.Tensor) -> torch.Tensor:
        logits = model(ids, seg).logits
        return (torch.log_softmax(logits[:, :-1], -1).gather(2, ids[:, 1:, None]).squeeze(2) * comp[:, 1:]).sum(1)

    # the reference: the initial weights' log-probabilities, precomputed (untimed) as in the other arms. Without
    # it the margins are whole log-probability sums apart, the loss saturates, and its gradients are denormal
    # floats (~1e-39) that made this arm's backward 4x slower on x86 (measured: 5.8 s against 1.35 s a step).
    model.eval()  # as seqpack's reference pass: no dropout
    with torch.no_grad():
        refs = [logps(*b).chunk(2) for b in batches]
    model.train()
    times = []
    for (ids, seg, comp), ref in zip(batches, refs):
        t0 = time.perf_counter()
        pc, pr = logps(ids, seg, comp).chunk(2)
        loss = -torch.nn.functional.logsigmoid(0.1 * ((pc - ref[0]) - (pr - ref[1]))).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        times.append(time.perf_counter() - t0)
    t_ = statistics.median(times[1:])
    return {"step_s": t_, "pairs_per_s": pairs / t_, "pairs_per_step": pairs}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer pairs and steps (a smoke run)")
    ap.add_argument("--pairs", type=int, default=8, help="pairs per optimiser step")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--steps", type=int, default=None, help="optimiser steps per arm (default 5, --quick 3)")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument(
        "--dtype", choices=("fp32", "bf16"), default="fp32", help="bf16: autocast over fp32 weights, every arm"
    )
    ap.add_argument("--llama", choices=tuple(LLAMAS), default="small", help="the Llama's size (1b: TinyLlama's shape)")
    ap.add_argument(
        "--models", default="llama,gpt", help="which models' arms run (llama: TRL and seqpack; gpt: seqpack)"
    )
    ap.add_argument("--max-lens", default="1024,4096")
    ap.add_argument(
        "--mix", choices=tuple(MIXES), default="ultrafeedback", help="the pairs' length distribution (see above)"
    )
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument(
        "--checkpointing",
        action="store_true",
        help="also the Llama arms with gradient checkpointing (TRL's default, seqpack's --gradient-checkpointing)",
    )
    ap.add_argument(
        "--only",
        nargs="*",
        default=None,
        metavar="ARM",
        help="re-run only these arms (e.g. llama/trl) and update their entries in --out",
    )
    args = ap.parse_args()
    if args.device == "cpu":
        torch.set_num_threads(2)
    setup = Setup(args.device, args.dtype, args.llama)
    models = set(args.models.split(","))
    from seqpack.pipeline import PackConfig, build_packed_dataset
    from seqpack.tokenizer import open_tokenizer

    work = scratch_dir("seqpack-pref-")
    tok_dir = word_tokenizer(work / "tok")
    (work / "llama.json").write_text(json.dumps(packed_llama(args.llama)))
    n, steps = (200, 3) if args.quick else (600, 5)
    steps = args.steps or steps
    results: dict[str, Any] = {
        "pairs_per_step": args.pairs,
        "rounds": args.rounds,
        "steps": steps,
        "by_max_len": {},
        "device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
        "dtype": args.dtype,
        "llama": {**LLAMAS[args.llama]},
        "torch": torch.__version__,
        "mix": {"name": args.mix, **{k: {"median": m, "sigma": sg} for k, (m, sg) in MIXES[args.mix].items()}},
    }
    if args.only:
        results = json.loads(args.out.read_text())

    def arms_of(records: list[dict[str, str]], paths: dict[str, Path]) -> dict[str, Callable[[], dict[str, Any]]]:
        """Each arm on one max_len's pairs and packed datasets."""
        return {
            "llama/trl": lambda: trl_arm(records, tok_dir, args.pairs, steps, work, setup),
            "llama/pairs": lambda: seqpack_arm(paths["pairs"], work, args.pairs, steps, work / "llama.json", setup),
            "llama/shared-prefix": lambda: seqpack_arm(
                paths["shared-prefix"], work, args.pairs, steps, work / "llama.json", setup
            ),
            "llama/trl_default_checkpointing": lambda: trl_arm(records, tok_dir, args.pairs, steps, work, setup, True),
            "llama/pairs_checkpointing": lambda: seqpack_arm(
                paths["pairs"], work, args.pairs, steps, work / "llama.json", setup, True
            ),
            "llama/shared-prefix_checkpointing": lambda: seqpack_arm(
                paths["shared-prefix"], work, args.pairs, steps, work / "llama.json", setup, True
            ),
            "gpt/padded": lambda: gpt_padded_arm(records, tok_dir, args.pairs, steps),
            "gpt/pairs": lambda: seqpack_arm(paths["pairs"], work, args.pairs, steps, None, setup),
            "gpt/shared-prefix": lambda: seqpack_arm(paths["shared-prefix"], work, args.pairs, steps, None, setup),
        }

    for max_len in (int(x) for x in args.max_lens.split(",")):
        records = pairs_data(n, max_len, mix=args.mix)
        r: dict[str, Any] = {"pairs": len(records), "tokens": {"trl": trl_tokens(records, tok_dir, args.pairs)}}
        old = results["by_max_len"].get(str(max_len), {})
        paths = {}
        for layout in ("pairs", "shared-prefix"):
            paths[layout] = work / f"{layout}-{max_len}"
            build_packed_dataset(
                records,
                open_tokenizer(tok_dir),
                paths[layout],
                PackConfig.for_task("preference", max_len=max_len, layout=layout),
            )
            r["tokens"][layout] = packed_tokens(paths[layout])
        runs: dict[str, list[dict]] = {}
        for _ in range(args.rounds):
            arms = arms_of(records, paths)
            for name, fn in arms.items():
                if (args.only and name not in args.only) or name.split("/")[0] not in models:
                    continue
                if name.endswith("_checkpointing") and not (args.checkpointing or args.only):
                    continue
                runs.setdefault(name, []).append(setup.measure(fn))
                print(f"max_len {max_len} {name}: {runs[name][-1]}", flush=True)
        r["throughput"] = {
            **old.get("throughput", {}),
            **{
                k: {
                    "pairs_per_s": statistics.median(x["pairs_per_s"] for x in v),
                    "runs": [x["pairs_per_s"] for x in v],
                    "pairs_per_step": v[0]["pairs_per_step"],
                    **({"peak_gib": max(x["peak_gib"] for x in v)} if "peak_gib" in v[0] else {}),
                }
                for k, v in runs.items()
            },
        }
        for model, base in (("llama", "trl"), ("gpt", "padded")):
            if f"{model}/{base}" not in r["throughput"]:
                continue
            for layout in ("pairs", "shared-prefix"):
                speed = (
                    r["throughput"][f"{model}/{layout}"]["pairs_per_s"]
                    / r["throughput"][f"{model}/{base}"]["pairs_per_s"]
                )
                tokens = r["tokens"]["trl"]["tokens_per_pair"] / r["tokens"][layout]["tokens_per_pair"]
                r.setdefault("ratios", {})[f"{model}/{layout}"] = {
                    "speedup": speed,
                    "token_ratio": tokens,
                    "realised_over_tokens": speed / tokens,
                }
        tp, ck = r["throughput"], "llama/trl_default_checkpointing"
        for layout in ("pairs", "shared-prefix"):  # both sides recompute their layers
            if ck in tp and f"llama/{layout}_checkpointing" in tp:
                r.setdefault("ratios", {})[f"llama/{layout}_checkpointing vs trl_default_checkpointing"] = {
                    "speedup": tp[f"llama/{layout}_checkpointing"]["pairs_per_s"] / tp[ck]["pairs_per_s"]
                }
        results["by_max_len"][str(max_len)] = r
        print(json.dumps(r.get("ratios"), indent=1), flush=True)
        if args.out:  # after each max_len: a run cut short keeps what it finished
            args.out.write_text(json.dumps(results, indent=1) + "\n")
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
