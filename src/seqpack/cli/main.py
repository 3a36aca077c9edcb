"""``seqpack`` command line: one module per subcommand; handlers parse and call the library.

User errors (bad options, missing or malformed files) print one line
``seqpack: error: ...`` to stderr and exit with code 2, without a traceback.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Sequence

from seqpack.cli import bench, compare, decode, demo, encode, pack, plan, stats, tokenize, train, train_tokenizer

_COMMANDS = (train_tokenizer, encode, decode, tokenize, plan, stats, pack, train, bench, compare, demo)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"seqpack: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    from seqpack import __version__

    parser = _Parser(prog="seqpack", description="Remove padding from transformer training.")
    parser.add_argument("--version", action="version", version=f"seqpack {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for module in _COMMANDS:
        module.add_parser(sub)
    return parser


def _show_warning(message, category, filename, lineno, file=None, line=None):  # type: ignore[no-untyped-def]
    print(f"seqpack: warning: {message}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    warnings.showwarning = _show_warning
    try:
        return int(args.handler(args) or 0)
    except (ValueError, TypeError, OSError) as e:
        msg = str(e) or type(e).__name__
        print(f"seqpack: error: {msg}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:
        print(f"seqpack: interrupted{': ' + str(e) if str(e) else ''}", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
