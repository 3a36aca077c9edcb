"""``seqpack`` command line: one module per subcommand; handlers parse and call the library.

User errors (`seqpack.errors.UserError`: bad options, malformed or damaged inputs, data that does
not fit the model) and the system's (`OSError`: a missing file, a full disk) print one line
``seqpack: error: ...`` to stderr and exit with code 2, without a traceback. Any other exception is
a bug in seqpack: its traceback is printed, then one line asking for a report, and the exit code
is 1. ``--debug`` (anywhere on the line) or ``SEQPACK_DEBUG=1`` prints a user error's traceback
too, with the exceptions it was raised from.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import os
import sys
import warnings
from collections.abc import Sequence
from typing import TextIO

from seqpack.errors import UserError

#: the subcommands, as ``seqpack --help`` lists them: name -> its module in ``seqpack.cli`` (which has
#: ``NAME``, ``HELP`` and ``add_parser``). A command imports its own module only: the others' imports
#: (dataclasses, pathlib, ...) would slow a short command such as ``train-tokenizer``.
COMMANDS = {
    "train-tokenizer": "train_tokenizer",
    "encode": "encode",
    "decode": "decode",
    "tokenize": "tokenize",
    "plan": "plan",
    "stats": "stats",
    "pack": "pack",
    "train": "train",
    "bench": "bench",
    "compare": "compare",
    "demo": "demo",
}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]  # argparse declares error NoReturn; this one raises too
        self.exit(2, f"seqpack: error: {message}\n")


class _Formatter(argparse.HelpFormatter):
    """argparse's help, with the closing example and docs page kept line for line."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if text.startswith("example:"):
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


def _epilog(example: str, docs: str) -> str:
    return f"example:\n  {example}\ndocs: {docs}"


#: what ``seqpack --help`` ends with
EXAMPLE = "seqpack train-tokenizer my_corpus/ --vocab-size 32000 --hf --out tok/"
DOCS = "docs/getting-started.md"


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser; with ``command``, only that subcommand's options are built.

    Building the options of some subcommands (``train``, ``bench``) imports torch; ``seqpack
    tokenize`` should not pay for that. With a known ``command`` the parser holds that subcommand
    alone (the others' help shows in ``seqpack --help``, which builds them all), so that no other
    module is imported and no other parser built.
    """
    from seqpack._version import __version__

    parser = _Parser(
        prog="seqpack",
        description="Remove padding from transformer training.",
        epilog=_epilog(EXAMPLE, DOCS),
        formatter_class=_Formatter,
    )
    parser.add_argument("--version", action="version", version=f"seqpack {__version__}")
    parser.add_argument(
        "--debug",
        action="store_true",
        help=f"print the traceback of an error too (anywhere on the line; or set {DEBUG_ENV}=1)",
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for name, module_name in COMMANDS.items():
        if command in COMMANDS and name != command:
            continue
        module = importlib.import_module(f"seqpack.cli.{module_name}")
        if command is None or name == command:
            module.add_parser(sub)
            sub.choices[name].epilog = _epilog(module.EXAMPLE, module.DOCS)
            sub.choices[name].formatter_class = _Formatter
        else:
            sub.add_parser(name, help=module.HELP)
    return parser


#: optional packages and the extra that installs each (pyproject.toml)
EXTRAS = {
    "torch": "torch",
    "transformers": "hf",
    "datasets": "hf",
    "trl": "hf",
    "accelerate": "hf",
    "matplotlib": "report",
    "ray": "ray",
}


def _show_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    print(f"seqpack: warning: {message}", file=sys.stderr)


#: the environment variable that turns ``--debug`` on
DEBUG_ENV = "SEQPACK_DEBUG"
#: what a user error is: one line and exit code 2 (any other exception is a bug)
USER_ERRORS = (UserError, OSError)


def debugging(argv: Sequence[str]) -> bool:
    """Whether ``argv`` holds ``--debug`` or the environment sets ``SEQPACK_DEBUG`` (not ``0``)."""
    return "--debug" in argv or os.environ.get(DEBUG_ENV, "").strip() not in ("", "0")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command in ``argv`` (default: ``sys.argv[1:]``, the process's own: it then exits next)."""
    program = argv is None
    argv = sys.argv[1:] if argv is None else list(argv)
    debug = debugging(argv)
    argv = [a for a in argv if a != "--debug"]  # taken anywhere on the line, not only before the command
    command = next((a for a in argv if not a.startswith("-")), "")
    try:  # building a command's options may import its extra (train's attention backends need torch)
        args = build_parser(command).parse_args(argv)
    except ModuleNotFoundError as e:
        return _missing_extra(e, command)
    warnings.showwarning = _show_warning
    try:
        from seqpack.cli.paths import check_paths

        check_paths(args)  # every command's outputs, one guard, before any work
        code = int(args.handler(args) or 0)
        if program:
            _exiting()
        return code
    except ModuleNotFoundError as e:
        return _missing_extra(e, command)
    except BrokenPipeError:  # `seqpack stats | head -1`: the reader has what it wanted
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # no second error when Python flushes stdout at exit
        return 0
    except USER_ERRORS as e:
        if debug:
            import traceback  # only here: every command's start-up stays without it

            traceback.print_exception(type(e), e, e.__traceback__, file=sys.stderr)
        msg = " ".join(str(e).split()) or type(e).__name__  # one line, whatever a library put in it
        print(f"seqpack: error: {msg}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:
        print(f"seqpack: interrupted{': ' + str(e) if str(e) else ''}", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001 - anything else is a bug: its traceback and a request to report it
        return _bug(e)


def _bug(e: Exception) -> int:
    """An exception that is not a user error: its traceback, then one line asking for a report."""
    import traceback

    from seqpack._version import __version__

    traceback.print_exception(type(e), e, e.__traceback__, file=sys.stderr)
    print(
        f"seqpack: internal error ({type(e).__name__}): this is a bug in seqpack {__version__}; please report "
        "it with the command line and the traceback above",
        file=sys.stderr,
    )
    return 1


def _exiting() -> None:
    """The command is done and the process exits next (``main`` ran as the program: a caller of
    ``main(argv)`` keeps its collector as it was): what it holds is left to the OS. CPython's
    last collection at exit otherwise walks every object still alive, the imported modules' functions
    and classes above all, a measurable part of a short command such as `seqpack train-tokenizer`
    (``benchmarks/first_command.py``). The young generations are collected first, so that recent
    garbage in reference cycles still has its finalizers run; atexit handlers run as before."""
    gc.collect(1)
    gc.freeze()


def _missing_extra(e: ModuleNotFoundError, command: str) -> int:
    """One line naming the extra that installs a missing optional package (else the error as it is)."""
    top = (e.name or "").split(".")[0]
    if top not in EXTRAS:
        raise e
    print(f"seqpack: error: seqpack {command} needs {top}; pip install 'seqpack[{EXTRAS[top]}]'", file=sys.stderr)
    return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
