"""The padding-free form transformers uses (``DataCollatorWithFlattening``) for packed rows.

    register_varlen_attention()                                   # once, before building the model
    model = transformers.LlamaForCausalLM(LlamaConfig(..., attn_implementation="seqpack_varlen"))
    out = packed_forward(model, batch)                            # seqpack.nn.hf_adapter: goes padding-free

The real tokens of every packed row are concatenated into one row ``(1, total)`` with
position ids that restart at each sequence, plus ``cu_seq_lens_q/k`` and ``max_length_q/k``
(FlashAttention's keywords, which transformers passes down to the attention function):

    segment_ids  [[1 1 2 0], [1 1 1 0]]   ->  input_ids (1, 5), position_ids [[0 1 0 0 1 2]][:, :5]
    cu_seq_lens  [0 2 3 5]                    max_length 2

``seqpack_varlen`` is an attention function registered in transformers' ``AttentionInterface``:
on CUDA in fp16/bf16 it runs PyTorch's varlen flash kernel
(``torch.nn.attention.varlen.varlen_attn``); elsewhere it runs each sequence through SDPA, one
at a time (the oracle: slow, exact on CPU). ``flash_attention_2/3/4`` models (flash-attn
installed) take the same inputs.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import torch

from seqpack.errors import UserError
from seqpack.nn.hf_support import PADDING_FREE, UNPACKED, VARLEN_IMPL, require_documents
from seqpack.nn.masks import cu_seqlens, max_seqlen, position_ids, unpad_index

if TYPE_CHECKING:
    from seqpack.nn.attention.base import LayerAttention

#: set while seqpack runs a model on the padding-free form: an attention call without
#: ``cu_seq_lens_q`` then means the model dropped them on the way (it would attend across documents)
_PACKED_CALL: contextvars.ContextVar[bool] = contextvars.ContextVar("seqpack_packed_call", default=False)


@contextlib.contextmanager
def packed_call() -> Iterator[None]:
    """Mark a model call as one on packed rows in the padding-free form (see ``_PACKED_CALL``)."""
    token = _PACKED_CALL.set(True)
    try:
        yield
    finally:
        _PACKED_CALL.reset(token)


def register_varlen_attention() -> str:
    """Register ``seqpack_varlen`` with transformers (idempotent); returns the name."""
    from transformers import AttentionInterface

    AttentionInterface.register(VARLEN_IMPL, varlen_attention_forward)
    return VARLEN_IMPL


def flat_inputs(batch: Mapping[str, torch.Tensor]) -> tuple[dict[str, Any], torch.Tensor]:
    """``model(**inputs)`` keywords of the padding-free form, and the flat ``segment_ids``
    (1, total) numbering every sequence of the batch 1..N."""
    seg = batch["segment_ids"]
    keep = unpad_index(seg)  # (total,)
    pos = batch.get("position_ids")
    pos = position_ids(seg) if pos is None else pos
    cu = cu_seqlens(seg)
    m = max_seqlen(seg)
    lengths = (cu[1:] - cu[:-1]).long()
    flat_seg = torch.repeat_interleave(torch.arange(1, lengths.numel() + 1, device=seg.device), lengths)[None]
    inputs = {
        "input_ids": batch["input_ids"].reshape(-1)[keep][None],
        "position_ids": pos.reshape(-1)[keep][None],
        "cu_seq_lens_q": cu,
        "cu_seq_lens_k": cu,
        "max_length_q": m,
        "max_length_k": m,
    }
    return inputs, flat_seg


def flatten(x: torch.Tensor, segment_ids: torch.Tensor) -> torch.Tensor:
    """A per-token ``(B, T, ...)`` tensor in the padding-free form ``(1, total, ...)``."""
    return x.reshape(-1, *x.shape[2:])[unpad_index(segment_ids)][None]


def unflatten_slots(values: torch.Tensor, segment_ids: torch.Tensor, fill: float = 0.0) -> torch.Tensor:
    """Per-sequence values ``(1, N)`` of the flat form back into ``(B, D)`` slots."""
    B, T = segment_ids.shape
    D = int(segment_ids.max()) if segment_ids.numel() else 0
    cu = cu_seqlens(segment_ids).long()
    starts = unpad_index(segment_ids)[cu[:-1]]  # flat index of each sequence's first token
    rows, slots = starts // T, segment_ids.reshape(-1)[starts] - 1
    out = values.new_full((B, max(D, 1)), fill)
    return out.index_put((rows, slots), values.reshape(-1))


def unflatten_tokens(flat: torch.Tensor, segment_ids: torch.Tensor) -> torch.Tensor:
    """``(1, total, ...)`` back into ``(B, T, ...)``, zeros at padding."""
    B, T = segment_ids.shape
    out = flat.new_zeros(B * T, *flat.shape[2:])
    return out.index_copy(0, unpad_index(segment_ids), flat[0]).view(B, T, *flat.shape[2:])


def varlen_attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers attention function: q ``(1, Hq, total, d)``, k/v ``(1, Hkv, total, d)`` ->
    ``(1, total, Hq, d)``; sequences given by ``cu_seq_lens_q``."""
    B, Hq, n, d = query.shape
    cu, m = kwargs.get("cu_seq_lens_q"), kwargs.get("max_length_q")
    if (cu is None or m is None) and _PACKED_CALL.get():
        raise UserError(
            f"{type(module).__name__} does not hand cu_seq_lens_q to its attention, so the padding-free "
            "form would attend across documents; load the model with attn_implementation='sdpa' or 'eager'"
        )
    if attention_mask is not None and _PACKED_CALL.get():  # transformers makes none for it: the model's own
        raise UserError(
            f"{type(module).__name__} hands its attention a mask of its own making (a computed bias or "
            "dynamic mask), which the padding-free form does not compute; " + UNPACKED
        )
    if cu is not None:
        require_documents(
            module,
            route="or call seqpack.nn.hf_support.prepare_packed(model) once before training on padding-free rows",
        )
    if cu is None or m is None:  # a plain batch: every row is one unpadded sequence (as flash_attention_2)
        cu, m = torch.arange(0, B * n + 1, n, device=query.device, dtype=torch.int32), n
    if dropout and module.training:
        raise UserError(f"{VARLEN_IMPL} has no attention dropout; set attention_dropout=0 in the model config")
    causal = bool(getattr(module, "is_causal", True) if is_causal is None else is_causal)
    scale = d**-0.5 if scaling is None else float(scaling)
    from seqpack.nn.hf_attention import layer_attention

    layer = layer_attention(module, {**kwargs, "is_causal": causal}, causal=causal)
    from seqpack.nn.attention.varlen import (
        torch_varlen,
        varlen_kwargs,
        varlen_oracle,
        varlen_params,
    )

    fn = torch_varlen()
    half = query.dtype in (torch.float16, torch.bfloat16) or (query.is_cuda and torch.is_autocast_enabled("cuda"))
    fast = query.is_cuda and half and fn is not None
    if fast and layer.features() - {"window"}:
        raise UserError(
            f"{VARLEN_IMPL}'s kernel cannot compute this layer's {' and '.join(sorted(layer.features() - {'window'}))}; "
            "load the model with attn_implementation='seqpack_packed'"
        )
    gqa = key.shape[1] != Hq
    dv = value.shape[-1]
    if dv != d:  # multi-head latent attention: zero value columns to the query width (exact), cut after
        from seqpack.nn.hf_attention import same_head_dim

        query, key, value = same_head_dim(query, key, value, scale)
        d = query.shape[-1]
    kw = varlen_kwargs(fn, causal, scale, d, layer.window) if fast and fn is not None else {}
    if gqa and fast and "enable_gqa" in varlen_params(fn):
        kw["enable_gqa"] = True  # the kernel shares each kv head across its query group: no copies
    elif gqa:  # grouped-query attention: share each kv head across its query group
        key, value = (x.repeat_interleave(Hq // x.shape[1], dim=1) for x in (key, value))
    q, k, v = (x.transpose(1, 2).reshape(B * n, x.shape[1], d) for x in (query, key, value))
    if fast and q.dtype == torch.float32:
        # rotary embeddings hand fp32 q/k to attention under autocast; flash kernels take half (as transformers' FA2 path)
        q, k, v = (x.to(torch.get_autocast_dtype("cuda")) for x in (q, k, v))
    if fast and fn is not None:
        out = fn(q, k, v, cu.to(torch.int32), cu.to(torch.int32), int(m), int(m), **kw)
    elif layer.features():
        out = _layer_oracle(q, k, v, cu, causal, scale, layer)
    else:
        out = varlen_oracle(q, k, v, cu, int(m), causal, scale)
    return out.to(query.dtype).view(B, n, Hq, d)[..., :dv], None


def _layer_oracle(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu: torch.Tensor,
    causal: bool,
    scale: float,
    layer: LayerAttention,
) -> torch.Tensor:
    """Each run (one document, positions from 0) through the oracle attention with the layer's
    window, chunk, cap and sinks.  # (total, H, d) -> (total, H, d)"""
    from seqpack.nn.attention.base import band, oracle_attention

    outs = []
    for a, b in zip(cu[:-1].tolist(), cu[1:].tolist()):
        qs, ks, vs = (x[a:b].transpose(0, 1)[None] for x in (q, k, v))  # (1, H, n, d)
        pos = torch.arange(b - a, device=q.device)[None]
        allowed = band(pos, layer)
        if allowed is None and causal:
            allowed = torch.ones(b - a, b - a, dtype=torch.bool, device=q.device).tril()
        outs.append(oracle_attention(qs, ks, vs, allowed, scale=scale, layer=layer)[0].transpose(0, 1))
    return torch.cat(outs) if outs else q.new_zeros(q.shape)


__all__ = [
    "PADDING_FREE",
    "VARLEN_IMPL",
    "flat_inputs",
    "flatten",
    "packed_call",
    "register_varlen_attention",
    "unflatten_slots",
    "unflatten_tokens",
    "varlen_attention_forward",
]
