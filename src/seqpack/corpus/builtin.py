"""The built-in corpus: the Python documentation that ships with the interpreter.

Documents are the ``pydoc_data.topics`` help topics (sorted by name), then one
document per standard-library module holding its module, class and function
docstrings (read with ``ast``: no module is imported, so nothing runs). Test
packages and site-packages are left out. About 2 MB on CPython 3.11.

Extracting takes a few seconds, so the result is cached (JSON lines) under
``$SEQPACK_CACHE_DIR`` (default ``~/.cache/seqpack``), keyed by the Python
version and standard-library path.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import sys
import sysconfig
import threading
from pathlib import Path

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (a cost in every start-up)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

_SKIP_PARTS = {"test", "tests", "idle_test", "site-packages", "dist-packages", "__pycache__"}
_VERSION = 1
#: one build at a time in a process: CPython 3.11's ``ast.parse`` is not safe in two threads at once
#: ("AST constructor recursion depth mismatch"), and a second caller then reads the first's cache
_BUILDING = threading.Lock()


def cache_dir() -> Path:
    env = os.environ.get("SEQPACK_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "seqpack"


def _stdlib_files(root: Path) -> list[Path]:
    out = []
    for p in root.rglob("*.py"):
        parts = p.relative_to(root).parts
        if any(part in _SKIP_PARTS or part.startswith("test_") for part in parts):
            continue
        out.append(p)
    return sorted(out, key=lambda p: p.relative_to(root).as_posix())


def module_docstrings(path: Path) -> str:
    """Module, class and function docstrings of one source file, blank-line separated."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
    except (SyntaxError, ValueError):
        return ""
    kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    docs = [ast.get_docstring(n) for n in ast.walk(tree) if isinstance(n, kinds)]
    return "\n\n".join(d for d in docs if d)


def extract_python_docs() -> list[str]:
    """Build the corpus from scratch (no cache)."""
    from pydoc_data.topics import topics

    docs = [topics[k] for k in sorted(topics)]
    root = Path(sysconfig.get_paths()["stdlib"])
    for path in _stdlib_files(root):
        text = module_docstrings(path)
        if text:
            docs.append(text)
    return docs


def _cached(name: str, build: Callable[[], list[Any]], use_cache: bool) -> list[Any]:
    """``build()``, cached as JSON lines under `cache_dir` (keyed by Python version and stdlib path)."""
    with _BUILDING:
        return _cached_locked(name, build, use_cache)


def _cached_locked(name: str, build: Callable[[], list[Any]], use_cache: bool) -> list[Any]:
    if not use_cache:
        return build()
    stdlib = sysconfig.get_paths()["stdlib"]
    key = hashlib.sha256(f"{_VERSION}|{sys.version}|{stdlib}".encode()).hexdigest()[:16]
    path = cache_dir() / f"{name}-{key}.jsonl"
    if path.exists():
        try:
            with open(path, encoding="utf-8") as f:
                return [json.loads(line) for line in f]
        except (OSError, ValueError):
            pass  # a damaged cache is rebuilt below
    items = build()
    try:
        from seqpack._atomic import write_text_atomic

        write_text_atomic(path, "".join(json.dumps(d) + "\n" for d in items))
    except OSError:
        pass  # caching is an optimisation only
    return items


def python_docs(*, use_cache: bool = True) -> list[str]:
    """The built-in corpus as a list of documents (cached after the first call).

    Args:
        use_cache: read and write the cache (`False`: build the corpus again).

    Returns:
        The documents: the standard library's documentation, one text each.
    """
    return _cached("python-docs", extract_python_docs, use_cache)


def extract_docstrings() -> list[dict[str, str]]:
    """``{"text", "package"}`` for every docstring of every module inside a standard-library package."""
    root = Path(sysconfig.get_paths()["stdlib"])
    kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    out = []
    for path in _stdlib_files(root):
        parts = path.relative_to(root).parts
        if len(parts) < 2:
            continue  # a top-level module, not a package
        try:
            tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
        except (SyntaxError, ValueError):
            continue
        out += [
            {"text": d, "package": parts[0]}
            for n in ast.walk(tree)
            if isinstance(n, kinds)
            if (d := ast.get_docstring(n))
        ]
    return out


def python_docstrings(
    *, packages: int = 8, per_package: int = 600, seed: int = 0, use_cache: bool = True
) -> list[dict[str, Any]]:
    """A labelled set from the built-in corpus: which standard-library package a docstring comes from.

    The ``packages`` packages with the most docstrings, ``per_package`` docstrings of each drawn at
    random (``seed``), shuffled: records ``{"text", "label"}`` (the package name).

    Args:
        packages: how many packages (the classes).
        per_package: docstrings drawn from each.
        seed: the draw's seed.
        use_cache: read and write the cache.

    Returns:
        The records `{"text", "label"}`, shuffled.
    """
    import random

    items = _cached("python-docstrings", extract_docstrings, use_cache)
    by: dict[str, list[str]] = {}
    for it in items:
        by.setdefault(it["package"], []).append(it["text"])
    top = sorted(by, key=lambda k: (-len(by[k]), k))[:packages]
    rng = random.Random(seed)
    records = [{"text": t, "label": k} for k in sorted(top) for t in rng.sample(by[k], min(per_package, len(by[k])))]
    rng.shuffle(records)
    return records
