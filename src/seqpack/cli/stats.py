"""``seqpack stats --lengths FILE.npy | --histogram FILE --max-len L``: what padding costs."""

from __future__ import annotations

import argparse
import json

from seqpack.cli.args import HISTOGRAM_HELP, MAX_LEN_HINT, add_store_task_option, read_histogram
from seqpack.cli.numbers import max_len as _max_len

NAME = "stats"
HELP = "padding without packing"
EXAMPLE = "seqpack stats --histogram wikipedia --max-len 512"
DOCS = "docs/concepts/plans.md"


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(NAME, help=HELP, description="Sequences, tokens, padding, speed-up bound.")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--lengths", help=".npy of sequence lengths (one per sequence)")
    src.add_argument("--histogram", help=HISTOGRAM_HELP)
    p.add_argument("--max-len", required=True, type=_max_len)
    p.add_argument("--json", action="store_true")
    add_store_task_option(p)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from seqpack.packing import histogram, length_stats
    from seqpack.packing.histogram import load_npy_1d

    if args.lengths:
        hist = histogram(load_npy_1d(args.lengths, "lengths (one per sequence)"), args.max_len, hint=MAX_LEN_HINT)
    else:
        hist = read_histogram(args.histogram, args.max_len, task=args.task)
    s = length_stats(hist, args.max_len)
    if args.json:
        print(json.dumps(s.to_dict()))
    else:
        print(
            f"sequences {s.sequences:,}  tokens {s.tokens:,}  mean length {s.mean_length:.1f}  longest {s.longest}\n"
            f"padded to {s.max_len}: {100 * s.padding_fraction:.2f}% padding; "
            f"theoretical speed-up from removing it: {s.theoretical_speedup:.3f}x"
        )
    return 0
