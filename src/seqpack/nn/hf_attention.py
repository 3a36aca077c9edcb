"""``seqpack_packed``: seqpack's packed attention backends inside transformers models.

    register_packed_attention()                                  # once, before building the model
    model = transformers.LlamaForCausalLM(LlamaConfig(..., attn_implementation="seqpack_packed"))
    plan = plan_attention(segment_ids, causal=True, branch_ids=...)   # seqpack.nn.attention
    logits = model(input_ids, position_ids=position_ids, seqpack_plan=plan, use_cache=False).logits

transformers builds no mask for an attention implementation it does not know and hands the
model call's extra keywords to the attention function, so every layer runs
`seqpack.nn.attention.packed_attention` with the plan made once per batch, and with what the
layer computes beyond plain attention (`layer_attention`: its ``sliding_window``, its
chunk, ``softcap``, sinks ``s_aux``; an argument seqpack does not know is refused by name): the
``per_document`` buckets on CPU (``sum(l^2)`` work instead of the dense mask's ``T^2``),
FlexAttention's block mask, or a varlen kernel, and the preference task's shared prefix
(``branch_ids``). `seqpack.nn.hf_adapter.packed_forward` and the preference task pass the plan.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from seqpack.errors import UserError
from seqpack.nn.attention import AttentionPlan, LayerAttention, packed_attention
from seqpack.nn.hf_support import PACKED_IMPL, UNPACKED, config_window, prepare_packed, require_documents

if TYPE_CHECKING:
    from transformers import PretrainedConfig

#: keywords transformers hands an attention function that change nothing it computes over one
#: document in a packed row (positions, caches, document boundaries the plan already holds, flags for
#: other implementations' inputs)
IGNORED_KWARGS = frozenset(
    {
        "seqpack_plan",
        "position_ids",
        "cache_position",
        "use_cache",
        "output_attentions",
        "position_embeddings",
        "past_key_values",
        "past_key_value",
        "cache",
        "layer_idx",
        "token_type_ids",
        "return_dict",
        "output_hidden_states",
        "num_items_in_batch",
        "is_causal",
        "output_router_logits",
        "seq_idx",
    }
)


def layer_attention(module: torch.nn.Module, kwargs: dict[str, Any], *, causal: bool = True) -> LayerAttention:
    """What this transformers attention layer computes beyond plain attention: its sliding window
    (the ``sliding_window`` keyword, or its config's ``layer_types`` entry), Llama 4's chunk
    (``attention_chunk_size`` on a ``chunked_attention`` layer), ``softcap``, sinks (``s_aux``).
    A keyword that would change the result and that seqpack does not compute is refused by name."""
    unknown = sorted(
        k
        for k, v in kwargs.items()
        if k not in IGNORED_KWARGS | {"sliding_window", "softcap", "s_aux"}
        and v is not None
        and not k.startswith(("cu_seq_lens", "max_length"))
    )
    if unknown:
        raise UserError(
            f"{type(module).__name__} passes {', '.join(unknown)} to its attention, which seqpack's packed "
            "attention does not compute; " + UNPACKED
        )
    layer_causal = kwargs.get("is_causal", getattr(module, "is_causal", True))
    if layer_causal is not None and bool(layer_causal) != causal:
        raise UserError(
            f"{type(module).__name__} is {'causal' if layer_causal else 'bidirectional'} but the packed "
            f"attention plan is {'causal' if causal else 'bidirectional'}"
        )
    config = getattr(module, "config", None)
    kinds = getattr(config, "layer_types", None)
    idx = getattr(module, "layer_idx", None)
    kind = kinds[idx] if kinds is not None and isinstance(idx, int) and idx < len(kinds) else None
    windowed = any(getattr(config, k, None) is not None for k in ("sliding_window", "attention_chunk_size"))
    if kinds is not None and kind is None and windowed:  # a shared layer (Zamba's) has no kind: no window to read
        raise UserError(
            f"{type(module).__name__} has no layer_idx into its config's layer_types; seqpack cannot tell "
            "whether it has a sliding window: " + UNPACKED
        )
    window = kwargs.get("sliding_window")
    if window is None and config is not None:
        window = config_window(config, kind, module)
    chunk = getattr(config, "attention_chunk_size", None) if kind == "chunked_attention" else None
    softcap, sinks = kwargs.get("softcap"), kwargs.get("s_aux")
    return LayerAttention(
        window=int(window) if window is not None else None,
        chunk=int(chunk) if chunk is not None else None,
        softcap=float(softcap) if softcap is not None else None,
        sinks=sinks,
    )


def register_packed_attention() -> str:
    """Register ``seqpack_packed`` with transformers (idempotent); returns the name.

    Returns:
        `"seqpack_packed"`, the attention implementation's name.
    """
    from transformers import AttentionInterface

    AttentionInterface.register(PACKED_IMPL, packed_attention_forward)
    return PACKED_IMPL


def packed_attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers attention function: q ``(B, Hq, T, d)``, k/v ``(B, Hkv, T, d)`` -> ``(B, T, Hq, d)``."""
    plan = kwargs.get("seqpack_plan")
    if not isinstance(plan, AttentionPlan):
        raise UserError(
            f"attn_implementation {PACKED_IMPL!r} needs seqpack_plan=plan_attention(segment_ids, ...) in the "
            "model call (seqpack.nn.hf_adapter.packed_forward passes it); to generate or call the model "
            "plainly, set model.config._attn_implementation = 'sdpa' first"
        )
    require_documents(module, route="or attach_packed_attention, not with a plan by hand")
    if dropout and module.training:
        raise UserError(f"{PACKED_IMPL} has no attention dropout; set attention_dropout=0 in the model config")
    dev = query.device.type
    if torch.is_autocast_enabled(dev) and query.dtype != torch.get_autocast_dtype(dev):
        # rotary embeddings in float32 promote q and k out of autocast's dtype; the plan (and a
        # half-precision-only kernel such as varlen) expects it, as autocast gives SDPA
        query, key, value = (x.to(torch.get_autocast_dtype(dev)) for x in (query, key, value))
    layer = layer_attention(module, kwargs, causal=plan.causal)
    Hq = query.shape[1]
    if key.shape[1] != Hq:  # grouped-query attention: share each kv head across its query group
        key, value = (x.repeat_interleave(Hq // x.shape[1], dim=1) for x in (key, value))
    if attention_mask is not None:  # transformers makes none for seqpack_packed: this one is the model's own
        raise UserError(
            f"{type(module).__name__} hands its attention a mask of its own making (a computed bias or "
            "dynamic mask), which seqpack's packed attention does not compute; " + UNPACKED
        )
    dv = value.shape[-1]
    query, key, value = same_head_dim(query, key, value, scaling)
    out = packed_attention(query, key, value, plan, scale=scaling, layer=layer)  # (B, Hq, T, d)
    return out[..., :dv].transpose(1, 2).contiguous(), None


def same_head_dim(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scaling: float | None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Multi-head latent attention (DeepSeek-V3) has values narrower than queries and keys: zero
    columns make them one width (a zero value column adds 0 to every output; zero query and key
    columns add 0 to every score), as transformers does for its flash kernels. Exact."""
    d, dv = q.shape[-1], v.shape[-1]
    if d == dv:
        return q, k, v
    if scaling is None:
        raise UserError("queries and values of different widths need the layer's scaling")
    if dv < d:
        return q, k, torch.nn.functional.pad(v, (0, d - dv))
    return torch.nn.functional.pad(q, (0, dv - d)), torch.nn.functional.pad(k, (0, dv - d)), v


def attach_packed_attention(
    model: torch.nn.Module, *, config: PretrainedConfig | None = None
) -> torch.utils.hooks.RemovableHandle:
    """Run ``model``'s attention as ``seqpack_packed`` with a plan made at each call from its
    ``position_ids``: a sample starts where the positions restart at 0 (the first row of a
    ``(4, B, T)`` mRoPE tensor). ``config``: the config whose attention changes, by default the text
    model's (``model.config.get_text_config()``: a vision encoder keeps its own attention). Returns
    the hook's handle; ``handle.remove()`` and setting the config back to ``sdpa`` undo it.

        handle = attach_packed_attention(vlm)
        vlm(input_ids=ids, position_ids=pos, pixel_values=..., use_cache=False)   # sum(l^2) attention

    Args:
        model: a transformers model.
        config: the config whose attention implementation changes (`None`: the text model's).

    Returns:
        The forward pre-hook's handle.
    """
    from seqpack.nn.attention import plan_attention

    needs = prepare_packed(model).needs  # refused here, before any change, when packed rows can't be exact
    register_packed_attention()
    hf: Any = model  # a transformers model: its config is read by name
    cfg = config if config is not None else hf.config.get_text_config()
    cfg._attn_implementation = PACKED_IMPL

    def plan_from_positions(module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Any]:
        if kwargs.get("seqpack_plan") is None:
            pos = kwargs.get("position_ids")
            if pos is None:
                raise UserError(
                    f"{PACKED_IMPL} attention reads where samples start from position_ids; pass them "
                    "(restarting at 0 at each sample)"
                )
            text = pos[0] if pos.ndim == 3 else pos  # (B, T)
            dtype = next(module.parameters()).dtype
            kwargs["seqpack_plan"] = plan_attention(
                (text == 0).cumsum(-1).int(), causal=True, dtype=dtype, needs=needs, position_ids=text
            )
        return args, kwargs

    return model.register_forward_pre_hook(plan_from_positions, with_kwargs=True)


__all__ = [
    "IGNORED_KWARGS",
    "PACKED_IMPL",
    "attach_packed_attention",
    "layer_attention",
    "same_head_dim",
    "packed_attention_forward",
    "register_packed_attention",
]
