"""``seqpack plan --histogram FILE --max-len L``: a packing plan, or every algorithm side by side."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from seqpack.cli.args import (
    HISTOGRAM_HELP,
    add_balance_options,
    add_store_task_option,
    read_histogram,
    require,
    schedule_from_args,
)
from seqpack.cli.numbers import depth as _depth
from seqpack.cli.numbers import max_len as _max_len
from seqpack.cli.paths import declare_paths

if TYPE_CHECKING:
    from seqpack.packing import PackingPlan
    from seqpack.packing.balance import ScheduleOptions

NAME = "plan"
HELP = "pack a length histogram"
EXAMPLE = "seqpack plan --histogram wikipedia --max-len 512 --compare"
DOCS = "docs/concepts/plans.md"


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from seqpack.packing import ALGORITHMS, DEFAULT_ALGORITHM

    p = sub.add_parser(NAME, help=HELP, description="Plan packs for a length histogram.")
    p.add_argument("--histogram", required=True, help=HISTOGRAM_HELP)
    p.add_argument("--max-len", required=True, type=_max_len, help="tokens per row")
    p.add_argument("--algorithm", choices=ALGORITHMS, default=DEFAULT_ALGORITHM)
    p.add_argument("--max-depth", type=_depth, default=None, help="sequences per pack at most (default: no limit)")
    p.add_argument("--compare", action="store_true", help="every algorithm at depths 1,2,3,4,8,16,none (Table 1)")
    p.add_argument("--json", action="store_true", help="print JSON (a list with --compare)")
    p.add_argument("--out", help="write the plan (strategies and counts) to this JSON file")
    p.add_argument("--plot", help="PNG: the length histogram and the distribution of pack fill")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out or --plot file")
    add_balance_options(p)
    add_store_task_option(p)
    p.set_defaults(handler=run)
    declare_paths(p, reads=("histogram", "cost"), files={"out": "json", "plot": "png"})


def run(args: argparse.Namespace) -> int:
    from seqpack.packing import plan
    from seqpack.packing.report import format_table, plot_plan

    if args.plot:  # --out and --plot: checked by the one guard (seqpack.cli.paths) before this
        require("matplotlib")
    schedule = schedule_from_args(args)
    hist = read_histogram(args.histogram, args.max_len, task=args.task)
    if args.compare:
        from seqpack.packing.report import compare_plans

        plans = compare_plans(hist, args.max_len)
    else:
        plans = [plan(hist, args.max_len, algorithm=args.algorithm, max_depth=args.max_depth)]
    if args.out:
        plans[-1].save(args.out)
    if args.plot:
        plot_plan(hist, plans[-1], args.plot)
    balance = _balance(plans[-1], schedule, args.cost or f"flops (hidden {args.hidden})") if schedule else None
    if args.json:
        objs = [p.summary() for p in plans]
        if balance:
            objs[-1]["balance"] = balance
        print(json.dumps(objs if args.compare else objs[0]))
    else:
        print(format_table(plans))
        if balance:
            print(
                f"{balance['world']} ranks x {balance['micro_batch']} packs per step (cost: {balance['cost_source']}): "
                f"slowest / mean rank {balance['imbalance_sequential']:.4f} shuffled, {balance['imbalance_balanced']:.4f} "
                f"balanced (seqpack train --balance compute): {100 * balance['step_time_saving']:.1f}% of step time saved"
            )
    return 0


def _balance(plan: PackingPlan, schedule: ScheduleOptions, source: str) -> dict[str, Any]:
    """How evenly data-parallel ranks are loaded by this plan's packs, shuffled and balanced."""
    from seqpack.packing.balance import balance_report, plan_costs

    kw = {"world": schedule.world_size, "micro_batch": schedule.micro_batch}
    _, report = balance_report(plan_costs(plan, schedule.cost), **kw)
    return {**kw, **report, "cost": schedule.cost.to_dict(), "cost_source": source}
