"""``seqpack train-tokenizer INPUT... --vocab-size N --out DIR``."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from seqpack.errors import UserError

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (a cost in every start-up)
if TYPE_CHECKING:
    from typing import Any

DEFAULT_SPECIAL = "<|endoftext|>"


NAME = "train-tokenizer"
HELP = "train a byte-level BPE tokenizer"
EXAMPLE = "seqpack train-tokenizer my_corpus/ --vocab-size 32000 --hf --out tok/"
DOCS = "docs/guides/tokenizer.md"


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from seqpack.cli.inputs import add_input_options
    from seqpack.cli.numbers import WORKERS_LIMIT, integer
    from seqpack.cli.paths import declare_paths
    from seqpack.corpus.readers import DEFAULT_ERRORS

    p = sub.add_parser(
        NAME,
        help=HELP,
        description="Train a byte-level BPE tokenizer (exact CS336 semantics) and save it. "
        "Text files are read whole; .jsonl/.parquet give one document per record. "
        "With no INPUT, trains on the built-in Python-documentation corpus.",
    )
    add_input_options(p)
    p.add_argument(
        "--vocab-size",
        type=integer("--vocab-size", 1, 2**31 - 1),
        required=True,
        help="final vocab size, specials included",
    )
    p.add_argument(
        "--special-token",
        action="append",
        dest="special_tokens",
        metavar="TOK",
        help=f"special token (repeatable; default {DEFAULT_SPECIAL})",
    )
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--overwrite", action="store_true", help="replace a non-empty --out")
    p.add_argument(
        "--workers",
        type=integer("--workers", 1, WORKERS_LIMIT),
        default=None,
        help="threads for pre-tokenization (default: all cores)",
    )
    p.add_argument(
        "--errors",
        choices=("strict", "replace"),
        default=DEFAULT_ERRORS,
        help="invalid UTF-8 in the inputs: replace (with U+FFFD, counted and reported in one line) or "
        f"strict (refuse the file, naming the byte); default {DEFAULT_ERRORS}",
    )
    p.add_argument("--text-field", default="text", help="field of .jsonl/.parquet records")
    p.add_argument(
        "--hf",
        action="store_true",
        help="also write tokenizer_config.json (bos/eos/pad, a chat template) and special_tokens_map.json: "
        "a complete Hugging Face tokenizer directory (AutoTokenizer.from_pretrained). Without "
        "--chat-template this adds <|im_start|> and <|im_end|> for the default ChatML template",
    )
    p.add_argument(
        "--chat-template",
        metavar="FILE",
        help="with --hf: the Jinja chat template to write (default: ChatML with generation blocks)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object with the results")
    p.set_defaults(handler=run)
    declare_paths(p, reads=("inputs", "chat_template"), dirs=("out",))


def run(args: argparse.Namespace) -> int:
    from seqpack._atomic import check_output_dir
    from seqpack.cli.inputs import files, report_replacements
    from seqpack.corpus.readers import REPLACED, expand_inputs
    from seqpack.tokenizer import BPEConfig
    from seqpack.tokenizer.files import OUTPUT as TOKENIZER_OUTPUT
    from seqpack.tokenizer.hf_export import CHATML_TEMPLATE, CHATML_TOKENS
    from seqpack.tokenizer.train import train_bpe_inputs

    REPLACED.clear()  # this command's own count
    specials = tuple(args.special_tokens) if args.special_tokens else (DEFAULT_SPECIAL,)
    template = None
    if args.chat_template and not args.hf:
        raise UserError("--chat-template is written by --hf; pass both")
    if args.hf:
        if args.chat_template:
            p = Path(args.chat_template)
            if not p.is_file():
                raise UserError(f"--chat-template {p}: no such file (give a Jinja template)")
            template = p.read_text(encoding="utf-8")
        else:  # ChatML writes its own tokens: they must be special tokens, not text
            template = CHATML_TEMPLATE
            specials += tuple(t for t in CHATML_TOKENS if t not in specials)
    config = BPEConfig(
        vocab_size=args.vocab_size,
        special_tokens=specials,
        workers=args.workers,
        errors=args.errors,
        progress=not args.json,
    )
    check_output_dir(
        args.out, overwrite=args.overwrite, kind=TOKENIZER_OUTPUT
    )  # against the inputs: seqpack.cli.paths, before
    inputs = expand_inputs(args.inputs, glob=args.glob)
    result = train_bpe_inputs(inputs, config=config, text_field=args.text_field)
    tok = result.tokenizer()
    tok.save(args.out, overwrite=args.overwrite, hf=args.hf, chat_template=template)
    summary: dict[str, Any] = {
        "vocab_size": len(result.vocab),
        "num_merges": len(result.merges),
        "special_tokens": list(result.special_tokens),
        "seconds": round(result.seconds, 4),
        "pretokenize_seconds": round(result.pretokenize_seconds, 4),
        "merge_seconds": round(result.merge_seconds, 4),
        "num_words": result.num_words,
        "num_pretokens": result.num_pretokens,
        "input_size": result.input_bytes,
        "stopped_early": result.stopped_early,
        "out": str(args.out),
        "input_files": len(inputs),
    }
    if args.json:
        print(json.dumps(summary))
    else:
        print(
            f"trained {summary['vocab_size']} tokens ({summary['num_merges']} merges) from "
            f"{result.num_pretokens:,} pre-tokens ({result.num_words:,} distinct) in "
            f"{result.seconds:.2f} s (pre-tokenize {result.pretokenize_seconds:.2f} s, "
            f"merges {result.merge_seconds:.2f} s) -> {args.out}"
            + (f" ({files(len(inputs), 'input file')})" if inputs else "")
        )
    report_replacements()
    return 0
