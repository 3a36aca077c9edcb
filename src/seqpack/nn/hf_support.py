"""What a transformers model needs to run packed rows exactly, read from its config and layers.

    support = packing_support(model)       # Support(needs={'window'}, refusal=None)
    check_packable(model)                  # raises the refusal, one line, before any work

``needs``: the layer arguments (`seqpack.nn.attention.FEATURES`) its attention layers use:
a sliding window (``sliding_window`` on some or all layers: ``layer_types``, Qwen2's
``max_window_layers``, GPT-Neo's local layers), a chunk (Llama 4's ``attention_chunk_size``), logit
soft-capping (``attn_logit_softcapping``), sinks (a ``sinks`` parameter in an attention module). The
attention plan is made for them (`seqpack.nn.attention.plan_attention`'s ``needs``), and
every layer is checked against it when it runs.

``refusal``: why packed rows would not be exact, or None. A layer that is not attention carries
state from one document into the next (a state-space model such as Mamba, linear attention, a
short convolution over the sequence): seqpack cannot tell it where documents start, so such a
model is refused, naming the layer, and its rows must be run unpacked, outside seqpack
(`UNPACKED`). So is a model whose forward takes no ``position_ids`` (its positions could not restart
at each document).
"""

from __future__ import annotations

import inspect
import weakref
from dataclasses import dataclass
from typing import Any

import torch

#: what a refusal tells the user to run: ``seqpack train`` (its ``--padded`` baseline included, which
#: is evaluated on the packed rows) runs a transformers model through packed rows only
UNPACKED = (
    "train it on unpacked rows outside seqpack (TRL's SFTTrainer with packing=False, or transformers' Trainer); "
    "seqpack runs a transformers model on packed rows only, seqpack train --padded included"
)

#: the layer types (a config's ``layer_types``) seqpack computes packed: softmax attention, whole,
#: in a sliding window or in chunks; any other kind is refused
ATTENTION_LAYERS = frozenset({"full_attention", "sliding_attention", "chunked_attention"})
#: layer types that mix nothing across positions (a feed-forward block alone)
POINTWISE_LAYERS = frozenset({"mlp", "moe"})


def builds_sliding_masks(obj: Any) -> bool:
    """Whether the transformers modeling file of ``obj`` (a model or one of its layers) makes sliding
    window masks: how a model without ``layer_types`` applies its config's ``sliding_window`` to
    every layer (Mistral, PhiMoE), where another stores one it never uses (Moshi)."""
    import sys

    return hasattr(sys.modules.get(type(obj).__module__), "create_sliding_window_causal_mask")


def config_window(config: Any, kind: str | None, owner: Any) -> int | None:
    """The sliding window a layer of this kind (its ``layer_types`` entry; None: the config has no
    ``layer_types``) has by its config: ``sliding_window`` on ``sliding_attention`` layers, or on
    every layer of a config without ``layer_types`` whose model makes sliding masks
    (`builds_sliding_masks` of ``owner``), unless ``use_sliding_window`` is False."""
    window = getattr(config, "sliding_window", None)
    if window is None or getattr(config, "use_sliding_window", True) is False:
        return None
    if kind == "sliding_attention" or (kind is None and builds_sliding_masks(owner)):
        return int(window)
    return None


#: parameter names only a recurrent or state-space mixer has (Mamba's ``A_log`` and ``dt_bias``,
#: RWKV's ``time_decay``, gated linear attention's ``A_log``)
STATE_PARAMETERS = ("A_log", "dt_bias", "time_decay", "time_first")


@dataclass(frozen=True)
class Support:
    needs: frozenset[str]
    refusal: str | None = None


def text_config(model: Any) -> Any:
    inner = getattr(model, "_orig_mod", model)
    inner = getattr(inner, "module", inner)  # DistributedDataParallel
    config = inner.config
    return config.get_text_config() if hasattr(config, "get_text_config") else config


def _layer_kinds(config: Any) -> list[str]:
    kinds = getattr(config, "layer_types", None)
    return [str(k) for k in kinds] if isinstance(kinds, (list, tuple)) else []


def _needs(model: Any, config: Any) -> frozenset[str]:
    needs: set[str] = set()
    kinds = _layer_kinds(config)
    if any(config_window(config, kind, model) for kind in ((*kinds,) or (None,))):
        needs.add("window")
    if "chunked_attention" in kinds and getattr(config, "attention_chunk_size", None):
        needs.add("chunk")
    if getattr(config, "attn_logit_softcapping", None) is not None:
        needs.add("softcap")
    for name, _ in model.named_parameters():
        if name.rsplit(".", 1)[-1] == "sinks":
            needs.add("sinks")
            break
    return frozenset(needs)


def _mixer_refusal(model: Any, config: Any) -> str | None:
    name = type(getattr(model, "_orig_mod", model)).__name__
    other = sorted({k for k in _layer_kinds(config) if k not in ATTENTION_LAYERS | POINTWISE_LAYERS})
    if other:
        return (
            f"{name} has {', '.join(other)} layers, which seqpack cannot compute packed (a layer that is not "
            "attention carries state from one document into the next): " + UNPACKED
        )
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else model
    decoder = decoder if isinstance(decoder, torch.nn.Module) else model
    for mname, module in decoder.named_modules():
        own = [p for p, _ in module.named_parameters(recurse=False)]
        if isinstance(module, torch.nn.Conv1d) or any(p in STATE_PARAMETERS for p in own):
            owner = mname.rsplit(".", 1)[0] if "." in mname else mname
            kind = type(decoder.get_submodule(owner)).__name__ if owner else type(module).__name__
            what = "a convolution over the sequence" if isinstance(module, torch.nn.Conv1d) else "a recurrent state"
            return (
                f"{name}'s {kind} layers ({what}) carry state from one packed document into the next; seqpack "
                "cannot tell them where documents start: " + UNPACKED
            )
    return None


#: config keys of attention that adds a mask of its own making to the one it is given (Doge's dynamic
#: mask: a top-k over the whole row's keys once it is longer than ``keep_window_size``)
COMPUTED_MASK_KEYS = ("keep_window_size",)


def _attention_refusal(model: Any, config: Any) -> str | None:
    name = type(model).__name__
    for key in COMPUTED_MASK_KEYS:
        if getattr(config, key, None) is not None:
            return (
                f"{name}'s attention adds a mask of its own making ({key}: chosen over the whole row), which "
                "seqpack cannot keep inside each document: " + UNPACKED
            )
    if not getattr(model, "_supports_attention_backend", False):
        return (
            f"{name} does not run its attention through transformers' attention interface, so seqpack cannot "
            "give it packed attention or masks: " + UNPACKED
        )
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else model
    decoder = decoder if isinstance(decoder, torch.nn.Module) else model
    for module in decoder.modules():
        if getattr(module, "is_causal", None) is False and "Attention" in type(module).__name__:
            return (
                f"{name}'s {type(module).__name__} is bidirectional (is_decoder is off in its config?): packed causal "
                "rows need causal attention"
            )
    return None


_SUPPORT: weakref.WeakKeyDictionary[Any, tuple[int, Support]] = weakref.WeakKeyDictionary()


def packing_support(model: Any) -> Support:
    """See the module.

    >>> import transformers
    >>> cfg = transformers.MistralConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
    ...                                  num_attention_heads=2, num_key_value_heads=1, sliding_window=4)
    >>> packing_support(transformers.MistralForCausalLM(cfg))
    Support(needs=frozenset({'window'}), refusal=None)
    """
    config = text_config(model)
    inner = getattr(model, "_orig_mod", model)
    inner = getattr(inner, "module", inner)
    key = hash(config.to_json_string(use_diff=False)) if hasattr(config, "to_json_string") else id(config)
    cached = _SUPPORT.get(inner)
    if cached is not None and cached[0] == key:  # read once per model (and config), not every batch
        return cached[1]
    refusal = _mixer_refusal(inner, config) or _attention_refusal(inner, config)
    if refusal is None and "position_ids" not in inspect.signature(inner.forward).parameters:
        refusal = (
            f"{type(inner).__name__}'s forward takes no position_ids, so positions cannot restart at each packed "
            "document: " + UNPACKED
        )
    support = Support(needs=_needs(inner, config), refusal=refusal)
    _SUPPORT[inner] = (key, support)
    return support


def check_packable(model: Any) -> Support:
    """`packing_support`, raising its refusal (a ``ValueError``, one line)."""
    support = packing_support(model)
    if support.refusal is not None:
        raise ValueError(support.refusal)
    return support


__all__ = [
    "ATTENTION_LAYERS",
    "COMPUTED_MASK_KEYS",
    "POINTWISE_LAYERS",
    "STATE_PARAMETERS",
    "UNPACKED",
    "builds_sliding_masks",
    "config_window",
    "Support",
    "check_packable",
    "packing_support",
    "text_config",
]
