"""``seqpack tokenize INPUT... --tokenizer DIR --out STORE``: corpus -> token store."""

from __future__ import annotations

import argparse
import json
import time

from seqpack.cli.args import TOKENIZER_HELP, add_engine_options, engine_from_args
from seqpack.cli.inputs import add_input_options, files, report_replacements
from seqpack.cli.numbers import WORKERS_LIMIT, integer, number
from seqpack.cli.paths import declare_paths
from seqpack.errors import UserError

NAME = "tokenize"
HELP = "corpus -> token store"
EXAMPLE = "seqpack tokenize my_corpus/ --tokenizer tok/ --out store/"
DOCS = "docs/getting-started.md"


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    # imported here: the store brings numpy, which the other commands' start-up skips
    from seqpack.corpus.readers import DEFAULT_ERRORS, DEFAULT_SEPARATOR
    from seqpack.store.sharded import DEFAULT_SHARD_CHARS

    p = sub.add_parser(
        NAME,
        help=HELP,
        description="Encode documents into a sharded, memory-mapped token store (shards.json + "
        "shard-NNNNN/ stores: tokens.bin + offsets.idx + meta.json), shard by shard (resumable: a re-run "
        "reuses finished shards). Text files are split at --separator (or per line with --one-per-line); "
        ".jsonl/.parquet give one document per record. With no INPUT, the built-in Python docs.",
    )
    add_input_options(p)
    p.add_argument("--tokenizer", required=True, help=TOKENIZER_HELP)
    p.add_argument("--out", required=True, help="store directory to create")
    p.add_argument("--overwrite", action="store_true", help="replace a non-empty --out")
    p.add_argument(
        "--workers",
        type=integer("--workers", 1, WORKERS_LIMIT),
        default=None,
        help="encoding threads (default: all cores)",
    )
    p.add_argument("--text-field", default="text", help="field of .jsonl/.parquet records")
    p.add_argument("--separator", default=DEFAULT_SEPARATOR, help="document separator in text files")
    p.add_argument("--one-per-line", action="store_true", help="text files hold one document per line")
    p.add_argument(
        "--errors",
        choices=("strict", "replace"),
        default=DEFAULT_ERRORS,
        help="invalid UTF-8 in the inputs: replace (with U+FFFD, counted and reported in one line) or "
        f"strict (refuse the file, naming the byte); default {DEFAULT_ERRORS}",
    )
    p.add_argument(
        "--shard-mb",
        type=number("--shard-mb", MIN_SHARD_MB, 2**20),
        default=DEFAULT_SHARD_CHARS / 2**20,
        help=f"characters of input per shard, in MiB (default {DEFAULT_SHARD_CHARS // 2**20})",
    )
    add_engine_options(p)
    p.add_argument("--json", action="store_true", help="print the store's shards.json")
    p.set_defaults(handler=run)
    declare_paths(p, reads=("inputs", "tokenizer"), dirs=("out",))


#: the smallest --shard-mb: about a KiB of text per shard (a shard is a folder of three files)
MIN_SHARD_MB = 0.001
#: shards one run may cut its input into (each a folder and a stage): past this, --shard-mb is too small
MAX_SHARDS = 10_000


def check_shard_count(inputs: list[str], shard_mb: float) -> None:
    """Refuse a ``--shard-mb`` that would cut the input files into more than `MAX_SHARDS` shards
    (counted from the files' sizes; text is cut at document boundaries, so shards hold at least this)."""
    import math
    import os

    size = sum(os.path.getsize(p) for p in inputs if os.path.isfile(p))
    shards = size / (shard_mb * 2**20)
    if shards > MAX_SHARDS:
        least = math.ceil(size / MAX_SHARDS / 2**20 * 1000) / 1000
        raise UserError(
            f"--shard-mb {shard_mb:g} would cut the {size / 2**20:,.1f} MiB of input into about {shards:,.0f} shards "
            f"(at most {MAX_SHARDS:,}: each is a folder and a stage); pass --shard-mb {least:g} or more"
        )


def run(args: argparse.Namespace) -> int:
    from seqpack._atomic import check_output_dir
    from seqpack.corpus import expand_inputs, python_docs, read_documents
    from seqpack.corpus.readers import REPLACED, require_file
    from seqpack.pipeline import build_sharded_store
    from seqpack.store.store import OUTPUT as STORE_OUTPUT
    from seqpack.tokenizer import open_tokenizer

    REPLACED.clear()  # this command's own count
    tok = open_tokenizer(args.tokenizer)
    check_output_dir(
        args.out, overwrite=args.overwrite, kind=STORE_OUTPUT
    )  # against the inputs: seqpack.cli.paths, before
    args.inputs = expand_inputs(args.inputs, glob=args.glob)
    for path in args.inputs:  # every input checked before anything is written
        require_file(path)
    check_shard_count(args.inputs, args.shard_mb)
    if args.inputs:
        docs = read_documents(
            args.inputs,
            text_field=args.text_field,
            separator=args.separator,
            one_per_line=args.one_per_line,
            errors=args.errors,
        )
        source = ", ".join(args.inputs)
    else:
        docs, source = iter(python_docs()), "built-in Python docs"
    engine = engine_from_args(args)
    t0 = time.perf_counter()
    try:
        store = build_sharded_store(
            docs,
            tok,
            args.out,
            shard_chars=max(1, int(args.shard_mb * 2**20)),
            workers=args.workers,
            engine=engine,
            overwrite=args.overwrite,
            source=source,
        )
    finally:
        engine.close()
    seconds = time.perf_counter() - t0  # reading, encoding and writing (the store's encode_seconds: summed over shards)
    m = store.meta
    if args.json:
        print(json.dumps({**m, "reused": store.reused, "redone": store.redone}, sort_keys=True))
    else:
        reused = f"; reused {len(store.reused)} finished shard(s): {', '.join(store.reused)}" if store.reused else ""
        if store.redone:
            reused += (
                f"; re-encoded {len(store.redone)} shard(s) a killed run left whose input or files changed: "
                + ", ".join(f"{k} ({v})" for k, v in store.redone.items())
            )
        mb_s = m["input_bytes"] / 1e6 / max(seconds, 1e-9)
        print(
            f"{m['num_documents']:,} documents ({m['empty_documents']:,} empty, dropped), "
            f"{m['num_tokens']:,} {m['dtype']} tokens from {m['input_bytes'] / 1e6:.2f} MB "
            f"{f'({files(len(args.inputs))}) ' if args.inputs else ''}in {seconds:.2f} s ({mb_s:.1f} MB/s), {len(store.shards)} shard(s){reused} -> {args.out}"
        )
    report_replacements()
    return 0
