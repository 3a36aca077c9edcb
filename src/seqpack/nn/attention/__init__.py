"""Packed attention behind one function: build a plan once per batch, call it in every layer.

    plan = plan_attention(segment_ids, causal=True)        # (B, T) -> masks / indices, once
    out = packed_attention(q, k, v, plan)                  # (B, H, T, d) -> (B, H, T, d), per layer

Backends live in one registry (`REGISTRY`), one module each:

``sdpa``          dense ``(B, 1, T, T)`` bool mask into ``scaled_dot_product_attention``
                  (`.dense`); rows holding one sequence use a key-padding mask instead.
``eager``         the oracle: ``softmax(q k^T * scale + additive mask) v`` (`.dense`).
``per_document``  length buckets, SDPA per bucket (`.per_document`).
``flash_varlen``  ``flash_attn_varlen_func`` on the rows as they are (`.varlen`, flash-attn).
``varlen``        PyTorch's own varlen flash kernel on the rows as they are (`.varlen`).
``flex``          FlexAttention with a ``BlockMask`` (`.flex`).
``context_parallel``  one rank's share of rows split across context-parallel ranks: keys and
                  values all-gathered, a mask from every token's document and position
                  (`.context_parallel`; its plan comes from ``plan_context_parallel``).
``auto``          `choose_backend` picks one per batch.

A layer may compute more than softmax attention inside its document: a sliding window, a chunk,
logit soft-capping, attention sinks (`LayerAttention`). ``plan_attention(..., needs=...)``
names what the model's layers need; ``auto`` picks a backend that computes all of it, an explicit
backend that cannot is refused naming the argument, and ``packed_attention(..., layer=...)``
checks each layer against its plan's backend, so none is ever dropped silently::

    needs   window, chunk         sdpa, eager, per_document, flex, context_parallel (varlen: window)
            softcap               eager, per_document, flex
            sinks                 eager, per_document

``branch_ids`` (B, T) (the preference task's layouts): without a shared prefix (``pairs``) each
branch becomes a sequence of its own and every backend runs it; a shared prefix (prompt once,
both responses attending to it, never to each other) needs a mask, which `SHARED_PREFIX`
backends build (``auto``: ``flex`` on CUDA; on CPU ``per_document``, which runs each response
with the prompt gathered in front of it through plain causal kernels, no mask).

Adding a backend: one module defining a plan type and a `Backend`, plus one line in
``REGISTRY`` below.

Padding tokens (segment 0) get output 0, except with ``sdpa`` when no row holds two
sequences (its cheaper key-padding / ``is_causal`` forms) and with ``varlen`` / ``flash_varlen``
(padding attends to the padding of its 128-token block): there padding outputs are unspecified,
finite, and nothing reads them (no real token attends to padding).

    >>> sorted(REGISTRY) == sorted(BACKENDS[1:])
    True
    >>> get_backend("dense")
    Traceback (most recent call last):
    ...
    seqpack.errors.UserError: unknown attention backend 'dense'; known: auto|sdpa|eager|per_document|flash_varlen|varlen|flex|context_parallel
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections import Counter
from collections.abc import Callable, Iterator

import torch

from seqpack.errors import UserError
from seqpack.nn.attention.base import (
    FEATURES,
    PLAIN,
    AttentionPlan,
    Backend,
    LayerAttention,
    check_layer,
    check_qkv,
    half_precision,
    oracle_attention,
)
from seqpack.nn.attention.context_parallel import CONTEXT_PARALLEL, CPPlan, plan_context_parallel
from seqpack.nn.attention.dense import EAGER, SDPA, MaskPlan, eager_attention
from seqpack.nn.attention.flex import FLEX, FlexPlan
from seqpack.nn.attention.per_document import PER_DOCUMENT, BucketPlan, bucket_lengths
from seqpack.nn.attention.varlen import (
    FLASH_VARLEN,
    VARLEN,
    VarlenPlan,
    flash_attn_available,
    torch_varlen,
)
from seqpack.nn.masks import (
    check_segment_ids,
    sequence_lengths,
    shares_prefix,
    split_branches,
)
from seqpack.nn.masks import position_ids as restarting_positions

REGISTRY: dict[str, Backend] = {
    b.name: b for b in (SDPA, EAGER, PER_DOCUMENT, FLASH_VARLEN, VARLEN, FLEX, CONTEXT_PARALLEL)
}
BACKENDS: tuple[str, ...] = ("auto", *REGISTRY)
#: backends whose plan takes ``branch_ids`` with a shared prefix (a mask per (query, key) pair)
SHARED_PREFIX: tuple[str, ...] = ("sdpa", "eager", "per_document", "flex")


def get_backend(name: str) -> Backend:
    """The registry entry of ``name``; an error listing the known names otherwise.

    Args:
        name: a key of `REGISTRY`.

    Returns:
        The `Backend`.

    Raises:
        UserError: an unknown name.
    """
    if name not in REGISTRY:
        raise UserError(f"unknown attention backend {name!r}; known: {'|'.join(BACKENDS)}")
    return REGISTRY[name]


def backends_for(needs: frozenset[str] | set[str]) -> tuple[str, ...]:
    """The backends that compute every layer argument in ``needs`` (`FEATURES`).

    >>> backends_for({"softcap"})
    ('eager', 'per_document', 'flex')

    Args:
        needs: names of `FEATURES` (`window`, `chunk`, `softcap`, `sinks`).

    Returns:
        The backends' names, in registry order.

    Raises:
        UserError: an unknown feature.
    """
    unknown = set(needs) - set(FEATURES)
    if unknown:
        raise UserError(f"unknown attention arguments {sorted(unknown)}; known: {'|'.join(FEATURES)}")
    return tuple(name for name, b in REGISTRY.items() if set(needs) <= b.features)


def _able(name: str, needs: frozenset[str]) -> bool:
    return needs <= REGISTRY[name].features


def choose_backend(segment_ids: torch.Tensor, *, dtype: torch.dtype, needs: frozenset[str] = frozenset()) -> str:
    """The ``auto`` rule (the fastest exact backend measured; docs/benchmarks/gpu.md, docs/concepts/attention.md).

    CUDA, half precision: ``flash_varlen`` when flash-attn is installed, else PyTorch's
    ``varlen`` (the rows as they are, no cross-document blocks), faster than flex and a dense mask
    at long rows; at 512 the dense mask is faster alone but not in a training step, where varlen
    gives the larger speed-up. CUDA in fp32: dense ``sdpa``. Otherwise (CPU) ``per_document`` on
    rows of at least 1024 tokens unless every row is one document filling it
    (``sum(l_i^2) == B * T^2``), else dense ``sdpa``: a packed row's dense mask sends SDPA to its
    materialising kernel, while each bucket runs the fused causal one. The measurements behind
    the rule are in docs/benchmarks/gpu.md and ``benchmarks/layer_attention.py``.

    With ``needs`` (a layer's window, chunk, soft-capping or sinks), the first of these that
    computes them all: on CUDA in half precision the varlen kernels (a window), then ``flex``
    (softcap), ``sdpa``, ``per_document`` (sinks); on CPU the rule above for a window or a chunk, ``per_document``
    for soft-capping or sinks (the oracle attention per bucket; FlexAttention has no CPU backward).

    Args:
        segment_ids: each token's sequence in its row, 0 for padding `(B, T)`.
        dtype: the dtype of q/k/v.
        needs: the layer features the model asks for (`FEATURES`).

    Returns:
        The backend's name.
    """
    B, T = segment_ids.shape
    if segment_ids.is_cuda:
        if not half_precision(dtype):
            return "sdpa" if _able("sdpa", needs) else "per_document"
        if flash_attn_available() and _able("flash_varlen", needs):
            return "flash_varlen"
        if torch_varlen() is not None and _able("varlen", needs):
            return "varlen"
        return next(name for name in ("flex", "sdpa", "per_document") if _able(name, needs))
    if not _able("sdpa", needs):  # soft-capping or sinks: the oracle per document, sum(l^2) work
        return "per_document"
    if T < 1024 or B == 0:
        return "sdpa"
    lengths = bucket_lengths(sequence_lengths(segment_ids), T).double()
    return "per_document" if float((lengths * lengths).sum()) < B * T * T else "sdpa"


_COUNTERS: list[Counter[str]] = []


@contextlib.contextmanager
def count_backends() -> Iterator[Counter[str]]:
    """Count, by backend, the plans `plan_attention` makes inside the block (one per batch
    and model call): what ``auto`` chose, as it ran. A training run records it.

        >>> with count_backends() as ran:
        ...     _ = plan_attention(torch.tensor([[1, 1, 2, 0]]), causal=True)
        >>> dict(ran)
        {'sdpa': 1}

    Yields:
        The counter, backend name -> plans made, filled as the block runs.
    """
    counter: Counter[str] = Counter()
    _COUNTERS.append(counter)
    try:
        yield counter
    finally:
        _COUNTERS.remove(counter)


def _counted(plan: AttentionPlan) -> AttentionPlan:
    for counter in _COUNTERS:
        counter[plan.backend] += 1
    return plan


def plan_attention(
    segment_ids: torch.Tensor,
    *,
    causal: bool = False,
    backend: str = "auto",
    dtype: torch.dtype = torch.float32,
    validate: bool = True,
    branch_ids: torch.Tensor | None = None,
    needs: frozenset[str] = frozenset(),
    position_ids: torch.Tensor | None = None,
) -> AttentionPlan:
    """Masks or indices for ``packed_attention`` (``dtype`` is the dtype of q/k/v; ``branch_ids``:
    see the module docstring). ``needs``: the layer arguments (`FEATURES`) the model's layers
    will ask for; a window or a chunk reads each token's position in its document from
    ``position_ids`` (B, T) (restarting at each sequence when None).

    Args:
        segment_ids: each token's sequence in its row, 0 for padding `(B, T)`.
        causal: each token sees only the tokens before it.
        backend: a name of `BACKENDS` (`auto`: `choose_backend`).
        dtype: the dtype of q/k/v.
        validate: check `segment_ids` (runs `1..k`, then 0s).
        branch_ids: each token's branch, 0 for a shared prefix `(B, T)` (`None`: none).
        needs: the layer features the model's layers will ask for (`FEATURES`).
        position_ids: each token's position in its document `(B, T)` (`None`: restarting at each sequence).

    Returns:
        The plan, for every layer of one batch.

    Raises:
        UserError: an unknown backend or feature, shapes that differ, a backend that cannot run here or
            cannot take a shared prefix, or malformed `segment_ids`.
    """
    needs = frozenset(needs)
    if backend != "auto":
        get_backend(backend)
    missing = needs - set(FEATURES)
    if missing:
        raise UserError(f"unknown attention arguments {sorted(missing)}; known: {'|'.join(FEATURES)}")
    if validate:
        check_segment_ids(segment_ids)
    if needs & {"window", "chunk"} and not causal:
        raise UserError(
            "a sliding window or a chunk is supported on causal attention only; this model's "
            "bidirectional layers have one: train it on unpacked rows outside seqpack (transformers' Trainer)"
        )
    positions = None
    if needs & {"window", "chunk"}:
        positions = position_ids if position_ids is not None else restarting_positions(segment_ids)
        if positions.shape != segment_ids.shape:
            raise UserError(f"position_ids has shape {tuple(positions.shape)}, segment_ids {tuple(segment_ids.shape)}")
        # padding far before every real position: no window or chunk reaches it, whatever the mask's form
        positions = torch.where(segment_ids > 0, positions.long(), -(2**40))
    if branch_ids is not None:
        if branch_ids.shape != segment_ids.shape:
            raise UserError(f"branch_ids has shape {tuple(branch_ids.shape)}, segment_ids {tuple(segment_ids.shape)}")
        if shares_prefix(segment_ids, branch_ids):
            plan = _shared_prefix_plan(
                segment_ids, branch_ids, causal=causal, backend=backend, dtype=dtype, needs=needs
            )
            return _counted(_with_positions(plan, positions))
        segment_ids = split_branches(segment_ids, branch_ids)
    if backend == "auto":
        backend = choose_backend(segment_ids, dtype=dtype, needs=needs)
    make = _planner(_entry(backend, needs), segment_ids, dtype)
    return _counted(_with_positions(make(segment_ids, causal=causal, dtype=dtype), positions))


def _entry(backend: str, needs: frozenset[str]) -> Backend:
    entry = REGISTRY[backend]
    missing = sorted(needs - entry.features)
    if missing:
        raise UserError(
            f"attention backend {backend} cannot compute this model's {' and '.join(missing)}; "
            f"use --attention auto or one of {'|'.join(backends_for(needs))}"
        )
    return entry


def _planner(entry: Backend, segment_ids: torch.Tensor, dtype: torch.dtype) -> Callable[..., AttentionPlan]:
    """The backend's plan maker, where the backend can run on ``segment_ids`` (else refused)."""
    reason = entry.unavailable(segment_ids, dtype)
    if reason is not None or entry.plan is None:
        raise UserError(reason or f"attention backend {entry.name} makes no plan from segment_ids")
    return entry.plan


def _with_positions(plan: AttentionPlan, positions: torch.Tensor | None) -> AttentionPlan:
    return plan if positions is None else dataclasses.replace(plan, positions=positions)


def _shared_prefix_plan(
    segment_ids: torch.Tensor,
    branch_ids: torch.Tensor,
    *,
    causal: bool,
    backend: str,
    dtype: torch.dtype,
    needs: frozenset[str] = frozenset(),
) -> AttentionPlan:
    if backend == "auto":  # the block-sparse kernel on CUDA; on CPU per-response documents, causal, no mask
        backend = "flex" if segment_ids.is_cuda else ("per_document" if causal else "sdpa")
        if not _able(backend, needs):
            backend = "eager"
    if backend not in SHARED_PREFIX:
        raise UserError(
            f"attention backend {backend} runs whole sequences and cannot share a prompt between two "
            f"responses; use --attention {'|'.join(SHARED_PREFIX)}, or pack with --layout pairs"
        )
    plan = _planner(_entry(backend, needs), segment_ids, dtype)
    return plan(segment_ids, causal=causal, dtype=dtype, branch_ids=branch_ids)


def packed_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    plan: AttentionPlan,
    *,
    scale: float | None = None,
    layer: LayerAttention = PLAIN,
) -> torch.Tensor:
    """Attention that never mixes sequences of one row; ``layer``: what this layer computes beyond
    plain attention, refused in one line when the plan's backend cannot.  # (B, H, T, d) x3 -> (B, H, T, d)

    Args:
        q: queries `(B, H, T, d)`.
        k: keys `(B, H, T, d)` (or fewer heads, grouped).
        v: values `(B, H, T, d)`.
        plan: the batch's plan (`plan_attention`).
        scale: the scores' scale (`None`: `d ** -0.5`).
        layer: what this layer computes beyond plain attention (a window, soft-capping, sinks).

    Returns:
        The output `(B, H, T, d)`.

    Raises:
        UserError: shapes that do not match the plan, or a layer feature its backend cannot compute.
    """
    check_qkv(q, k, v, plan)
    entry = get_backend(plan.backend)
    check_layer(entry, layer, plan)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    return entry.attend(q, k, v, plan, scale, layer)


__all__ = [
    "BACKENDS",
    "FEATURES",
    "REGISTRY",
    "SHARED_PREFIX",
    "AttentionPlan",
    "Backend",
    "BucketPlan",
    "CPPlan",
    "FlexPlan",
    "LayerAttention",
    "MaskPlan",
    "VarlenPlan",
    "backends_for",
    "choose_backend",
    "count_backends",
    "eager_attention",
    "get_backend",
    "packed_attention",
    "plan_attention",
    "plan_context_parallel",
    "oracle_attention",
]
