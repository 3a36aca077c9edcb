"""The model a training run builds for a dataset: seqpack's compact BERT / GPT, or a
transformers model from a config file (through :mod:`seqpack.nn.hf`).

    model, spec = build_model(manifest, cfg)          # spec: a JSON-able description
    out = forward(model, batch, task=manifest["task"], reduction="sequence")
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from seqpack.nn.models.bert import PackedOutput
from seqpack.train.config import TrainConfig

MODEL_TASKS = {"bert": ("mlm", "classification", "multilabel"), "gpt": ("clm",)}


def dataset_vocab_size(manifest: Mapping[str, Any]) -> int:
    v = manifest.get("task_info", {}).get("vocab_size") or manifest.get("vocab_size")
    if not v:
        raise ValueError("the dataset's manifest records no vocab_size; re-pack it with this version of seqpack pack")
    return int(v)


def model_kind(task: str, cfg: TrainConfig) -> str:
    kind = cfg.model or ("gpt" if task == "clm" else "bert")
    if task not in MODEL_TASKS[kind]:
        fits = [k for k, tasks in MODEL_TASKS.items() if task in tasks]
        hint = f"use --model {fits[0]}" if fits else "seqpack train does not train this task yet"
        raise ValueError(f"--model {kind} does not train a {task} dataset; {hint}")
    return kind


def _num_labels(manifest: Mapping[str, Any]) -> int:
    info = manifest.get("task_info", {})
    n = info.get("num_labels") or len(info.get("label_names") or ()) or manifest.get("config", {}).get("num_labels")
    if not n:
        raise ValueError("the dataset's manifest records no num_labels; re-pack it with --num-labels N")
    return int(n)


def build_model(manifest: Mapping[str, Any], cfg: TrainConfig) -> tuple[torch.nn.Module, dict[str, Any]]:
    """A freshly initialised model (seeded by the caller) and its description."""
    task = manifest["task"]
    kind = model_kind(task, cfg)
    vocab = dataset_vocab_size(manifest)
    need = int(manifest["max_len"]) + int(manifest.get("position_offset", 0))
    if cfg.hf_model:
        return _hf_model(cfg.hf_model, task, vocab, need, manifest)
    from seqpack.nn.models import GPT, BertConfig, BertForPreTraining, BertForSequenceClassification, GPTConfig

    extra: dict[str, Any] = {"attention": cfg.attention}
    if cfg.dropout is not None:
        extra["dropout"] = cfg.dropout
    if cfg.max_position is not None:
        extra["max_position"] = cfg.max_position
    if kind == "gpt":
        mc: Any = GPTConfig.of_size(cfg.size, vocab_size=vocab, **extra)
        model: torch.nn.Module = GPT(mc)
    elif task == "mlm":
        mc = BertConfig.of_size(cfg.size, vocab_size=vocab, **extra)
        model = BertForPreTraining(mc)
    else:
        mc = BertConfig.of_size(cfg.size, vocab_size=vocab, num_labels=_num_labels(manifest),
                                multilabel=task == "multilabel", **extra)
        model = BertForSequenceClassification(mc)
    if need > mc.max_position:
        raise ValueError(f"the dataset's rows need {need} positions, more than the model's max_position="
                         f"{mc.max_position}; pass --max-position {need} or re-pack with a smaller --max-len")
    spec = {"library": "seqpack", "class": type(model).__name__, "config": dataclasses.asdict(mc)}
    return model, spec


def _hf_model(source: str, task: str, vocab: int, need: int, manifest: Mapping[str, Any]) -> tuple[torch.nn.Module, dict[str, Any]]:
    import transformers

    p = Path(source)
    file = p / "config.json" if p.is_dir() else p
    if not file.is_file():
        raise ValueError(f"--hf-model {source}: no such config file (give a config.json or a directory holding one)")
    try:
        d = json.loads(file.read_text(encoding="utf-8"))
        model_type = d.pop("model_type")
    except (json.JSONDecodeError, KeyError) as e:
        raise ValueError(f"--hf-model {file}: not a transformers config ({e})") from None
    d["vocab_size"] = vocab  # trained from scratch on this dataset's tokenizer
    d.setdefault("attn_implementation", "sdpa")
    if task in ("classification", "multilabel"):
        d["num_labels"] = _num_labels(manifest)
        if task == "multilabel":
            d["problem_type"] = "multi_label_classification"
    config = transformers.AutoConfig.for_model(model_type, **d)
    positions = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
    if positions is not None and need > positions:
        raise ValueError(f"the dataset's rows need {need} positions, more than {file}'s {positions}; "
                         "raise max_position_embeddings in the config or re-pack with a smaller --max-len")
    if task == "clm":
        model = transformers.AutoModelForCausalLM.from_config(config)
    elif task == "mlm" and "next_sentence_label" in manifest["columns"] and model_type == "bert":
        model = transformers.BertForPreTraining(config)
    elif task == "mlm":
        model = transformers.AutoModelForMaskedLM.from_config(config)
    else:
        model = transformers.AutoModelForSequenceClassification.from_config(config)
    from seqpack.nn.hf import SUPPORTED

    if type(model).__name__ not in SUPPORTED:
        raise ValueError(f"--hf-model builds {type(model).__name__}; the adapters take {', '.join(SUPPORTED)}")
    return model, {"library": "transformers", "class": type(model).__name__, "config": config.to_diff_dict()}


def forward(model: torch.nn.Module, batch: Mapping[str, torch.Tensor], *, task: str, reduction: str) -> PackedOutput:
    """One forward pass on a batch from :class:`seqpack.train.data.TrainData`."""
    inner = getattr(model, "module", model)  # DistributedDataParallel wraps the model
    if type(inner).__module__.startswith("transformers"):
        from seqpack.nn.hf import packed_forward

        b = {k: v for k, v in batch.items() if k != "num_sequences"}
        if task == "mlm" and type(inner).__name__ != "BertForPreTraining":
            b.pop("next_sentence_label", None)
        return packed_forward(model, b, reduction=reduction)  # type: ignore[no-any-return]
    ids, seg = batch["input_ids"], batch["segment_ids"]
    kw: dict[str, Any] = {"position_ids": batch["position_ids"], "labels": batch.get("labels")}
    if task == "clm":
        return model(ids, seg, reduction=reduction, **kw)  # type: ignore[no-any-return]
    kw["token_type_ids"] = batch.get("token_type_ids")
    if task == "mlm":
        return model(ids, seg, reduction=reduction, next_sentence_label=batch.get("next_sentence_label"), **kw)  # type: ignore[no-any-return]
    return model(ids, seg, **kw)  # type: ignore[no-any-return]
