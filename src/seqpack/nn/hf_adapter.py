"""Feed packed batches to Hugging Face transformers (5.x) models and unpack what comes out.

    model = transformers.BertForMaskedLM(config)                  # attn_implementation sdpa or eager
    out = packed_forward(model, batch)                            # batch from collate_packed
    out.loss, out.per_sequence                                    # per-sequence MLM loss, (B, D)

What the adapter does for you:

* causal LMs built with ``attn_implementation="seqpack_packed"`` (`seqpack.nn.hf_attention`)
  get seqpack's attention plan and no mask: ``per_document`` buckets on CPU, FlexAttention or a
  varlen kernel on CUDA, the same backends seqpack's own models run;
* other causal LMs under ``sdpa`` and ``eager`` get seqpack's 4-D block-diagonal causal mask,
  narrowed per layer kind for sliding windows and chunks (`layer_masks`; transformers' own
  mask from restarting ``position_ids`` is wrong for some models, OPT's among them), restarting
  ``position_ids`` and ``use_cache=False``; under ``flex_attention`` no mask (transformers builds its
  block mask from the restarting ``position_ids``; a 4-D mask there crashes torch's CPU kernel).
  ``flash_attention_2/3/4`` and ``seqpack_varlen`` go
  padding-free instead: the real tokens as one row with ``cu_seq_lens_q/k``
  (`seqpack.nn.hf_padding_free`, the form of ``DataCollatorWithFlattening``);
* encoders (BERT, RoBERTa, XLM-R, ELECTRA, DistilBERT, ALBERT, DeBERTa, ModernBERT and every other
  family the door finds exact, `seqpack.nn.hf_encoder`) get a 4-D ``(B, 1, T, T)`` mask that keeps
  the row's documents apart: **bool for ``sdpa``, additive float for ``eager``** (a bool 4-D mask given
  to an eager model is added to the scores as 0/1 and silently attends across documents, so
  `hf_attention_mask` picks the dtype from ``config._attn_implementation`` and `check_hf_mask`
  refuses a mismatch); positions as the family counts them for each document alone; and their
  heads run through the model's own modules on each document (its own ``[CLS]``/``<s>``, pooler,
  mean, span and token heads);
* ``position_ids`` that restart at every sequence (from ``segment_ids`` when the batch has none);
* per-sequence losses (the paper's) or per-token ones (``reduction="token"``, HF's).

Supported: every causal LM of transformers' causal-LM registry whose packed rows are exact
(`seqpack.nn.hf_support` reads its config and layers: sliding windows, chunks, soft-capping and
sinks are computed; layers that carry state along the sequence, in hybrid models, run on each
document from a zero state; the generated table is docs/integrations/models.md), their reward models (a score head), and every
encoder family of transformers' masked-LM registry whose packed rows are exact, with a masked-LM,
sequence-classification, question-answering, token-classification or pre-training head
(`seqpack.nn.hf_support.encoder_support`; the encoder section of the same page).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from seqpack.errors import UserError
from seqpack.nn.attention import plan_attention
from seqpack.nn.hf_encoder import encoder_forward, encoder_inputs
from seqpack.nn.hf_padding_free import (
    PADDING_FREE,
    flat_inputs,
    flatten,
    packed_call,
    unflatten_slots,
    unflatten_tokens,
)
from seqpack.nn.hf_support import attention_route, check_encoder, is_encoder, packed_documents, prepare_packed
from seqpack.nn.losses import check_reduction, mean_over, sequence_token_losses, token_loss
from seqpack.nn.masks import attention_mask, check_segment_ids, position_ids
from seqpack.nn.models.common import PackedOutput
from seqpack.nn.models.layers import compute_dtype


def _name(model: Any) -> str:
    """The transformers class name, through a ``torch.compile`` wrapper."""
    return type(getattr(model, "_orig_mod", model)).__name__


def is_causal_lm(model: Any) -> bool:
    """A causal language model of transformers' own registry (``AutoModelForCausalLM``'s classes)."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    return _name(model) in set(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values())


def is_reward_model(model: Any) -> bool:
    """A decoder with a score head (``AutoModelForSequenceClassification`` on a causal LM's config):
    the preference task's reward model."""
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES,
    )

    kind = getattr(getattr(model, "config", None), "model_type", None)
    return (
        kind in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
        and _name(model) == MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES.get(str(kind))
        and not is_encoder(model)
    )


def takes_plan(model: Any) -> bool:
    """The models that can run ``seqpack_packed`` (seqpack's attention plan inside the model):
    causal LMs and reward models."""
    return is_causal_lm(model) or is_reward_model(model)


def layer_masks(
    model_or_config: Any,
    segment_ids: torch.Tensor,
    *,
    causal: bool,
    dtype: torch.dtype = torch.float32,
    branch_ids: torch.Tensor | None = None,
    positions: torch.Tensor | None = None,
    needs: frozenset[str] = frozenset(),
) -> torch.Tensor | dict[str, torch.Tensor]:
    """`hf_attention_mask`, narrowed for layers with a sliding window or a chunk (``needs``,
    `seqpack.nn.hf_support.packing_support`), from each token's document ``positions`` (B, T):
    one mask when every layer is the same, else one per layer kind of the config's ``layer_types``
    (``{"full_attention": ..., "sliding_attention": ...}``, which transformers' models take as
    they are).  # (B, 1, T, T) or a dict of them"""
    from seqpack.nn.attention.base import LayerAttention, band
    from seqpack.nn.hf_support import ATTENTION_LAYERS, POINTWISE_LAYERS, config_window, state_layer_kinds, text_config

    if not needs & {"window", "chunk"}:
        return hf_attention_mask(model_or_config, segment_ids, causal=causal, dtype=dtype, branch_ids=branch_ids)
    base = hf_attention_mask(model_or_config, segment_ids, causal=causal, dtype=dtype, branch_ids=branch_ids)
    bool_base = base if base.dtype == torch.bool else base == 0
    config = text_config(model_or_config) if hasattr(model_or_config, "config") else model_or_config
    owner = model_or_config if hasattr(model_or_config, "config") else None
    pos = position_ids(segment_ids) if positions is None else positions
    chunk = getattr(config, "attention_chunk_size", None)
    kinds = [str(k) for k in getattr(config, "layer_types", None) or ()]
    if not kinds:  # one window on every layer (Mistral), or none
        kinds = ["sliding_attention" if "window" in needs else "full_attention"]
    # layers of another kind run on documents (seqpack.nn.hf_mixers) and read no mask, or attend inside
    # the plain one; a kind that names a window or a chunk would need it narrowed: not made here
    state = {k for k in state_layer_kinds(config) if "sliding" not in k and "chunk" not in k}
    unknown = sorted(set(kinds) - ATTENTION_LAYERS - POINTWISE_LAYERS - state)
    if unknown:
        raise UserError(
            f"no packed mask for layers of kind {', '.join(unknown)}; load the model with "
            "attn_implementation='seqpack_packed'"
        )

    def layer(kind: str) -> LayerAttention:
        if kind not in ATTENTION_LAYERS:
            return LayerAttention()
        window = config_window(config, kind, owner) if owner is not None else None
        if window is None and owner is None and kind == "sliding_attention":
            window = getattr(config, "sliding_window", None)
        return LayerAttention(window=window, chunk=chunk if kind == "chunked_attention" else None)

    def made(kind: str) -> torch.Tensor:
        narrowed = band(pos, layer(kind))
        allowed = bool_base if narrowed is None else bool_base & narrowed
        if base.dtype == torch.bool:
            return allowed
        return torch.where(allowed, torch.zeros((), dtype=dtype, device=allowed.device), torch.finfo(dtype).min)

    masks = {kind: made(kind) for kind in dict.fromkeys(kinds)}
    return masks[kinds[0]] if len(masks) == 1 and not getattr(config, "layer_types", None) else masks


def _impl(model_or_config: Any) -> str:
    config = getattr(model_or_config, "config", model_or_config)
    return str(getattr(config, "_attn_implementation", None) or "eager")


def hf_attention_mask(
    model_or_config: Any,
    segment_ids: torch.Tensor,
    *,
    causal: bool,
    dtype: torch.dtype = torch.float32,
    branch_ids: torch.Tensor | None = None,
) -> torch.Tensor:
    """The 4-D mask a transformers model with this attention implementation reads correctly:
    bool for ``sdpa`` (and flex), additive float of ``dtype`` for ``eager`` (``branch_ids``: a
    shared prefix, `seqpack.nn.masks.attention_mask`).  # (B, 1, T, T)

    Args:
        model_or_config: a transformers model or its config (its attention implementation).
        segment_ids: each token's sequence in its row, 0 for padding `(B, T)`.
        causal: each token sees only the tokens before it.
        dtype: the dtype of an additive mask (`eager`).
        branch_ids: each token's branch, 0 for a shared prefix `(B, T)`.

    Returns:
        The mask `(B, 1, T, T)`, bool or additive.
    """
    impl = _impl(model_or_config)
    if impl == "eager":
        return attention_mask(segment_ids, causal=causal, dtype=dtype, branch_ids=branch_ids)
    if impl in ("sdpa", "flex_attention"):
        return attention_mask(segment_ids, causal=causal, branch_ids=branch_ids)
    raise UserError(
        f"attn_implementation {impl!r} takes no 4-D mask here; load the model with "
        f"attn_implementation='sdpa' (or 'eager'), or a padding-free one for causal LMs: {', '.join(PADDING_FREE)}"
    )


def check_hf_mask(model_or_config: Any, mask: torch.Tensor) -> None:
    """Refuse a 4-D mask whose dtype the model's attention would misread.

    Args:
        model_or_config: a transformers model or its config (its attention implementation).
        mask: the 4-D mask `(B, 1, T, T)`.

    Raises:
        UserError: a mask that is not 4-D, or a bool mask under `eager`.
    """
    impl = _impl(model_or_config)
    if mask.ndim != 4:
        raise UserError(f"attention_mask must be 4-D (B, 1, T, T) for packed rows, got shape {tuple(mask.shape)}")
    if impl == "eager" and mask.dtype == torch.bool:
        raise UserError(
            "a bool 4-D mask is added as 0/1 by eager attention and silently attends across sequences; "
            "pass an additive float mask: hf_attention_mask(model, segment_ids, causal=...)"
        )


def model_compute_dtype(model: Any) -> torch.dtype:
    """The dtype q/k/v will have: the weights', or autocast's when it is on."""
    p = next(model.parameters())
    return compute_dtype(p.device, p.dtype)


def _require_columns(batch: Mapping[str, torch.Tensor]) -> None:
    for key in ("input_ids", "segment_ids"):
        if key not in batch:
            raise UserError(f"the packed batch has no {key!r} column")


def hf_inputs(model: Any, batch: Mapping[str, torch.Tensor]) -> dict[str, Any]:
    """``model(**inputs)`` keywords: ``input_ids`` and restarting ``position_ids``; for an encoder the
    4-D ``attention_mask``, its family's positions and ``token_type_ids``; for a causal LM under
    ``sdpa``/``eager``/``flex_attention`` no mask (transformers derives it from ``position_ids``) and
    ``use_cache=False``.

    Args:
        model: a supported transformers model.
        batch: packed columns: `input_ids`, `segment_ids` `(B, T)`, and the task's others.

    Returns:
        The keyword arguments of `model(**inputs)`.
    """
    name = _name(model)
    causal = is_causal_lm(model)
    encoder = not causal and is_encoder(model)
    if not causal and not encoder:
        raise UserError(
            f"no packed adapter for {name}; it takes transformers' causal LMs (AutoModelForCausalLM) "
            "and encoders with a masked-LM, classification, question-answering or pre-training head"
        )
    _require_columns(batch)
    ids, seg = batch["input_ids"], batch["segment_ids"]
    if ids.shape != seg.shape:
        raise UserError(f"segment_ids has shape {tuple(seg.shape)} but input_ids is {tuple(ids.shape)}")
    check_segment_ids(seg)
    if encoder:
        support = check_encoder(model)
        if support.windows or support.mask != "4d" or support.embeddings_mask is not None:
            raise UserError(
                f"{name} needs more than model(**inputs) for packed rows (its sliding windows, or embeddings "
                "that read the mask as 2-D); run it through seqpack.nn.hf_adapter.packed_forward"
            )
        return encoder_inputs(model, batch, support)
    pos = batch.get("position_ids")
    if pos is None:
        pos = position_ids(seg)
    elif pos.shape != ids.shape:
        raise UserError(f"position_ids has shape {tuple(pos.shape)} but input_ids is {tuple(ids.shape)}")
    needs = prepare_packed(model).needs
    route = attention_route(model)
    if route == "plan":
        plan = plan_attention(
            seg, causal=True, dtype=model_compute_dtype(model), validate=False, needs=needs, position_ids=pos
        )
        return {"input_ids": ids, "position_ids": pos, "seqpack_plan": plan, "use_cache": False}
    if route == "flex":  # transformers' own block mask from the restarting positions
        if "sinks" in needs:
            raise UserError(
                f"{name} has attention sinks, which transformers' flex_attention masks do not keep inside "
                "each packed document; load it with attn_implementation='seqpack_packed' or 'eager'"
            )
        return {"input_ids": ids, "position_ids": pos, "use_cache": False}
    mask = layer_masks(model, seg, causal=True, dtype=model_compute_dtype(model), positions=pos, needs=needs)
    return {"input_ids": ids, "attention_mask": mask, "position_ids": pos, "use_cache": False}


def packed_forward(
    model: Any,
    batch: Mapping[str, torch.Tensor],
    *,
    reduction: str = "sequence",
    max_depth: int | None = None,
    padded: bool | None = None,
) -> PackedOutput:
    """Run a supported transformers model on a packed batch; see the module. ``padded`` (encoders):
    rows of one document each run the model's own padded forward, an ordinary 2-D mask (None: when
    the rows are so; `seqpack.nn.hf_encoder.encoder_forward`).

    Args:
        model: a supported transformers model (the supported models page lists them).
        batch: packed columns: `input_ids`, `segment_ids` `(B, T)`, labels as the task has them.
        reduction: `sequence` or `token` (`seqpack.nn.token_loss`).
        max_depth: the slots per row `D` (`None`: from the labels, else the deepest row).
        padded: run rows of one document each padded (`None`: when the rows are so).

    Returns:
        The `PackedOutput`, as seqpack's own models return it.

    Raises:
        UserError: an unknown reduction, a model family seqpack does not support, or malformed columns.
    """
    check_reduction(reduction)
    causal = is_causal_lm(model)
    if not causal and is_encoder(model):
        return encoder_forward(model, batch, reduction=reduction, max_depth=max_depth, padded=padded)
    if causal and attention_route(model) == "padding-free":
        return _padding_free_causal(model, batch, reduction)
    inputs = hf_inputs(model, batch)
    seg, labels = batch["segment_ids"], batch.get("labels")
    with packed_documents(model, seg):
        logits = model(**inputs).logits  # (B, T, V)
    out = PackedOutput(logits=logits)
    if labels is not None:
        out.per_sequence, out.present = sequence_token_losses(logits, labels, seg, shift=True)
        out.loss = _token_reduce(logits, labels, seg, out.per_sequence, out.present, reduction, True)
    return out


def _padding_free_causal(model: Any, batch: Mapping[str, torch.Tensor], reduction: str) -> PackedOutput:
    """A causal LM on the flattened real tokens (no padding, no mask); outputs back in (B, T) / (B, D)."""
    _require_columns(batch)
    prepare_packed(model)
    seg, labels = batch["segment_ids"], batch.get("labels")
    check_segment_ids(seg)
    inputs, flat_seg = flat_inputs(batch)
    with packed_call(), packed_documents(model, flat_seg):
        flat_logits = model(**inputs, use_cache=False).logits  # (1, total, V)
    out = PackedOutput(logits=unflatten_tokens(flat_logits, seg))
    if labels is not None:
        flat_labels = flatten(labels, seg)
        per, present = sequence_token_losses(flat_logits, flat_labels, flat_seg, shift=True)  # (1, N)
        out.per_sequence, out.present = unflatten_slots(per, seg), unflatten_slots(present, seg, fill=False)
        out.loss = _token_reduce(flat_logits, flat_labels, flat_seg, per, present, reduction, True)
    return out


def _token_reduce(
    logits: torch.Tensor,
    labels: torch.Tensor,
    seg: torch.Tensor,
    per: torch.Tensor,
    present: torch.Tensor,
    reduction: str,
    shift: bool,
) -> torch.Tensor:
    if reduction == "sequence":
        return mean_over(per, present)
    return token_loss(logits, labels, seg, reduction=reduction, shift=shift)
