"""The door: how a transformers model runs packed rows exactly, read once from its config and layers.

    support = packing_support(model)       # .needs {'window'}, .mixers (), .refusal None
    prepare_packed(model)                  # refuses in one line before any work, or readies the model
    with packed_documents(model, segment_ids, branch_ids=None):
        model(input_ids, position_ids=..., seqpack_plan=plan)      # each entry point's own call

Every packed entry point (`seqpack.nn.hf_adapter.packed_forward`, `seqpack.rl`, the preference
forward, ``seqpack train --hf-model``, the TRL trainers, `attach_packed_attention`, context
parallelism) asks this module, and nothing else, what a model needs:

``needs``: the layer arguments (`seqpack.nn.attention.FEATURES`) its attention layers use:
a sliding window (``sliding_window`` on some or all layers: ``layer_types``, Qwen2's
``max_window_layers``, GPT-Neo's local layers), a chunk (Llama 4's ``attention_chunk_size``), logit
soft-capping (``attn_logit_softcapping``), sinks (a ``sinks`` parameter in an attention module). The
attention plan is made for them (`seqpack.nn.attention.plan_attention`'s ``needs``), and
every layer is checked against it when it runs.

``mixers``: its layers that carry state along the sequence (Gated DeltaNet, Mamba, Mamba2, short
convolutions, lightning attention, RWKV's time mixing; `seqpack.nn.hf_mixers.find_mixers`).
`prepare_packed` makes each run on the row's documents, each from a zero state, inside
`packed_documents`: hybrid models are exact, gradients included.

``refusal``: why packed rows would not be exact, or None: layers named by the config that are
neither attention nor a state-carrying layer seqpack finds, attention that makes its own mask, or
a model that attends but takes no ``position_ids`` (its positions could not restart at each
document). Its rows must be run unpacked, outside seqpack (`UNPACKED`).
"""

from __future__ import annotations

import contextlib
import inspect
import weakref
from dataclasses import dataclass
from typing import Any

import torch

from seqpack.errors import UserError
from seqpack.nn.hf_mixers import STATE_PARAMETERS, current_documents, documents, find_mixers, install_mixers, prepared

#: what a refusal tells the user to run: ``seqpack train`` (its ``--padded`` baseline included, which
#: is evaluated on the packed rows) runs a transformers model through packed rows only
UNPACKED = (
    "train it on unpacked rows outside seqpack (TRL's SFTTrainer with packing=False, or transformers' Trainer); "
    "seqpack runs a transformers model on packed rows only, seqpack train --padded included"
)

#: seqpack's attention implementations inside transformers models: its attention plan
#: (`seqpack.nn.hf_attention`), and the padding-free varlen kernel (`seqpack.nn.hf_padding_free`)
PACKED_IMPL = "seqpack_packed"
VARLEN_IMPL = "seqpack_varlen"
#: implementations that take the real tokens as one row with ``cu_seq_lens_q/k``
PADDING_FREE = ("flash_attention_2", "flash_attention_3", "flash_attention_4", VARLEN_IMPL)
#: how a packed call feeds a causal LM's attention (`attention_route`)
ROUTES = ("plan", "padding-free", "flex", "mask")


def attention_route(model: Any) -> str:
    """How a packed call feeds this causal LM's attention, by its text config's ``attn_implementation``:
    ``plan`` (``seqpack_packed``: seqpack's attention plan in the call), ``padding-free`` (the real
    tokens as one row, `PADDING_FREE`), ``flex`` (transformers' block mask from restarting
    positions), ``mask`` (seqpack's 4-D masks: ``sdpa``, ``eager``)."""
    impl = str(getattr(text_config(model), "_attn_implementation", None) or "eager")
    if impl == PACKED_IMPL:
        return "plan"
    if impl in PADDING_FREE:
        return "padding-free"
    return "flex" if impl == "flex_attention" else "mask"


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
    every attention layer of a config without ``layer_types``, or of a hybrid whose ``layer_types``
    name no sliding layer, when its model makes sliding masks (`builds_sliding_masks` of ``owner``), unless
    ``use_sliding_window`` is False."""
    window = getattr(config, "sliding_window", None)
    if window is None or getattr(config, "use_sliding_window", True) is False:
        return None
    # a hybrid whose layer_types name state-carrying and attention layers but no sliding one (MiniMax)
    # windows every attention layer, as a config without layer_types does
    kinds = _layer_kinds(config)
    every = kind is None or (
        kind in ATTENTION_LAYERS and "sliding_attention" not in kinds and bool(state_layer_kinds(config))
    )
    if kind == "sliding_attention" or (every and builds_sliding_masks(owner)):
        return int(window)
    return None


@dataclass(frozen=True)
class Support:
    needs: frozenset[str]
    refusal: str | None = None
    #: the classes of its layers that carry state along the sequence (`seqpack.nn.hf_mixers`), run
    #: on each document from a zero state
    mixers: tuple[str, ...] = ()
    #: layer kinds that attend in a way of their own, reading the 4-D mask (DeepSeek's indexer): the
    #: model runs packed under ``sdpa`` or ``eager`` only
    masked: tuple[str, ...] = ()


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


def state_layer_kinds(config: Any) -> list[str]:
    """The layer kinds of a config (``layer_types``) that are neither attention nor pointwise: the
    kinds that carry state along the sequence (``linear_attention``, ``conv``, ``mamba``...)."""
    return sorted({k for k in _layer_kinds(config) if k not in ATTENTION_LAYERS | POINTWISE_LAYERS}) if config else []


def require_documents(module: Any, *, route: str) -> None:
    """Refuse an attention call of a hybrid (its config names state layers) made without the
    documents of a packed call: its state layers would carry state across documents. ``route``: the
    way in to name (`seqpack.nn.hf_attention`'s plan by hand, `seqpack.nn.hf_padding_free`'s rows)."""
    state = state_layer_kinds(getattr(module, "config", None))
    if state and current_documents() is None:
        raise UserError(
            f"{type(module).__name__}'s model also has {', '.join(state)} layers, which carry state from one "
            "packed document into the next unless seqpack gives them their documents: run it through "
            f"seqpack.nn.hf_adapter.packed_forward or seqpack.rl, {route}"
        )


def _mixers(
    model: Any, config: Any, mixers: tuple[tuple[str, Any], ...]
) -> tuple[tuple[str, ...], tuple[str, ...], str | None]:
    """The classes of the layers that carry state along the sequence (`find_mixers`); the layer kinds
    that are neither attention, pointwise, nor hold such a layer (they attend in a way of their own,
    reading the mask they are given: DeepSeek's indexer); and a refusal."""
    found = tuple(sorted({type(module).__name__ for _, module in mixers}))
    other = state_layer_kinds(config)
    name = type(getattr(model, "_orig_mod", model)).__name__
    windowed = [k for k in other if "sliding" in k or "chunk" in k]
    if windowed:  # attention of a kind seqpack does not know, narrowed in a way it cannot read
        return (
            found,
            (),
            (
                f"{name} has {', '.join(windowed)} layers, a kind of attention whose window or chunk seqpack "
                "cannot read: " + UNPACKED
            ),
        )
    if other and not found:
        return (
            found,
            (),
            (
                f"{name} has {', '.join(other)} layers, and seqpack finds no layer that carries their state (a "
                "state parameter, a token shift or a convolution over the sequence) to give documents to: " + UNPACKED
            ),
        )
    return found, _kinds_without(model, _layer_kinds(config), other, [m for _, m in mixers]), None


def _kinds_without(model: Any, kinds: list[str], other: list[str], mixers: list[Any]) -> tuple[str, ...]:
    """The kinds of ``other`` whose layers (the model's list of ``len(kinds)`` layers) hold no mixer."""
    layers = next((m for m in model.modules() if isinstance(m, torch.nn.ModuleList) and len(m) == len(kinds)), None)
    if layers is None:
        return ()
    ids = {id(x) for x in mixers}
    holding = {kinds[i] for i, layer in enumerate(layers) if any(id(m) in ids for m in layer.modules())}
    return tuple(k for k in other if k not in holding)


def _attends(model: Any, mixers: tuple[tuple[str, Any], ...]) -> bool:
    """Whether ``model`` has attention layers besides its state-carrying ones ``mixers`` (a pure
    state-space model such as Mamba has none, and reads no positions)."""
    inside = {id(m) for _, x in mixers for m in x.modules()}
    return any("Attention" in type(m).__name__ and id(m) not in inside for m in model.modules())


def _attention_interface(model: Any) -> bool:
    """``model`` runs its attention through transformers' attention interface: it says so, or its
    modeling file calls ``ALL_ATTENTION_FUNCTIONS`` (hybrids that do not say it)."""
    import sys

    if getattr(model, "_supports_attention_backend", False):
        return True
    return hasattr(sys.modules.get(type(model).__module__), "ALL_ATTENTION_FUNCTIONS")


#: config keys of attention that adds a mask of its own making to the one it is given (Doge's dynamic
#: mask: a top-k over the whole row's keys once it is longer than ``keep_window_size``)
COMPUTED_MASK_KEYS = ("keep_window_size",)


def _attention_refusal(model: Any, config: Any, mixers: tuple[tuple[str, Any], ...]) -> str | None:
    name = type(model).__name__
    for key in COMPUTED_MASK_KEYS:
        if getattr(config, key, None) is not None:
            return (
                f"{name}'s attention adds a mask of its own making ({key}: chosen over the whole row), which "
                "seqpack cannot keep inside each document: " + UNPACKED
            )
    if not _attention_interface(model) and (_attends(model, mixers) or not mixers):
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
    >>> s = packing_support(transformers.MistralForCausalLM(cfg))
    >>> s.needs, s.mixers, s.refusal
    (frozenset({'window'}), (), None)
    >>> mamba = transformers.MambaConfig(vocab_size=32, hidden_size=16, state_size=4, num_hidden_layers=1)
    >>> packing_support(transformers.MambaForCausalLM(mamba)).mixers
    ('MambaMixer',)
    """
    config = text_config(model)
    inner = getattr(model, "_orig_mod", model)
    inner = getattr(inner, "module", inner)
    key = hash(config.to_json_string(use_diff=False)) if hasattr(config, "to_json_string") else id(config)
    cached = _SUPPORT.get(inner)
    if cached is not None and cached[0] == key:  # read once per model (and config), not every batch
        return cached[1]
    found = find_mixers(inner)
    mixers, masked, refusal = _mixers(inner, config, found)
    refusal = refusal or _attention_refusal(inner, config, found)
    takes_positions = "position_ids" in inspect.signature(inner.forward).parameters
    if refusal is None and not takes_positions and (_attends(inner, found) or not mixers):
        refusal = (
            f"{type(inner).__name__}'s forward takes no position_ids, so positions cannot restart at each packed "
            "document: " + UNPACKED
        )
    support = Support(needs=_needs(inner, config), refusal=refusal, mixers=mixers, masked=masked)
    _SUPPORT[inner] = (key, support)
    return support


def check_packable(model: Any) -> Support:
    """`packing_support`, raising its refusal (a ``ValueError``, one line)."""
    support = packing_support(model)
    if support.refusal is not None:
        raise UserError(support.refusal)
    return support


def prepare_packed(model: Any) -> Support:
    """The door every packed entry point goes through: `check_packable`, then every layer that carries
    state along the sequence reads the documents of each packed call (`seqpack.nn.hf_mixers`)."""
    support = check_packable(model)
    if support.masked and attention_route(model) != "mask":
        raise UserError(
            f"{type(getattr(model, '_orig_mod', model)).__name__}'s {', '.join(support.masked)} layers read the "
            "attention mask themselves; load the model with attn_implementation='sdpa' or 'eager'"
        )
    if support.mixers and not prepared(model):
        install_mixers(model)
    return support


def packed_documents(
    model: Any, segment_ids: torch.Tensor, *, branch_ids: torch.Tensor | None = None
) -> contextlib.AbstractContextManager[Any]:
    """The context a packed call of ``model`` runs in: its mixers' documents (`seqpack.nn.hf_mixers.
    documents`) when `prepare_packed` found state-carrying layers, else nothing."""
    if not prepared(model):  # prepare_packed found no state layers (every entry point calls it first)
        return contextlib.nullcontext()
    return documents(segment_ids, branch_ids=branch_ids)


__all__ = [
    "PACKED_IMPL",
    "PADDING_FREE",
    "ROUTES",
    "VARLEN_IMPL",
    "attention_route",
    "ATTENTION_LAYERS",
    "COMPUTED_MASK_KEYS",
    "POINTWISE_LAYERS",
    "STATE_PARAMETERS",
    "UNPACKED",
    "builds_sliding_masks",
    "config_window",
    "Support",
    "check_packable",
    "packed_documents",
    "prepare_packed",
    "require_documents",
    "state_layer_kinds",
    "packing_support",
    "text_config",
]
