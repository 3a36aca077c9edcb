"""The static checks' own inputs stay true: the compiled core's stub is what its build makes, and
ruff and mypy check the same folders.

`make lint` runs ruff and mypy on ``src/`` and the code around it (tests, tools, benchmarks,
examples, the docs generators); mypy reads ``src/seqpack/_native.pyi`` for the compiled core, so a
stub left behind a change to ``csrc/module.cpp`` would check the Python code against an interface
that no longer exists.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_the_native_stub_is_what_the_built_module_gives() -> None:
    pytest.importorskip("mypy.stubgen")
    spec = importlib.util.spec_from_file_location("gen_stub", ROOT / "csrc" / "gen_stub.py")
    assert spec is not None and spec.loader is not None
    gen = importlib.util.module_from_spec(spec)
    sys.modules["gen_stub"] = gen
    try:
        spec.loader.exec_module(gen)
        want = gen.stub()
    finally:
        del sys.modules["gen_stub"]
    got = (ROOT / "src" / "seqpack" / "_native.pyi").read_text()
    assert got == want, "src/seqpack/_native.pyi is stale: run python csrc/gen_stub.py"


def test_ruff_and_mypy_check_the_same_folders() -> None:
    """The Makefile's ``LINTED`` (ruff's folders) are mypy's ``files`` (``pyproject.toml``)."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # Python 3.10: tomllib's predecessor
        tomllib = pytest.importorskip("tomli")
    linted = re.search(r"^LINTED := (.+)$", (ROOT / "Makefile").read_text(), re.MULTILINE)
    assert linted is not None, "the Makefile's lint target names its folders in LINTED"
    mypy = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    files = {"src" if f == "src/seqpack" else f for f in mypy["files"]}  # the package: src/'s code
    assert files == set(linted.group(1).split())
