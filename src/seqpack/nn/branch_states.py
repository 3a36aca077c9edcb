"""A causal LM's hidden states on packed rows whose sequences may branch, and the head to run
where a target is predicted.

Rows carry ``input_ids``, ``segment_ids``, ``position_ids`` and, optionally, ``branch_ids``: a
shared prefix (branch 0, a prompt) and branches after it (responses, completions) that attend to
the prefix and to themselves, never to each other (`seqpack.nn.masks.attention_mask`)::

    hidden, head = causal_states(model, batch)     # hidden (B, T, H)
    logits = head(hidden[rows, cols])              # (N, V): the head only at the N positions asked for

Works with seqpack's ``GPT`` and transformers causal LMs (Llama, GPT-2, Qwen2, ...): those get
seqpack's attention plan (``attn_implementation="seqpack_packed"``), a 4-D mask built from the
branches (bool for ``sdpa``, additive for ``eager``), or, padding-free (``flash_attention_*``,
``seqpack_varlen``) and only without a shared prefix, each branch as a sequence of its own. A
transformers model in `seqpack.nn.hf_causal_lm.HEAD_AT_TARGETS` has its base model and
``lm_head`` called apart; another returns its full logits as ``hidden`` and an identity head.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

from seqpack.errors import UserError
from seqpack.nn.attention import plan_attention
from seqpack.nn.hf_adapter import layer_masks, model_compute_dtype
from seqpack.nn.hf_causal_lm import HEAD_AT_TARGETS
from seqpack.nn.hf_padding_free import flat_inputs, packed_call, unflatten_tokens
from seqpack.nn.hf_support import attention_route, packed_documents, prepare_packed
from seqpack.nn.masks import check_segment_ids, shares_prefix, split_branches


def is_transformers(model: Any) -> bool:
    """A transformers model (through a ``torch.compile`` wrapper)."""
    return type(getattr(model, "_orig_mod", model)).__module__.startswith("transformers")


def hf_branch_states(model: Any, batch: Mapping[str, torch.Tensor], run: Callable[..., torch.Tensor]) -> torch.Tensor:
    """``run(**inputs)`` on the packed rows (a transformers model's call, its base model's...), its
    (B, T, ...) output, with the attention each implementation needs (see the module)."""
    seg, br = batch["segment_ids"], batch.get("branch_ids")
    check_segment_ids(seg)
    needs = prepare_packed(model).needs
    route = attention_route(model)
    if route == "plan":  # seqpack's backends inside the model: the plan, no mask
        plan = plan_attention(
            seg,
            causal=True,
            dtype=model_compute_dtype(model),
            validate=False,
            branch_ids=br,
            needs=needs,
            position_ids=batch["position_ids"],
        )
        with packed_documents(model, seg, branch_ids=br):
            return run(
                input_ids=batch["input_ids"], position_ids=batch["position_ids"], seqpack_plan=plan, use_cache=False
            )
    if route == "padding-free":
        if br is not None and shares_prefix(seg, br):
            impl = model.config._attn_implementation
            raise UserError(
                f"attn_implementation {impl} runs whole sequences and cannot share a prompt between "
                'branches; load the model with seqpack_packed, sdpa or eager, or pack without a shared prefix (--layout pairs, layout="pairs")'
            )
        flat_batch = {
            "input_ids": batch["input_ids"],
            "segment_ids": seg if br is None else split_branches(seg, br),
            "position_ids": batch["position_ids"],
        }
        inputs, flat_seg = flat_inputs(flat_batch)
        with packed_call(), packed_documents(model, flat_seg):
            return unflatten_tokens(run(**inputs, use_cache=False), flat_batch["segment_ids"])
    mask = layer_masks(
        model,
        seg,
        causal=True,
        dtype=next(model.parameters()).dtype,
        branch_ids=br,
        positions=batch["position_ids"],
        needs=needs,
    )
    with packed_documents(model, seg, branch_ids=br):
        return run(
            input_ids=batch["input_ids"], attention_mask=mask, position_ids=batch["position_ids"], use_cache=False
        )


def causal_states(
    model: Any, batch: Mapping[str, torch.Tensor]
) -> tuple[torch.Tensor, Callable[[torch.Tensor], torch.Tensor]]:
    """``(hidden (B, T, H), head)``: run ``head`` on the hidden states of the positions that
    predict a target, ``(N, H) -> (N, V)`` (see the module)."""
    if is_transformers(model):
        inner = getattr(model, "_orig_mod", model)
        head = inner.get_output_embeddings() if getattr(inner.config, "model_type", None) in HEAD_AT_TARGETS else None
        if head is not None:
            return hf_branch_states(model, batch, lambda **kw: inner.base_model(**kw).last_hidden_state), head
        return hf_branch_states(model, batch, lambda **kw: model(**kw).logits), lambda x: x
    h = model(
        batch["input_ids"],
        batch["segment_ids"],
        position_ids=batch["position_ids"],
        branch_ids=batch.get("branch_ids"),
        logits=False,
    ).hidden
    return h, model.token_logits


__all__ = ["causal_states", "hf_branch_states", "is_transformers"]
