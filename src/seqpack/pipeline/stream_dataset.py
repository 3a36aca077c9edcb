"""``StreamingPackedDataset``: a torch ``IterableDataset`` of packed rows from any stream of examples,
with ``state_dict`` / ``load_state_dict`` (torchdata's ``StatefulDataLoader`` saves and restores it,
worker by worker).

    ds = StreamingPackedDataset(token_lists, max_len=2048, buffer_size=10_000, rank=rank, world_size=world)
    loader = StatefulDataLoader(ds, batch_size=8, num_workers=2, collate_fn=collate_stream)
    ...
    state = loader.state_dict()              # in the checkpoint
    loader.load_state_dict(state)            # after a restart: the same batches from there on

Each row holds ``input_ids``, ``position_ids`` (restarting at each sequence), ``segment_ids`` and the
task's columns (``labels``...), all ``(max_len,)``, and its sequences' ``example_ids`` (their index
in the stream) and per-sequence fields, one value per sequence of the row: `collate_stream`
pads those to the batch.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch

from seqpack.data.sequences import IGNORE_INDEX
from seqpack.data.torch_dataset import to_tensors
from seqpack.packing.plan import STREAM_ALGORITHM
from seqpack.pipeline.streaming import PackedStream, StreamConfig, require_reiterable

if TYPE_CHECKING:
    from seqpack.tokenizer.types import AnyTokenizer


class StreamingPackedDataset(torch.utils.data.IterableDataset):
    """Packed rows of a stream (see the module and `seqpack.pipeline.streaming.PackedStream`).

    ``examples`` must give the same examples in the same order each time it is iterated (a list, a
    file reader, an HF ``IterableDataset`` without shuffling, a `seqpack.pipeline.Mixture`):
    every rank and dataloader worker reads it and keeps its own share (example ``i`` goes to
    reader ``i % (world_size * num_workers)``), and a resume reads it again up to where it stopped.

    Args:
        examples: the stream, the same on each iteration.
        max_len: the row length.
        buffer_size: the sequences buffered before a plan is made.
        task: the task's name.
        tokenizer: the tokenizer of a task that reads text (`None`: the examples are token ids).
        seed: the seed of each buffer's assignment.
        rank: this rank, in `0..world_size - 1`.
        world_size: the ranks.
        algorithm: the planner of each buffer.
        carry: the fraction of a buffer, at most, kept back for the next plan.
        chunk: examples turned into sequences at a time.
        position_offset: the first position id of each sequence.
        options: the task's options, by name.

    Raises:
        UserError: a bad option, or examples that can be read only once.
    """

    def __init__(
        self,
        examples: Iterable[Any],
        *,
        max_len: int,
        buffer_size: int = 10_000,
        task: str = "clm",
        tokenizer: AnyTokenizer | None = None,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
        algorithm: str = STREAM_ALGORITHM,
        carry: float = 0.5,
        chunk: int = 64,
        position_offset: int = 0,
        options: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        require_reiterable(examples, "StreamingPackedDataset")
        self.examples, self.tokenizer = examples, tokenizer
        self.config = StreamConfig(
            max_len=max_len,
            buffer_size=buffer_size,
            task=task,
            seed=seed,
            rank=rank,
            world_size=world_size,
            algorithm=algorithm,
            carry=carry,
            chunk=chunk,
            position_offset=position_offset,
            options=dict(options or {}),
        )
        self._stream: PackedStream | None = None

    def _reader(self) -> PackedStream:
        info = torch.utils.data.get_worker_info()
        workers, worker = (info.num_workers, info.id) if info is not None else (1, 0)
        shards, shard = self.config.world_size * workers, self.config.rank * workers + worker
        if self._stream is None or (self._stream.shard, self._stream.shards) != (shard, shards):  # a worker's copy
            self._stream = PackedStream(
                self.examples, config=self.config, tokenizer=self.tokenizer, shard=shard, shards=shards
            )
        return self._stream

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        stream = self._reader()
        for row in stream:
            yield to_tensors(row, float_labels=stream.task.rows.float_labels)

    def state_dict(self) -> dict[str, Any]:
        """Where this reader is: after the rows it has yielded (see `PackedStream.state_dict`).

        Returns:
            The state, JSON-ready.
        """
        return self._reader().state_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume from ``state``; a state of another configuration, input or shard is refused in one line.

        Args:
            state: a state `state_dict` returned.

        Raises:
            UserError: a state of another configuration, input or shard.
        """
        self._reader().load_state_dict(state)

    @property
    def mix(self) -> dict[str, int]:
        """Examples this reader has taken from each source of a Mixture in this epoch."""
        return self._reader().mix


def collate_stream(rows: Sequence[Mapping[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Stack rows of `StreamingPackedDataset`: per-token columns ``(B, L)``; per-sequence ones
    padded to the batch's most sequences, ``(B, D)`` (``example_ids`` with -1, the others with -100).

    Args:
        rows: the rows, each a dict of tensors.

    Returns:
        The batch, by column: `(B, L)` per-token, `(B, D)` per-sequence.
    """
    out: dict[str, torch.Tensor] = {}
    for k in rows[0]:
        vals = [r[k] for r in rows]
        if all(v.shape == vals[0].shape for v in vals):
            out[k] = torch.stack(vals)
            continue
        depth = max(v.shape[0] for v in vals)
        pad = -1 if k == "example_ids" else IGNORE_INDEX
        stacked = torch.full((len(vals), depth, *vals[0].shape[1:]), pad, dtype=vals[0].dtype)
        for i, v in enumerate(vals):
            stacked[i, : v.shape[0]] = v
        out[k] = stacked
    return out


__all__ = ["StreamingPackedDataset", "collate_stream"]
