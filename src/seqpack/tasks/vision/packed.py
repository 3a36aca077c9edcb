"""Packed image-text rows: one plan over every sample's length (image tokens included), written as
one Parquet file of rows beside a versioned ``manifest.json``, read back row by row.

A row holds its samples side by side: ``input_ids`` and ``labels`` (L,), ``seq_lengths`` (S,), the
samples' ``example_ids`` (S,), and the row's images in order as encoded bytes with their patch
grids (``image_grids``: k x 3). Images are kept encoded, not as pixels: the processor makes the
pixels when a row is read (a Qwen2-VL image of 1,000 tokens is ~16 MB of float32 pixels against
tens of KB as JPEG or PNG). Given the processor, the directory keeps a copy of it in ``processor/``,
so that training reads the rows with the processor that made them.

    packs = pack_vision(samples, max_len=4096)
    write_vision_packs(packs, "vlm-packs/", processor=processor)
    rows = VisionRows("vlm-packs/")         # rows[i] -> {"input_ids", "labels", "seq_lengths", ...}
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from seqpack._atomic import atomic_directory, read_versioned_json
from seqpack._stages import file_checksum
from seqpack.packing import DEFAULT_ALGORITHM, Packing, pack_lengths
from seqpack.tasks.vision.samples import VisionSamples

KIND = "seqpack-vision-packs"
FORMAT_VERSION = 2  # 2: the summary keys of the packed format (task, num_packs, ...) and processor/
ROWS = "rows.parquet"
MANIFEST = "manifest.json"
PROCESSOR = "processor"  # the processor the rows were made with (save_pretrained)
TASK = "vision"
ROW_GROUP = 256  # rows per Parquet row group: what one read decodes


@dataclass(frozen=True, eq=False)
class VisionPacks:
    """``samples`` assigned to rows by ``packing``."""

    samples: VisionSamples
    packing: Packing
    max_len: int

    @property
    def num_rows(self) -> int:
        return self.packing.num_packs

    def row(self, i: int) -> dict[str, Any]:
        """Row ``i`` (see the module for its fields)."""
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
        """Rows, tokens and the padding a ``(rows, max_len)`` batch would hold.

        The same counts go under the packed format's names too (``num_packs``, ``efficiency``, ...),
        which ``seqpack pack`` prints and ``seqpack train`` reads."""
        tokens = int(self.samples.lengths.sum())
        slots = self.num_rows * self.max_len
        depth = np.diff(self.packing.pack_offsets)
        return {
            "rows": self.num_rows,
            "samples": self.samples.num_samples,
            "tokens": tokens,
            "images": len(self.samples.images),
            "padding_fraction": 1 - tokens / slots if slots else 0.0,
            "num_packs": self.num_rows,
            "num_sequences": self.samples.num_samples,
            "num_tokens": tokens,
            "efficiency": tokens / slots if slots else 0.0,
            "max_depth": int(depth.max(initial=0)),
            "packing_factor": self.samples.num_samples / self.num_rows if self.num_rows else 0.0,
        }


def pack_vision(
    samples: VisionSamples, *, max_len: int, algorithm: str = DEFAULT_ALGORITHM, seed: int = 0
) -> VisionPacks:
    """One packing plan over every sample (``algorithm``: a `seqpack.packing.ALGORITHMS` name)."""
    if samples.num_samples == 0:
        raise ValueError("no samples to pack: every record was dropped (see samples.dropped)")
    if int(samples.lengths.max()) > max_len:
        raise ValueError(
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
    """Write ``packs`` to the directory ``path`` atomically (the manifest last); ``processor``: the one
    the samples were made with, saved in ``path/processor/`` (what ``seqpack train`` reads images
    with); ``extra``: more manifest keys (what made the rows)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    s = packs.samples
    manifest = {
        "kind": KIND,
        "format_version": FORMAT_VERSION,
        "task": TASK,
        "max_len": packs.max_len,
        **packs.stats(),
        "layout": s.layout,
        "merge": s.merge,
        "image_token_id": s.image_token_id,
        "num_examples": s.num_examples,
        "dropped": s.dropped,
        "info": s.info,
        "plan": packs.packing.plan.algorithm,
        "vocab_size": vocab_of(processor),
        **(extra or {}),
    }
    with atomic_directory(path, overwrite=overwrite) as tmp:
        writer = None
        for a in range(0, packs.num_rows, ROW_GROUP):
            rows = [packs.row(i) for i in range(a, min(a + ROW_GROUP, packs.num_rows))]
            table = pa.table(
                {
                    "input_ids": [r["input_ids"].tolist() for r in rows],
                    "labels": [r["labels"].tolist() for r in rows],
                    "seq_lengths": [r["seq_lengths"].tolist() for r in rows],
                    "example_ids": [r["example_ids"].tolist() for r in rows],
                    "images": pa.array([r["images"] for r in rows], type=pa.list_(pa.binary())),
                    "image_grids": [r["image_grids"].reshape(-1).tolist() for r in rows],
                }
            )
            writer = writer or pq.ParquetWriter(tmp / ROWS, table.schema)
            writer.write_table(table, row_group_size=ROW_GROUP)
        assert writer is not None
        writer.close()
        if processor is not None:
            processor.save_pretrained(str(tmp / PROCESSOR))
        manifest["shards"] = [
            {"file": ROWS, "rows": packs.num_rows, "checksum": file_checksum(tmp / ROWS)}
        ]  # what a resume checks
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return Path(path)


def vocab_of(processor: Any) -> int | None:
    """Ids ``processor``'s tokenizer makes (its added tokens included), or ``None`` without one."""
    tok = getattr(processor, "tokenizer", None)
    return None if tok is None else len(tok)


class VisionRows:
    """Rows of a packed image-text directory, read one row group at a time (the last one kept)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        import pyarrow.parquet as pq

        self.path = Path(path)
        self.manifest = read_versioned_json(
            self.path,
            MANIFEST,
            kind=KIND,
            version=FORMAT_VERSION,
            what="packed image-text dataset",
            hint="make one with write_vision_packs",
        )
        from seqpack.data.format import verify_file

        shard = (self.manifest.get("shards") or [{}])[0]
        verify_file(self.path / ROWS, shard.get("checksum"))  # the check every packed reader makes
        self._file = pq.ParquetFile(self.path / ROWS)
        sizes = [self._file.metadata.row_group(g).num_rows for g in range(self._file.num_row_groups)]
        self._starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        if int(self._starts[-1]) != int(self.manifest["rows"]):
            raise ValueError(
                f"{self.path / ROWS}: {int(self._starts[-1])} rows, the manifest says {self.manifest['rows']}; "
                "write the dataset again"
            )
        self._group: tuple[int, Any] = (-1, None)

    def processor(self) -> Any:
        """The processor the rows were made with (saved by `write_vision_packs`)."""
        from seqpack.tasks.vision.processor import load_processor

        if not (self.path / PROCESSOR).is_dir():
            raise ValueError(
                f"{self.path}: holds no {PROCESSOR}/ (written without its processor); pack it again with "
                "seqpack pack --task vision, or write_vision_packs(..., processor=processor)"
            )
        return load_processor(self.path / PROCESSOR)

    def seq_lengths(self) -> list[np.ndarray]:
        """The sample lengths of every row, read alone (no tokens, no images).  # [(S_i,)]"""
        import pyarrow.parquet as pq

        col = pq.read_table(self.path / ROWS, columns=["seq_lengths"]).column(0).to_pylist()
        return [np.asarray(x, dtype=np.int64) for x in col]

    def __len__(self) -> int:
        return int(self._starts[-1])

    def __getitem__(self, i: int) -> dict[str, Any]:
        if not 0 <= i < len(self):
            raise IndexError(f"row {i} of {len(self)}")
        g = int(np.searchsorted(self._starts, i, side="right") - 1)
        if self._group[0] != g:
            self._group = (g, self._file.read_row_group(g).to_pydict())
        cols, k = self._group[1], i - int(self._starts[g])
        return {
            "input_ids": np.asarray(cols["input_ids"][k], dtype=np.int64),
            "labels": np.asarray(cols["labels"][k], dtype=np.int64),
            "seq_lengths": np.asarray(cols["seq_lengths"][k], dtype=np.int64),
            "example_ids": np.asarray(cols["example_ids"][k], dtype=np.int64),
            "images": list(cols["images"][k]),
            "image_grids": np.asarray(cols["image_grids"][k], dtype=np.int64).reshape(-1, 3),
        }


def vision_rows_dataset(path: str | os.PathLike[str], *, cache_dir: str | os.PathLike[str] | None = None) -> Any:
    """The rows of a packed image-text directory as a ``datasets.Dataset`` (what TRL's ``SFTTrainer``
    takes), its manifest checked first; ``cache_dir``: where ``datasets`` keeps its Arrow copy."""
    import datasets

    rows = VisionRows(path)
    return datasets.Dataset.from_parquet(str(rows.path / ROWS), cache_dir=None if cache_dir is None else str(cache_dir))
