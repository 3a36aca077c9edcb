"""Packing a stream: any iterable of examples in, packed rows out, and a small state that resumes
the stream exactly where it stopped.

Examples are read in order and dealt to ``world_size x num_workers`` shards (example ``i`` goes to
shard ``i % shards``, so no example is lost or read twice in an epoch). Each shard builds its
examples' sequences with the task's own builder (the same sequences as the offline pack job) a
chunk at a time, keeps up to ``buffer_size`` of them, plans the buffer (``algorithm``, milliseconds),
emits the fullest packs as rows and carries the sequences of the emptiest (at most ``carry`` of the
buffer) into the next buffer. The end of the stream packs whatever is left.

The state (`PackedStream.state_dict`) is positions and keys, never tokens: the next example
to read, where the current buffer's new examples start, the ``(example, piece)`` keys and lengths
of the sequences it carried in, and how many of its rows were already yielded. Resuming reads the
input again from its start, building only the examples the buffer holds (the others are skipped
unbuilt), plans the buffer again (planning is deterministic) and skips the rows already yielded:
the rows that follow are exactly those of the uninterrupted stream.

    stream = PackedStream(token_lists, max_len=2048, buffer_size=10_000)
    for row in stream: ...                     # {"input_ids": (L,), "position_ids": (L,), ...}
    state = stream.state_dict()                # JSON-able, small
    again = PackedStream(token_lists, max_len=2048, buffer_size=10_000)
    again.load_state_dict(state)               # the same rows from there on
"""

from __future__ import annotations

import dataclasses
from collections.abc import Generator, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from seqpack.data.columns import materialize, pack_depth
from seqpack.data.sequences import Sequences, concat_ranges, offsets_of
from seqpack.errors import UserError
from seqpack.packing import ALGORITHMS, STREAM_ALGORITHM, Packing
from seqpack.packing.assign import assign
from seqpack.packing.plan import plan
from seqpack.pipeline.config import PackConfig
from seqpack.pipeline.mixture import Mixture
from seqpack.tasks import get_task

STATE_KIND = "seqpack-stream-state"
STATE_VERSION = 1
#: per-token columns every row has besides the task's token fields (the others hold one value per slot)
_TOKEN_COLUMNS = ("segment_ids", "position_ids")


@dataclass(frozen=True, kw_only=True)
class StreamConfig:
    """How a stream is packed; what a saved state must agree with (`fingerprint`).

    Attributes:
        max_len: the row length.
        buffer_size: the sequences buffered before a plan is made.
        task: the task's name.
        seed: the seed of each buffer's assignment.
        rank: this rank, in `0..world_size - 1`.
        world_size: the ranks reading the stream.
        algorithm: the planner of each buffer.
        carry: the fraction of a buffer, at most, kept back for the next plan, in `[0, 1)`.
        chunk: examples turned into sequences at a time.
        position_offset: the first position id of each sequence.
        options: the task's options, by name.
    """

    max_len: int
    buffer_size: int = 10_000
    task: str = "clm"
    seed: int = 0
    rank: int = 0
    world_size: int = 1
    algorithm: str = STREAM_ALGORITHM
    carry: float = 0.5
    chunk: int = 64
    position_offset: int = 0
    options: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("buffer_size", "world_size", "chunk"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise UserError(f"{name} must be an int >= 1, got {v!r}")
        if isinstance(self.rank, bool) or not isinstance(self.rank, int) or not 0 <= self.rank < self.world_size:
            raise UserError(f"rank must be an int in 0..world_size-1 = 0..{self.world_size - 1}, got {self.rank!r}")
        if not 0.0 <= self.carry < 1.0:
            raise UserError(f"carry must be in [0, 1), got {self.carry}")
        if self.algorithm not in ALGORITHMS:
            raise UserError(f"algorithm must be one of {'|'.join(ALGORITHMS)}, got {self.algorithm!r}")
        self.pack_config()  # the task and its options, checked now

    def pack_config(self) -> PackConfig:
        """The `PackConfig` of the task and its options (checked).

        Returns:
            The `PackConfig`.
        """
        return PackConfig.for_task(
            self.task, max_len=self.max_len, seed=self.seed, position_offset=self.position_offset, **dict(self.options)
        )

    def fingerprint(self) -> dict[str, Any]:
        """What a saved state must agree with: the fields, the options sorted.

        Returns:
            The fields, JSON-ready.
        """
        d = dataclasses.asdict(self)
        d["options"] = dict(sorted(dict(self.options).items()))
        return d


def drain(lengths: np.ndarray, *, max_len: int, algorithm: str, keep: int, seed: int) -> tuple[Packing, np.ndarray]:
    """Plan a buffer of ``lengths``; the packs to emit (fullest first) and the indices carried: the
    sequences of the emptiest packs, while they are at most ``keep``.

    >>> packing, carried = drain(np.array([5, 3, 6, 2, 4, 3]), max_len=8, algorithm="lpfhp", keep=2, seed=0)
    >>> sorted(sorted(packing.pack(i).tolist()) for i in range(packing.num_packs)), carried.tolist()
    ([[0, 1], [2, 3]], [4, 5])
    """
    h = np.bincount(lengths - 1, minlength=max_len)
    p = assign(plan(h, max_len, algorithm=algorithm), lengths, seed=seed)
    fill = p.pack_fill
    order = np.argsort(-fill, kind="stable")  # fullest first
    sizes = np.diff(p.pack_offsets)[order]
    kept_from = len(order) - int(np.searchsorted(np.cumsum(sizes[::-1]), keep, side="right"))
    emit, kept = order[:kept_from], order[kept_from:]
    members = [p.pack(int(i)) for i in emit]
    carried = np.concatenate([p.pack(int(i)) for i in kept]) if kept.size else np.zeros(0, np.int64)
    offsets = offsets_of(np.array([m.size for m in members], dtype=np.int64))
    index = np.concatenate(members) if members else np.zeros(0, np.int64)
    return Packing(offsets, index.astype(np.int64), lengths, p.plan), np.sort(carried)


def subset(seqs: Sequences, idx: np.ndarray) -> Sequences:
    """Sequences ``idx`` of ``seqs``, in that order."""
    lens = seqs.lengths[idx]
    starts = seqs.offsets[:-1][idx]
    take = concat_ranges(starts, lens)
    return dataclasses.replace(
        seqs,
        offsets=offsets_of(lens),
        example_ids=seqs.example_ids[idx],
        token_fields={k: v[take] for k, v in seqs.token_fields.items()},
        seq_fields={k: v[idx] for k, v in seqs.seq_fields.items()},
    )


def concat(parts: list[Sequences], like: Sequences) -> Sequences:
    """``parts`` one after the other (``like``: the fields and dtypes when there are none)."""
    parts = [p for p in parts if p.num_sequences] or [subset(like, np.zeros(0, np.int64))]
    first = parts[0]
    lens = np.concatenate([p.lengths for p in parts])
    return dataclasses.replace(
        first,
        offsets=offsets_of(lens),
        example_ids=np.concatenate([p.example_ids for p in parts]),
        token_fields={k: np.concatenate([p.token_fields[k] for p in parts]) for k in first.token_fields},
        seq_fields={k: np.concatenate([p.seq_fields[k] for p in parts]) for k in first.seq_fields},
    )


def piece_keys(example_ids: np.ndarray) -> np.ndarray:
    """``(example, piece)`` of each sequence: its example and its rank among that example's
    sequences (examples in order).  # (N,) -> (N, 2)

    >>> piece_keys(np.array([3, 3, 5, 6, 6, 6])).tolist()
    [[3, 0], [3, 1], [5, 0], [6, 0], [6, 1], [6, 2]]
    """
    n = example_ids.size
    start = np.ones(n, dtype=bool)
    start[1:] = example_ids[1:] != example_ids[:-1]
    first = np.maximum.accumulate(np.where(start, np.arange(n), 0))
    return np.stack([example_ids, np.arange(n) - first], axis=1).astype(np.int64)


class _Reader:
    """``(global index, example)`` of one shard's examples in order, with one look-ahead; counts the
    examples read from each source of a `Mixture`."""

    def __init__(self, examples: Iterable[Any], shard: int, shards: int, sources: int | None) -> None:
        self._it = enumerate(iter(examples))
        self.shard, self.shards, self.sources = shard, shards, sources
        self.mix = [0] * (sources or 0)
        self._ahead: tuple[int, Any] | None = None
        self.ended = False

    def _pull(self) -> tuple[int, Any] | None:
        for i, item in self._it:
            if i % self.shards == self.shard:
                return i, item
        self.ended = True
        return None

    def peek(self) -> tuple[int, Any] | None:
        if self._ahead is None and not self.ended:
            self._ahead = self._pull()
        return self._ahead

    def take(self, n: int) -> list[tuple[int, Any]]:
        out: list[tuple[int, Any]] = []
        while len(out) < n and self.peek() is not None:
            i, item = self._ahead  # type: ignore[misc]  # peek() just set _ahead
            self._ahead = None
            if self.sources is not None:
                source, item = item
                self.mix[source] += 1
            out.append((i, item))
        return out


def require_reiterable(examples: Any, what: str) -> None:
    """Refuse a one-shot iterator (a generator, ``iter(list)``, a file object) where the input is
    read again (each epoch, by every rank and dataloader worker): a second read of an iterator is
    silently empty. A `PackedStream` read once may take one; `StreamingPackedDataset` may not."""
    if isinstance(examples, Iterator):
        raise UserError(
            f"{what} got a one-shot iterator ({type(examples).__name__}), which is empty when read again "
            "(the next epoch, another worker, a resume); pass a list, or an object whose iter() starts "
            "over each time (a class with __iter__, an HF IterableDataset)"
        )


class PackedStream:
    """Packed rows of one shard of a stream of examples; see the module.

    ``examples``: token-id lists (``task="clm"`` without a tokenizer: each list a document, taken as
    it is), or the records the task reads (``text`` strings or records for ``clm`` with a
    tokenizer; ``messages`` for ``chat``; ...), or a `seqpack.pipeline.Mixture` of sources.
    ``shard``/``shards``: this reader's place among all of them (``rank * num_workers + worker`` of
    ``world_size * num_workers``).

    Args:
        examples: the stream (see above).
        config: how it is packed.
        tokenizer: the tokenizer of a task that reads text (`None`: the examples are token ids).
        shard: this reader's index (`None`: `config.rank`).
        shards: the readers (`None`: `config.world_size`).

    Raises:
        UserError: a shard outside `0..shards - 1`.
    """

    def __init__(
        self,
        examples: Iterable[Any],
        *,
        config: StreamConfig,
        tokenizer: Any = None,
        shard: int | None = None,
        shards: int | None = None,
    ) -> None:
        self.examples, self.config, self.tokenizer = examples, config, tokenizer
        self._read = False  # whether an iteration has started: a one-shot iterator is read once only
        self.shards = config.world_size if shards is None else shards
        self.shard = config.rank if shard is None else shard
        if not 0 <= self.shard < self.shards:
            raise UserError(f"shard {self.shard} is outside 0..{self.shards - 1}")
        self.task = get_task(config.task)
        self.packing = self.task.packs()
        self.pack_config = config.pack_config()
        self.context = self.packing.stream_context(self.pack_config)
        self.sources = examples.names if isinstance(examples, Mixture) else None
        self._state = self._fresh(epoch=0)
        self._mix = [0] * len(self.sources or ())
        self._ended_at_load = False

    # ---- state ------------------------------------------------------------------------------
    @staticmethod
    def _fresh(epoch: int) -> dict[str, Any]:
        # new_from: this shard's first example of the buffer being emitted (-1: the epoch is over);
        # carried: (example, piece) keys of the sequences that buffer started with, and their lengths;
        # drain: buffers emitted in this epoch; yielded: rows of the current buffer already yielded
        return {
            "epoch": epoch,
            "new_from": 0,
            "carried": [],
            "carried_lengths": [],
            "drain": 0,
            "yielded": 0,
            "rows": 0,
        }

    def state_dict(self) -> dict[str, Any]:
        """Where the stream is (JSON-able; see the module): after the rows yielded so far.

        Returns:
            The state, JSON-ready.
        """
        s = self._state
        return {
            "kind": STATE_KIND,
            "format_version": STATE_VERSION,
            "config": self.config.fingerprint(),
            "shard": self.shard,
            "shards": self.shards,
            **{
                k: ([list(x) for x in v] if k == "carried" else list(v) if isinstance(v, list) else v)
                for k, v in s.items()
            },
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from ``state`` (made by `state_dict` of a stream with the same configuration
        and shard); the next iteration yields the rows that followed it.

        Args:
            state: a state `state_dict` returned.

        Raises:
            UserError: a state of another configuration, input or shard.
        """
        if not isinstance(state, Mapping) or state.get("kind") != STATE_KIND:
            raise UserError("not a seqpack stream state (save one with state_dict())")
        if state.get("format_version") != STATE_VERSION:
            raise UserError(f"stream state format {state.get('format_version')}, this seqpack reads {STATE_VERSION}")
        mine, saved = self.config.fingerprint(), state.get("config", {})
        diff = sorted(k for k in mine if saved.get(k) != mine[k])
        if diff:
            k = diff[0]
            raise UserError(
                f"the state was saved with {k}={saved.get(k)!r}, this stream has {k}={mine[k]!r}; "
                "resume with the configuration it was saved with"
            )
        if (state["shard"], state["shards"]) != (self.shard, self.shards):
            raise UserError(
                f"the state is shard {state['shard']} of {state['shards']}, this stream is shard "
                f"{self.shard} of {self.shards}; resume with the same ranks and dataloader workers"
            )
        self._state = {k: state[k] for k in self._fresh(0)}
        self._ended_at_load = self._state["new_from"] < 0  # saved after its epoch's last row: nothing more in it

    @property
    def mix(self) -> dict[str, int]:
        """Examples this shard has read from each source of a `Mixture` in this epoch."""
        return dict(zip(self.sources or (), self._mix))

    # ---- iteration --------------------------------------------------------------------------
    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        if self._read:
            require_reiterable(self.examples, "PackedStream, read again,")
        self._read = True
        s = self._state
        if self._ended_at_load:  # restored after its epoch's last row: the rest is empty
            self._ended_at_load = False
            return
        if s["new_from"] < 0:  # the last epoch ended: this iteration is the next one
            self._state = s = self._fresh(epoch=s["epoch"] + 1)
        reader = _Reader(self.examples, self.shard, self.shards, len(self.sources) if self.sources else None)
        carried = self._restore(reader, s)
        skip = s["yielded"]
        while True:
            pool = self._fill(reader, carried)
            self._mix = reader.mix
            ended = reader.peek() is None
            if pool is None:
                s["new_from"] = -1
                return
            carried = yield from self._drain(pool, s, reader, final=ended, skip=skip)
            skip = 0
            if ended and carried is None:
                s["new_from"] = -1
                return

    def _build(self, batch: list[tuple[int, Any]]) -> tuple[Sequences, np.ndarray]:
        """The sequences of a chunk of examples, their ``example_ids`` global, and each one's piece
        (its rank among its example's sequences)."""
        ids = np.array([i for i, _ in batch], dtype=np.int64)
        seqs = self.packing.stream_sequences([x for _, x in batch], self.tokenizer, self.pack_config, self.context)
        seqs = dataclasses.replace(seqs, example_ids=ids[seqs.example_ids])
        return seqs, piece_keys(seqs.example_ids)[:, 1]

    def _restore(self, reader: _Reader, s: dict[str, Any]) -> tuple[Sequences, np.ndarray] | None:
        """Read up to the state's buffer (building only the examples of its carried sequences); those
        sequences, checked against the state's lengths."""
        keys = np.asarray(s["carried"], dtype=np.int64).reshape(-1, 2)
        want = set(keys[:, 0].tolist())
        held: list[tuple[int, Any]] = []
        while (nxt := reader.peek()) is not None and nxt[0] < s["new_from"]:
            ((i, x),) = reader.take(1)
            if i in want:
                held.append((i, x))
        if not keys.size:
            return None
        built, pieces = self._build(held) if held else (None, np.zeros(0, np.int64))
        at = {} if built is None else {(int(e), int(p)): j for j, (e, p) in enumerate(zip(built.example_ids, pieces))}
        idx = np.array([at.get((int(e), int(p)), -1) for e, p in keys.tolist()], dtype=np.int64)
        if built is None or (idx < 0).any() or not np.array_equal(built.lengths[idx], np.asarray(s["carried_lengths"])):
            raise UserError(
                "the stream's examples are not those the state was saved from (the sequences its buffer "
                "held differ); resume on the same input"
            )
        return subset(built, idx), keys[:, 1].copy()

    def _fill(
        self, reader: _Reader, carried: tuple[Sequences, np.ndarray] | None
    ) -> tuple[Sequences, np.ndarray] | None:
        """The next buffer, with each sequence's piece: ``carried``, then this shard's next examples
        until it holds ``buffer_size`` sequences or the stream ends (None: nothing left)."""
        parts = [carried] if carried is not None and carried[0].num_sequences else []
        have = sum(p[0].num_sequences for p in parts)
        while have < self.config.buffer_size:
            batch = reader.take(self.config.chunk)
            if not batch:
                break
            built = self._build(batch)
            parts.append(built)
            have += built[0].num_sequences
        if not have:
            return None
        return concat([p[0] for p in parts], parts[0][0]), np.concatenate([p[1] for p in parts])

    def _drain(
        self, buffer: tuple[Sequences, np.ndarray], s: dict[str, Any], reader: _Reader, *, final: bool, skip: int
    ) -> Generator[dict[str, np.ndarray], None, tuple[Sequences, np.ndarray] | None]:  # returns what it carries
        cfg = self.config
        pool, pieces = buffer
        seed = int(np.random.SeedSequence([cfg.seed, s["epoch"], self.shard, s["drain"]]).generate_state(1)[0])
        keep = 0 if final else int(cfg.carry * cfg.buffer_size)
        packing, carried_idx = drain(pool.lengths, max_len=cfg.max_len, algorithm=cfg.algorithm, keep=keep, seed=seed)
        carried = subset(pool, carried_idx)
        keys = np.stack([pool.example_ids[carried_idx], pieces[carried_idx]], axis=1)
        cols = (
            materialize(
                pool,
                packing,
                max_len=cfg.max_len,
                max_depth=pack_depth(packing, None),
                position_offset=cfg.position_offset,
            )
            if packing.num_packs
            else {}
        )
        counts = np.diff(packing.pack_offsets)
        per_token = set(pool.token_fields) | set(_TOKEN_COLUMNS)
        for r in range(skip, packing.num_packs):  # a slot column keeps the row's own sequences
            row = {k: (v[r] if k in per_token or v.ndim == 1 else v[r][: counts[r]]) for k, v in cols.items()}
            s["yielded"], s["rows"] = r + 1, s["rows"] + 1
            if r + 1 == packing.num_packs:  # the state after this buffer's last row: the next buffer's start
                s.update(
                    carried=keys.tolist(), carried_lengths=carried.lengths.tolist(), yielded=0, drain=s["drain"] + 1
                )
                nxt = reader.peek()
                s["new_from"] = nxt[0] if nxt is not None else -1 if final else s["new_from"]
            yield row
        return (carried, pieces[carried_idx]) if carried.num_sequences else None
