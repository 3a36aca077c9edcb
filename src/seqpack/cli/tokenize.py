"""``seqpack tokenize INPUT... --tokenizer DIR --out STORE``: corpus -> token store."""

from __future__ import annotations

import argparse
import json
from typing import Any

from seqpack.corpus.readers import DEFAULT_SEPARATOR


NAME = "tokenize"
HELP = "corpus -> token store"

def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        NAME, help=HELP,
        description="Encode documents into a memory-mapped token store (tokens.bin + offsets.idx + "
        "meta.json). Text files are split at --separator (or per line with --one-per-line); "
        ".jsonl/.parquet give one document per record. With no INPUT, the built-in Python docs.",
    )
    p.add_argument("inputs", nargs="*", metavar="INPUT", help="text, .jsonl or .parquet files")
    p.add_argument("--tokenizer", required=True, help="directory written by train-tokenizer")
    p.add_argument("--out", required=True, help="store directory to create")
    p.add_argument("--overwrite", action="store_true", help="replace a non-empty --out")
    p.add_argument("--workers", type=int, default=None, help="encoding threads (default: all cores)")
    p.add_argument("--text-field", default="text", help="field of .jsonl/.parquet records")
    p.add_argument("--separator", default=DEFAULT_SEPARATOR, help="document separator in text files")
    p.add_argument("--one-per-line", action="store_true", help="text files hold one document per line")
    p.add_argument("--errors", choices=("strict", "replace"), default="strict", help="invalid UTF-8 handling")
    p.add_argument("--json", action="store_true", help="print the store's meta.json")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from seqpack._atomic import check_output_dir
    from seqpack.corpus import python_docs, read_documents
    from seqpack.store import build_store
    from seqpack.tokenizer import Tokenizer

    if args.workers is not None and args.workers < 1:
        raise ValueError(f"--workers must be >= 1, got {args.workers}")
    tok = Tokenizer.load(args.tokenizer)
    check_output_dir(args.out, overwrite=args.overwrite)
    if args.inputs:
        docs = read_documents(
            args.inputs, text_field=args.text_field, separator=args.separator,
            one_per_line=args.one_per_line, errors=args.errors,
        )
        source = ", ".join(args.inputs)
    else:
        docs, source = iter(python_docs()), "built-in Python docs"
    store = build_store(docs, tok, args.out, workers=args.workers, overwrite=args.overwrite, source=source)
    m = store.meta
    if args.json:
        print(json.dumps(m, sort_keys=True))
    else:
        print(
            f"{m['num_documents']:,} documents ({m['empty_documents']:,} empty, dropped), "
            f"{m['num_tokens']:,} {m['dtype']} tokens from {m['input_bytes'] / 1e6:.2f} MB "
            f"in {m['encode_seconds']:.2f} s ({m['mb_per_s']:.1f} MB/s) -> {args.out}"
        )
    return 0
