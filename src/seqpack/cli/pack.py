"""``seqpack pack STORE|EXAMPLES --task T --max-len L --tokenizer DIR --out DIR``: packed rows on disk."""

from __future__ import annotations

import argparse
import json
from typing import Any

from seqpack.cli.args import (
    TOKENIZER_HELP,
    add_balance_options,
    add_engine_options,
    default_of,
    engine_from_args,
    from_args,
    option_name,
    schedule_from_args,
)
from seqpack.cli.inputs import files
from seqpack.cli.numbers import TOKENS_PER_ROW, depth, integer, max_len, seed
from seqpack.cli.paths import declare_paths
from seqpack.errors import UserError

NAME = "pack"
HELP = "token store or labelled examples -> packed dataset"
EXAMPLE = "seqpack pack store/ --task clm --max-len 2048 --tokenizer tok/ --out packed/"
DOCS = "docs/concepts/format.md"


def task_option_fields() -> dict[str, list[tuple[str, Any]]]:
    """Every task option name -> ``(task, dataclass field)`` of each task that has it."""
    import dataclasses

    from seqpack.tasks import REGISTRY

    found: dict[str, list[tuple[str, Any]]] = {}
    for t in REGISTRY.values():
        for f in dataclasses.fields(t.options_type):
            found.setdefault(f.name, []).append((t.name, f))
    return found


def add_task_options(g: Any) -> None:
    """One option per task option of every registered task (from the tasks' options
    dataclasses); its help lists each task's default."""
    from seqpack.cli.args import _parser_for

    for name, uses in task_option_fields().items():
        first = uses[0][1]
        defaults = ", ".join(f"{task}: {f.default}" for task, f in uses)
        if str(first.type) == "bool":  # a switch: given, it is on
            g.add_argument(
                option_name(name), action="store_true", default=argparse.SUPPRESS, help=first.metadata.get("help")
            )
            continue
        g.add_argument(
            option_name(name),
            type=_parser_for(str(first.type), option_name(name), first.metadata.get("range")),
            default=argparse.SUPPRESS,
            help=f"{first.metadata.get('help', '')} (default {defaults})",
        )


def add_parser(sub: Any) -> None:
    from seqpack.data.format import COMPRESSION, ENCODINGS
    from seqpack.packing import ALGORITHMS
    from seqpack.pipeline import PackConfig
    from seqpack.pipeline.config import SHARD_EXAMPLES, OutputOptions
    from seqpack.tasks import REGISTRY, TASKS

    store = "/".join(t for t in TASKS if REGISTRY[t].reads_store)
    examples = ", ".join(t for t in TASKS if not REGISTRY[t].reads_store)
    p = sub.add_parser(
        NAME,
        help=HELP,
        description="Build a task's sequences and pack them into fixed-shape rows: Parquet shards + "
        f"manifest.json. {store} read a token store (seqpack tokenize); {examples} read .jsonl/.parquet "
        "examples.",
    )
    p.add_argument(
        "source",
        metavar="STORE|EXAMPLES",
        help="a token store (clm, mlm), or examples: a .jsonl/.parquet file or a folder of them",
    )
    p.add_argument(
        "--glob",
        metavar="PATTERN",
        default=None,
        help="in a folder of examples, read the files whose name or relative path matches this pattern "
        "(default: every .jsonl, .ndjson and .parquet file below it, in sorted order)",
    )
    p.add_argument("--task", required=True, choices=TASKS)
    p.add_argument("--max-len", required=True, type=max_len, help="tokens per packed row")
    p.add_argument(
        "--tokenizer", required=True, help=TOKENIZER_HELP + "; task vision: the directory of the model's processor"
    )
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--overwrite", action="store_true", help="replace a non-empty --out")
    p.add_argument("--algorithm", choices=ALGORITHMS, default=default_of(PackConfig, "algorithm"))
    p.add_argument(
        "--max-depth",
        type=depth,
        default=default_of(PackConfig, "max_depth"),
        help="sequences per pack at most (default: no limit)",
    )
    p.add_argument(
        "--seed",
        type=seed(),
        default=default_of(PackConfig, "seed"),
        help="seed of the assignment (and of mlm's pairs/masks)",
    )
    p.add_argument(
        "--position-offset",
        type=integer("--position-offset", 0, TOKENS_PER_ROW),
        default=default_of(PackConfig, "position_offset"),
        help="first position id of a sequence (RoBERTa: 2)",
    )
    p.add_argument(
        "--context-parallel",
        type=integer("--context-parallel", 1, 2**20),
        default=default_of(PackConfig, "context_parallel"),
        metavar="C",
        help="rows for C context-parallel ranks: each sequence's length is planned rounded up to a multiple "
        "of 2C so every row splits per document into 2C chunks (the padding is reported; default 1)",
    )
    p.add_argument("--export-bin", action="store_true", help="also write raw .bin columns for zero-copy memmap")
    p.add_argument(
        "--write-derived",
        action="store_true",
        help="also store the columns seqpack's readers rebuild (segment_ids; clm's labels) in the Parquet parts, "
        "for readers other than seqpack (datasets.load_dataset)",
    )
    p.add_argument(
        "--encoding",
        choices=ENCODINGS,
        default=default_of(OutputOptions, "encoding"),
        help="Parquet encoding of the numeric columns: byte_stream_split (smaller, faster to write; pyarrow >= 16 reads "
        "it) or plain (any Parquet reader)",
    )
    p.add_argument(
        "--compression",
        choices=COMPRESSION,
        default=default_of(OutputOptions, "compression"),
        help="Parquet compression (default zstd level 1)",
    )
    p.add_argument(
        "--shard-packs",
        type=integer("--shard-packs", 1, TOKENS_PER_ROW),
        default=None,
        help="packs per Parquet shard (default: about 16M tokens' worth, at most 50,000)",
    )
    p.add_argument(
        "--row-group-packs",
        type=integer("--row-group-packs", 1, TOKENS_PER_ROW),
        default=None,
        help="packs per Parquet row group, what a reader decodes to return any of its rows "
        "(default: about 1M tokens' worth, 512 packs at 2048)",
    )
    p.add_argument(
        "--shard-examples",
        type=integer("--shard-examples", 1, TOKENS_PER_ROW),
        default=SHARD_EXAMPLES,
        help=f"labelled examples per stage (classification, multilabel, qa; default {SHARD_EXAMPLES:,})",
    )
    add_engine_options(p)
    add_balance_options(
        p.add_argument_group("balanced data-parallel steps (schedule.npy, read by seqpack.data.BalancedSampler)")
    )
    p.add_argument("--json", action="store_true", help="print the manifest's summary as JSON")
    add_task_options(p.add_argument_group("task options (each task takes its own; see seqpack.tasks)"))
    p.set_defaults(handler=run)
    declare_paths(p, reads=("source", "tokenizer", "chat_template", "cost"), dirs=("out",))


SUMMARY_KEYS = (
    "task",
    "max_len",
    "max_depth",
    "num_packs",
    "num_sequences",
    "num_examples",
    "num_tokens",
    "efficiency",
    "packing_factor",
    "dropped",
)


def run(args: argparse.Namespace) -> int:
    from seqpack._atomic import check_output_dir
    from seqpack.data.format import OUTPUT as PACKED_OUTPUT
    from seqpack.pipeline import PackConfig
    from seqpack.pipeline.config import COMMON
    from seqpack.tasks import get_task

    if args.glob is not None and get_task(args.task).reads_store:
        raise UserError(
            f"--glob picks files in a folder of examples; task {args.task} reads a token store (drop --glob)"
        )
    options = {k: v for k, v in vars(args).items() if k not in COMMON and k in task_option_fields()}
    cfg = PackConfig.for_task(
        args.task,
        max_len=args.max_len,
        algorithm=args.algorithm,
        max_depth=args.max_depth,
        seed=args.seed,
        position_offset=args.position_offset,
        context_parallel=args.context_parallel,
        **options,
    )
    check_output_dir(
        args.out, overwrite=args.overwrite, kind=PACKED_OUTPUT
    )  # against the inputs: seqpack.cli.paths, before
    m = _pack_job(args, cfg)
    _report(args, m)
    return 0


def _pack_job(args: argparse.Namespace, cfg: Any) -> dict[str, Any]:
    from seqpack.pipeline import OutputOptions, build_packed_dataset
    from seqpack.tasks import get_task

    schedule = schedule_from_args(args, seed=args.seed)
    tok = get_task(cfg.task).packs().open_tokenizer(args.tokenizer)
    engine = engine_from_args(args)
    try:
        m = build_packed_dataset(
            args.source,
            tok,
            args.out,
            cfg,
            engine=engine,
            shard_examples=args.shard_examples,
            glob=args.glob,
            output=from_args(OutputOptions, args, schedule=schedule),
        )
    finally:
        engine.close()
    return m


def _report(args: argparse.Namespace, m: dict[str, Any]) -> None:
    from seqpack.tasks import get_task

    summary = {k: m[k] for k in SUMMARY_KEYS}
    if m.get("schedule"):
        summary["schedule"] = m["schedule"]
    if args.json:
        print(json.dumps(summary))
    else:
        dropped = ", ".join(f"{v:,} {k}" for k, v in m["dropped"].items()) or "none"
        truncated = int(m.get("task_info", {}).get("truncated") or 0)
        if truncated:
            dropped += f"; truncated: {truncated:,}"
        print(
            f"{m['task']}: {m['num_sequences']:,} sequences from {m['num_examples']:,} examples"
            + (f" ({files(m['input_files'])})" if "input_files" in m else "")
            + " -> "
            f"{m['num_packs']:,} packs of {m['max_len']} (efficiency {m['efficiency']:.2%}, "
            f"{m['packing_factor']:.2f} sequences/pack, dropped: {dropped}) -> {args.out}"
            + (f" (reused {len(m['reused'])} finished part(s))" if m.get("reused") else "")
            + (
                f" (rebuilt {len(m['redone'])} part(s) a killed run left whose input or files changed: "
                + ", ".join(f"{k} ({v})" for k, v in m["redone"].items())
                + ")"
                if m.get("redone")
                else ""
            )
        )
        if m.get("schedule"):
            s = m["schedule"]
            print(
                f"schedule: {s['steps']:,} steps of {s['world_size']} ranks x {s['micro_batch']} packs; slowest / mean rank "
                f"{s['imbalance_sequential']:.4f} shuffled, {s['imbalance_balanced']:.4f} balanced "
                f"({100 * s['step_time_saving']:.1f}% of step time saved)"
            )
        if m.get("context_parallel"):
            c = m["context_parallel"]
            print(
                f"context parallel: rows split per document for {c['size']} ranks; rounding lengths to multiples of "
                f"{2 * c['size']} adds {c['padding_tokens']:,} padding tokens ({c['padding_fraction']:.2%} of the planned)"
            )
        describe = get_task(m["task"]).packs().summary
        if describe is not None and (line := describe(m)):
            print(line)
