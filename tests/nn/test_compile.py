"""``torch.compile(model)`` on packed batches whose number of sequences per row changes from
batch to batch: the same losses and gradients as eager, and no recompilation storm (after
automatic dynamic shapes kick in, new batches compile nothing).

On CPU the graphs go through ``aot_eager`` (Dynamo + AOTAutograd, no code generation, so the
test stays fast); on CUDA through inductor. The attention plan and positions are built eagerly
(``positions_and_plan`` is ``torch.compiler.disable``d): they are data-dependent metadata.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from tests.nn.test_models import build, make_batch, on, run

T = 32
# every batch is 2 rows of T=32; the number of sequences per row changes each time
LAYOUTS = [
    [[10, 22], [32]],
    [[5, 5, 5, 17], [16, 16]],
    [[32], [31]],
    [[8, 8, 8, 8], [16, 16]],
    [[3, 29], [30]],
    [[1, 1, 30], [32]],
    [[4, 4, 4, 4], [2, 30]],
]
STEADY = 3  # batches after which nothing new may compile


def counting_backend(compiler: str) -> tuple[list[int], Any]:
    """A ``torch.compile`` backend that records each graph it compiles, then hands it to ``compiler``."""
    graphs: list[int] = []

    def counting(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> Any:
        graphs.append(len(gm.graph.nodes))
        return torch._dynamo.lookup_backend(compiler)(gm, example_inputs)

    return graphs, counting


def compile_run(
    kind: str,
    backend: str,
    *,
    device: str,
    compiler: str,
    layouts: list[Any] = LAYOUTS,
    autocast: torch.dtype | None = None,
) -> dict[str, Any]:
    """Eager and compiled losses (and the largest gradient difference) per batch, and how many
    graphs had been compiled after each batch (``autocast``: run both under it, e.g. bf16)."""
    torch._dynamo.reset()
    graphs, counting = counting_backend(compiler)

    eager, compiled = build(kind, backend).to(device), build(kind, backend).to(device)
    fn = torch.compile(compiled, backend=counting)
    out: dict[str, Any] = {"eager": [], "compiled": [], "grad_diff": [], "graphs_after": []}
    for i, rows in enumerate(layouts):
        batch = on(make_batch(T, rows, seed=i), torch.device(device))
        with torch.autocast(device, dtype=autocast or torch.float32, enabled=autocast is not None):
            le, lc = run(eager, kind, batch).loss, run(fn, kind, batch).loss  # type: ignore[arg-type]  # torch.compile's wrapper of the module
        le.backward()
        lc.backward()
        # largest gradient difference in units of the exactness suite's tolerance (1e-5 + 1e-4 * scale)
        diff = max(
            float((p.grad - q.grad).abs().max() / (1e-5 + 1e-4 * p.grad.abs().max()))  # type: ignore[operator]  # p.grad, q.grad: backward() set it
            for p, q in zip(eager.parameters(), compiled.parameters())
            if p.grad is not None
        )
        eager.zero_grad()
        compiled.zero_grad()
        out["eager"].append(float(le.detach()))
        out["compiled"].append(float(lc.detach()))
        out["grad_diff"].append(diff)
        out["graphs_after"].append(len(graphs))
    return out


@pytest.mark.parametrize("kind", ("gpt", "pretrain", "qa"))
def test_compiled_equals_eager_without_a_recompile_storm(kind: str) -> None:
    cuda = torch.cuda.is_available()
    r = compile_run(kind, "sdpa", device="cuda" if cuda else "cpu", compiler="inductor" if cuda else "aot_eager")
    for e, c in zip(r["eager"], r["compiled"]):
        # aot_eager runs the same ATen ops in the same order: equal to float rounding of a few
        # re-associated sums (inductor fuses kernels: fp32 sums reordered, ~1e-6 relative)
        assert abs(e - c) <= 1e-5 * max(1.0, abs(e))
    assert max(r["grad_diff"]) <= 1.0
    after = r["graphs_after"]
    assert after[STEADY - 1] == after[-1], f"graphs compiled after each batch: {after}"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the varlen kernel needs CUDA")
@pytest.mark.parametrize("kind", ("gpt", "pretrain"))
def test_varlen_compiles_without_a_recompile_storm(kind: str) -> None:
    r = compile_run(kind, "varlen", device="cuda", compiler="inductor", autocast=torch.bfloat16)
    for e, c in zip(r["eager"], r["compiled"]):
        # bf16 autocast: inductor fuses the elementwise work between the matmuls and rounds to bf16 at
        # other points than eager; each rounding is within u = 2^-8 relative, and a loss of ~log(V)
        # moves by a few u at most (packing's exactness is test_cuda's; this checks that compiling
        # changes nothing beyond rounding)
        assert abs(e - c) <= 8 * 2.0**-8 * max(1.0, abs(e))
    after = r["graphs_after"]
    assert after[STEADY - 1] == after[-1], f"graphs compiled after each batch: {after}"


def compile_hf_run(kind: str, *, device: str, compiler: str) -> dict[str, Any]:
    """A transformers causal LM compiled and fed through seqpack.nn.hf_adapter.packed_forward."""
    from seqpack.nn.hf_adapter import packed_forward
    from tests.nn.test_hf_adapter import build as hf_build
    from tests.nn.test_hf_adapter import packed_batch

    torch._dynamo.reset()
    graphs, counting = counting_backend(compiler)

    eager = hf_build(kind, "sdpa").to(device)
    fn = torch.compile(hf_build(kind, "sdpa").to(device), backend=counting)
    out: dict[str, Any] = {"eager": [], "compiled": [], "graphs_after": []}
    for i, rows in enumerate(LAYOUTS):
        x = on(make_batch(T, rows, seed=i), torch.device(device))
        with torch.no_grad():
            out["eager"].append(float(packed_forward(eager, packed_batch(kind, x)).loss))  # type: ignore[arg-type]  # PackedOutput.loss: set when the batch has targets
            out["compiled"].append(float(packed_forward(fn, packed_batch(kind, x)).loss))  # type: ignore[arg-type]  # PackedOutput.loss: set when the batch has targets
        out["graphs_after"].append(len(graphs))
    return out


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("kind", ("GPT2LMHeadModel", "LlamaForCausalLM"))
def test_compiled_hf_adapter_equals_eager(kind: str) -> None:
    pytest.importorskip("transformers")
    cuda = torch.cuda.is_available()
    r = compile_hf_run(kind, device="cuda" if cuda else "cpu", compiler="inductor" if cuda else "aot_eager")
    for e, c in zip(r["eager"], r["compiled"]):
        assert abs(e - c) <= 1e-5 * max(1.0, abs(e))  # as above: reordered fp32 sums at most
    assert r["graphs_after"][STEADY - 1] == r["graphs_after"][-1], r["graphs_after"]
