"""``seqpack_packed``: seqpack's packed attention backends inside transformers models.

    register_packed_attention()                                  # once, before building the model
    model = transformers.LlamaForCausalLM(LlamaConfig(..., attn_implementation="seqpack_packed"))
    plan = plan_attention(segment_ids, causal=True, branch_ids=...)   # seqpack.nn.attention
    logits = model(input_ids, position_ids=position_ids, seqpack_plan=plan, use_cache=False).logits

transformers builds no mask for an attention implementation it does not know and hands the
model call's extra keywords to the attention function, so every layer runs
:func:`seqpack.nn.attention.packed_attention` with the plan made once per batch: the
``per_document`` buckets on CPU (``sum(l^2)`` work instead of the dense mask's ``T^2``),
FlexAttention's block mask, or a varlen kernel, and the preference task's shared prefix
(``branch_ids``). :func:`seqpack.nn.hf_adapter.packed_forward` and the preference task pass the plan.
"""

from __future__ import annotations

from typing import Any

import torch

from seqpack.nn.attention import AttentionPlan, packed_attention

PACKED_IMPL = "seqpack_packed"


def register_packed_attention() -> str:
    """Register ``seqpack_packed`` with transformers (idempotent); returns the name."""
    from transformers import AttentionInterface

    AttentionInterface.register(PACKED_IMPL, packed_attention_forward)
    return PACKED_IMPL


def packed_attention_forward(
    module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
    attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None, **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers attention function: q ``(B, Hq, T, d)``, k/v ``(B, Hkv, T, d)`` -> ``(B, T, Hq, d)``."""
    plan = kwargs.get("seqpack_plan")
    if not isinstance(plan, AttentionPlan):
        raise ValueError(f"attn_implementation {PACKED_IMPL!r} needs seqpack_plan=plan_attention(segment_ids, ...) in the "
                         "model call (seqpack.nn.hf_adapter.packed_forward passes it); to generate or call the model "
                         "plainly, set model.config._attn_implementation = 'sdpa' first")
    if dropout and module.training:
        raise ValueError(f"{PACKED_IMPL} has no attention dropout; set attention_dropout=0 in the model config")
    dev = query.device.type
    if torch.is_autocast_enabled(dev) and query.dtype != torch.get_autocast_dtype(dev):
        # rotary embeddings in float32 promote q and k out of autocast's dtype; the plan (and a
        # half-precision-only kernel such as varlen) expects it, as autocast gives SDPA
        query, key, value = (x.to(torch.get_autocast_dtype(dev)) for x in (query, key, value))
    Hq = query.shape[1]
    if key.shape[1] != Hq:  # grouped-query attention: share each kv head across its query group
        key, value = (x.repeat_interleave(Hq // x.shape[1], dim=1) for x in (key, value))
    out = packed_attention(query, key, value, plan, scale=scaling)  # (B, Hq, T, d)
    return out.transpose(1, 2).contiguous(), None


def attach_packed_attention(model: torch.nn.Module, *, config: Any = None) -> torch.utils.hooks.RemovableHandle:
    """Run ``model``'s attention as ``seqpack_packed`` with a plan made at each call from its
    ``position_ids``: a sample starts where the positions restart at 0 (the first row of a
    ``(4, B, T)`` mRoPE tensor). ``config``: the config whose attention changes, by default the text
    model's (``model.config.get_text_config()``: a vision encoder keeps its own attention). Returns
    the hook's handle; ``handle.remove()`` and setting the config back to ``sdpa`` undo it.

        handle = attach_packed_attention(vlm)
        vlm(input_ids=ids, position_ids=pos, pixel_values=..., use_cache=False)   # sum(l^2) attention
    """
    from seqpack.nn.attention import plan_attention

    register_packed_attention()
    cfg = config if config is not None else model.config.get_text_config()
    cfg._attn_implementation = PACKED_IMPL

    def plan_from_positions(module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Any]:
        if kwargs.get("seqpack_plan") is None:
            pos = kwargs.get("position_ids")
            if pos is None:
                raise ValueError(f"{PACKED_IMPL} attention reads where samples start from position_ids; pass them "
                                 "(restarting at 0 at each sample)")
            text = pos[0] if pos.ndim == 3 else pos  # (B, T)
            dtype = next(module.parameters()).dtype
            kwargs["seqpack_plan"] = plan_attention((text == 0).cumsum(-1).int(), causal=True, dtype=dtype)
        return args, kwargs

    return model.register_forward_pre_hook(plan_from_positions, with_kwargs=True)


__all__ = ["PACKED_IMPL", "attach_packed_attention", "packed_attention_forward", "register_packed_attention"]
