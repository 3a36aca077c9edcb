"""``seqpack demo``: the main job on the built-in corpus (what ``make demo`` runs)."""

from __future__ import annotations

import argparse
import json

from seqpack.cli.paths import declare_paths

NAME = "demo"
HELP = "run the pipeline on the built-in corpus"
EXAMPLE = "seqpack demo --out demo_out"
DOCS = "docs/guides/demo.md"


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from seqpack.cli.numbers import WORKERS_LIMIT, integer, number
    from seqpack.experiments.demo import MAX_BUDGET

    p = sub.add_parser(
        NAME,
        help=HELP,
        description="Run the seqpack pipeline end to end on the built-in Python-documentation corpus (or --corpus files).",
    )
    p.add_argument("--corpus", nargs="+", default=[], metavar="PATH", help="your own text/.jsonl/.parquet files")
    p.add_argument("--out", default="demo_out", help="output directory (default demo_out)")
    p.add_argument("--vocab-size", type=integer("--vocab-size", 1, 2**31 - 1), default=8192)
    p.add_argument("--workers", type=integer("--workers", 1, WORKERS_LIMIT), default=None)
    p.add_argument(
        "--threads", type=integer("--threads", 1, WORKERS_LIMIT), default=None, help="torch CPU threads for training"
    )
    p.add_argument(
        "--budget",
        type=number("--budget", 0.0, MAX_BUDGET, above=True),
        default=1.0,
        help="scale the training sequences (default 1.0)",
    )
    p.add_argument("--fresh", action="store_true", help="re-run every stage (default: reuse finished ones)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(handler=run)
    declare_paths(p, reads=("corpus",), dirs=("out",))


def run(args: argparse.Namespace) -> int:
    from seqpack.cli.args import require

    require("torch", "matplotlib")  # the demo trains and plots: say so before its first stage, not after
    from seqpack.experiments.demo import format_summary, run_demo

    summary = run_demo(
        args.out,
        corpus=args.corpus,
        vocab_size=args.vocab_size,
        workers=args.workers,
        progress=not args.json,
        fresh=args.fresh,
        threads=args.threads,
        budget=args.budget,
    )
    print(json.dumps(summary) if args.json else format_summary(summary))
    return 0
