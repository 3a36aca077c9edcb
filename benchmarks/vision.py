"""Image-text SFT packed: rows, padding and CPU training throughput against TRL's unpacked VLM SFT.

Run: .venv/bin/python benchmarks/vision.py [--quick] [--out benchmarks/results/vision.json]

Data: ``--samples`` synthetic records (seed 0) in TRL's vision format: 0-2 images each (JPEG),
each image's token count log-uniform in 50-1,500 (Qwen2-VL: one token per 28 x 28 pixels; the
processor's max_pixels lets every image through unresized), one exchange of 3-90 words per turn
(byte-level tokens). Processor: Qwen2-VL's, with seqpack's tiny byte-level tokenizer
(``seqpack.experiments.tiny_vlm``). max_len 4096.

1. Packing: seqpack's ``best`` plan over all samples against TRL's ``pack_dataset(strategy="bfd")``
   on the same lengths (its default 1,000-row windows, and whole); the padding of TRL's unpacked
   batches (8 samples in random order, padded to the longest: ``DataCollatorForVisionLanguageModeling``).
2. Storage: an image as the encoded bytes the rows keep against the float32 pixels the processor
   makes, and the time to decode and process it (what reading a row costs per image).
3. Training on CPU (2 threads, fp32): a small Qwen2-VL-style model (text: hidden 128, 4 layers;
   vision: 1 block), the same initial weights in each arm, forward + backward + AdamW, the collator
   (decoding and processing the images) timed inside each step:
     padded   TRL's collator, 8 samples per step, sdpa
     packed   seqpack's rows of the ``best`` plan, 2 rows per step, ``VisionCollator`` and
              seqpack's packed attention (``attach_packed_attention``)
   Samples per second, median over interleaved rounds after a warm-up step per arm. TRL's collator
   renders and tokenizes every sample at each step; the rows were tokenized when they were packed
   (their collator only processes the images): the seconds each collator took are reported apart.
4. ``seqpack train --hf-model``'s loop on the same records packed by the pack job (``build_packed_dataset``)
   (the packed arm's model config, its own random init, 2 rows per step, per-sample loss, one row
   held out): samples per second of its steps after the first, median (the library's training loop,
   reading rows from disk, against the bare packed step of 3).
"""

from __future__ import annotations

import argparse
import copy
import io
import statistics
import time
from typing import Any

import numpy as np
import torch
from _common import write_result

from seqpack.experiments.tiny_vlm import synthetic_records, tiny_processor, tiny_vlm
from seqpack.nn.hf_attention import attach_packed_attention
from seqpack.tasks.vision import VisionCollator, pack_vision, vision_samples

MAX_LEN = 4096
MAX_PIXELS = 1600 * 28 * 28
BATCH = 8


def trl_rows(lengths: np.ndarray, window: int | None) -> int:
    import datasets
    from trl.data_utils import pack_dataset

    datasets.disable_progress_bars()
    ds = datasets.Dataset.from_dict({"input_ids": [[0] * int(n) for n in lengths]})
    kw = {"batch_size": len(ds)} if window is None else None
    return len(pack_dataset(ds, MAX_LEN, strategy="bfd", map_kwargs=kw))


def padded_slots(lengths: np.ndarray, order: np.ndarray) -> int:
    """Token slots of batches of BATCH samples in ``order``, each padded to its longest (TRL's collator)."""
    return sum(
        int(lengths[order[a : a + BATCH]].max()) * len(order[a : a + BATCH]) for a in range(0, lengths.size, BATCH)
    )


def padded_fraction(lengths: np.ndarray, seed: int = 0) -> float:
    return 1 - int(lengths.sum()) / padded_slots(lengths, np.random.default_rng(seed).permutation(lengths.size))


def packing(samples, records) -> dict:  # type: ignore[no-untyped-def]
    lengths = samples.lengths
    t0 = time.perf_counter()
    packs = pack_vision(samples, max_len=MAX_LEN)
    plan_s = time.perf_counter() - t0
    tokens = int(lengths.sum())
    out: dict[str, Any] = {
        "samples": int(lengths.size),
        "tokens": tokens,
        "images": len(samples.images),
        "image_tokens": [int(x) for x in np.percentile(samples.grids.prod(axis=1) // 4, [0, 50, 100])],
        "sample_tokens": [int(x) for x in np.percentile(lengths, [0, 50, 100])],
        "rows": {
            "seqpack best": packs.num_rows,
            "trl bfd (1,000-row windows)": trl_rows(lengths, 1000),
            "trl bfd (whole set)": trl_rows(lengths, None),
            "lower bound": -(-tokens // MAX_LEN),
        },
        "plan_seconds": plan_s,
        "padding_fraction_trl_batches": padded_fraction(lengths),
    }
    out["fill"] = {k: tokens / (v * MAX_LEN) for k, v in out["rows"].items()}
    return out


def storage(records, processor, n: int = 40) -> dict:  # type: ignore[no-untyped-def]
    from PIL import Image

    data = [b for r in records for b in r["images"]][:n]
    t0 = time.perf_counter()
    pixels = 0
    for b in data:
        got = processor.image_processor(images=[Image.open(io.BytesIO(b)).convert("RGB")], return_tensors="np")
        pixels += got["pixel_values"].nbytes
    seconds = time.perf_counter() - t0
    stored = sum(len(b) for b in data)
    return {
        "images": len(data),
        "stored_bytes_per_image": stored / len(data),
        "pixel_bytes_per_image": pixels / len(data),
        "ratio": pixels / stored,
        "decode_and_process_ms_per_image": 1000 * seconds / len(data),
    }


def step_fn(model, collate, batches, collate_s: list[float]):  # type: ignore[no-untyped-def]
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    it = iter(batches)

    def step() -> int:
        items, n = next(it)
        t0 = time.perf_counter()
        batch = collate(items)
        collate_s.append(time.perf_counter() - t0)
        loss = model(**batch).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return n

    return step


def training(records, steps: int, rounds: int) -> dict:  # type: ignore[no-untyped-def]
    from PIL import Image
    from trl.trainer.sft_trainer import DataCollatorForVisionLanguageModeling

    processor, base = tiny_vlm("qwen2_vl", max_pixels=MAX_PIXELS, hidden=128, layers=4)
    base.train()
    need = (steps * rounds + 1) * BATCH
    recs = records[:need]
    samples = vision_samples(recs, processor, max_len=MAX_LEN)
    packs = pack_vision(samples, max_len=MAX_LEN)
    rows = [packs.row(i) for i in np.random.default_rng(1).permutation(packs.num_rows)]
    trl = DataCollatorForVisionLanguageModeling(processor, assistant_only_loss=True)

    def trl_collate(items):  # type: ignore[no-untyped-def]
        return trl(
            [
                {"messages": r["messages"], "images": [Image.open(io.BytesIO(b)).convert("RGB") for b in r["images"]]}
                for r in items
            ]
        )

    order = np.random.default_rng(2).permutation(len(recs))
    padded_batches = [
        ([recs[j] for j in order[a : a + BATCH]], len(order[a : a + BATCH])) for a in range(0, len(recs), BATCH)
    ]
    packed_batches = [
        (rows[a : a + 2], sum(len(r["seq_lengths"]) for r in rows[a : a + 2])) for a in range(0, len(rows), 2)
    ]
    padded_model, packed_model = copy.deepcopy(base), copy.deepcopy(base)
    attach_packed_attention(packed_model)
    collate_s: dict[str, list[float]] = {"padded": [], "packed": []}
    arms = {
        "padded": step_fn(padded_model, trl_collate, padded_batches * 4, collate_s["padded"]),
        "packed": step_fn(packed_model, VisionCollator(processor), packed_batches * 4, collate_s["packed"]),
    }
    for fn in arms.values():
        fn()  # warm-up
    for v in collate_s.values():
        v.clear()
    rates: dict[str, list[float]] = {k: [] for k in arms}
    model_rates: dict[str, list[float]] = {k: [] for k in arms}  # the collator's seconds left out
    for _ in range(rounds):
        for name, fn in arms.items():
            t0, n, c0 = time.perf_counter(), 0, sum(collate_s[name])
            for _ in range(steps):
                n += fn()
            spent = time.perf_counter() - t0
            rates[name].append(n / spent)
            model_rates[name].append(n / (spent - (sum(collate_s[name]) - c0)))
    lengths = samples.lengths
    factor = padded_slots(lengths, order) / int(lengths.sum())
    med = {k: statistics.median(v) for k, v in rates.items()}
    model_med = {k: statistics.median(v) for k, v in model_rates.items()}
    collate = {k: sum(v) for k, v in collate_s.items()}  # collator seconds over the timed steps
    return {
        "samples": len(recs),
        "steps": steps,
        "rounds": rounds,
        "samples_per_s": med,
        "rounds_samples_per_s": rates,
        "collate_seconds": collate,
        "model_samples_per_s": model_med,
        "model_speedup": model_med["packed"] / model_med["padded"],
        "speedup": med["packed"] / med["padded"],
        "packing_factor": factor,
        "speedup_over_factor": med["packed"] / med["padded"] / factor,
    }


def cli_loop(records, steps: int, rounds: int) -> dict:  # type: ignore[no-untyped-def]
    """``seqpack train``'s loop (:func:`seqpack.train.train`) on rows written to disk."""
    import tempfile
    from pathlib import Path

    from seqpack.experiments.tiny_vlm import tiny_config
    from seqpack.pipeline import PackConfig, build_packed_dataset
    from seqpack.tasks.vision import ProcessorTokenizer
    from seqpack.train import TrainConfig, train
    from seqpack.train.checkpoint import read_metrics

    processor = tiny_processor("qwen2_vl", max_pixels=MAX_PIXELS)
    recs = records[: (steps * rounds + 1) * BATCH]  # the records the other arms train on
    with tempfile.TemporaryDirectory() as d:
        build_packed_dataset(
            recs,
            ProcessorTokenizer(processor),
            Path(d, "packs"),
            PackConfig.for_task("vision", max_len=MAX_LEN),
        )
        tiny_config("qwen2_vl", processor, hidden=128, layers=4).save_pretrained(Path(d, "model"))
        n = steps * rounds + 1
        train(
            TrainConfig(
                data=str(Path(d, "packs")),
                out=str(Path(d, "run")),
                hf_model=str(Path(d, "model")),
                steps=n,
                batch_size=2,
                eval_fraction=0.02,
                eval_tokens=MAX_LEN,
                progress=False,
                threads=2,
                lr=1e-4,
                warmup=0.0,
            )
        )
        recs_ = [r for r in read_metrics(Path(d, "run")) if "eval" not in r and r["step"] > 1]
    rates = [r["sequences_per_s"] for r in recs_]
    return {"steps": len(rates), "samples_per_s": statistics.median(rates), "steps_samples_per_s": rates}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=2000)
    ap.add_argument("--steps", type=int, default=3, help="timed steps per arm and round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    if args.quick:
        args.samples, args.steps, args.rounds = 200, 1, 1
    torch.set_num_threads(2)
    records = synthetic_records(
        args.samples, seed=0, images=(0, 2), image_tokens=(50, 1500), words=(3, 90), turns=(1, 1), fmt="JPEG"
    )
    processor = tiny_processor("qwen2_vl", max_pixels=MAX_PIXELS)
    t0 = time.perf_counter()
    samples = vision_samples(records, processor, max_len=MAX_LEN)
    build_s = time.perf_counter() - t0
    result: dict[str, Any] = {
        "seed": 0,
        "max_len": MAX_LEN,
        "build_seconds": build_s,
        "packing": packing(samples, records),
        "storage": storage(records, processor),
    }
    p = result["packing"]
    print(
        f"{p['samples']:,} samples, {p['images']:,} images, {p['tokens']:,} tokens (sample tokens min/median/max "
        f"{p['sample_tokens']}; image tokens {p['image_tokens']}); built in {build_s:.1f} s"
    )
    for k, v in p["rows"].items():
        print(f"  {k:<30} {v:>6,} rows  fill {p['fill'][k]:.2%}")
    print(f"  TRL unpacked batches of {BATCH}: {p['padding_fraction_trl_batches']:.1%} padding")
    s = result["storage"]
    print(
        f"storage: {s['stored_bytes_per_image'] / 1e3:.1f} KB stored vs {s['pixel_bytes_per_image'] / 1e6:.2f} MB of "
        f"float32 pixels per image (x{s['ratio']:.0f}); decode + process {s['decode_and_process_ms_per_image']:.1f} ms/image"
    )
    result["training"] = t = training(records, args.steps, args.rounds)
    print(
        f"training (CPU, 2 threads): padded {t['samples_per_s']['padded']:.2f} samples/s, packed "
        f"{t['samples_per_s']['packed']:.2f} samples/s: x{t['speedup']:.2f} (packing factor {t['packing_factor']:.2f}, "
        f"{t['speedup_over_factor']:.2f} of it); collators {t['collate_seconds']['padded']:.1f} s vs "
        f"{t['collate_seconds']['packed']:.1f} s of the timed steps; without them x{t['model_speedup']:.2f}"
    )
    result["cli_loop"] = c = cli_loop(records, args.steps, args.rounds)
    c["against_packed_step"] = c["samples_per_s"] / t["samples_per_s"]["packed"]
    print(
        f"seqpack train --hf-model loop: {c['samples_per_s']:.2f} samples/s ({c['against_packed_step']:.2f} of the "
        f"bare packed step, {c['samples_per_s'] / t['samples_per_s']['padded']:.2f}x TRL padded)"
    )
    write_result(args.out, result, packages=("torch", "transformers", "trl", "pillow"))


if __name__ == "__main__":
    main()
