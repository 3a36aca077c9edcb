"""``vision``: image-text SFT of a transformers vision-language model (Qwen2-VL family, LLaVA-style).

``seqpack pack --task vision RECORDS --tokenizer PROCESSOR_DIR`` reads TRL's vision records with the
model's processor (saved with ``save_pretrained``; ``--tokenizer`` names its directory) and packs
them like any other task: a packed dataset whose example table holds the images
(`seqpack.tasks.vision.packed`), the processor copied beside it. ``seqpack train --data DIR
--hf-model VLM_CONFIG`` trains on them: the micro-batch's rows side by side in one padding-free
``(1, T)`` row (`VisionBatches`), seqpack's packed attention
in the text model, the loss per sample (``--reduction sequence``) or per token, on the assistant
tokens only. Training a vision-language model needs ``--hf-model``: seqpack has no model of its own
for images.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from seqpack.data.sequences import check_overflow
from seqpack.errors import UserError
from seqpack.tasks._lm import LM_TRAINING
from seqpack.tasks.chat.sequences import TRAIN_ON
from seqpack.tasks.spec import HFModels, Packing, PackSettings, Rows, Task
from seqpack.tasks.vision.samples import VISION_OVERFLOW

if TYPE_CHECKING:
    import torch
    from transformers import PretrainedConfig

    from seqpack.data.sequences import Sequences
    from seqpack.nn.models.common import PackedOutput
    from seqpack.tasks.vision.processor import ProcessorTokenizer


@dataclass(frozen=True, kw_only=True)
class VisionOptions:
    messages_field: str = field(default="messages", metadata={"help": "the column holding the list of messages"})
    images_field: str = field(
        default="images",
        metadata={"help": "vision: the column holding each record's images (paths, bytes or {bytes, path})"},
    )
    image_root: str | None = field(
        default=None, metadata={"help": "vision: where relative image paths point (default: the folder of the records)"}
    )
    train_on: str = field(
        default="assistant",
        metadata={
            "help": "tokens that carry loss: assistant (every assistant turn and its end token) | last (the final one) | all"
        },
    )
    overflow: str = field(
        default="truncate",
        metadata={
            "help": "vision: samples longer than max_len: truncate (after the last assistant turn that fits, never "
            "inside an image) | drop | error"
        },
    )

    def __post_init__(self) -> None:
        check_overflow(self.overflow, allowed=VISION_OVERFLOW)
        if self.train_on not in TRAIN_ON:
            raise UserError(f"train_on must be one of {'|'.join(TRAIN_ON)}, got {self.train_on!r}")


def check_config(config: PackSettings) -> None:
    """Image-text samples keep the positions they have alone (the collator makes them), and their
    rows are not split across context-parallel ranks."""
    for name, flag in (("position_offset", "--position-offset"), ("context_parallel", "--context-parallel")):
        if getattr(config, name) != getattr(type(config), "__dataclass_fields__")[name].default:  # noqa: B009
            raise UserError(
                f"{flag} is not taken by task vision (its samples keep the positions they have alone, "
                "one padding-free row per micro-batch); drop it"
            )


def open_processor(path: str | os.PathLike[str]) -> ProcessorTokenizer:
    """``--tokenizer`` names the model's processor directory (``processor.save_pretrained(DIR)``)."""
    from seqpack.tasks.vision.processor import ProcessorTokenizer, load_processor

    if not Path(path).is_dir():
        raise UserError(
            f"--tokenizer {path}: task vision reads the model's processor; give the directory "
            "it was saved to (processor.save_pretrained(DIR))"
        )
    return ProcessorTokenizer(load_processor(path), path=path)


def _processor(tokenizer: Any) -> ProcessorTokenizer:
    from seqpack.tasks.vision.processor import ProcessorTokenizer

    if not isinstance(tokenizer, ProcessorTokenizer):
        raise UserError(
            "task vision makes its samples with the model's processor: pass ProcessorTokenizer(processor) "
            "(seqpack.tasks.vision), or --tokenizer PROCESSOR_DIR"
        )
    return tokenizer


def write_processor(tokenizer: Any, root: Path) -> None:
    """The processor the samples were made with, in ``processor/`` (what training reads images with)."""
    from seqpack.tasks.vision.packed import PROCESSOR

    _processor(tokenizer).save(root / PROCESSOR)


def _sequences(source: Any, tokenizer: Any, config: PackSettings, image_root: str | None) -> Sequences:
    from seqpack.tasks.vision.packed import vision_sequences
    from seqpack.tasks.vision.samples import vision_samples

    tok = _processor(tokenizer)
    o: VisionOptions = config.options
    samples = vision_samples(
        source,
        tok.processor,
        max_len=config.max_len,
        images_field=o.images_field,
        messages_field=o.messages_field,
        train_on=o.train_on,
        overflow=o.overflow,
        image_root=o.image_root or image_root,
    )
    return vision_sequences(samples, vocab_size=tok.vocab_size)


def build(source: Any, tokenizer: Any, config: PackSettings) -> Sequences:
    """One sample per record of ``source``, as the processor makes it (`vision_samples`)."""
    return _sequences(source, tokenizer, config, None)


def build_shard(
    records: list[dict[str, Any]], tokenizer: Any, config: PackSettings, context: dict[str, Any]
) -> Sequences:
    """One shard's samples, relative image paths read from the job's ``image_root``."""
    return _sequences(records, tokenizer, config, context.get("image_root"))


def shard_context(source: Any, config: PackSettings) -> dict[str, Any]:
    """Where relative image paths point: ``--image-root``, or the folder that holds the record files."""
    from seqpack.tasks.vision.samples import image_root_of

    return {"image_root": config.options.image_root or image_root_of(list(source))}


def shard_identity(records: list[dict[str, Any]], config: PackSettings, context: dict[str, Any]) -> Any:
    """The size and mtime of every image file the records name (a path, or a dict holding only
    a path): an image rewritten under the same name changes the shard's key."""
    from seqpack._stages import file_fingerprint
    from seqpack.tasks.vision.images import image_path

    o: VisionOptions = config.options
    root = o.image_root or context.get("image_root")
    out: list[Any] = []
    for r in records:
        values = r.get(o.images_field) if isinstance(r, Mapping) else None
        for path in (image_path(v, root) for v in (values if isinstance(values, list) else [])):
            if path is not None:
                out.append([str(path), file_fingerprint(path) if path.is_file() else None])
    return out


def pack_summary(manifest: Mapping[str, Any]) -> str:
    """The images and where their pixels come from."""
    info = manifest["task_info"]
    return (
        f"images: {info['images']:,} ({info['positions']} positions), kept encoded in the example table; "
        "the processor makes their pixels when a row is read"
    )


def batch_maker(path: str | os.PathLike[str], manifest: Mapping[str, Any]) -> Any:
    """The rows side by side with their images' pixels (`VisionBatches`)."""
    from seqpack.tasks.vision.collate import VisionBatches

    return VisionBatches(path, manifest)


def hf_config(d: dict[str, Any], manifest: Mapping[str, Any]) -> None:
    """The text model's vocabulary is the processor's (a model built from its config; a checkpoint
    keeps its own, checked against the rows); the image placeholder is the rows'."""
    text = d.setdefault("text_config", {})
    if isinstance(text, dict) and "vocab_size" in d:
        text["vocab_size"] = d["vocab_size"]
    d["image_token_id"] = int(manifest["task_info"]["image_token_id"])
    d.pop("image_token_index", None)  # an older name of the same id


def hf_model(config: PretrainedConfig, model_type: str, manifest: Mapping[str, Any], kind: str) -> torch.nn.Module:
    """A transformers vision-language model of ``config`` (refused for a config of another kind)."""
    import transformers

    if type(config) not in transformers.MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING:
        raise UserError(
            f"--hf-model: a {model_type} config is not a vision-language model; give the config of "
            "one transformers builds with AutoModelForImageTextToText (Qwen2-VL, Qwen2.5-VL, LLaVA, ...)"
        )
    return transformers.AutoModelForImageTextToText.from_config(config)


def hf_ready(model: torch.nn.Module) -> torch.nn.Module:
    """The text model's attention packed (sum(l^2) work); the vision encoder keeps its own."""
    from seqpack.nn.hf_attention import attach_packed_attention

    attach_packed_attention(model)
    return model


def hf_forward(
    model: torch.nn.Module, batch: Mapping[str, torch.Tensor], *, reduction: str, objective: Any = None
) -> PackedOutput:
    """Logits of the whole ``(1, T)`` row, then the loss of each sample's target tokens (shifted)."""
    from seqpack.nn.losses import mean_over, sequence_token_losses, token_loss
    from seqpack.nn.models.common import PackedOutput

    inputs = {k: v for k, v in batch.items() if k not in ("labels", "segment_ids")}
    logits = model(**inputs, use_cache=False).logits  # (1, T, V)
    out = PackedOutput(logits=logits)
    labels, seg = batch.get("labels"), batch["segment_ids"]
    if labels is not None:
        out.per_sequence, out.present = sequence_token_losses(logits, labels, seg, shift=True)  # (1, S)
        out.loss = (
            mean_over(out.per_sequence, out.present)
            if reduction == "sequence"
            else token_loss(logits, labels, seg, reduction=reduction, shift=True)
        )
    return out


#: image-text samples packed by the pack job, their images in the example table
#: (`seqpack.tasks.vision.packed`), trained through a transformers vision-language model
TASK = Task(
    name="vision",
    summary="image-text SFT of a vision-language model (Qwen2-VL family, LLaVA)",
    options_type=VisionOptions,
    rows=Rows(token_labels=True),
    packing=Packing(
        reads="examples",
        build=build,
        shard=build_shard,
        context=shard_context,
        identity=shard_identity,
        stream=None,
        unstreamed="its images go in the packed dataset's example table; pack the records with seqpack pack "
        "--task vision and train on the directory",
        open_tokenizer=open_processor,
        beside=write_processor,
        check_config=check_config,
        summary=pack_summary,
    ),
    # a rank's rows may hold no image: its vision encoder then has no gradient
    training=replace(LM_TRAINING, batch_maker=batch_maker, partial_graph=True),
    models=None,  # seqpack has no model of its own for images
    hf=HFModels(
        build=hf_model,
        config=hf_config,
        ready=hf_ready,
        forward=hf_forward,
        adapted=False,  # its forward runs the model; its text attention is packed by `ready`
        what="the config.json of a Qwen2-VL, Qwen2.5-VL or LLaVA model, or its directory",
    ),
)
