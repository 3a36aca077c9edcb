"""The pack job's options: what to pack (`PackConfig`) and how to write it (`OutputOptions`).

cfg = PackConfig.for_task("clm", max_len=512)                # task options by name
out = OutputOptions(shard_packs=4096, export_bin=True)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import TYPE_CHECKING, Any

import numpy as np

from seqpack.data.format import WriteOptions
from seqpack.errors import UserError
from seqpack.packing.balance import ScheduleOptions
from seqpack.packing.histogram import check_max_len, round_up
from seqpack.packing.plan import ALGORITHMS, DEFAULT_ALGORITHM, check_max_depth
from seqpack.tasks import get_task

if TYPE_CHECKING:
    from seqpack.packing import Packing

#: labelled examples per stage of the sharded pack job (classification, multilabel, qa, ...)
SHARD_EXAMPLES = 100_000
COMMON = ("task", "max_len", "algorithm", "max_depth", "seed", "position_offset", "context_parallel")


@dataclass(frozen=True, kw_only=True)
class PackConfig:
    """The task, how to pack, and the task's own options (its options dataclass, see
    `seqpack.tasks`; ``None``: the task's defaults).

    >>> PackConfig.for_task("clm", max_len=512, overflow="drop").options
    CLMOptions(overflow='drop', eos_token='<|endoftext|>')

    Attributes:
        task: the task's name (`seqpack.tasks`).
        max_len: the row length.
        algorithm: the planner (`seqpack.packing.ALGORITHMS`); the default is the LP optimum.
        max_depth: the most sequences a row holds (`None`: no limit).
        seed: the seed of the assignment of sequences to rows.
        position_offset: the first position id of each sequence.
        context_parallel: C > 1 plans each length rounded up to a multiple of 2C.
        options: the task's options dataclass (`None`: its defaults).
    """

    task: str
    max_len: int
    algorithm: str = DEFAULT_ALGORITHM
    max_depth: int | None = None
    seed: int = 0
    position_offset: int = 0
    context_parallel: int = (
        1  # C > 1: plan each sequence's length rounded up to a multiple of 2C (rows that split per document)
    )
    options: Any = None

    def __post_init__(self) -> None:
        t = get_task(self.task)
        check_max_len(self.max_len)
        if self.algorithm not in ALGORITHMS:
            raise UserError(f"algorithm must be one of {'|'.join(ALGORITHMS)}, got {self.algorithm!r}")
        check_max_depth(self.max_depth)
        if self.position_offset < 0:
            raise UserError(f"position_offset must be >= 0, got {self.position_offset}")
        cp = self.context_parallel
        if isinstance(cp, bool) or not isinstance(cp, int) or cp < 1:
            raise UserError(f"context_parallel must be an int >= 1, got {cp!r}")
        if self.max_len % (2 * cp) and cp > 1:
            raise UserError(
                f"--context-parallel {cp} splits each row into 2C = {2 * cp} chunks per document: pass a "
                f"--max-len divisible by {2 * cp} (e.g. {self.max_len - self.max_len % (2 * cp)})"
            )
        if self.options is None:
            object.__setattr__(self, "options", t.options())
        elif not isinstance(self.options, t.options_type):
            raise TypeError(
                f"task {self.task} takes {t.options_type.__name__} options, got {type(self.options).__name__}"
            )
        if t.packing is not None and t.packing.check_config is not None:
            t.packing.check_config(self)

    @classmethod
    def for_task(cls, task: str, **kw: Any) -> PackConfig:
        """Packing fields and the task's options in one call (each option checked against the task).

        Args:
            task: the task's name.
            **kw: `PackConfig` fields and the task's options, by name.

        Returns:
            The `PackConfig`.

        Raises:
            UserError: an option the task does not take, or a bad value.
        """
        common = {k: v for k, v in kw.items() if k in COMMON}
        options = get_task(task).options(**{k: v for k, v in kw.items() if k not in COMMON})
        return cls(task=task, options=options, **common)

    @property
    def round_to(self) -> int:
        """What the plan rounds each length up to a multiple of: ``2 * context_parallel`` (1 without CP)."""
        return 2 * self.context_parallel if self.context_parallel > 1 else 1

    def cp_summary(self, packing: Packing) -> dict[str, Any]:
        """With ``context_parallel`` > 1: the manifest's real-token counts (the plan counted rounded
        lengths) and the padding the rounding adds; ``{}`` otherwise.

        Args:
            packing: the packing of the rows.

        Returns:
            `num_tokens`, `efficiency` and `context_parallel` (its padding), or `{}`.
        """
        cp = self.context_parallel
        if cp == 1:
            return {}
        tokens = int(np.asarray(packing.lengths, dtype=np.int64).sum())
        planned = int(round_up(packing.lengths, self.round_to).sum())
        slots = packing.num_packs * self.max_len
        return {
            "num_tokens": tokens,
            "efficiency": tokens / slots if slots else 0.0,
            "context_parallel": {
                "size": cp,
                "padding_tokens": planned - tokens,
                "padding_fraction": (planned - tokens) / planned if planned else 0.0,
            },
        }

    def to_dict(self) -> dict[str, Any]:
        """The config as the manifest records it (the options' class named; ``context_parallel`` only
        when set, so that the manifests of other packs stay as they were).

        Returns:
            The fields and `options_type`, JSON-ready.
        """
        d = {**asdict(self), "options_type": type(self.options).__name__}
        if self.context_parallel == 1:
            del d["context_parallel"]
        return d


@dataclass(frozen=True, kw_only=True)
class OutputOptions(WriteOptions):
    """How the pack job writes a packed dataset: the files as `WriteOptions` says (Parquet parts,
    row groups, compression, encoding, ``.bin`` columns, overwrite), and what else it stores:
    ``schedule`` also groups the packs into balanced data-parallel steps (``schedule.npy``);
    ``write_derived`` also stores the task's derived columns (``segment_ids``; clm's labels) in the
    Parquet parts.

    >>> OutputOptions(compression="lz4").parts(max_len=2048), OutputOptions().row_groups(max_len=2048)
    (8192, 512)
    >>> OutputOptions(compression="brotli")
    Traceback (most recent call last):
    ...
    seqpack.errors.UserError: compression must be one of none|snappy|zstd|lz4|gzip, got 'brotli'
    """

    schedule: ScheduleOptions | None = None
    write_derived: bool = False

    def write(self) -> WriteOptions:
        """The options of the files alone (`seqpack.data.write_packed`'s).

        Returns:
            The `WriteOptions` part of these options.
        """
        return WriteOptions(**{f.name: getattr(self, f.name) for f in fields(WriteOptions)})

    def derived(self, task: str) -> dict[str, str]:
        """The columns the Parquet parts leave out, ``name -> rule`` (`seqpack.data.derived`).

        >>> OutputOptions().derived("clm"), OutputOptions(write_derived=True).derived("clm")
        ({'labels': 'lm_labels', 'segment_ids': 'segments'}, {})

        Args:
            task: the task's name.

        Returns:
            The derived columns and their rules (`{}` with `write_derived`).
        """
        return {} if self.write_derived else dict(get_task(task).rows.derived_columns)
