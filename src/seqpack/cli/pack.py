"""``seqpack pack STORE|EXAMPLES --task T --max-len L --tokenizer DIR --out DIR``: packed rows on disk."""

from __future__ import annotations

import argparse
import json
from typing import Any

from seqpack.cli.plan import _depth, _int_at_least, _max_len, _positive_int


def _nonneg(text: str) -> int:
    return _int_at_least(text, "value", 0)


def add_parser(sub: Any) -> None:
    from seqpack.data.build import TASKS
    from seqpack.data.io import COMPRESSION
    from seqpack.packing import ALGORITHMS

    p = sub.add_parser(
        "pack", help="token store or labelled examples -> packed dataset",
        description="Build a task's sequences and pack them into fixed-shape rows: Parquet shards + "
        "manifest.json. clm/mlm read a token store (seqpack tokenize); classification, multilabel "
        "and qa read .jsonl/.parquet examples.",
    )
    p.add_argument("source", metavar="STORE|EXAMPLES")
    p.add_argument("--task", required=True, choices=TASKS)
    p.add_argument("--max-len", required=True, type=_max_len, help="tokens per packed row")
    p.add_argument("--tokenizer", required=True, help="directory written by train-tokenizer")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--overwrite", action="store_true", help="replace a non-empty --out")
    p.add_argument("--algorithm", choices=ALGORITHMS, default="best")
    p.add_argument("--max-depth", type=_depth, default=None, help="sequences per pack at most (default: no limit)")
    p.add_argument("--seed", type=_nonneg, default=0, help="seed of the assignment (and of mlm's pairs/masks)")
    p.add_argument("--overflow", default=None, help="clm: split|truncate|drop|error (default split); "
                   "classification/multilabel: truncate|drop|error (default truncate)")
    p.add_argument("--position-offset", type=_nonneg, default=0, help="first position id of a sequence (RoBERTa: 2)")
    p.add_argument("--export-bin", action="store_true", help="also write raw .bin columns for zero-copy memmap")
    p.add_argument("--compression", choices=COMPRESSION, default="zstd", help="Parquet compression (default zstd level 1)")
    p.add_argument("--shard-packs", type=lambda t: _positive_int(t, "--shard-packs"), default=50_000, help="packs per Parquet shard")
    p.add_argument("--json", action="store_true", help="print the manifest's summary as JSON")
    g = p.add_argument_group("task options")
    g.add_argument("--eos-token", default="<|endoftext|>", help="clm: appended to each document ('' for none)")
    g.add_argument("--text-field", default="text")
    g.add_argument("--text-pair-field", default=None)
    g.add_argument("--label-field", default="label")
    g.add_argument("--num-labels", type=lambda t: _positive_int(t, "--num-labels"), default=None)
    g.add_argument("--question-field", default="question")
    g.add_argument("--context-field", default="context")
    g.add_argument("--answers-field", default="answers")
    g.add_argument("--doc-stride", type=_nonneg, default=128, help="qa: overlap of context windows, tokens")
    g.add_argument("--max-question-len", type=lambda t: _positive_int(t, "--max-question-len"), default=64)
    g.add_argument("--mask-prob", type=float, default=0.15)
    g.add_argument("--short-seq-prob", type=float, default=0.1)
    g.add_argument("--random-next-prob", type=float, default=0.5)
    g.add_argument("--max-predictions", type=lambda t: _positive_int(t, "--max-predictions"), default=None)
    g.add_argument("--dupe-factor", type=lambda t: _positive_int(t, "--dupe-factor"), default=1)
    p.set_defaults(handler=run)


SUMMARY_KEYS = ("task", "max_len", "max_depth", "num_packs", "num_sequences", "num_examples", "num_tokens",
                "efficiency", "packing_factor", "dropped")


def run(args: argparse.Namespace) -> int:
    from seqpack.data.build import PackConfig, build_packed_dataset
    from seqpack.tokenizer import Tokenizer

    cfg = PackConfig(
        task=args.task, max_len=args.max_len, algorithm=args.algorithm, max_depth=args.max_depth,
        seed=args.seed, position_offset=args.position_offset, overflow=args.overflow,
        eos_token=args.eos_token, text_field=args.text_field, text_pair_field=args.text_pair_field,
        label_field=args.label_field, num_labels=args.num_labels, question_field=args.question_field,
        context_field=args.context_field, answers_field=args.answers_field, doc_stride=args.doc_stride,
        max_question_len=args.max_question_len, mask_prob=args.mask_prob, short_seq_prob=args.short_seq_prob,
        random_next_prob=args.random_next_prob, max_predictions=args.max_predictions, dupe_factor=args.dupe_factor,
    )
    tok = Tokenizer.load(args.tokenizer)
    m = build_packed_dataset(args.source, tok, args.out, cfg, overwrite=args.overwrite,
                             export_bin=args.export_bin, compression=args.compression, shard_packs=args.shard_packs)
    summary = {k: m[k] for k in SUMMARY_KEYS}
    if args.json:
        print(json.dumps(summary))
    else:
        dropped = ", ".join(f"{v:,} {k}" for k, v in m["dropped"].items()) or "none"
        print(
            f"{m['task']}: {m['num_sequences']:,} sequences from {m['num_examples']:,} examples -> "
            f"{m['num_packs']:,} packs of {m['max_len']} (efficiency {m['efficiency']:.2%}, "
            f"{m['packing_factor']:.2f} sequences/pack, dropped: {dropped}) -> {args.out}"
        )
    return 0
