"""The model a training run builds for a dataset: seqpack's compact BERT / GPT, or a
transformers model from a config file (through `seqpack.nn.hf_adapter`).

    model, spec = build_model(manifest, cfg)          # spec: a JSON-able description
    out = forward(model, batch, task=manifest["task"], reduction="sequence")
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from seqpack.errors import UserError
from seqpack.nn.models.common import PackedOutput
from seqpack.tasks import HFModels, Task, get_task
from seqpack.train.config import TrainConfig


def dataset_vocab_size(manifest: Mapping[str, Any]) -> int:
    v = manifest.get("task_info", {}).get("vocab_size") or manifest.get("vocab_size")
    if not v:
        raise UserError("the dataset's manifest records no vocab_size; re-pack it with this version of seqpack pack")
    return int(v)


def build_model(manifest: Mapping[str, Any], cfg: TrainConfig) -> tuple[torch.nn.Module, dict[str, Any]]:
    """A freshly initialised model (seeded by the caller) and its description."""
    task = get_task(manifest["task"])
    task.trains()  # a task seqpack train cannot train: refused before the model is built
    kind = task.model_kind(cfg.model, hf=bool(cfg.hf_model))
    vocab = dataset_vocab_size(manifest)
    need = int(manifest["max_len"]) + int(manifest.get("position_offset", 0))
    if cfg.hf_model:
        return _hf_model(cfg, task, vocab, need, manifest, kind)
    extra: dict[str, Any] = {"attention": cfg.attention}
    if cfg.dropout is not None:
        extra["dropout"] = cfg.dropout
    if cfg.max_position is not None:
        from seqpack._resources import check_memory
        from seqpack.nn.models.common import SIZES

        # the position table, its gradient and AdamW's two moments, float32: memory set by the argument
        check_memory(
            cfg.max_position * SIZES[cfg.size]["hidden"] * 16,
            what=f"--max-position {cfg.max_position:,}'s position embeddings",
            hint=f"pass --max-position {need} (what the dataset's rows need) or a little more",
        )
        extra["max_position"] = cfg.max_position
    model, mc = task.own_models().build(kind, cfg.size, vocab, manifest, extra)
    if need > mc.max_position:
        raise UserError(
            f"the dataset's rows need {need} positions, more than the model's max_position="
            f"{mc.max_position}; pass --max-position {need} or re-pack with a smaller --max-len"
        )
    spec = {"library": "seqpack", "class": type(model).__name__, "config": dataclasses.asdict(mc)}
    return model, spec


def enable_checkpointing(model: torch.nn.Module) -> None:
    """Gradient checkpointing: seqpack's encoders recompute each block (``checkpoint_blocks``); a
    transformers model through its own ``gradient_checkpointing_enable`` (non-reentrant)."""
    hf: Any = model  # a transformers model's methods are read by name
    if hasattr(hf, "gradient_checkpointing_enable"):
        if not getattr(hf, "supports_gradient_checkpointing", False):
            raise UserError(
                f"{type(model).__name__} does not support gradient checkpointing; drop --gradient-checkpointing"
            )
        if hasattr(hf, "activation_checkpointing_enable"):  # transformers 5.x's name for it
            hf.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
        else:
            hf.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        return
    stacks = [m for m in model.modules() if hasattr(m, "checkpoint_blocks")]
    assert stacks, f"{type(model).__name__} holds no block stack"
    for m in stacks:
        setattr(m, "checkpoint_blocks", True)  # noqa: B010 - a BlockStack's flag, set through nn.Module


def max_positions(config: Any) -> int | None:
    """The positions a transformers config's (text) model embeds, or None when it names none."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    return getattr(text, "max_position_embeddings", None) or getattr(text, "n_positions", None)


def _hf_config(
    file: Path, hf: HFModels, manifest: Mapping[str, Any], *, vocab: int | None, need: int
) -> tuple[dict[str, Any], str, Any]:
    """``(config dict, model_type, transformers config)`` of ``--hf-model``'s ``file``, with the
    task's fields and, for a model trained from scratch (``vocab`` given), the data's vocabulary;
    ``d["_named"]`` is the attention implementation the file names (None: sdpa, seqpack's later)."""
    import transformers

    d = read_config(file)
    model_type = d.pop("model_type")
    if vocab is not None:
        d["vocab_size"] = vocab  # trained from scratch on this dataset's tokenizer
        if isinstance(d.get("text_config"), dict):  # a composite config: its text model's vocabulary
            d["text_config"]["vocab_size"] = vocab
    named = d.get("attn_implementation")  # a config saved by to_json_file() usually names none
    d["attn_implementation"] = named or "sdpa"
    _register(d["attn_implementation"])
    if hf.config is not None:
        hf.config(d, manifest)
    if model_type not in transformers.CONFIG_MAPPING:
        near = sorted(t for t in transformers.CONFIG_MAPPING if t[:3] == str(model_type)[:3])[:5]
        raise UserError(
            f"--hf-model {file}: transformers knows no model_type {model_type!r}"
            + (f" (close: {', '.join(near)})" if near else "")
            + "; give the config.json of a model seqpack adapts (bert, llama, gpt2, ...)"
        )
    config = config_for(file, model_type, d)
    if vocab is not None and not isinstance(d.get("text_config"), dict) and _own_special_ids(d, config, vocab):
        config = config_for(file, model_type, d)
    positions = max_positions(config)
    if positions is not None and need > positions:
        raise UserError(
            f"the dataset's rows need {need} positions, more than {file}'s {positions}; "
            "raise max_position_embeddings in the config or re-pack with a smaller --max-len"
        )
    return {**d, "_named": named}, model_type, config


def _hf_model(
    cfg: TrainConfig, task: Task, vocab: int, need: int, manifest: Mapping[str, Any], kind: str
) -> tuple[torch.nn.Module, dict[str, Any]]:
    from seqpack.train.pretrained import check_vocabulary, has_weights, load_weights

    source = str(cfg.hf_model)
    pretrained = has_weights(source)  # a checkpoint: its weights are loaded, its vocabulary kept
    p = Path(source)
    file = p / "config.json" if p.is_dir() else p
    if not file.is_file():
        raise UserError(f"--hf-model {source}: no such config file (give a config.json or a directory holding one)")
    hf = task.hf_models()
    d, model_type, config = _hf_config(file, hf, manifest, vocab=None if pretrained else vocab, need=need)
    named = d.pop("_named")

    parts: dict[str, list[str]] = {}

    def build(config: Any) -> Any:
        return hf.build(config, model_type, manifest, kind)

    def make(config: Any) -> Any:
        if pretrained:
            model, loaded = load_weights(p, config, build, resize=cfg.ignore_mismatched_sizes)
            parts.update(loaded)
        else:
            model = build(config)
        return hf.ready(model) if hf.ready is not None else model

    try:
        model = make(config)
    except ValueError:
        if named is not None:
            raise
        # an architecture without sdpa (Gemma 2: soft-capping): built eager, then given seqpack's attention below
        config = config_for(file, model_type, {**d, "attn_implementation": "eager"})
        model = make(config)
    if pretrained:  # the data must be the model's tokens: refused here, before any step
        opener = task.packing.open_tokenizer if task.packing is not None else None  # as the data's task opened it
        check_vocabulary(model, manifest, source=source, data=cfg.data, vocab=vocab, opener=opener, stream=cfg.stream)
    from seqpack.nn.hf_adapter import is_causal_lm, takes_plan
    from seqpack.nn.hf_attention import PACKED_IMPL
    from seqpack.nn.hf_support import check_encoder, is_encoder, prepare_packed

    spec: dict[str, Any] = {"library": "transformers", "class": type(model).__name__, "config": config.to_diff_dict()}
    if pretrained:
        spec.update({"weights": "pretrained", **parts})
    if not hf.adapted:  # the task runs the model itself (its forward), attention included
        return _lora(model, spec, cfg, hf.lora_task_type), spec
    encoder = is_encoder(model)
    if not takes_plan(model) and not encoder:
        raise UserError(
            f"--hf-model builds {type(model).__name__}; the adapters take transformers' causal LMs, their "
            "reward models (a score head) and encoders with a masked-LM, classification, question-answering, "
            "token-classification or pre-training head"
        )
    if encoder:  # packed rows that would not be exact: refused before any step
        positions = max_positions(config)
        offset = check_encoder(model).padding_idx
        if offset is not None and positions is not None and need + offset + 1 > positions:
            raise UserError(
                f"the dataset's rows need {need} positions, which {type(model).__name__} counts from its pad id "
                f"{offset} + 1: {need + offset + 1} > {file}'s max_position_embeddings {positions}; raise it or "
                "re-pack with a smaller --max-len"
            )
    if takes_plan(model) or is_causal_lm(model):
        prepare_packed(model)  # a layer that packed rows would make wrong: refused before any step
    if named is None and takes_plan(model) and not attention_dropout(config):
        _register(PACKED_IMPL)  # seqpack's packed attention unless the config names one (or needs dropout in it)
        model.set_attn_implementation(PACKED_IMPL)
    return _lora(model, spec, cfg, hf.lora_task_type), spec


#: a config's token ids that name tokens of its tokenizer (a model trained from scratch on another one)
SPECIAL_IDS = ("pad_token_id", "bos_token_id", "eos_token_id", "cls_token_id", "sep_token_id", "mask_token_id")


def _own_special_ids(d: dict[str, Any], config: Any, vocab: int) -> bool:
    """A config trained from scratch on a dataset's ``vocab`` tokens keeps no token id past them (``d``
    changed in place; True when it was): a pad id past them (ModernBERT's 50283, an embedding row that
    no longer exists) becomes a pad of its own, one more row (``vocab``) that no data token is, so
    that the model's own positions and padding row never touch a real token; another special id past
    them (its tokenizer's ``[CLS]``) is dropped (None), the data's rows holding their own."""
    changed = False
    for key in SPECIAL_IDS:
        v = getattr(config, key, None)
        if not isinstance(v, int) or isinstance(v, bool) or v < vocab:
            continue
        changed = True
        if key == "pad_token_id":
            d["pad_token_id"], d["vocab_size"] = vocab, vocab + 1
        else:
            d[key] = None
    return changed


def _lora(model: Any, spec: dict[str, Any], cfg: TrainConfig, task_type: str | None) -> Any:
    """``model`` with LoRA adapters when ``--lora-rank`` asks for them (recorded in ``spec``)."""
    if not cfg.lora_rank:
        return model
    from seqpack.train.pretrained import add_lora

    spec["lora"] = {"rank": cfg.lora_rank, "targets": cfg.lora_targets}
    new = [*spec.get("new", ()), *spec.get("resized", ())]  # weights the checkpoint did not give: trained whole
    return add_lora(model, task_type, rank=cfg.lora_rank, targets=cfg.lora_targets, train_whole=new)


def read_config(file: Path) -> dict[str, Any]:
    """``file``'s config as transformers reads it (``{"__float__": "Infinity"}`` is ``inf``); a
    ``ValueError`` when it is not a transformers config."""
    import transformers

    try:
        d, _ = transformers.PretrainedConfig.get_config_dict(str(file), local_files_only=True)
    except OSError as e:
        raise UserError(f"--hf-model {file}: not a transformers config ({e})") from e
    if not isinstance(d, dict) or "model_type" not in d:
        raise UserError(f"--hf-model {file}: not a transformers config (no model_type)")
    return dict(d)


def config_for(file: Path, model_type: str, d: dict[str, Any]) -> Any:
    """``AutoConfig.for_model(model_type, **d)``; a value transformers refuses is a ``ValueError``
    naming the file."""
    import transformers
    from huggingface_hub.errors import StrictDataclassError

    try:
        return transformers.AutoConfig.for_model(model_type, **d)
    except (StrictDataclassError, TypeError) as e:
        why = " ".join(line.strip() for line in str(e).strip().splitlines()[:2])
        raise UserError(f"--hf-model {file}: transformers refuses this {model_type} config ({why})") from e


#: where transformers configs keep the dropout on attention probabilities
ATTENTION_DROPOUT = ("attention_dropout", "attn_pdrop", "attention_probs_dropout_prob")


def attention_dropout(config: Any) -> float:
    """The dropout a transformers config puts on attention probabilities (``seqpack_packed`` has none)."""
    return max((float(getattr(config, k, 0.0) or 0.0) for k in ATTENTION_DROPOUT), default=0.0)


def attention_of(model: torch.nn.Module, cfg: TrainConfig) -> str:
    """The attention a run's model runs: a transformers model's ``attn_implementation``, or
    seqpack's ``--attention`` backend (``auto``: chosen per batch, `seqpack.nn.attention.choose_backend`)."""
    inner: Any = getattr(model, "module", model)
    if type(inner).__module__.startswith("transformers"):
        config = inner.config.get_text_config() if hasattr(inner.config, "get_text_config") else inner.config
        return str(getattr(config, "_attn_implementation", None) or "eager")  # a VLM's: its text model's
    return cfg.attention


def _register(impl: str) -> None:
    """seqpack's own transformers attention implementations join transformers' registry when named."""
    from seqpack.nn.hf_attention import PACKED_IMPL, register_packed_attention
    from seqpack.nn.hf_padding_free import VARLEN_IMPL, register_varlen_attention

    if impl == PACKED_IMPL:
        register_packed_attention()
    elif impl == VARLEN_IMPL:
        register_varlen_attention()


def forward(
    model: torch.nn.Module, batch: Mapping[str, torch.Tensor], *, task: str, reduction: str, objective: Any = None
) -> PackedOutput:
    """One forward pass on a batch from `seqpack.train.data.TrainData` (``objective``: the
    task's, `seqpack.tasks.Training.objective`)."""
    inner: Any = getattr(model, "module", model)  # DistributedDataParallel wraps the model
    t = get_task(task)
    if type(inner).__module__.startswith("transformers"):
        return t.hf_models().run(model, batch, reduction=reduction, objective=objective)
    return t.own_models().forward(model, batch, reduction=reduction, objective=objective)


class TaskModule(torch.nn.Module):
    """The model and its task (and objective) in one module, so that ``DistributedDataParallel``
    sees one forward call: `forward`."""

    def __init__(self, model: torch.nn.Module, task: str, reduction: str, objective: Any = None) -> None:
        super().__init__()
        self.model, self.task, self.reduction, self.objective = model, task, reduction, objective

    def forward(self, batch: dict[str, torch.Tensor]) -> PackedOutput:
        return forward(self.model, batch, task=self.task, reduction=self.reduction, objective=self.objective)
