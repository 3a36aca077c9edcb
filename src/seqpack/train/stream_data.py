"""Batches read from a stream of examples for ``seqpack train --stream`` (packed as they are read).

The examples (a ``.jsonl``/``.parquet`` file or a folder of them) are read in order: the first
``eval_examples`` are held out and packed once for evaluation; the rest go through
`seqpack.pipeline.PackedStream` (the task's own builder, a buffer of ``buffer_size``
sequences planned at a time, this rank's share of the examples). Step ``s`` takes the next rows of
each rank's stream, so a run is a pure function of the input, the seed and the number of ranks; the
stream's state (positions and keys, never tokens) is saved with every checkpoint and restored on
``--resume``, which then trains on exactly the rows the uninterrupted run would have::

    data = StreamTrainData(cfg, rank=0, world_size=1)
    batch = data.batch(data.units_at(cfg.seed, 0, 8))     # the stream's next 8 rows, (8, L) tensors
    state = data.state_dict()                           # in the checkpoint
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from seqpack.data.format import DatasetFacts
from seqpack.errors import UserError
from seqpack.train.config import EVAL_EXAMPLES_CAP, TrainConfig
from seqpack.train.data import Units

DEFAULT_TASK = "clm"


class _Records:
    """Records ``start`` to ``stop`` of ``files``, read again from the start at every iteration."""

    def __init__(self, files: list[str], start: int = 0, stop: int | None = None) -> None:
        self.files, self.start, self.stop = files, start, stop

    def __iter__(self) -> Iterator[dict[str, Any]]:
        from seqpack.corpus.records import iter_records

        return itertools.islice(iter_records(self.files), self.start, self.stop)


def held_out_examples(files: list[str], cfg: TrainConfig, where: str) -> int:
    """How many of the stream's first examples are held out: ``cfg.eval_examples``, or by default
    ``eval_fraction`` of the first `EVAL_EXAMPLES_CAP` / ``eval_fraction`` examples (at least one,
    at most the cap), read to count them; always leaving examples to train on."""
    from seqpack.corpus.records import iter_records

    window = int(EVAL_EXAMPLES_CAP / cfg.eval_fraction) + 1
    seen = sum(1 for _ in itertools.islice(iter_records(files), window))  # bounded: never the whole stream
    n = (
        cfg.eval_examples
        if cfg.eval_examples is not None
        else min(EVAL_EXAMPLES_CAP, max(1, int(seen * cfg.eval_fraction)))
    )
    if n >= seen:
        raise UserError(
            f"{where}: --eval-examples {n:,} holds out every one of its {seen:,} examples, leaving none to "
            f"train on; pass --eval-examples {max(1, seen // 20):,} (or fewer)"
        )
    return n


class StreamTrainData(Units):
    """The run's rows from a stream (see the module); the API the training loop reads."""

    padded = False
    by_pack = False
    pack_columns = None

    def __init__(self, cfg: TrainConfig, *, rank: int = 0, world_size: int = 1) -> None:
        from seqpack._stages import file_checksum
        from seqpack.corpus.records import record_files
        from seqpack.pipeline.streaming import PackedStream, StreamConfig
        from seqpack.tasks import get_task
        from seqpack.tokenizer import open_tokenizer

        assert cfg.stream and cfg.max_len is not None
        if cfg.tokenizer is None:
            raise UserError("--stream reads records and tokenizes them: pass --tokenizer DIR")
        self.task: str = cfg.task or DEFAULT_TASK
        task = get_task(self.task)
        files = record_files(cfg.data)
        tok = open_tokenizer(cfg.tokenizer)
        self.max_len = int(cfg.max_len)

        def config(rank: int, world: int) -> StreamConfig:
            return StreamConfig(
                max_len=self.max_len,
                buffer_size=cfg.buffer_size,
                task=self.task,
                seed=cfg.seed,
                rank=rank,
                world_size=world,
            )

        self.eval_examples = held_out_examples(files, cfg, str(cfg.data))
        held = list(PackedStream(_Records(files, 0, self.eval_examples), config=config(0, 1), tokenizer=tok))
        if not held:
            raise UserError(
                f"{cfg.data}: its first {self.eval_examples:,} examples (held out for evaluation) make no row"
            )
        self.eval_rows = [{k: v for k, v in r.items() if k != "example_ids"} for r in held]
        self.pack_fill = np.array([int((r["segment_ids"] != 0).sum()) for r in self.eval_rows], dtype=np.int64)
        self._pack_nseq = np.array([int(r["num_sequences"]) for r in self.eval_rows], dtype=np.int64)
        self.held_out_packs = np.arange(len(self.eval_rows))
        self.size_eval(cfg.eval_tokens or 0)
        self.source = PackedStream(_Records(files, self.eval_examples), config=config(rank, world_size), tokenizer=tok)
        self._rows: Iterator[dict[str, np.ndarray]] | None = None
        self._counts: dict[int, tuple[int, int]] = {}
        self._read = np.zeros(2, np.int64)  # rows and sequences this rank has trained on
        self.float_labels = task.rows.float_labels
        self.facts = DatasetFacts(**task.facts())
        #: what a resume must find again: the task, the row length, the stream's settings, each input's checksum
        self.manifest: dict[str, Any] = {
            "task": self.task,
            "max_len": self.max_len,
            "vocab_size": tok.vocab_size,
            "position_offset": 0,
            "tokenizer_hash": tok.fingerprint(),
            "seed": cfg.seed,
            "algorithm": self.source.config.algorithm,
            "stream": {"buffer_size": cfg.buffer_size, "eval_examples": self.eval_examples, "world_size": world_size},
            "shards": [{"file": os.path.abspath(f), "checksum": file_checksum(f)} for f in files],
        }
        self.unit_sequences = np.zeros(0, np.int64)  # a stream has no fixed units
        self.unit_tokens = np.zeros(0, np.int64)
        self._perms = {}

    @property
    def num_units(self) -> int:
        return 2**62  # unbounded: the run's --steps end it

    @property
    def packing_factor(self) -> float:  # type: ignore[override]  # a property here, a plain attribute in the base
        """Sequences per row read so far (the held-out rows' before the first step)."""
        if self._read[0]:
            return float(self._read[1] / self._read[0])
        return float(np.mean([int(r["num_sequences"]) for r in self.eval_rows]))

    @property
    def train_sequences(self) -> int:
        return int(self._read[1])

    def units_at(self, seed: int, start: int, count: int) -> np.ndarray:
        """Positions ``start .. start + count - 1`` of the stream (each rank reads its own stream's next rows)."""
        return np.arange(start, start + count)

    def _next_row(self) -> dict[str, np.ndarray]:
        for _ in range(2):  # the current epoch, then one more
            if self._rows is None:
                self._rows = iter(self.source)
            row = next(self._rows, None)
            if row is not None:
                return row
            self._rows = None
        raise UserError(
            f"the stream holds no training example for shard {self.source.shard} of {self.source.shards} "
            "(past the held-out ones); pass fewer --eval-examples or give more examples"
        )

    def batch(self, units: np.ndarray) -> dict[str, torch.Tensor]:
        """This rank's next ``len(units)`` rows, ``(B, L)`` tensors."""
        rows = [self._next_row() for _ in units]
        for u, r in zip(units.tolist(), rows):
            self._counts[u] = (int(r["num_sequences"]), int((r["segment_ids"] != 0).sum()))
        self._read += [len(rows), sum(int(r["num_sequences"]) for r in rows)]
        return self._tensors(rows)

    def _tensors(self, rows: list[dict[str, np.ndarray]]) -> dict[str, torch.Tensor]:
        from seqpack.data.torch_dataset import to_tensors
        from seqpack.pipeline.stream_dataset import collate_stream

        return collate_stream(
            [
                to_tensors({k: v for k, v in r.items() if k != "example_ids"}, float_labels=self.float_labels)
                for r in rows
            ]
        )

    def counts(self, units: np.ndarray) -> tuple[int, int]:
        got = [self._counts.pop(int(u)) for u in units]
        return sum(g[0] for g in got), sum(g[1] for g in got)

    def eval_batches(self, batch_size: int) -> Iterator[dict[str, torch.Tensor]]:
        for lo in range(0, len(self.eval_packs), batch_size):
            yield self._tensors([self.eval_rows[int(i)] for i in self.eval_packs[lo : lo + batch_size]])

    def state_dict(self) -> dict[str, Any]:
        """The stream's state after the rows handed out (JSON values only)."""
        state = {"stream": self.source.state_dict(), "read": self._read.tolist()}
        return json.loads(json.dumps(state, default=int))

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        assert state is not None, "a stream's checkpoint always holds its position"  # state_dict never gives None
        self.source.load_state_dict(state["stream"])
        self._read = np.asarray(state["read"], dtype=np.int64)
        self._rows = None

    def describe(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "max_len": self.max_len,
            "padded": False,
            "stream": True,
            "buffer_size": self.source.config.buffer_size,
            "eval_examples": self.eval_examples,
            "held_out_packs": len(self.held_out_packs),
            "eval_packs": len(self.eval_packs),
            "eval_tokens": self.eval_tokens,
            "eval_sequences": self.eval_sequences,
            "shard": self.source.shard,
            "shards": self.source.shards,
        }
