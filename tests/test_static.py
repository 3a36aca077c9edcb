"""The static checks' own inputs stay true: the compiled core's stub is what its build makes, and
ruff and mypy check the same folders.

`make lint` runs ruff and mypy on ``src/`` and the code around it (tests, tools, benchmarks,
examples, the docs generators); mypy reads ``src/seqpack/_native.pyi`` for the compiled core, so a
stub left behind a change to ``csrc/module.cpp`` would check the Python code against an interface
that no longer exists.
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


def test_the_static_checks_cover_every_python_file() -> None:
    """``make lint`` runs ruff on the whole checkout and mypy on its ``files`` (``pyproject.toml``),
    which hold every Python file of the repository (a new top-level folder must join them)."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # Python 3.10: tomllib's predecessor
        tomllib = pytest.importorskip("tomli")
    make = (ROOT / "Makefile").read_text()
    assert "ruff check .\n" in make and "ruff format --check .\n" in make, "make lint runs ruff on the checkout"
    roots = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]["files"]
    ours = [p for p in ROOT.rglob("*.py") if not ({".venv", "build", "site", ".git"} & set(p.relative_to(ROOT).parts))]
    ours = [
        p
        for p in ours
        if not any(part.startswith(".") or part.endswith(".egg-info") for part in p.relative_to(ROOT).parts)
    ]
    unchecked = [
        str(p.relative_to(ROOT)) for p in ours if not any(p.relative_to(ROOT).as_posix().startswith(r) for r in roots)
    ]
    assert not unchecked, f"Python files outside mypy's files: {unchecked[:5]}"
