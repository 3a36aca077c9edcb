"""What each command reads and writes, declared once per command, and the one guard over them
that `seqpack.cli.main.main` runs before any handler: no command's output replaces its input, an
existing output file is replaced only with ``--overwrite``. Light (no ``dataclasses`` or
``typing``), since every command imports it."""

from __future__ import annotations

import argparse

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from typing import Any


def declare_paths(
    p: argparse.ArgumentParser,
    *,
    reads: tuple[str, ...] = (),
    files: dict[str, str] | None = None,
    dirs: tuple[str, ...] = (),
) -> None:
    """Say which options (by ``dest``) name what a command reads and what it writes: ``files`` maps
    each file option to the format it writes (``json``, ``png``: an existing file is replaced only
    if it is one seqpack wrote), ``dirs`` the directory options.

        declare_paths(p, reads=("histogram",), files={"out": "json", "plot": "png"})
    """
    files = files or {}
    p.set_defaults(paths_read=reads, paths_file=files, paths_dir=dirs)


def check_paths(args: argparse.Namespace) -> None:
    """The one guard over the outputs `declare_paths` declared (`seqpack._atomic.check_outputs`)."""
    files, dirs = getattr(args, "paths_file", {}), getattr(args, "paths_dir", ())
    if not any(getattr(args, dest, None) for dest in (*files, *dirs)):
        return
    from seqpack._atomic import check_outputs

    def values(dest: str) -> list[Any]:
        v = getattr(args, dest, None)
        return list(v) if isinstance(v, (list, tuple)) else [v]

    inputs = [v for dest in getattr(args, "paths_read", ()) for v in values(dest)]
    outputs = {_flag(dest): (getattr(args, dest, None), fmt) for dest, fmt in files.items()}
    outputs |= {_flag(dest): (getattr(args, dest, None), None) for dest in dirs}
    check_outputs(outputs, inputs, overwrite=bool(getattr(args, "overwrite", False)))


def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")
