"""Image-text samples in the packed format: token columns, and the images in the example table.

Each sample is a sequence (``input_ids`` and ``labels``, image tokens included) that the pack job
packs like any other; its images go in the dataset's example table (`seqpack.data.example_table`),
keyed by the sample's example id: ``images`` (encoded bytes, in order) and ``image_grids`` (their
patch grids, ``k x 3`` flattened). Images stay encoded, not pixels: the processor makes the pixels
when a row is read (a Qwen2-VL image of 1,000 tokens is ~16 MB of float32 pixels against tens of KB
as JPEG or PNG). The directory keeps a copy of the processor in ``processor/``, so that training
reads the rows with the processor that made them.

    build_packed_dataset("train.jsonl", ProcessorTokenizer(processor), "vlm-packs/",
                         PackConfig.for_task("vision", max_len=4096))
    rows = VisionRows("vlm-packs/")     # rows[i] -> {"input_ids", "labels", "seq_lengths", "images", ...}

In memory, `pack_vision` gives the same rows without writing them (`VisionPacks.row`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from seqpack.data.sequences import Sequences, id_dtype, label_dtype
from seqpack.errors import UserError
from seqpack.packing import DEFAULT_ALGORITHM, Packing, pack_lengths
from seqpack.tasks.vision.samples import VisionSamples

PROCESSOR = "processor"  # the processor the rows were made with (save_pretrained)
TASK = "vision"
#: the example table's columns of an image-text dataset (beside its key)
IMAGE_COLUMNS = ("images", "image_grids")
#: the task's facts (`seqpack.tasks.TaskBase.facts`) and derived columns, for `write_vision_packs`
FACTS = {"token_labels": True, "float_labels": False, "causal_lm": False}
#: the packed columns a row of images is read from
ROW_COLUMNS = ("input_ids", "labels", "segment_ids", "example_ids", "num_sequences")


def vision_sequences(samples: VisionSamples, *, vocab_size: int | None = None) -> Sequences:
    """``samples`` as the pack job's sequences: ``input_ids`` and ``labels`` per token, and their
    images in the example table; ``task_info`` gets the position scheme, the merge, the image token
    and the image count. ``vocab_size``: the processor's (sets the id dtype; default: the ids seen)."""
    import pyarrow as pa

    s = samples
    top = max(int(s.input_ids.max(initial=0)), (vocab_size or 1) - 1)
    table = pa.table(
        {
            "example_id": pa.array(s.example_ids, type=pa.int64()),
            "images": pa.array(
                [s.images[int(a) : int(b)] for a, b in zip(s.image_offsets[:-1], s.image_offsets[1:])],
                type=pa.list_(pa.binary()),
            ),
            "image_grids": pa.array(
                [
                    s.grids[int(a) : int(b)].reshape(-1).tolist()
                    for a, b in zip(s.image_offsets[:-1], s.image_offsets[1:])
                ],
                type=pa.list_(pa.int64()),
            ),
        }
    )
    info = {
        **s.info,
        "images": len(s.images),
        "positions": s.positions,
        "merge": s.merge,
        "image_token_id": s.image_token_id,
    }
    return Sequences(
        task=TASK,
        offsets=s.offsets,
        example_ids=s.example_ids,
        token_fields={"input_ids": s.input_ids.astype(id_dtype(top)), "labels": s.labels.astype(label_dtype(top))},
        num_examples=s.num_examples,
        dropped=dict(s.dropped),
        info=info,
        examples=table,
    )


@dataclass(frozen=True, eq=False)
class VisionPacks:
    """``samples`` assigned to rows by ``packing``, in memory (what `pack_vision` gives)."""

    samples: VisionSamples
    packing: Packing
    max_len: int

    @property
    def num_rows(self) -> int:
        return self.packing.num_packs

    def row(self, i: int) -> dict[str, Any]:
        """Row ``i``, as `VisionRows` reads it back (see `row_of`)."""
        s = self.samples
        parts = [s.sample(int(j)) for j in self.packing.pack(i)]
        return {
            "input_ids": np.concatenate([p["input_ids"] for p in parts]),
            "labels": np.concatenate([p["labels"] for p in parts]),
            "seq_lengths": np.array([p["input_ids"].size for p in parts], dtype=np.int64),
            "example_ids": np.array([p["example_id"] for p in parts], dtype=np.int64),
            "images": [b for p in parts for b in p["images"]],
            "image_grids": np.concatenate([p["grids"] for p in parts]).reshape(-1, 3),
        }

    def stats(self) -> dict[str, Any]:
        """Rows, samples, tokens, images and the padding a ``(rows, max_len)`` batch would hold."""
        tokens = int(self.samples.lengths.sum())
        slots = self.num_rows * self.max_len
        return {
            "rows": self.num_rows,
            "samples": self.samples.num_samples,
            "tokens": tokens,
            "images": len(self.samples.images),
            "padding_fraction": 1 - tokens / slots if slots else 0.0,
        }


def pack_vision(
    samples: VisionSamples, *, max_len: int, algorithm: str = DEFAULT_ALGORITHM, seed: int = 0
) -> VisionPacks:
    """One packing plan over every sample (``algorithm``: a `seqpack.packing.ALGORITHMS` name): the
    plan the pack job makes of the same samples."""
    if samples.num_samples == 0:
        raise UserError("no samples to pack: every record was dropped (see samples.dropped)")
    if int(samples.lengths.max()) > max_len:
        raise UserError(
            f"a sample has {int(samples.lengths.max())} tokens, more than max_len={max_len}; "
            "build the samples with the same max_len"
        )
    return VisionPacks(samples, pack_lengths(samples.lengths, max_len, algorithm=algorithm, seed=seed), max_len)


def write_vision_packs(
    packs: VisionPacks,
    path: str | os.PathLike[str],
    *,
    processor: Any = None,
    overwrite: bool = False,
    extra: dict[str, Any] | None = None,
) -> Path:
    """Deprecated: ``build_packed_dataset(records, ProcessorTokenizer(processor), path,
    PackConfig.for_task("vision", max_len=...))`` writes the same packed dataset from the records.
    This writes ``packs`` in that format (``processor``: saved in ``path/processor/``)."""
    import warnings

    from seqpack.data.columns import PackedColumns, materialize, pack_depth
    from seqpack.data.format import WriteOptions, write_packed
    from seqpack.tasks.vision.processor import ProcessorTokenizer

    warnings.warn(
        "write_vision_packs is deprecated: pack the records with seqpack.pipeline.build_packed_dataset(records, "
        "ProcessorTokenizer(processor), out, PackConfig.for_task('vision', max_len=...))",
        DeprecationWarning,
        stacklevel=2,
    )
    tok = None if processor is None else ProcessorTokenizer(processor)
    seqs = vision_sequences(packs.samples, vocab_size=None if tok is None else tok.vocab_size)
    depth = pack_depth(packs.packing, None)
    cols = materialize(seqs, packs.packing, max_len=packs.max_len, max_depth=depth)
    pc = PackedColumns(TASK, cols, packs.packing, packs.max_len, depth, examples=seqs.examples)
    info = {
        "num_examples": seqs.num_examples,
        "dropped": seqs.dropped,
        "task_info": seqs.info,
        "vocab_size": None if tok is None else tok.vocab_size,
        **FACTS,
        **(extra or {}),
    }
    write_packed(
        pc,
        path,
        options=WriteOptions(overwrite=overwrite),
        extra=info,
        derived={"segment_ids": "segments"},
        beside=None if tok is None else (lambda root: tok.save(root / PROCESSOR)),
    )
    return Path(path)


def row_of(cols: Mapping[str, np.ndarray], b: int, examples: list[dict[str, Any]]) -> dict[str, Any]:
    """Pack ``b`` of the packed columns ``cols`` (`ROW_COLUMNS`) as an image-text row: its tokens
    without the padding, its samples' lengths and example ids, and the images of ``examples`` (its
    samples' rows of the example table, in order) with their grids.

    >>> cols = {"input_ids": np.array([[5, 6, 7, 0]]), "labels": np.array([[-100, 6, 7, -100]]),
    ...         "segment_ids": np.array([[1, 1, 2, 0]]), "example_ids": np.array([[4, 9]]),
    ...         "num_sequences": np.array([2])}
    >>> r = row_of(cols, 0, [{"images": [], "image_grids": []}, {"images": [b"png"], "image_grids": [1, 2, 2]}])
    >>> r["input_ids"].tolist(), r["seq_lengths"].tolist(), r["images"], r["image_grids"].tolist()
    ([5, 6, 7], [2, 1], [b'png'], [[1, 2, 2]])
    """
    seg = np.asarray(cols["segment_ids"][b])
    n = int(cols["num_sequences"][b])
    fill = int((seg != 0).sum())
    return {
        "input_ids": np.asarray(cols["input_ids"][b, :fill], dtype=np.int64),
        "labels": np.asarray(cols["labels"][b, :fill], dtype=np.int64),
        "seq_lengths": np.bincount(seg[:fill].astype(np.int64), minlength=n + 1)[1 : n + 1],
        "example_ids": np.asarray(cols["example_ids"][b, :n], dtype=np.int64),
        "images": [x for e in examples for x in e["images"]],
        "image_grids": np.asarray([g for e in examples for g in e["image_grids"]], dtype=np.int64).reshape(-1, 3),
    }


class VisionRows:
    """Rows of a packed image-text dataset: its token columns (`seqpack.data.rows.PackedRows`)
    joined with their images by example id (`seqpack.data.example_table.ExampleTable`)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        from seqpack.data.example_table import ExampleTable
        from seqpack.data.rows import PackedRows

        self.path = Path(path)
        self._rows = PackedRows(self.path, columns=list(ROW_COLUMNS))
        self.manifest = self._rows.manifest
        if self.manifest["task"] != TASK or "example_table" not in self.manifest:
            raise UserError(
                f"{self.path}: a packed {self.manifest['task']} dataset, not image-text rows; "
                "read it with seqpack.data.PackedDataset"
            )
        self.examples = ExampleTable(self.path, self.manifest)

    def processor(self) -> Any:
        """The processor the rows were made with (saved beside them by the pack job)."""
        return saved_processor(self.path)

    def __len__(self) -> int:
        return len(self._rows)

    def take(self, packs: np.ndarray | list[int]) -> list[dict[str, Any]]:
        """Rows ``packs``, in that order (see `row_of`)."""
        cols = self._rows.take(packs)
        return rows_of(cols, self.examples)

    def __getitem__(self, i: int) -> dict[str, Any]:
        if not 0 <= i < len(self):
            raise IndexError(f"row {i} of {len(self)}")
        return self.take([i])[0]


def rows_of(cols: Mapping[str, np.ndarray], examples: Any) -> list[dict[str, Any]]:
    """Every pack of ``cols`` as an image-text row, its images read from ``examples`` (an `ExampleTable`)."""
    out = []
    for b in range(len(cols["input_ids"])):
        n = int(cols["num_sequences"][b])
        out.append(row_of(cols, b, examples.rows(np.asarray(cols["example_ids"][b, :n]))))
    return out


def saved_processor(path: str | os.PathLike[str]) -> Any:
    """The processor saved in the packed dataset ``path`` (``processor/``); refused in one line without one."""
    from seqpack.tasks.vision.processor import load_processor

    if not (Path(path) / PROCESSOR).is_dir():
        raise UserError(
            f"{path}: holds no {PROCESSOR}/ (written without its processor); pack it again with "
            "seqpack pack --task vision, or build_packed_dataset with a ProcessorTokenizer"
        )
    return load_processor(Path(path) / PROCESSOR)


def vision_rows_dataset(path: str | os.PathLike[str], *, cache_dir: str | os.PathLike[str] | None = None) -> Any:
    """Deprecated: `seqpack.data.hf_dataset` gives every packed dataset as a ``datasets.Dataset``, an
    image-text one with its rows' ``images`` and ``image_grids``."""
    import warnings

    from seqpack.data.hf_rows import hf_dataset

    warnings.warn(
        "vision_rows_dataset is deprecated: seqpack.data.hf_dataset reads every packed dataset, images included",
        DeprecationWarning,
        stacklevel=2,
    )
    return hf_dataset(path, cache_dir=cache_dir)
