"""Layer arguments (sliding window, chunk, soft-capping, sinks) on every backend, against each
document alone through the obviously correct reference; refusals where a backend can't."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings

from seqpack.nn.attention import (
    REGISTRY,
    LayerAttention,
    backends_for,
    oracle_attention,
    packed_attention,
    plan_attention,
)
from seqpack.nn.attention.base import band
from tests.nn._packs import packs, segment_rows, spans

SINKS = torch.tensor([0.5, -1.0])
LAYERS = {
    "window": LayerAttention(window=3),
    "chunk": LayerAttention(chunk=4),
    "window+chunk": LayerAttention(window=5, chunk=4),
    "softcap": LayerAttention(softcap=0.7),
    "sinks": LayerAttention(sinks=SINKS),
    "all": LayerAttention(window=3, softcap=0.7, sinks=SINKS),
}
CPU = ("sdpa", "eager", "per_document")


def alone(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer: LayerAttention, start: int = 0) -> torch.Tensor:
    """One document, positions ``start..``, written out longhand.  # (H, n, d)"""
    n = q.shape[-2]
    s = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    if layer.softcap is not None:
        s = layer.softcap * torch.tanh(s / layer.softcap)
    p = torch.arange(start, start + n)
    keep = p[None, :] <= p[:, None]
    if layer.window is not None:
        keep &= p[None, :] > p[:, None] - layer.window
    if layer.chunk is not None:
        keep &= p[None, :] // layer.chunk == p[:, None] // layer.chunk
    s = s.masked_fill(~keep, float("-inf"))
    if layer.sinks is not None:
        s = torch.cat([s, layer.sinks.view(-1, 1, 1).expand(-1, n, 1)], dim=-1)
    w = s.softmax(-1)
    return (w[..., :n] if layer.sinks is not None else w) @ v


@settings(max_examples=20, deadline=None)
@given(packs(max_len=36, max_depth=5))
def test_every_backend_computes_its_layer_arguments_exactly(pack) -> None:
    T, rows = pack
    seg = segment_rows(T, rows)
    torch.manual_seed(T)
    q, k, v = (torch.randn(len(rows), 2, T, 8) for _ in range(3))
    for name, layer in LAYERS.items():
        for backend in CPU:
            if not layer.features() <= REGISTRY[backend].features:
                continue
            plan = plan_attention(seg, causal=True, backend=backend, needs=layer.features())
            out = packed_attention(q, k, v, plan, layer=layer)
            for b, _, at, n in spans(rows):
                sl = slice(at, at + n)
                want = alone(q[b, :, sl], k[b, :, sl], v[b, :, sl], layer)
                # fp32 softmax over <= 36 keys: summation order and the exp of a shifted max differ
                assert (out[b, :, sl] - want).abs().max() <= 1e-5, (backend, name)


def test_auto_picks_a_backend_that_computes_the_layer() -> None:
    seg = torch.tensor([[1] * 1200 + [2] * 848])
    assert plan_attention(seg, causal=True, needs=frozenset({"window"})).backend == "per_document"
    assert plan_attention(seg, causal=True, needs=frozenset({"sinks"})).backend == "per_document"
    assert plan_attention(seg[:, :64], causal=True, needs=frozenset({"softcap"})).backend == "per_document"
    assert backends_for({"sinks"}) == ("eager", "per_document")


@pytest.mark.parametrize("backend", ["sdpa"])
def test_a_backend_that_cannot_is_refused_by_name(backend: str) -> None:
    seg = torch.tensor([[1, 1, 2, 2]])
    with pytest.raises(ValueError, match=f"backend {backend} cannot compute this model's sinks"):
        plan_attention(seg, causal=True, backend=backend, needs=frozenset({"sinks"}))
    plan = plan_attention(seg, causal=True, backend=backend)  # planned without needs, then a layer asks
    q = torch.randn(1, 2, 4, 8)
    with pytest.raises(ValueError, match="cannot compute this layer's softcap"):
        packed_attention(q, q, q, plan, layer=LayerAttention(softcap=1.0))
    with pytest.raises(ValueError, match="holds no positions"):
        packed_attention(q, q, q, plan, layer=LayerAttention(window=2))


def test_bidirectional_windows_are_refused() -> None:
    with pytest.raises(ValueError, match="causal attention only"):
        plan_attention(torch.tensor([[1, 1]]), causal=False, needs=frozenset({"window"}))


def test_shared_prefix_branches_keep_each_completions_positions() -> None:
    """A prompt and two completions sharing it: each completion's window counts positions from the
    prompt's start (``position_ids`` continue past the prompt), as when it runs alone after it."""
    seg = torch.tensor([[1] * 12])
    br = torch.tensor([[0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2]])
    pos = torch.tensor([[0, 1, 2, 3, 4, 5, 6, 7, 4, 5, 6, 7]])
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 12, 8) for _ in range(3))
    layer = LayerAttention(window=3, chunk=6)
    for backend in CPU:
        plan = plan_attention(
            seg, causal=True, backend=backend, branch_ids=br, needs=layer.features(), position_ids=pos
        )
        out = packed_attention(q, k, v, plan, layer=layer)
        for cols in ([0, 1, 2, 3, 4, 5, 6, 7], [0, 1, 2, 3, 8, 9, 10, 11]):
            want = alone(q[0][:, cols], k[0][:, cols], v[0][:, cols], layer)
            assert (out[0][:, cols[4:]] - want[:, 4:]).abs().max() <= 1e-5, backend


def test_varlen_runs_take_the_window_on_the_reference_kernel() -> None:
    from seqpack.nn.attention.varlen import attend_runs, plan_varlen, varlen_oracle

    seg = torch.tensor([[1] * 9 + [2] * 5 + [0, 0]])
    torch.manual_seed(1)
    q, k, v = (torch.randn(1, 2, 16, 8) for _ in range(3))
    layer = LayerAttention(window=4)
    out = attend_runs(q, k, v, plan_varlen(seg, causal=True, dtype=q.dtype), 8**-0.5, varlen_oracle, layer)
    for at, n in ((0, 9), (9, 5)):
        sl = slice(at, at + n)
        assert (out[0, :, sl] - alone(q[0, :, sl], k[0, :, sl], v[0, :, sl], layer)).abs().max() <= 1e-5
    assert REGISTRY["varlen"].features == REGISTRY["flash_varlen"].features == frozenset({"window"})


def test_flex_forward_on_cpu_with_window_chunk_and_cap() -> None:
    seg = torch.tensor([[1] * 70 + [2] * 58])
    torch.manual_seed(2)
    q, k, v = (torch.randn(1, 2, 128, 8) for _ in range(3))
    layer = LayerAttention(window=9, chunk=32, softcap=0.8)
    plan = plan_attention(seg, causal=True, backend="flex", needs=layer.features())
    with torch.no_grad():
        out = packed_attention(q, k, v, plan, layer=layer)
    for at, n in ((0, 70), (70, 58)):
        sl = slice(at, at + n)
        assert (out[0, :, sl] - alone(q[0, :, sl], k[0, :, sl], v[0, :, sl], layer)).abs().max() <= 1e-5


def test_context_parallel_mask_takes_the_window() -> None:
    from seqpack.nn.attention import plan_context_parallel

    seg = torch.tensor([[1] * 10 + [2] * 6])
    pos = torch.tensor([list(range(10)) + list(range(6))])
    torch.manual_seed(3)
    q, k, v = (torch.randn(1, 2, 16, 8) for _ in range(3))
    layer = LayerAttention(window=3)
    out = packed_attention(q, k, v, plan_context_parallel(seg, pos), layer=layer)  # one rank: the whole row
    for at, n in ((0, 10), (10, 6)):
        sl = slice(at, at + n)
        assert (out[0, :, sl] - alone(q[0, :, sl], k[0, :, sl], v[0, :, sl], layer)).abs().max() <= 1e-5


def test_reference_attention_matches_softmax_with_a_sink_column() -> None:
    torch.manual_seed(4)
    q, k, v = (torch.randn(1, 2, 5, 4) for _ in range(3))
    layer = LayerAttention(sinks=SINKS)
    got = oracle_attention(q, k, v, band(torch.arange(5)[None], LayerAttention(window=5)), scale=0.5, layer=layer)
    s = (q @ k.transpose(-2, -1)) * 0.5
    s = s.masked_fill(~torch.ones(5, 5, dtype=torch.bool).tril(), float("-inf"))
    w = torch.cat([s, SINKS.view(1, 2, 1, 1).expand(1, 2, 5, 1)], -1).softmax(-1)[..., :5]
    assert (got - w @ v).abs().max() <= 1e-6  # fp32, 6 terms
