"""The static checks' own inputs stay true: the compiled core's stub is what its build makes.

`make lint` runs ruff and mypy on ``src/``; mypy reads ``src/seqpack/_native.pyi`` for the
compiled core, so a stub left behind a change to ``csrc/module.cpp`` would check the Python code
against an interface that no longer exists.
"""

from __future__ import annotations

import importlib.util
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
