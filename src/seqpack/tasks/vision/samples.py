"""Image-text conversations -> samples: token ids, assistant-only labels, and the images they hold.

Records are TRL's vision format: ``messages`` whose ``content`` is a string or a list of parts
(``{"type": "text", "text": ...}``, ``{"type": "image"}``) and ``images``, one per image part in
order (see `seqpack.tasks.vision.images` for the forms an image takes). A sample may hold no
image. Each record becomes one sample exactly as the model's processor makes it: the chat template
renders the text, the processor expands each image placeholder into the tokens the image becomes
(their number depends on the image's size for the Qwen2-VL family), and the labels mark the
assistant turns (``train_on``) as the ``chat`` task does.

A sample longer than ``max_len`` is cut after its last assistant turn that fits (``overflow``
``truncate``: never inside an image's tokens; the images past the cut go with it), dropped, or
refused (``error``). An image that alone becomes more than ``max_len`` tokens is refused in every case.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from seqpack.corpus.records import iter_records, record_files
from seqpack.data.sequences import IGNORE_INDEX, check_overflow, offsets_of, overflow_error
from seqpack.errors import UserError
from seqpack.packing.histogram import check_max_len
from seqpack.tasks.chat.sequences import TRAIN_ON, target_mask, turn_ends
from seqpack.tasks.chat.template import ROLES, ChatTemplate
from seqpack.tasks.examples import get_field
from seqpack.tasks.vision.images import image_bytes, open_image
from seqpack.tasks.vision.rope import image_token_of, merge_of, position_scheme_of

VISION_OVERFLOW = ("truncate", "drop", "error")


@dataclass(frozen=True, eq=False, kw_only=True)
class VisionSamples:
    """N image-text samples ready to pack (CSR over tokens and over images).

    ``input_ids``/``labels``: (T,); sample ``i`` holds tokens ``offsets[i]:offsets[i+1]`` and images
    ``image_offsets[i]:image_offsets[i+1]`` (``images``: encoded bytes, ``grids``: (K, 3) patches
    ``(t, h, w)`` of each; ``(1, 1, tokens)`` for a model without a patch grid)."""

    offsets: np.ndarray  # (N + 1,) int64
    input_ids: np.ndarray  # (T,) int64
    labels: np.ndarray  # (T,) int64, -100 off the targets
    example_ids: np.ndarray  # (N,) int64
    image_offsets: np.ndarray  # (N + 1,) int64
    images: list[bytes]  # (K,)
    grids: np.ndarray  # (K, 3) int64
    image_token_id: int
    positions: str  # the position scheme: a key of seqpack.tasks.vision.rope.POSITION_SCHEMES
    merge: int  # patches merged per side into one token (1 without a grid)
    num_examples: int = 0
    dropped: dict[str, int] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def num_samples(self) -> int:
        return int(self.offsets.size - 1)

    @property
    def lengths(self) -> np.ndarray:
        """Tokens per sample, images included.  # (N,)"""
        return np.diff(self.offsets)

    def sample(self, i: int) -> dict[str, Any]:
        """Sample ``i`` alone (the slow, obvious view tests use)."""
        a, b = int(self.offsets[i]), int(self.offsets[i + 1])
        c, d = int(self.image_offsets[i]), int(self.image_offsets[i + 1])
        return {
            "input_ids": self.input_ids[a:b],
            "labels": self.labels[a:b],
            "images": self.images[c:d],
            "grids": self.grids[c:d],
            "example_id": int(self.example_ids[i]),
        }


def image_root_of(files: list[str]) -> str | None:
    """Where the relative image paths of records read from ``files`` point: the deepest folder that
    holds them all (a file's own folder; a folder's, when it holds its record files directly).
    ``seqpack pack`` and `vision_samples` use the same rule.

    >>> image_root_of(["/d/train.jsonl"]), image_root_of(["/d/a/x.jsonl", "/d/b/y.jsonl"]), image_root_of([])
    ('/d', '/d', None)
    """
    if not files:
        return None
    return os.path.commonpath([os.path.dirname(os.path.abspath(f)) for f in files])


def check_vision_messages(messages: Any, i: int) -> int:
    """Check example ``i``'s messages (TRL's vision format); the number of image parts they hold."""
    if not isinstance(messages, list) or not messages:
        raise UserError(f"example {i}: messages must be a non-empty list of {{'role', 'content'}} objects")
    n = 0
    for j, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in ROLES:
            raise UserError(f"example {i}: message {j} must be an object with a role ({'|'.join(ROLES)}) and content")
        content = m.get("content")
        if isinstance(content, str):
            continue
        if not isinstance(content, list):
            raise UserError(
                f"example {i}: message {j} has content of type {type(content).__name__}; "
                "give a string or a list of {'type': 'text'|'image'} parts"
            )
        for part in content:
            kind = part.get("type") if isinstance(part, dict) else None
            if kind not in ("text", "image"):
                raise UserError(
                    f"example {i}: message {j} has a part {part!r}; parts are "
                    "{'type': 'text', 'text': ...} or {'type': 'image'}"
                )
            n += kind == "image"
    return n


def vision_samples(
    examples: str | os.PathLike[str] | Iterable[Any],
    processor: Any,
    *,
    max_len: int,
    images_field: str = "images",
    messages_field: str = "messages",
    train_on: str = "assistant",
    overflow: str = "truncate",
    image_root: str | os.PathLike[str] | None = None,
) -> VisionSamples:
    """One sample per record, as ``processor`` (a transformers ``AutoProcessor``) makes it; see the module.
    ``image_root``: where relative image paths point (default: `image_root_of` the record files
    ``examples`` names, else the working directory)."""
    check_max_len(max_len)
    check_overflow(overflow, allowed=VISION_OVERFLOW)
    if train_on not in TRAIN_ON:
        raise UserError(f"train_on must be one of {'|'.join(TRAIN_ON)}, got {train_on!r}")
    template = _template(processor)
    if image_root is None and isinstance(examples, (str, os.PathLike)):
        image_root = image_root_of(record_files(examples))
    scheme = position_scheme_of(processor)
    enc = _Encoder(processor, scheme.axes > 1)
    out = _Collected()
    for i, row in enumerate(iter_records(examples)):
        out.num_examples += 1
        messages = get_field(row, messages_field, i, "--messages-field", list)
        n_parts = check_vision_messages(messages, i)
        values = row.get(images_field) or []
        if not isinstance(values, list):
            raise UserError(
                f"example {i}: field {images_field!r} is {type(values).__name__}, expected a list of images"
            )
        if len(values) != n_parts:
            raise UserError(
                f"example {i}: its messages hold {n_parts} image placeholder(s) but {images_field!r} "
                f"has {len(values)} image(s); give one image per {{'type': 'image'}} part"
            )
        data = [image_bytes(v, example=i, k=k, root=image_root) for k, v in enumerate(values)]
        pil = [open_image(b, example=i, k=k) for k, b in enumerate(data)]
        text, turns = template.render_with_spans(messages)
        if train_on != "all" and not turns:
            out.drop("no_assistant")
            continue
        ids, turn, ends, grids, tokens = enc.encode(text, turns, pil, i)
        big = np.flatnonzero(tokens > max_len)
        if big.size:
            raise UserError(
                f"example {i}: image {int(big[0])} alone becomes {int(tokens[big[0]]):,} tokens, more than "
                f"max_len={max_len}; raise --max-len or lower the processor's image size (max_pixels)"
            )
        n, k = ids.size, len(pil)
        if n > max_len:
            out.too_long += 1
            fit = ends[ends <= max_len]
            n = int(fit.max()) if overflow == "truncate" and fit.size else 0
            if n == 0:
                out.drop("too_long")
                continue
            k = int(np.searchsorted(np.cumsum(tokens), int((ids[:n] == enc.image_token_id).sum()), side="right"))
            out.truncated += 1
        kept = int((ends <= n).sum())  # whole turns kept
        target = (
            turn[:n] >= 0
            if train_on == "assistant"
            else turn[:n] == kept - 1
            if train_on == "last"
            else np.ones(n, bool)
        )
        lab = np.where(target & (ids[:n] != enc.image_token_id), ids[:n], IGNORE_INDEX)
        lab[:1] = IGNORE_INDEX
        if not (lab != IGNORE_INDEX).any():
            out.drop("no_target")
            continue
        out.add(ids[:n], lab, i, data[:k], grids[:k])
    if out.too_long and overflow == "error":
        raise overflow_error(out.too_long, max_len, VISION_OVERFLOW)
    return out.samples(enc, scheme.name, train_on=train_on, overflow=overflow, template=template.name)


def _template(processor: Any) -> ChatTemplate:
    source = getattr(processor, "chat_template", None) or getattr(
        getattr(processor, "tokenizer", None), "chat_template", None
    )
    if not source:
        raise UserError(
            "the processor has no chat_template; give one (processor.chat_template = ...) to render the messages"
        )
    return ChatTemplate(source, name="the processor's chat_template")


class _Encoder:
    """A record's text and images -> its token ids, exactly as the processor makes them."""

    def __init__(self, processor: Any, grid: bool) -> None:
        self.processor, self.grid = processor, grid
        self.tokenizer = processor.tokenizer
        self.image_token_id = image_token_of(processor)
        self.merge = merge_of(processor)

    def encode(
        self, text: str, turns: list[tuple[int, int]], images: list[Any], i: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(ids, turn, turn_ends, grids, tokens_per_image)`` of one sample (expanded); ``turn``: the
        assistant turn each token starts in, -1 outside them."""
        got = self.processor(text=[text], images=images or None, add_special_tokens=False, return_tensors="np")
        ids = np.asarray(got["input_ids"][0], dtype=np.int64)
        is_image = ids == self.image_token_id
        if self.grid:
            grids = (
                np.asarray(got["image_grid_thw"], dtype=np.int64).reshape(-1, 3)
                if images
                else np.zeros((0, 3), np.int64)
            )
            tokens = grids.prod(axis=1) // (self.merge * self.merge)
        else:
            per = int(is_image.sum()) // max(1, len(images))
            tokens = np.full(len(images), per, dtype=np.int64)
            grids = np.stack([np.ones_like(tokens), np.ones_like(tokens), tokens], axis=1).reshape(-1, 3)
        plain = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        pids = np.asarray(plain["input_ids"], dtype=np.int64)
        spans = np.asarray(plain["offset_mapping"], dtype=np.int64).reshape(-1, 2)
        reps = np.ones(pids.size, dtype=np.int64)
        slots = np.flatnonzero(pids == self.image_token_id)
        if slots.size != tokens.size:
            raise UserError(
                f"example {i}: the rendered text holds {slots.size} image token(s) for {tokens.size} image(s); "
                "the chat template must write one image token per {'type': 'image'} part"
            )
        reps[slots] = tokens
        if int(reps.sum()) != ids.size or not np.array_equal(np.repeat(pids, reps), ids):
            raise UserError(
                f"example {i}: the processor's tokens are not the text's with each image token repeated "
                "(seqpack packs processors that expand one placeholder per image)"
            )
        turn = np.full(pids.size, -1, dtype=np.int64)
        for t, span in enumerate(turns):
            turn[target_mask(spans, [span])] = t
        turn = np.repeat(turn, reps)
        ends = np.cumsum(reps)[np.maximum(turn_ends(spans, turns) - 1, 0)] if turns else np.zeros(0, np.int64)
        return ids, turn, ends, grids, tokens


@dataclass
class _Collected:
    ids: list[np.ndarray] = field(default_factory=list)
    labels: list[np.ndarray] = field(default_factory=list)
    examples: list[int] = field(default_factory=list)
    images: list[bytes] = field(default_factory=list)
    grids: list[np.ndarray] = field(default_factory=list)
    per_sample: list[int] = field(default_factory=list)
    dropped: dict[str, int] = field(default_factory=dict)
    num_examples: int = 0
    too_long: int = 0
    truncated: int = 0

    def drop(self, why: str) -> None:
        self.dropped[why] = self.dropped.get(why, 0) + 1

    def add(self, ids: np.ndarray, labels: np.ndarray, example: int, images: list[bytes], grids: np.ndarray) -> None:
        self.ids.append(ids)
        self.labels.append(labels)
        self.examples.append(example)
        self.images.extend(images)
        self.grids.append(grids)
        self.per_sample.append(len(images))

    def samples(self, enc: _Encoder, positions: str, **info: Any) -> VisionSamples:
        lengths = np.array([a.size for a in self.ids], dtype=np.int64)
        cat = lambda xs: np.concatenate(xs) if xs else np.zeros(0, np.int64)  # noqa: E731
        labels = cat(self.labels)
        return VisionSamples(
            offsets=offsets_of(lengths),
            input_ids=cat(self.ids),
            labels=labels,
            example_ids=np.asarray(self.examples, dtype=np.int64),
            image_offsets=offsets_of(np.asarray(self.per_sample, dtype=np.int64)),
            images=self.images,
            grids=np.concatenate(self.grids).reshape(-1, 3) if self.grids else np.zeros((0, 3), np.int64),
            image_token_id=enc.image_token_id,
            positions=positions,
            merge=enc.merge,
            num_examples=self.num_examples,
            dropped=self.dropped,
            info={**info, "truncated": self.truncated, "target_tokens": int((labels != IGNORE_INDEX).sum())},
        )
