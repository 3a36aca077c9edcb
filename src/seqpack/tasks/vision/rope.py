"""Position ids of packed image-text rows: each sample's own, laid side by side.

A packed row holds several samples; every sample must see the positions it would get alone. Two
position schemes, picked by the processor (`position_scheme_of`), registered in `POSITION_SCHEMES`:

- ``mrope`` (Qwen2-VL, Qwen2.5-VL): three rope axes (temporal, height, width). Text tokens advance
  all three by one; an image's tokens sit on its ``(t, h, w)`` grid of merged patches, starting at
  the position after the text before it, and the text after it resumes at that start plus
  ``max(h, w)``. The row's ``position_ids`` is ``(4, T)``: the text positions (restarting at each
  sample: what transformers reads to keep packed samples apart) above the three rope axes.
- ``1d`` (LLaVA-style models with plain RoPE): ``(1, T)``, restarting at each sample.

    >>> mrope_positions(np.array([0, 1, 1, 1, 1, 0], bool), np.array([[1, 4, 4]]), merge=2).tolist()
    [[0, 1, 1, 1, 1, 3], [0, 1, 1, 2, 2, 3], [0, 1, 2, 1, 2, 3]]
    >>> POSITION_SCHEMES["mrope"].positions(np.array([2, 1]), np.zeros(3, bool), np.zeros((0, 3), np.int64), merge=2).tolist()
    [[0, 1, 0], [0, 1, 0], [0, 1, 0], [0, 1, 0]]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


def text_positions(lengths: np.ndarray) -> np.ndarray:
    """``0 .. n-1`` for each sample of ``lengths``, side by side.  # (S,) -> (sum,)

    >>> text_positions(np.array([3, 2])).tolist()
    [0, 1, 2, 0, 1]
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    starts = np.repeat(np.cumsum(lengths) - lengths, lengths)
    return np.arange(int(lengths.sum()), dtype=np.int64) - starts


def image_runs(image_mask: np.ndarray, tokens: np.ndarray) -> list[tuple[int, int]]:
    """``(start, end)`` of each image's tokens: the image-token runs of ``image_mask``, a run cut into
    consecutive images of ``tokens`` tokens each.  # (n,), (k,) -> k pairs"""
    edges = np.flatnonzero(np.diff(np.concatenate([[0], image_mask.astype(np.int8), [0]])))
    runs, k = [], 0
    for a, b in zip(edges[::2].tolist(), edges[1::2].tolist()):
        while a < b:
            assert k < tokens.size, "more image tokens than the images' grids make"
            runs.append((a, a + int(tokens[k])))
            a, k = a + int(tokens[k]), k + 1
        assert a == b, "an image-token run that is not a whole number of images"
    assert k == tokens.size, "fewer image tokens than the images' grids make"
    return runs


def mrope_positions(image_mask: np.ndarray, grids: np.ndarray, *, merge: int) -> np.ndarray:
    """The three rope axes of one sample alone (what the model's ``get_rope_index`` gives it).
    ``image_mask``: its image tokens; ``grids``: ``(t, h, w)`` patches of each image, in order.
    # (n,), (k, 3) -> (3, n)"""
    n = image_mask.size
    grids = np.asarray(grids, dtype=np.int64).reshape(-1, 3)
    llm = grids // np.array([1, merge, merge])
    out = np.empty((3, n), dtype=np.int64)
    pos, at = 0, 0
    for (a, b), (t, h, w) in zip(image_runs(image_mask, llm.prod(axis=1)), llm.tolist()):
        out[:, at:a] = np.arange(a - at) + pos
        pos += a - at
        ti, hi, wi = np.meshgrid(np.arange(t), np.arange(h), np.arange(w), indexing="ij")
        out[:, a:b] = np.stack([ti.ravel(), hi.ravel(), wi.ravel()]) + pos
        pos, at = pos + max(h, w), b
    out[:, at:] = np.arange(n - at) + pos
    return out


@dataclass(frozen=True)
class PositionScheme:
    """How a family of models reads positions; see the module."""

    name: str
    axes: int  # rows of a packed row's position_ids

    def positions(self, lengths: np.ndarray, image_mask: np.ndarray, grids: np.ndarray, *, merge: int) -> np.ndarray:
        """Position ids of a packed row: samples of ``lengths``; ``image_mask`` over the row's tokens;
        ``grids``: the row's images in order.  # (S,), (T,), (k, 3) -> (axes, T)"""
        text = text_positions(lengths)
        if self.axes == 1:
            return text[None]
        out = np.empty((4, text.size), dtype=np.int64)
        out[0] = text
        ends = np.cumsum(lengths)
        per_image = np.asarray(grids, dtype=np.int64).reshape(-1, 3)
        tokens = per_image.prod(axis=1) // (merge * merge)
        used = 0
        for a, b in zip((ends - lengths).tolist(), ends.tolist()):
            mask = image_mask[a:b]
            k = _images_in(mask, tokens[used:])
            out[1:, a:b] = mrope_positions(mask, per_image[used : used + k], merge=merge)
            used += k
        assert used == len(per_image), "the row's images and its image tokens disagree"
        return out


def _images_in(mask: np.ndarray, tokens: np.ndarray) -> int:
    """How many of the next images (``tokens`` each) a sample with image tokens ``mask`` holds."""
    total, k = int(mask.sum()), 0
    while total > 0:
        total -= int(tokens[k])
        k += 1
    assert total == 0, "a sample's image tokens are not a whole number of its images"
    return k


POSITION_SCHEMES: dict[str, PositionScheme] = {"mrope": PositionScheme("mrope", 4), "1d": PositionScheme("1d", 1)}


def image_token_of(processor: Any) -> int:
    """The id of ``processor``'s image placeholder token."""
    if getattr(processor, "image_token_id", None) is not None:
        return int(processor.image_token_id)
    return int(processor.tokenizer.convert_tokens_to_ids(processor.image_token))


def merge_of(processor: Any) -> int:
    """Patches merged per side into one token by ``processor``'s image processor (1 without a grid)."""
    return int(getattr(getattr(processor, "image_processor", None), "merge_size", None) or 1)


def position_scheme_of(processor: Any) -> PositionScheme:
    """The position scheme of ``processor``'s model family: ``mrope`` when its image processor merges patches
    into a grid (the Qwen2-VL family), ``1d`` otherwise."""
    merge = getattr(getattr(processor, "image_processor", None), "merge_size", None)
    return POSITION_SCHEMES["mrope" if merge else "1d"]
