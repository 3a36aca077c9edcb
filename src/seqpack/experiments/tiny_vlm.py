"""Tiny vision-language models and processors built locally (no download): for tests, the
benchmark and the docs' recipes. Random weights; the processors are the transformers classes of
each family with a byte-level seqpack tokenizer and the family's chat format.

    processor, model = tiny_vlm("qwen2_vl")          # also "qwen2_5_vl", "llava"
    processor = tiny_processor("qwen2_vl", max_pixels=448 * 448)

Families (`FAMILIES`): ``qwen2_vl`` and ``qwen2_5_vl`` (mRoPE; an image's tokens depend on
its size: one per 2x2 block of 14-pixel patches here, as in the released models), ``llava``
(1-D RoPE; every image becomes 16 tokens).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from seqpack.errors import UserError

QWEN_SPECIALS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
)
LLAVA_SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<image>")

#: ChatML with the Qwen2-VL image parts (the released template, less its default system turn), its
#: assistant turns in ``{% generation %}`` blocks (so TRL's ``assistant_only_loss`` reads them too)
QWEN_TEMPLATE = (
    "{% macro body(content) %}{% if content is string %}{{ content }}{% else %}{% for c in content %}"
    "{% if c['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>{% elif c['type'] == 'text' %}"
    "{{ c['text'] }}{% endif %}{% endfor %}{% endif %}{% endmacro %}"
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{% if message['role'] == 'assistant' %}"
    "{% generation %}{{ body(message['content']) }}<|im_end|>{% endgeneration %}{% else %}"
    "{{ body(message['content']) }}<|im_end|>{% endif %}\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
LLAVA_TEMPLATE = QWEN_TEMPLATE.replace("<|vision_start|><|image_pad|><|vision_end|>", "<image>\n")
FAMILIES = ("qwen2_vl", "qwen2_5_vl", "llava")
PATCH = 14


def _tokenizer(specials: tuple[str, ...], template: str) -> Any:
    from transformers import AutoTokenizer

    from seqpack.tokenizer.hf_export import hf_directory_files, hf_tokenizer_json
    from seqpack.tokenizer.tokenizer import Tokenizer

    tok = Tokenizer({i: bytes([i]) for i in range(256)}, [], special_tokens=list(specials))
    with tempfile.TemporaryDirectory() as d:
        Path(d, "tokenizer.json").write_text(hf_tokenizer_json(tok), encoding="utf-8")
        for name, text in hf_directory_files(tok, chat_template=template).items():
            Path(d, name).write_text(text, encoding="utf-8")
        return AutoTokenizer.from_pretrained(d)


def tiny_processor(family: str, *, max_pixels: int = 448 * 448, min_pixels: int = 56 * 56) -> Any:
    """The processor of ``family`` (see the module); ``max_pixels``/``min_pixels`` bound an image's
    size for the Qwen families (so its tokens: pixels / 28²)."""
    if family not in FAMILIES:
        raise UserError(f"unknown family {family!r}; choose one of {', '.join(FAMILIES)}")
    if family == "llava":
        from transformers import LlavaProcessor
        from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil

        images: Any = CLIPImageProcessorPil(
            size={"shortest_edge": 4 * PATCH}, crop_size={"height": 4 * PATCH, "width": 4 * PATCH}
        )
        return LlavaProcessor(
            image_processor=images,
            tokenizer=_tokenizer(LLAVA_SPECIALS, LLAVA_TEMPLATE),
            patch_size=PATCH,
            vision_feature_select_strategy="default",
            num_additional_image_tokens=1,
            chat_template=LLAVA_TEMPLATE,
        )
    from transformers import Qwen2_5_VLProcessor, Qwen2VLProcessor
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    from seqpack.tasks.vision.processor import image_only

    base = image_only(Qwen2VLProcessor if family == "qwen2_vl" else Qwen2_5_VLProcessor)  # torchvision-free
    images = Qwen2VLImageProcessorPil(
        patch_size=PATCH, merge_size=2, temporal_patch_size=2, min_pixels=min_pixels, max_pixels=max_pixels
    )
    return base(image_processor=images, tokenizer=_tokenizer(QWEN_SPECIALS, QWEN_TEMPLATE), chat_template=QWEN_TEMPLATE)


def tiny_config(family: str, processor: Any, *, hidden: int = 32, layers: int = 2) -> Any:
    """A small random-init config of ``family`` whose special ids are ``processor``'s."""
    tok = processor.tokenizer
    vocab = len(tok)
    text = {
        "vocab_size": vocab,
        "hidden_size": hidden,
        "intermediate_size": 2 * hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 8192,
        "bos_token_id": tok.convert_tokens_to_ids("<|endoftext|>"),
        "eos_token_id": tok.convert_tokens_to_ids("<|im_end|>"),
    }
    if family == "llava":
        from transformers import CLIPVisionConfig, LlamaConfig, LlavaConfig

        clip = CLIPVisionConfig(
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            image_size=4 * PATCH,
            patch_size=PATCH,
        )
        return LlavaConfig(
            vision_config=clip,
            text_config=LlamaConfig(**text),
            image_token_index=tok.convert_tokens_to_ids("<image>"),
            vision_feature_select_strategy="default",
            vision_feature_layer=-1,
        )
    ids = {
        "image_token_id": tok.convert_tokens_to_ids("<|image_pad|>"),
        "video_token_id": tok.convert_tokens_to_ids("<|video_pad|>"),
        "vision_start_token_id": tok.convert_tokens_to_ids("<|vision_start|>"),
        "vision_end_token_id": tok.convert_tokens_to_ids("<|vision_end|>"),
    }
    head = hidden // 4
    text["rope_parameters"] = {
        "rope_type": "default",
        "rope_theta": 10000.0,
        "mrope_section": [head // 4, head // 8, head // 8],
    }
    if family == "qwen2_vl":
        from transformers import Qwen2VLConfig

        vision: dict[str, Any] = {
            "depth": 1,
            "embed_dim": 16,
            "hidden_size": hidden,
            "num_heads": 2,
            "patch_size": PATCH,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
            "in_channels": 3,
            "mlp_ratio": 2,
        }
        return Qwen2VLConfig(text_config=text, vision_config=vision, **ids)
    from transformers import Qwen2_5_VLConfig

    vision = {
        "depth": 2,
        "hidden_size": 16,
        "intermediate_size": 32,
        "num_heads": 2,
        "out_hidden_size": hidden,
        "patch_size": PATCH,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
        "window_size": 4 * PATCH,
        "fullatt_block_indexes": [1],
    }
    return Qwen2_5_VLConfig(text_config=text, vision_config=vision, **ids)


def tiny_vlm(family: str, *, seed: int = 0, max_pixels: int = 448 * 448, **config: Any) -> tuple[Any, Any]:
    """``(processor, model)`` of ``family``: random weights from ``seed``, fp32, eval mode, sdpa attention."""
    import torch
    from transformers import AutoModelForImageTextToText

    processor = tiny_processor(family, max_pixels=max_pixels)
    cfg = tiny_config(family, processor, **config)
    torch.manual_seed(seed)
    model = AutoModelForImageTextToText.from_config(cfg, attn_implementation="sdpa")
    return processor, model.float().eval()


WORDS = [
    "the",
    "a",
    "cat",
    "dog",
    "sat",
    "on",
    "mat",
    "why",
    "how",
    "what",
    "is",
    "are",
    "you",
    "we",
    "can",
    "see",
    "red",
    "blue",
    "small",
    "large",
    "left",
    "right",
    "image",
]


def synthetic_records(
    n: int,
    *,
    seed: int = 0,
    images: tuple[int, int] = (0, 3),
    side: tuple[int, int] = (20, 120),
    image_tokens: tuple[int, int] | None = None,
    words: tuple[int, int] = (3, 30),
    turns: tuple[int, int] = (1, 2),
    fmt: str = "PNG",
) -> list[dict[str, Any]]:
    """``n`` records in TRL's vision format: ``images`` (encoded ``fmt`` bytes, each side drawn from
    ``side`` pixels) and ``messages`` whose first user turn holds the image parts; the counts of
    images, words per turn and user/assistant exchanges are drawn uniformly from their ranges.
    ``image_tokens``: draw each image's Qwen2-VL token count log-uniformly from this range instead
    (sides are multiples of 28 pixels, aspect ratio 1:2 to 2:1), for a processor that does not resize them.

        >>> r = synthetic_records(2, seed=0, images=(1, 1))
        >>> [len(x["images"]) for x in r], [m["role"] for m in r[0]["messages"]][:2]
        ([1, 1], ['user', 'assistant'])
    """
    import io

    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)

    def text() -> str:
        return " ".join(rng.choice(WORDS, size=int(rng.integers(words[0], words[1] + 1))).tolist())

    def size() -> tuple[int, int]:
        if image_tokens is None:
            return int(rng.integers(side[0], side[1] + 1)), int(rng.integers(side[0], side[1] + 1))
        tokens = float(np.exp(rng.uniform(np.log(image_tokens[0]), np.log(image_tokens[1]))))
        rows = max(1, round(float(np.sqrt(tokens * np.exp(rng.uniform(np.log(0.5), np.log(2)))))))
        return 2 * PATCH * rows, 2 * PATCH * max(1, round(tokens / rows))

    def image() -> bytes:
        h, w = size()
        base = rng.integers(0, 255, size=3)
        pixels = np.clip(base + rng.normal(0, 20, size=(h, w, 3)), 0, 255).astype(np.uint8)
        buf = io.BytesIO()
        Image.fromarray(pixels).save(buf, format=fmt)
        return buf.getvalue()

    out = []
    for _ in range(n):
        k = int(rng.integers(images[0], images[1] + 1))
        messages: list[dict[str, Any]] = []
        for t in range(int(rng.integers(turns[0], turns[1] + 1))):
            parts = [{"type": "image"}] * (k if t == 0 else 0) + [{"type": "text", "text": text()}]
            messages += [
                {"role": "user", "content": parts},
                {"role": "assistant", "content": [{"type": "text", "text": text()}]},
            ]
        out.append({"messages": messages, "images": [image() for _ in range(k)]})
    return out
