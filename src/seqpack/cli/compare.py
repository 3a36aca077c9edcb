"""``seqpack compare --data DIR --out DIR --sequences N``: padded vs packed training, same sequences, one plot."""

from __future__ import annotations

import argparse
import json

from seqpack.cli.numbers import integer
from seqpack.cli.paths import declare_paths
from seqpack.cli.train import add_training_options, config_from_args

NAME = "compare"
HELP = "train padded and packed on the same sequences; plot eval loss"
EXAMPLE = "seqpack compare --data packed/ --out cmp/ --sequences 60000"
DOCS = "docs/guides/training.md"


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        NAME,
        help=HELP,
        description="Train the padded baseline, then the packed run (by default with as many sequences per step: "
        "--match sequences), for the same number of training sequences; write OUT/{padded,packed}/, "
        "OUT/compare.png (eval loss vs sequences seen and vs time) and OUT/compare.json.",
    )
    add_training_options(p)
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument(
        "--setup",
        choices=("match", "adjust"),
        default="match",
        help="match: packed rows = batch / packing factor (paper's first setup); adjust: same rows, "
        "betas ** p (second setup)",
    )
    p.add_argument("--evals", type=integer("--evals", 1, 10_000), default=10, help="evaluations per run")
    p.add_argument("--overwrite", action="store_true")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=run)
    declare_paths(p, reads=("data", "hf_model", "balance_cost", "init_from"), dirs=("out",))


def run(args: argparse.Namespace) -> int:
    from seqpack.experiments.compare import compare, format_compare

    adjust = args.setup == "adjust"
    cfg = config_from_args(args, match="none" if adjust else "sequences", adjust_hparams=adjust, evals=None)
    r = compare(cfg, evals=args.evals, overwrite=args.overwrite)
    print(json.dumps(r) if args.json else format_compare(r))
    return 0
