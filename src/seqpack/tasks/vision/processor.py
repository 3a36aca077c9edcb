"""A vision-language model's processor from a directory, loadable without a video processor.

``AutoProcessor.from_pretrained`` builds every part a processor class names; the Qwen2-VL family's
names a video processor, which needs ``torchvision``. Image-text packing uses the tokenizer, the
chat template and the image processor only, so `load_processor` falls back to those three
(the family's own processor class, its video part left out) when the whole processor can't be
built. `image_only` is that class.

    processor = load_processor("Qwen2-VL-2B-Instruct/")     # AutoProcessor, or its image-only form
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from seqpack.errors import UserError

CONFIG_FILES = ("processor_config.json", "preprocessor_config.json", "tokenizer_config.json")


def image_only(base: type) -> type:
    """``base`` (a transformers processor class) with only its image processor and tokenizer; it
    keeps ``base``'s name, so a processor it saves loads as ``base`` where the video part can be built."""

    class ImageOnly(base):
        @classmethod
        def get_attributes(cls) -> list[str]:
            return ["image_processor", "tokenizer"]

    ImageOnly.__name__ = ImageOnly.__qualname__ = base.__name__
    return ImageOnly


def processor_class_name(path: str | os.PathLike[str]) -> str | None:
    """The processor class a saved processor directory names (``None`` when none does)."""
    for name in CONFIG_FILES:
        f = Path(path) / name
        if f.is_file():
            try:
                found = json.loads(f.read_text(encoding="utf-8")).get("processor_class")
            except (json.JSONDecodeError, AttributeError):
                continue
            if found:
                return str(found)
    return None


def load_processor(path: str | os.PathLike[str]) -> Any:
    """The processor saved in the directory ``path`` (``save_pretrained``): ``AutoProcessor``'s, or,
    when its video processor can't be built, the same class with the image processor and tokenizer
    only. A ``ValueError`` says what is missing when the directory holds no image processor. Its
    tokenizer's saved ``truncation`` and ``padding`` are turned off: a sample is never cut or padded
    by the tokenizer, and its fingerprint is the same before and after the first call."""
    processor = _load_processor(path)
    backend = getattr(getattr(processor, "tokenizer", None), "backend_tokenizer", None)
    if backend is not None:
        backend.no_truncation()
        backend.no_padding()
    return processor


def _load_processor(path: str | os.PathLike[str]) -> Any:
    import transformers

    if not Path(path, "tokenizer_config.json").is_file() and not Path(path, "tokenizer.json").is_file():
        raise UserError(
            f"{path}: no processor here (no tokenizer files); give the directory a vision-language "
            "model's processor was saved to (processor.save_pretrained(DIR))"
        )
    try:
        processor = transformers.AutoProcessor.from_pretrained(str(path))
    except (OSError, ImportError, ValueError):
        processor = None
    if getattr(processor, "image_processor", None) is not None:
        return processor
    name = processor_class_name(path)
    base = getattr(transformers, name, None) if name else None
    if base is None:
        raise UserError(
            f"{path}: holds no image-text processor (processor_class {name!r}); give the directory of a "
            "vision-language model's processor (Qwen2-VL, Qwen2.5-VL, LLaVA, ...)"
        )
    try:
        images = transformers.AutoImageProcessor.from_pretrained(str(path), backend="pil")
    except TypeError:  # a transformers without backends
        images = transformers.AutoImageProcessor.from_pretrained(str(path))
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(path))
    template = getattr(tokenizer, "chat_template", None)
    return image_only(base)(image_processor=images, tokenizer=tokenizer, chat_template=template)


class ProcessorTokenizer:
    """A vision-language model's processor where the pack job takes a tokenizer: its ids' count
    (``vocab_size``, the added tokens included) and a ``fingerprint`` of everything that makes a
    sample's tokens and grids (the tokenizer, the image processor's settings, the chat template), which
    keys a resumed job's work. ``path``: the directory it was loaded from (a copy sent to another
    process loads it from there).

        tok = ProcessorTokenizer(load_processor("processor/"), path="processor/")
    """

    def __init__(self, processor: Any, *, path: str | os.PathLike[str] | None = None) -> None:
        self.processor = processor
        self.path = None if path is None else str(path)
        self._fingerprint: str | None = None

    @property
    def vocab_size(self) -> int:
        return len(self.processor.tokenizer)

    def fingerprint(self) -> str:
        if self._fingerprint is None:
            import hashlib

            tok = self.processor.tokenizer
            backend = getattr(tok, "backend_tokenizer", None)
            state = {
                "class": type(self.processor).__name__,
                "tokenizer": backend.to_str() if backend is not None else sorted(tok.get_vocab().items()),
                "images": self.processor.image_processor.to_dict(),
                "template": getattr(self.processor, "chat_template", None),
            }
            text = json.dumps(state, sort_keys=True, default=str)
            self._fingerprint = "processor:" + hashlib.sha256(text.encode()).hexdigest()[:32]
        return self._fingerprint

    def save(self, directory: str | os.PathLike[str]) -> None:
        """The processor, saved to ``directory`` (``save_pretrained``; `load_processor` reads it)."""
        self.processor.save_pretrained(str(directory))

    def __getstate__(self) -> dict[str, Any]:  # a processor made for images only is not picklable
        return {**self.__dict__, "processor": None} if self.path else self.__dict__

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        if self.processor is None:
            self.processor = load_processor(self.path)  # type: ignore[arg-type]  # set when it was left out


__all__ = ["ProcessorTokenizer", "image_only", "load_processor", "processor_class_name"]
