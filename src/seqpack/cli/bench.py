"""``seqpack bench --lengths wikipedia|FILE.npy|DIR --max-len L --model bert|gpt [--json]``."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from seqpack.cli.args import default_of, from_args
from seqpack.cli.numbers import COUNT_LIMIT, WORKERS_LIMIT, integer
from seqpack.cli.numbers import max_len as _max_len
from seqpack.cli.paths import declare_paths
from seqpack.errors import UserError

if TYPE_CHECKING:
    from collections.abc import Callable

    from seqpack.experiments.bench import BenchConfig

NAME = "bench"
HELP = "padded vs packed training throughput, side by side"
EXAMPLE = "seqpack bench --lengths wikipedia --max-len 512 --model bert"
DOCS = "docs/guides/training.md"


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from seqpack.experiments.bench import DEVICES, DTYPES, HEADS, BenchConfig
    from seqpack.nn.attention import BACKENDS
    from seqpack.nn.models.common import SIZES

    def pos(name: str, maximum: int = 2**31 - 1) -> Callable[[str], int]:
        return integer(name, 1, maximum)

    p = sub.add_parser(
        NAME,
        help=HELP,
        description="Time forward+backward steps of the same model on padded rows and on packed rows of "
        "lengths drawn from a histogram; report sequences/s, real tokens/s, the realised and the theoretical "
        "speed-up (packing factor) and the overhead (paper Table 1).",
    )
    p.add_argument(
        "--lengths",
        default=default_of(BenchConfig, "lengths"),
        help="wikipedia (built in: the paper's BERT Wikipedia lengths), a .npy or .csv histogram "
        "(index = length - 1) or a packed dataset directory",
    )
    p.add_argument("--max-len", type=_max_len, default=default_of(BenchConfig, "max_len"))
    p.add_argument("--model", choices=("bert", "gpt"), default=default_of(BenchConfig, "model"))
    p.add_argument("--size", choices=tuple(SIZES), default=default_of(BenchConfig, "size"))
    p.add_argument("--vocab-size", type=pos("--vocab-size"), default=default_of(BenchConfig, "vocab_size"))
    p.add_argument(
        "--batch-size",
        type=pos("--batch-size"),
        default=default_of(BenchConfig, "batch_size"),
        help="rows per step (default 8192 // max_len)",
    )
    p.add_argument(
        "--sequences",
        type=pos("--sequences", COUNT_LIMIT),
        default=default_of(BenchConfig, "sequences"),
        help="pool of sampled lengths",
    )
    p.add_argument(
        "--steps",
        type=pos("--steps"),
        default=default_of(BenchConfig, "steps"),
        help="timed steps per variant per round",
    )
    p.add_argument(
        "--repeats",
        type=pos("--repeats"),
        default=default_of(BenchConfig, "repeats"),
        help="timed rounds (after a warm-up round)",
    )
    p.add_argument(
        "--head",
        choices=HEADS,
        default=default_of(BenchConfig, "head"),
        help="vocabulary projection at target tokens (seqpack's models) or at every position (Hugging Face's)",
    )
    p.add_argument(
        "--attention",
        choices=BACKENDS,
        default=default_of(BenchConfig, "attention"),
        help="the packed run's attention backend",
    )
    p.add_argument("--threads", type=pos("--threads", WORKERS_LIMIT), default=default_of(BenchConfig, "threads"))
    p.add_argument(
        "--device", choices=DEVICES, default=default_of(BenchConfig, "device"), help="where both runs execute"
    )
    p.add_argument(
        "--dtype",
        choices=tuple(DTYPES),
        default=default_of(BenchConfig, "dtype"),
        help="bf16/fp16: autocast over fp32 weights",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--calibrate",
        action="store_true",
        help="instead: time rows designed to span sum(l^2) at --max-len on "
        "this model and fit seconds = a*tokens + b*sum(l^2) + c*sequences (the cost seqpack train/plan "
        "--balance compute --cost FILE balances by)",
    )
    p.add_argument("--out", help="with --calibrate: write the fitted coefficients to this JSON file (--cost FILE)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out file")
    p.set_defaults(handler=run)
    declare_paths(p, reads=("lengths",), files={"out": "json"})


def run(args: argparse.Namespace) -> int:
    from seqpack.experiments.bench import BenchConfig, format_bench, run_bench

    cfg = from_args(BenchConfig, args)
    if args.out and not args.calibrate:
        raise UserError("--out writes a calibration; pass --calibrate too (or --json to capture a bench)")
    if args.calibrate:
        return _calibrate(cfg, args)
    r = run_bench(cfg)
    print(json.dumps(r) if args.json else format_bench(r))
    return 0


def _calibrate(cfg: BenchConfig, args: argparse.Namespace) -> int:
    from seqpack.experiments.calibrate import calibrate, format_calibration
    from seqpack.packing.balance import RowCost

    r = calibrate(cfg)  # --out was checked by the one guard (seqpack.cli.paths) before minutes of timing
    if args.out:
        RowCost(**r["cost"]).save(args.out, unit="seconds per row", **{k: v for k, v in r.items() if k != "cost"})
    print(json.dumps(r) if args.json else format_calibration(r))
    return 0
