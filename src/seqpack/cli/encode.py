"""``seqpack encode --tokenizer DIR [FILE]``: print token ids (stdin by default)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Iterator

from seqpack.cli.args import TOKENIZER_HELP

NAME = "encode"
HELP = "text -> token ids"
EXAMPLE = 'echo "Hello world" | seqpack encode --tokenizer tok/'
DOCS = "docs/guides/tokenizer.md"


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        NAME, help=HELP, description="Encode text (FILE or stdin) to token ids, printed space-separated."
    )
    p.add_argument("file", nargs="?", help="input text file (default: stdin)")
    p.add_argument("--tokenizer", required=True, help=TOKENIZER_HELP)
    p.add_argument("--errors", choices=("strict", "replace"), default="strict", help="invalid UTF-8 handling")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from seqpack._progress import progress_bar
    from seqpack.corpus import iter_decoded
    from seqpack.tokenizer import open_tokenizer

    tok = open_tokenizer(args.tokenizer)
    out = sys.stdout
    first = True
    batch: list[str] = []
    bar = progress_bar(desc="encode", unit="char", unit_scale=True, leave=False)

    def counted(pieces: Iterable[str]) -> Iterator[str]:
        for piece in pieces:
            bar.update(len(piece))
            yield piece

    for i in tok.encode_iterable(counted(iter_decoded(args.file, errors=args.errors))):
        batch.append(str(i))
        if len(batch) >= 8192:
            out.write(("" if first else " ") + " ".join(batch))
            first, batch = False, []
    out.write(("" if first or not batch else " ") + " ".join(batch) + "\n")
    bar.close()
    return 0
