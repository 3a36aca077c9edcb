"""The import graph of ``src/seqpack`` is a strict layering: no upward import, no circle.

Every ``import``/``from ... import`` of a ``seqpack`` module counts, function-local ones included;
only imports under ``if TYPE_CHECKING:`` (never run) are left out. A package may import only
packages below it in :data:`LAYERS`, and the graph of modules has no cycle, with no exception.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "seqpack"

#: lowest first; a package imports only packages of a lower layer (or itself)
LAYERS: tuple[tuple[str, ...], ...] = (
    (
        "_atomic",
        "_ids",
        "_lazy",
        "_parallel",
        "_progress",
        "_native",
        "_resources",
        "_stages",
        "_version",
        "errors",
    ),  # helpers of every layer
    ("corpus",),
    ("tokenizer",),
    ("store",),
    ("packing",),
    ("data", "hf"),  # hf: the drop-in for TRL's pack_dataset (packing only)
    ("nn",),
    ("rl",),  # RL rollouts packed in memory (packing, nn)
    ("tasks",),
    ("pipeline",),
    ("train",),
    ("integrations",),  # the transformers / datasets / TRL entry points, each from its own layer
    ("experiments",),
    ("cli",),
    ("__init__", "__main__"),  # the package's own surface
)
RANK = {pkg: i for i, layer in enumerate(LAYERS) for pkg in layer}


def _modules() -> dict[str, Path]:
    out = {}
    for p in SRC.rglob("*.py"):
        parts = p.relative_to(SRC.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = p
    out["seqpack._native"] = SRC / "_native"  # the compiled core (an extension module)
    return out


def _type_checking_lines(tree: ast.AST) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


def import_graph() -> dict[str, set[str]]:
    """Module -> the seqpack modules it imports (run-time imports, function-local ones included)."""
    mods = _modules()
    graph: dict[str, set[str]] = defaultdict(set)
    for name, path in mods.items():
        if not path.is_file():
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip = _type_checking_lines(tree)
        is_pkg = path.name == "__init__.py"
        for node in ast.walk(tree):
            if getattr(node, "lineno", None) in skip:
                continue
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    pkg = name.split(".") if is_pkg else name.split(".")[:-1]
                    base = ".".join(pkg[: len(pkg) - node.level + 1] + ([node.module] if node.module else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            for t in targets:
                if t.startswith("seqpack"):
                    while t not in mods and "." in t:
                        t = t.rsplit(".", 1)[0]
                    graph[name].add(t)
    return graph


def package_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_every_package_has_a_layer() -> None:
    missing = sorted({package_of(m) for m in _modules()} - set(RANK))
    assert not missing, f"add {missing} to LAYERS"


def test_no_upward_import() -> None:
    bad = []
    for a, targets in import_graph().items():
        for b in targets:
            pa, pb = package_of(a), package_of(b)
            if pa != pb and RANK[pb] > RANK[pa]:
                bad.append(f"{a} -> {b}")
    assert not bad, "upward imports:\n" + "\n".join(sorted(bad))


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for t in sorted(graph.get(m, ())):
            if state.get(t) == 1:
                return stack[stack.index(t) :] + [t]
            if t not in state and (found := visit(t)):
                return found
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state and (found := visit(m)):
            return found
    return None


def test_no_import_circle() -> None:
    found = _cycle(import_graph())
    assert found is None, "import circle: " + " -> ".join(found or [])


@pytest.mark.parametrize(
    "graph, circle",
    [
        ({"a": {"b"}, "b": {"a"}}, True),
        ({"a": {"b"}, "b": {"c"}, "c": set()}, False),
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, True),
    ],
)
def test_the_circle_check_finds_circles(graph: dict[str, set[str]], circle: bool) -> None:
    assert (_cycle(graph) is not None) == circle


def test_the_graph_sees_function_local_imports_and_skips_type_checking() -> None:
    g = import_graph()
    assert "seqpack.tasks" in g["seqpack.pipeline.in_memory"]  # module level
    assert "seqpack.nn.models" in g["seqpack.tasks.clm"]  # inside a method
    assert "seqpack.tokenizer.tokenizer" not in g.get("seqpack.tokenizer.hf_export", set())  # TYPE_CHECKING only


def test_the_compiled_core_is_behind_one_class_in_tokenizer() -> None:
    users = sorted(m for m, ts in import_graph().items() if "seqpack._native" in ts and package_of(m) == "tokenizer")
    assert users == ["seqpack.tokenizer.core"]
