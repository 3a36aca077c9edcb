"""The corpus inputs of ``train-tokenizer`` and ``tokenize``: one definition, and light (no
``dataclasses`` or ``typing``, which ``seqpack.cli.args`` imports: ``train-tokenizer`` starts fast)."""

from __future__ import annotations

import argparse


def add_input_options(p: argparse.ArgumentParser) -> None:
    """``INPUT ...`` and ``--glob``: files, or folders of them."""
    p.add_argument("inputs", nargs="*", metavar="INPUT", help="text, .jsonl or .parquet files, or folders of them")
    p.add_argument(
        "--glob",
        metavar="PATTERN",
        default=None,
        help="in a folder, read the files whose name or relative path matches this pattern "
        "(e.g. '*.py', 'shards/*.jsonl'; default: .txt .md .rst .jsonl .ndjson .parquet)",
    )


def files(n: int, what: str = "file") -> str:
    """``"21 files"``, ``"1 file"``, ``"21 input files"``.

    >>> files(21), files(1), files(3, "input file")
    ('21 files', '1 file', '3 input files')
    """
    return f"{n} {what}{'s' if n != 1 else ''}"


def report_replacements() -> None:
    """After a command has read its inputs: one line on stderr saying how much invalid UTF-8 was
    replaced with U+FFFD and where (nothing when none was), then the count starts again."""
    import sys

    from seqpack.corpus.readers import REPLACED, replacement_line

    line = replacement_line()
    if line:
        print(f"seqpack: warning: {line}", file=sys.stderr)
    REPLACED.clear()
