"""Packed image-text rows -> the batch a vision-language model takes, padding-free.

The rows of a batch go side by side into one ``(1, T)`` row (no padding token at all); each
sample keeps the positions it has alone (`seqpack.tasks.vision.rope`), which is how
transformers keeps packed samples from attending to each other (and, for the Qwen2-VL family, why
``position_ids`` is ``(4, 1, T)``: a ``(3, 1, T)`` one would be read as one long sample). The
images are decoded and made into pixels here by the model's image processor; its patch grids must
be those the rows were packed with. The vision encoder attends within each image on its own.
The batch says ``use_cache=False``: transformers reads sample starts from the positions only
without a cache (a model in eval mode would otherwise make one and attend across samples).

    collate = VisionCollator(processor)
    batch = collate([rows[0], rows[1]])
    # input_ids (1, T), labels (1, T), position_ids (4, 1, T) or (1, T),
    # pixel_values, image_grid_thw (k, 3) for the Qwen2-VL family
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from seqpack.errors import UserError
from seqpack.tasks.vision.images import open_image
from seqpack.tasks.vision.rope import PositionScheme, image_token_of, merge_of, position_scheme_of


class VisionCollator:
    """A ``collate_fn`` for packed image-text rows: ``VisionRows`` items, ``VisionPacks.row``, or
    rows of ``seqpack.data.hf_dataset`` (the packed columns with their ``images`` and ``image_grids``)."""

    def __init__(self, processor: Any, *, positions: PositionScheme | None = None) -> None:
        self.processor = processor
        self.positions = positions or position_scheme_of(processor)
        self.merge = merge_of(processor)
        self.image_token_id = image_token_of(processor)

    def __call__(self, rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        import torch

        rows = [r if "seq_lengths" in r else _packed_row(r) for r in rows]
        ids = np.concatenate([np.asarray(r["input_ids"], dtype=np.int64) for r in rows])
        labels = np.concatenate([np.asarray(r["labels"], dtype=np.int64) for r in rows])
        lengths = np.concatenate([np.asarray(r["seq_lengths"], dtype=np.int64) for r in rows])
        grids = np.concatenate([np.asarray(r["image_grids"], dtype=np.int64).reshape(-1, 3) for r in rows])
        data = [b for r in rows for b in r["images"]]
        out: dict[str, Any] = {"input_ids": torch.from_numpy(ids)[None], "labels": torch.from_numpy(labels)[None]}
        if data:
            out.update(self._pixels(data, grids))
        pos = torch.from_numpy(self.positions.positions(lengths, ids == self.image_token_id, grids, merge=self.merge))
        out["position_ids"] = pos[:, None] if self.positions.axes > 1 else pos  # (4, 1, T) | (1, T)
        out["use_cache"] = False  # with a cache transformers ignores the positions' sample starts: one long sample
        return out

    def _pixels(self, data: list[bytes], grids: np.ndarray) -> dict[str, Any]:
        images = [open_image(b, example=-1, k=k) for k, b in enumerate(data)]
        got = self.processor.image_processor(images=images, return_tensors="pt")
        out = {"pixel_values": got["pixel_values"]}
        if "image_grid_thw" in got:
            made = got["image_grid_thw"].numpy().reshape(-1, 3)
            if not np.array_equal(made, grids):
                raise UserError(
                    "the processor makes other image grids than the rows were packed with "
                    f"({made[:3].tolist()} vs {grids[:3].tolist()}); pack again with this processor"
                )
            out["image_grid_thw"] = got["image_grid_thw"]
        return out


def _packed_row(r: Mapping[str, Any]) -> dict[str, Any]:
    """A row of the packed columns (``hf_dataset``'s) as an image-text row (`row_of`)."""
    from seqpack.tasks.vision.packed import ROW_COLUMNS, row_of

    cols = {k: np.asarray(r[k])[None] for k in ROW_COLUMNS}
    return row_of(cols, 0, [{"images": list(r["images"]), "image_grids": list(r["image_grids"])}])


class VisionBatches:
    """The image-text task's training batches (`seqpack.tasks.Trains.batch_maker`): packs' columns
    -> their rows side by side in one ``(1, T)`` row (`VisionCollator`, with the processor saved in
    the dataset), their images joined from the example table, and ``segment_ids`` ``(1, T)``
    numbering the samples (what the per-sample loss and the loss units read)."""

    def __init__(self, path: Any, manifest: Mapping[str, Any]) -> None:
        from seqpack.data.example_table import ExampleTable
        from seqpack.tasks.vision.packed import saved_processor

        self.collate = VisionCollator(saved_processor(path))
        self.examples = ExampleTable(path, manifest)

    def __call__(self, cols: Mapping[str, np.ndarray]) -> dict[str, Any]:
        import torch

        from seqpack.tasks.vision.packed import rows_of

        rows = rows_of(cols, self.examples)
        batch = {k: v for k, v in self.collate(rows).items() if isinstance(v, torch.Tensor)}  # use_cache: the forward's
        lengths = np.concatenate([r["seq_lengths"] for r in rows])
        batch["segment_ids"] = torch.from_numpy(np.repeat(np.arange(1, lengths.size + 1), lengths))[None]  # (1, T)
        return batch
