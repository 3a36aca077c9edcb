"""``seqpack decode --tokenizer DIR [FILE]``: token ids (whitespace-separated) -> text."""

from __future__ import annotations

import argparse
import sys

from seqpack.cli.args import TOKENIZER_HELP
from seqpack.errors import UserError

NAME = "decode"
HELP = "token ids -> text"
EXAMPLE = 'echo "15496 995" | seqpack decode --tokenizer tok/'
DOCS = "docs/guides/tokenizer.md"


def parse_ids(text: str, source: str) -> list[int]:
    ids = []
    for n, word in enumerate(text.split(), start=1):
        try:
            ids.append(int(word))
        except ValueError:
            raise UserError(f"{source}: item {n} is {word!r}, expected an integer token id") from None
    return ids


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(NAME, help=HELP, description="Decode whitespace-separated token ids (FILE or stdin) to text.")
    p.add_argument("file", nargs="?", help="file of ids (default: stdin)")
    p.add_argument("--tokenizer", required=True, help=TOKENIZER_HELP)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from seqpack.corpus import iter_decoded
    from seqpack.tokenizer import open_tokenizer

    tok = open_tokenizer(args.tokenizer)
    text = "".join(iter_decoded(args.file, hint="a file of token ids holds ASCII digits and whitespace only"))
    sys.stdout.write(tok.decode(parse_ids(text, args.file or "<stdin>")))
    return 0
