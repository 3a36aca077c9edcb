"""Argument parsers shared by the subcommands, and the bridge to config dataclasses, so that a
default lives in exactly one place (the dataclass).

    p.add_argument("--lr", type=float, default=default_of(TrainConfig, "lr"))
    cfg = from_args(TrainConfig, args, progress=False)
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from seqpack.errors import UserError

TOKENIZER_HELP = (
    "a directory written by seqpack train-tokenizer, or a Hugging Face tokenizer directory (tokenizer.json)"
)
MAX_LEN_HINT = "pass --max-len {longest} or more (the longest length)"


def _optional(parse: Any) -> Any:
    def f(text: str) -> Any:
        return None if text.lower() == "none" else parse(text)

    return f


def _parser_for(annotation: str, name: str = "value", bounds: tuple[float, float] | None = None) -> Any:
    """An argparse ``type`` for a dataclass field annotation (``from __future__`` strings): a
    number within ``bounds`` (the field's ``metadata["range"]``; default: a count, ``>= 0``, or a
    finite float), refused in a line naming the option ``name``."""
    from seqpack.cli.numbers import COUNT_LIMIT, integer, number

    kinds = [k.strip() for k in str(annotation).split("|")]
    base = next((k for k in kinds if k != "None"), "str")
    parse: Any
    if base == "int":
        lo, hi = bounds or (0, COUNT_LIMIT)
        parse = integer(name, int(lo), int(hi))
    elif base == "float":
        lo, hi = bounds or (-1e300, 1e300)
        parse = number(name, lo, hi)
    elif base == "str":
        return str
    else:
        raise TypeError(f"no CLI parser for a field of type {annotation}")
    return _optional(parse) if "None" in kinds else parse


def default_of(cls: type, name: str) -> Any:
    """A dataclass field's default: the CLI states no default of its own."""
    f = next(f for f in dataclasses.fields(cls) if f.name == name)
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    raise UserError(f"{cls.__name__}.{name} has no default")


def option_name(field_name: str) -> str:
    return "--" + field_name.replace("_", "-")


def from_args(cls: type, args: argparse.Namespace, **overrides: Any) -> Any:
    """``cls`` built from the parsed options named like its fields (plus ``overrides``)."""
    given = {f.name: getattr(args, f.name) for f in dataclasses.fields(cls) if hasattr(args, f.name)}
    return cls(**{**given, **overrides})


def add_engine_options(p: Any) -> None:
    """``--engine local|ray`` and ``--ray-address`` (one place for every sharded command)."""
    from seqpack.cli.numbers import WORKERS_LIMIT, integer
    from seqpack.pipeline.engine import ENGINES

    p.add_argument(
        "--engine",
        choices=ENGINES,
        default="local",
        help="where the per-shard stages run: this process, or Ray (pip install 'seqpack[ray]')",
    )
    p.add_argument(
        "--ray-address",
        default=None,
        metavar="ADDR",
        help="an existing Ray cluster (e.g. auto or ray://head:10001); default: a local Ray instance",
    )
    p.add_argument(
        "--shards-at-once",
        type=integer("--shards-at-once", 1, WORKERS_LIMIT),
        default=None,
        metavar="N",
        help="local engine: shards processed at once, on threads (default: 2 on 2 or more cores, about "
        "1.5-2x faster than 1 on 2 cores; memory grows with it)",
    )


def engine_from_args(args: argparse.Namespace) -> Any:
    from seqpack.pipeline.engine import get_engine

    if args.shards_at_once is not None and args.engine != "local":
        raise UserError("--shards-at-once applies to --engine local (Ray runs as many shards at once as it has CPUs)")
    if args.engine == "ray":
        require("ray")
    return get_engine(args.engine, address=args.ray_address, shards_at_once=args.shards_at_once)


def add_balance_options(p: argparse.ArgumentParser) -> None:
    """``--world-size/--micro-batch/--hidden/--cost``: data-parallel steps balanced by a row cost
    (``seqpack plan`` reports them, ``seqpack pack`` writes them)."""
    from seqpack.cli.numbers import integer
    from seqpack.packing.balance import DEFAULT_HIDDEN, ScheduleOptions

    p.add_argument(
        "--world-size",
        type=integer("--world-size", 1, 2**31 - 1),
        default=None,
        help="data-parallel ranks: group the packs into steps whose ranks have even work (shuffled vs balanced)",
    )
    p.add_argument(
        "--micro-batch",
        type=integer("--micro-batch", 1, 2**31 - 1),
        default=default_of(ScheduleOptions, "micro_batch"),
        help="with --world-size: packs per rank per step",
    )
    p.add_argument(
        "--hidden",
        type=integer("--hidden", 1, 2**20),
        default=DEFAULT_HIDDEN,
        help="with --world-size: the model's hidden size (the FLOP cost model's attention share)",
    )
    p.add_argument(
        "--cost",
        help="with --world-size: measured row costs (seqpack bench --calibrate --out FILE) "
        "instead of FLOPs at --hidden",
    )


def schedule_from_args(args: argparse.Namespace, *, seed: int = 0) -> Any:
    """The `ScheduleOptions` that ``--world-size/--micro-batch`` and
    ``--cost`` or ``--hidden`` name, or None without ``--world-size``."""
    from seqpack.packing.balance import RowCost, ScheduleOptions, load_row_cost

    if not args.world_size:
        if args.cost:
            raise UserError("--cost prices packs for --world-size W; pass --world-size too")
        return None
    cost = load_row_cost(args.cost) if args.cost else RowCost.from_flops(hidden=args.hidden, layers=1)
    return ScheduleOptions(world_size=args.world_size, micro_batch=args.micro_batch, cost=cost, seed=seed)


HISTOGRAM_HELP = (
    "a built-in histogram (wikipedia: BERT's Wikipedia lengths at 512), a token store "
    "(its document lengths), a packed dataset (the lengths it packed), .npy (counts indexed by "
    "length-1) or .csv (length,count)"
)


def add_store_task_option(p: Any) -> None:
    """``--task``: what a token store's documents become (`seqpack.tasks.Packing.store_lengths`)."""
    from seqpack.tasks import TASKS

    p.add_argument(
        "--task",
        choices=TASKS,
        default="clm",
        help="with a token store: plan the sequences seqpack pack --task makes of its documents at --max-len "
        "(default clm: an EOS each, longer documents split)",
    )


def read_histogram(source: str, max_len: int, *, task: str = "clm") -> Any:
    """The histogram ``--histogram`` names: a built-in one, the sequences ``seqpack pack --task``
    makes of a token store's documents, the lengths a packed dataset packed (its manifest's
    histogram), or a file."""
    import os

    from seqpack.packing import BUILTIN_HISTOGRAMS, builtin_histogram, check_histogram, histogram, load_histogram

    if source in BUILTIN_HISTOGRAMS and not os.path.exists(source):
        hist = builtin_histogram(source)
    elif os.path.isfile(os.path.join(source, "manifest.json")):
        import numpy as np

        from seqpack.data.format import read_manifest

        hist = np.asarray(read_manifest(source)["histogram"]["counts"], dtype=np.int64)
    elif os.path.isdir(source):
        from seqpack.store import open_store
        from seqpack.tasks import get_task

        t = get_task(task)
        lengths = t.packs().store_lengths
        if lengths is None:
            raise UserError(
                f"task {task}'s sequences are not the store's document lengths; pack the store with "
                f"seqpack pack --task {task}, then plan the packed dataset (--histogram PACKED_DIR)"
            )
        return histogram(lengths(open_store(source).lengths(), max_len, t.options_type()), max_len, hint=MAX_LEN_HINT)
    else:
        hist = load_histogram(source, max_len, hint=MAX_LEN_HINT)
    return check_histogram(hist, max_len, hint=MAX_LEN_HINT)


def require(*modules: str) -> None:
    """Check, before any work, that the optional packages a command will import are installed: a
    missing one raises ``ModuleNotFoundError`` naming it, which the CLI turns into the one line
    that names the extra to install."""
    import importlib.util

    for name in modules:
        if importlib.util.find_spec(name) is None:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
