"""Every CUDA path measured on one GPU: attention backends alone, packed vs padded
training throughput (BERT base/large at 512, GPT at 2048, a Llama-style HF model padding-free),
and torch.compile. Results go to ``--out`` as JSON lines; figures are recorded in docs/benchmarks/gpu.md.

Run (on a CUDA machine, from the checkout): PYTHONPATH=src:. python benchmarks/gpu.py --out gpu.jsonl

Every throughput figure is bf16 autocast over fp32 weights, forward + backward, lengths drawn
from the Wikipedia histogram shipped with seqpack (seed 0), padded and packed steps interleaved
in rounds after a warm-up round, the device synchronised around each step; medians reported.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import wikipedia_lengths

from seqpack.experiments.bench import BenchConfig, make_batches, run_bench
from seqpack.nn.attention import packed_attention, plan_attention

BACKENDS = ("sdpa", "per_document", "varlen", "flex")


def cuda_time(fn: Callable[[], Any], reps: int, warmup: int = 3) -> float:
    """Median seconds of ``fn`` over ``reps`` calls, synchronised."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        out.append(time.perf_counter() - t0)
    return statistics.median(out)


def attention_alone(T: int, rows: int, causal: bool, reps: int) -> dict[str, Any]:
    """fwd+bwd of the attention op alone, 12 heads x 64 dims, bf16, on packed Wikipedia rows
    (each backend) and on the same number of padded rows (sdpa, key padding / is_causal).
    q, k and v are slices of one (B, T, 3, H, d) projection and the output goes back to
    (B, T, H*d), as in the models' attention layer (so no backend is charged for a layout the
    model never has)."""
    lengths = wikipedia_lengths(20_000, np.random.default_rng(0))
    data = make_batches(lengths, T, rows, 1, seed=0, vocab=100, causal=causal)
    res: dict[str, Any] = {
        "case": "attention",
        "T": T,
        "rows": rows,
        "causal": causal,
        "packing_factor": data["packing_factor"],
    }
    for name, seg, backends in (
        ("padded", data["padded"][0]["segment_ids"], ("sdpa",)),
        ("packed", data["packed"][0]["segment_ids"], BACKENDS),
    ):
        seg = seg.cuda()
        qkv = torch.randn(rows, T, 3, 12, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)  # (B, H, T, d) views, as in layers.Attention
        grad = torch.randn(rows, T, 12 * 64, device="cuda", dtype=torch.bfloat16)
        for b in backends:
            plan = plan_attention(seg, causal=causal, backend=b, dtype=torch.bfloat16)

            def step(plan: Any = plan, q: Any = q, k: Any = k, v: Any = v, grad: Any = grad) -> None:
                packed_attention(q, k, v, plan).transpose(1, 2).reshape(rows, T, -1).backward(grad, retain_graph=True)

            res[f"{name}_{b}_ms"] = 1e3 * cuda_time(step, reps)
    return res


def varlen_profile(reps: int) -> dict[str, Any]:
    """Where varlen attention's time goes (16 x 2048, causal): the kernel on already-unpadded tokens
    (fwd, fwd+bwd), the kernel on the rows as they are (padding as runs of its own), flash SDPA on
    full rows, and the whole backend call."""
    from seqpack.nn.attention.varlen import VarlenPlan, torch_varlen
    from seqpack.nn.masks import cu_seqlens, max_seqlen

    fn = torch_varlen()
    assert fn is not None, "this torch has no varlen attention (2.10+)"
    lengths = wikipedia_lengths(20_000, np.random.default_rng(0))
    data = make_batches(lengths, 2048, 16, 1, seed=0, vocab=100, causal=True)
    seg = data["packed"][0]["segment_ids"].cuda()
    plan = plan_attention(seg, causal=True, backend="varlen", dtype=torch.bfloat16)
    assert isinstance(plan, VarlenPlan)
    cu_real, m_real = cu_seqlens(seg), max_seqlen(seg)
    total = int(cu_real[-1])
    res: dict[str, Any] = {
        "case": "varlen_profile",
        "tokens": total,
        "sequences": int(cu_real.numel() - 1),
        "runs": int(plan.cu_seqlens.numel() - 1),
        "row_tokens": 16 * 2048,
    }
    for name, n, cu, m in (("unpadded", total, cu_real, m_real), ("rows", 16 * 2048, plan.cu_seqlens, plan.max_seqlen)):
        q, k, v = (torch.randn(n, 12, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
        g = torch.randn_like(q)
        fwd = functools.partial(fn, q, k, v, cu, cu, m, m, window_size=(-1, 0))
        with torch.no_grad():
            res[f"kernel_{name}_fwd_ms"] = 1e3 * cuda_time(fwd, reps)

        def fwd_bwd(fwd: Callable[[], torch.Tensor] = fwd, g: torch.Tensor = g) -> None:
            fwd().backward(g)

        res[f"kernel_{name}_fwd_bwd_ms"] = 1e3 * cuda_time(fwd_bwd, reps)
    qf, kf, vf = (
        torch.randn(16, 12, 2048, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3)
    )
    with torch.no_grad():
        res["flash_full_rows_fwd_ms"] = 1e3 * cuda_time(
            lambda: torch.nn.functional.scaled_dot_product_attention(qf, kf, vf, is_causal=True), reps
        )
    gf = torch.randn_like(qf)
    res["flash_full_rows_fwd_bwd_ms"] = 1e3 * cuda_time(
        lambda: torch.nn.functional.scaled_dot_product_attention(qf, kf, vf, is_causal=True).backward(gf), reps
    )
    res["backend_fwd_bwd_ms"] = 1e3 * cuda_time(lambda: packed_attention(qf, kf, vf, plan).backward(gf), reps)
    res["plan_ms"] = 1e3 * cuda_time(
        lambda: plan_attention(seg, causal=True, backend="varlen", dtype=torch.bfloat16), reps
    )
    return res


def profile_steps(
    model: str, size: str, T: int, rows: int, attention: str, head: str, out_dir: str | None, steps: int = 5
) -> dict[str, Any]:
    """torch.profiler over ``steps`` training steps of the padded and the packed model: wall time and
    GPU kernel time per step, and the kernels that take the most (their table goes to ``out_dir``)."""
    from torch.profiler import ProfilerActivity, profile

    from seqpack.experiments.bench import bench_model, step

    cfg = BenchConfig(
        lengths="wikipedia",
        max_len=T,
        model=model,
        size=size,
        batch_size=rows,
        steps=steps,
        repeats=1,
        head=head,
        attention=attention,
        device="cuda",
        dtype="bf16",
        sequences=20_000,
    )
    causal = model == "gpt"
    lengths = wikipedia_lengths(20_000, np.random.default_rng(0))
    data = make_batches(lengths, T, rows, steps + 2, seed=0, vocab=cfg.vocab_size, causal=causal)
    res: dict[str, Any] = {
        "case": "profile",
        "model": model,
        "size": size,
        "T": T,
        "rows": rows,
        "attention": attention,
        "head": head,
        "packing_factor": data["packing_factor"],
    }
    for arm, backend in (("padded", "sdpa"), ("packed", attention)):
        torch.manual_seed(0)
        m = bench_model(cfg, backend).cuda()
        batches = [{n: x.cuda() for n, x in b.items()} for b in data[arm]]
        for b in batches[:2]:
            step(m, b, head, causal, "bf16")
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            t0 = time.perf_counter()
            for b in batches[2:]:
                step(m, b, head, causal, "bf16")
            torch.cuda.synchronize()
            wall = (time.perf_counter() - t0) / steps
        ev = prof.key_averages()
        kernels = sorted(
            (e for e in ev if e.device_type == torch.autograd.DeviceType.CUDA), key=lambda e: -e.self_device_time_total
        )
        gpu_ms = sum(e.self_device_time_total for e in kernels) / 1e3 / steps
        res[f"{arm}_wall_ms"] = 1e3 * wall
        res[f"{arm}_gpu_kernel_ms"] = gpu_ms
        res[f"{arm}_top"] = [
            (e.key[:90], round(e.self_device_time_total / 1e3 / steps, 3), e.count // steps) for e in kernels[:25]
        ]
        if out_dir:  # one file for all cases (the GPU machine hands back few files)
            with open(Path(out_dir, "profiles.txt"), "a", encoding="utf-8") as f:
                f.write(
                    f"\n== {model} {size} {rows} x {T}, {arm} ({backend}), head={head}: wall {1e3 * wall:.2f} ms/step, "
                    f"kernels {gpu_ms:.2f} ms/step\n"
                )
                f.write(ev.table(sort_by="self_device_time_total", row_limit=45, max_name_column_width=90))
        del m
    return res


def head_alone(T: int, rows: int, reps: int, vocab: int = 30522, hidden: int = 768) -> dict[str, Any]:
    """The GPT's tied head and its loss alone (``vocab_logits`` + the fused cross-entropy, forward +
    backward, bf16 autocast over an fp32 weight) on as many targets as a padded and a packed batch
    of ``rows x T`` hold: the part of a head-at-targets step that grows with the real tokens."""
    from seqpack.nn.cross_entropy import token_cross_entropy
    from seqpack.nn.heads import vocab_logits

    lengths = wikipedia_lengths(20_000, np.random.default_rng(0))
    data = make_batches(lengths, T, rows, 1, seed=0, vocab=vocab, causal=True)
    res: dict[str, Any] = {"case": "head_alone", "T": T, "rows": rows, "vocab": vocab, "hidden": hidden}
    w = (torch.randn(vocab, hidden, device="cuda") * 0.02).requires_grad_()
    for arm in ("padded", "packed"):
        labels = data[arm][0]["labels"]
        n = int((labels[:, 1:] != -100).sum())
        h = torch.randn(n, hidden, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        t = torch.randint(0, vocab, (n,), device="cuda")

        def step(h: torch.Tensor = h, t: torch.Tensor = t) -> None:
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = token_cross_entropy(vocab_logits(h, w), t).sum()
            loss.backward()

        res[f"{arm}_targets"] = n
        res[f"{arm}_head_ms"] = 1e3 * cuda_time(step, reps)
    return res


def head_at_targets(steps: int, repeats: int, profile_dir: str | None) -> list[dict[str, Any]]:
    """GPT 16 x 2048, head at the targets: packed / padded throughput, the head alone at each batch's
    targets, and the bound they set: the packed step can be no shorter than the padded one plus the
    head's extra work, so realised / packing factor <= padded / (padded + extra head)."""
    out = [throughput("gpt", "base", 2048, 16, "varlen", steps, repeats)]
    out.append(head_alone(2048, 16, 20))
    if profile_dir is not None:
        out.append(profile_steps("gpt", "base", 2048, 16, "varlen", "targets", profile_dir))
    b, h = out[0], out[1]
    extra = (h["packed_head_ms"] - h["padded_head_ms"]) / 1e3
    out.append(
        {
            "case": "head_at_targets_bound",
            "realised_over_factor": b["realized_speedup"] / b["packing_factor"],
            "padded_step_s": b["padded_step_s"],
            "packed_step_s": b["packed_step_s"],
            "extra_head_s": extra,
            "bound_over_factor": b["padded_step_s"] / (b["padded_step_s"] + extra),
            "packed_step_minus_bound_s": b["packed_step_s"] - (b["padded_step_s"] + extra),
        }
    )
    return out


def throughput(
    model: str, size: str, T: int, rows: int, attention: str, steps: int, repeats: int, head: str = "targets"
) -> dict[str, Any]:
    cfg = BenchConfig(
        lengths="wikipedia",
        max_len=T,
        model=model,
        size=size,
        batch_size=rows,
        steps=steps,
        repeats=repeats,
        head=head,
        attention=attention,
        device="cuda",
        dtype="bf16",
        sequences=20_000,
    )
    return {"case": "bench", **run_bench(cfg)}


def llama(T: int, rows: int, steps: int, repeats: int) -> dict[str, Any]:
    """A Llama-style model from a config through seqpack.nn.hf_adapter: padded rows (4-D mask, sdpa),
    packed rows with the 4-D mask (sdpa) and packed rows padding-free (seqpack_varlen)."""
    import transformers as tf

    from seqpack.nn.hf_adapter import packed_forward
    from seqpack.nn.hf_padding_free import register_varlen_attention

    impl_varlen = register_varlen_attention()
    lengths = wikipedia_lengths(20_000, np.random.default_rng(0))
    data = make_batches(lengths, T, rows, steps * (repeats + 1), seed=0, vocab=32000, causal=True)
    variants = {
        "padded_sdpa": ("padded", "sdpa"),
        "packed_sdpa": ("packed", "sdpa"),
        "packed_varlen": ("packed", impl_varlen),
    }
    models = {}
    for key, (_, impl) in variants.items():
        torch.manual_seed(0)
        cfg = tf.LlamaConfig(
            vocab_size=32000,
            hidden_size=1024,
            intermediate_size=2816,
            num_hidden_layers=12,  # type: ignore[call-arg]  # attn_implementation: every config takes it, its typed signature does not list it
            num_attention_heads=16,
            num_key_value_heads=4,
            max_position_embeddings=T,
            attn_implementation=impl,
        )
        models[key] = tf.LlamaForCausalLM(cfg).cuda().train()  # type: ignore[call-arg]  # transformers' typed wrapper of Module.cuda
    batches = {k: [{n: x.cuda() for n, x in b.items()} for b in data[layout]] for k, (layout, _) in variants.items()}
    times: dict[str, list[float]] = {k: [] for k in variants}
    peak: dict[str, float] = {}
    for r in range(repeats + 1):
        for key, m in models.items():
            torch.cuda.reset_peak_memory_stats()
            for b in batches[key][r * steps : (r + 1) * steps]:
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    loss = packed_forward(m, b).loss
                loss.backward()  # type: ignore[union-attr]  # PackedOutput.loss: set when the batch has targets
                m.zero_grad(set_to_none=True)
                torch.cuda.synchronize()
                if r:
                    times[key].append(time.perf_counter() - t0)
            peak[key] = torch.cuda.max_memory_allocated() / 2**30
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):  # same weights: same loss?
        b = batches["packed_sdpa"][0]
        check = {k: float(packed_forward(models[k], b).loss) for k in ("packed_sdpa", "packed_varlen")}  # type: ignore[arg-type]  # PackedOutput.loss: set when the batch has targets
    step_s = {k: statistics.median(v) for k, v in times.items()}
    per_row = {k: data[f"{variants[k][0]}_tokens_per_row"] for k in variants}
    tok = {k: per_row[k] * rows / step_s[k] for k in variants}
    return {
        "case": "llama",
        "T": T,
        "rows": rows,
        "packing_factor": data["packing_factor"],
        "step_s": step_s,
        "tokens_per_s": tok,
        "speedup_vs_padded": {k: tok[k] / tok["padded_sdpa"] for k in variants},
        "peak_memory_gib": peak,
        "layers": 12,
        "hidden": 1024,
        "first_batch_loss": check,
    }


def compile_counts() -> list[dict[str, Any]]:
    """Compiled vs eager on batches whose sequences per row change (tests/nn/test_compile.py)."""
    from tests.nn.test_compile import compile_run

    out = []
    for kind, backend in (("gpt", "sdpa"), ("pretrain", "sdpa"), ("gpt", "per_document"), ("gpt", "flex")):
        t0 = time.perf_counter()
        r = compile_run(kind, backend, device="cuda", compiler="inductor")
        out.append(
            {
                "case": "compile",
                "kind": kind,
                "backend": backend,
                "graphs_after_each_batch": r["graphs_after"],
                "max_loss_diff": max(abs(a - b) for a, b in zip(r["eager"], r["compiled"])),
                "max_grad_diff": max(r["grad_diff"]),
                "seconds": time.perf_counter() - t0,
            }
        )
    return out


def compiled_throughput(steps: int) -> dict[str, Any]:
    """BERT-base packed (varlen), eager vs torch.compile, step time after warm-up."""
    from seqpack.experiments.bench import step
    from seqpack.nn.models import BertConfig, BertForPreTraining

    lengths = wikipedia_lengths(20_000, np.random.default_rng(0))
    data = make_batches(lengths, 512, 64, steps + 4, seed=0, vocab=30522, causal=False)
    batches = [{n: x.cuda() for n, x in b.items()} for b in data["packed"]]
    res: dict[str, Any] = {"case": "compiled_throughput", "model": "bert base", "rows": 64}
    for name in ("eager", "compiled"):
        torch.manual_seed(0)
        model = (
            BertForPreTraining(BertConfig.of_size("base", vocab_size=30522, dropout=0.0, attention="varlen"))
            .cuda()
            .train()
        )
        fn = torch.compile(model) if name == "compiled" else model
        t0 = time.perf_counter()
        for b in batches[:4]:
            step(fn, b, "targets", False, "bf16")  # type: ignore[arg-type]  # torch.compile's wrapper of the module
        torch.cuda.synchronize()
        res[f"{name}_warmup_s"] = time.perf_counter() - t0
        ts = []
        for b in batches[4:]:
            torch.cuda.synchronize()
            t1 = time.perf_counter()
            step(fn, b, "targets", False, "bf16")  # type: ignore[arg-type]  # torch.compile's wrapper of the module
            torch.cuda.synchronize()
            ts.append(time.perf_counter() - t1)
        res[f"{name}_step_s"] = statistics.median(ts)
    res["speedup"] = res["eager_step_s"] / res["compiled_step_s"]
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", default="gpu.jsonl")
    ap.add_argument("--cases", default="attention,bert,gpt,llama,compile,compiled")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--profile-dir", default=None, help="where the profile case writes its tables")
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = True  # throughput runs: the usual training setting
    cases = set(args.cases.split(","))

    def emit(r: dict[str, Any]) -> None:  # each result appended as it comes (a crash keeps the earlier ones)
        r = {**r, "gpu": torch.cuda.get_device_name(), "torch": torch.__version__}
        with open(args.out, "a", encoding="utf-8") as out:
            out.write(json.dumps(r, default=str) + "\n")
        print(json.dumps(r, default=str), flush=True)

    if "attention" in cases:
        emit(attention_alone(512, 64, False, 20))
        emit(attention_alone(2048, 16, True, 20))
    if "bert" in cases:
        for size, rows in (("base", 64), ("large", 32)):
            for attn in ("auto", "sdpa", "per_document", "flex"):
                if size == "large" and attn not in ("auto", "sdpa"):
                    continue
                emit(throughput("bert", size, 512, rows, attn, args.steps, args.repeats))
        emit(throughput("bert", "base", 512, 64, "auto", args.steps, args.repeats, head="all"))
    if "gpt" in cases:
        for attn in ("auto", "per_document", "sdpa", "flex"):
            emit(throughput("gpt", "base", 2048, 16, attn, args.steps, args.repeats))
    if "bert_varlen" in cases:  # the gather-free varlen path against sdpa at 512
        emit(throughput("bert", "base", 512, 64, "varlen", args.steps, args.repeats))
        emit(throughput("bert", "base", 512, 64, "sdpa", args.steps, args.repeats))
        emit(throughput("bert", "large", 512, 32, "varlen", args.steps, args.repeats))
        emit(throughput("bert", "large", 512, 32, "sdpa", args.steps, args.repeats))
    if "fused_ce" in cases:  # after the fused cross-entropy: the three rows it moves
        emit(throughput("bert", "base", 512, 64, "varlen", args.steps, args.repeats))
        emit(throughput("gpt", "base", 2048, 16, "varlen", args.steps, args.repeats, head="all"))
        emit(throughput("gpt", "base", 2048, 16, "varlen", args.steps, args.repeats))
    if "gpt_varlen" in cases:
        emit(throughput("gpt", "base", 2048, 16, "varlen", args.steps, args.repeats, head="all"))
        emit(throughput("gpt", "base", 2048, 16, "varlen", args.steps, args.repeats))
    if "gpt_all" in cases:
        for attn in ("auto", "flex", "sdpa"):
            emit(throughput("gpt", "base", 2048, 16, attn, args.steps, args.repeats, head="all"))
    if "head_at_targets" in cases:  # GPT with the head at the targets: measured, and its bound
        for r in head_at_targets(args.steps, args.repeats, args.profile_dir):
            emit(r)
    if "profile" in cases:
        emit(profile_steps("bert", "base", 512, 64, "varlen", "targets", args.profile_dir))
        emit(profile_steps("gpt", "base", 2048, 16, "varlen", "all", args.profile_dir))
        emit(profile_steps("gpt", "base", 2048, 16, "varlen", "targets", args.profile_dir))
    if "varlen_profile" in cases:
        emit(varlen_profile(20))
    if "llama" in cases:
        emit(llama(2048, 8, args.steps, args.repeats))
    if "compile" in cases:
        for r in compile_counts():
            emit(r)
    if "compile_varlen" in cases:  # bf16 autocast (the varlen kernels take half precision only)
        for kind in ("gpt", "pretrain"):
            from tests.nn.test_compile import compile_run

            t0 = time.perf_counter()
            r = compile_run(kind, "varlen", device="cuda", compiler="inductor", autocast=torch.bfloat16)
            emit(
                {
                    "case": "compile",
                    "kind": kind,
                    "backend": "varlen",
                    "dtype": "bf16",
                    "graphs_after_each_batch": r["graphs_after"],
                    "max_loss_diff": max(abs(a - b) for a, b in zip(r["eager"], r["compiled"])),
                    "seconds": time.perf_counter() - t0,
                }
            )
    if "compiled" in cases:
        emit(compiled_throughput(args.steps))


if __name__ == "__main__":
    main()
