"""MkDocs hook: the pages that are generated, never written by hand.

- ``reference/cli.md``: every subcommand's ``--help``, from the argparse parsers themselves;
- ``reference/api/*.md``: one page per package, its ``__all__`` rendered from the docstrings by
  mkdocstrings;
- ``benchmarks/runs.md``: every stored result in ``benchmarks/results/``, with the machine, date,
  command and versions it records.

Nothing here reaches the network; ``mkdocs build --strict`` runs it in the test suite.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"

#: the API pages: page name -> package (each rendered from its ``__all__``)
API = {
    "seqpack": "seqpack",
    "corpus": "seqpack.corpus",
    "tokenizer": "seqpack.tokenizer",
    "store": "seqpack.store",
    "packing": "seqpack.packing",
    "tasks": "seqpack.tasks",
    "vision": "seqpack.tasks.vision",
    "pipeline": "seqpack.pipeline",
    "data": "seqpack.data",
    "nn": "seqpack.nn",
    "rl": "seqpack.rl",
    "train": "seqpack.train",
    "hf": "seqpack.hf",
    "integrations": "seqpack.integrations",
}


def cli_reference() -> str:
    """Markdown of ``seqpack --help`` and each subcommand's help, at a fixed width."""
    os.environ["COLUMNS"] = "100"  # argparse wraps to the terminal: the page must not depend on it
    from seqpack.cli.main import COMMANDS, build_parser

    parts = [
        "# CLI reference",
        "",
        "Generated from the command's own parsers when the site is built (`seqpack COMMAND --help` "
        "prints the same). User errors print one line `seqpack: error: ...` and exit with code 2.",
        "",
        "```text",
        build_parser("").format_help().rstrip(),
        "```",
        "",
    ]  # "": as `seqpack --help` builds it
    for name in COMMANDS:
        try:
            sub = build_parser(name)._subparsers._group_actions[0].choices[name]  # type: ignore[union-attr,index]  # argparse's private parts
        except ModuleNotFoundError as e:  # the docs extra alone: this command's options need an extra
            parts += [
                f"## seqpack {name}",
                "",
                f"Its options are built from `{e.name}`, which this site was built "
                f"without: `pip install 'seqpack[torch]'` and `seqpack {name} --help` prints them.",
                "",
            ]
            continue
        parts += [f"## seqpack {name}", "", "```text", sub.format_help().rstrip(), "```", ""]
    return "\n".join(parts)


def public_names(package: str) -> list[str]:
    """A package's ``__all__``, read from its source without importing it (the site builds from the
    docs extra alone: no torch)."""
    import ast

    base = ROOT / "src" / Path(*package.split("."))
    init = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
    for node in ast.walk(ast.parse(init.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return [str(v) for v in ast.literal_eval(node.value)]
    return []


def api_page(package: str) -> str:
    names = public_names(package)
    doc = [f"# `{package}`", "", f"The public names of `{package}` (its `__all__`), from their docstrings.", ""]
    members = "\n".join(f"        - {n}" for n in sorted(names) if not n.startswith("_"))
    doc += [f"::: {package}", "    options:", "      show_root_heading: false", "      members:", members, ""]
    return "\n".join(doc)


def _machine(d: dict) -> str:
    meta = d.get("meta", d)
    m = meta.get("machine") if isinstance(meta, dict) else None
    if isinstance(m, dict):
        return f"{m.get('cpus', '?')} CPUs, {m.get('processor', '')}, Python {m.get('python', '?')}"
    for key in ("gpu", "device"):
        if isinstance(d.get(key), str):
            return d[key]
    return "see the file"


def _record(name: str, d: dict) -> tuple[str, str, str, str]:
    meta: dict[str, Any] = d["meta"] if isinstance(d.get("meta"), dict) else {}
    command = meta.get("command") or d.get("command") or ""
    versions = meta.get("versions") or {k: d[k] for k in ("torch", "transformers", "trl") if isinstance(d.get(k), str)}
    vs = ", ".join(f"{k} {v}" for k, v in versions.items())
    date = str(meta.get("date", ""))[:10]
    return _machine(d), date, f"`{command}`" if command else "", vs


def runs_page() -> str:
    rows = []
    for path in sorted(RESULTS.glob("*.json*")):
        text = path.read_text(encoding="utf-8")
        docs = (
            [json.loads(ln) for ln in text.splitlines() if ln.strip()]
            if path.suffix == ".jsonl"
            else [json.loads(text)]
        )
        d = docs[0] if isinstance(docs[0], dict) else {}
        machine, date, command, versions = _record(path.name, d)
        n = f"{len(docs)} records" if path.suffix == ".jsonl" else ""
        rows.append(f"| `{path.name}` | {machine} | {date} | {command} | {versions} {n} |")
    return "\n".join(
        [
            "# Every stored run",
            "",
            "Each figure in these pages comes from a file in `benchmarks/results/`; this table, generated from those "
            "files when the site is built, says where and how each was made. A text file beside them holds a "
            "profile. The files keep every raw repetition, not only the medians.",
            "",
            "| result | machine | date | command | versions |",
            "|---|---|---|---|---|",
            *rows,
            "",
        ]
    )


def on_files(files: Files, config: Any) -> Files:
    pages = {"reference/cli.md": cli_reference(), "benchmarks/runs.md": runs_page()}
    pages.update({f"reference/api/{name}.md": api_page(pkg) for name, pkg in API.items()})
    for uri, content in pages.items():
        files.append(File.generated(config, uri, content=content))
    return files


class _DoctestFences:
    """A Markdown preprocessor for docstrings: a doctest (``>>>`` lines and the output after them, up to
    a blank line) becomes a fenced ``pycon`` block, so that it renders as the session it is and not
    as nested quotes. Text already inside a fence is left alone."""

    def run(self, lines: list[str]) -> list[str]:
        out: list[str] = []
        fence, i = None, 0
        while i < len(lines):
            line, stripped = lines[i], lines[i].lstrip()
            if stripped.startswith(("```", "~~~")):
                fence = None if fence else stripped[:3]
            if fence is None and stripped.startswith(">>>"):
                indent = line[: len(line) - len(stripped)]
                block = []
                while i < len(lines) and lines[i].strip():
                    block.append(lines[i][len(indent) :] if lines[i].startswith(indent) else lines[i].lstrip())
                    i += 1
                out += ["", f"{indent}```pycon", *[indent + b for b in block], f"{indent}```", ""]
                continue
            if fence is None and line.endswith("::") and not line.rstrip(":").endswith(" "):
                line = line[:-1]  # reST's "text::" before a literal block reads "text:" in Markdown
            out.append(line)
            i += 1
        return out


def _doctest_extension() -> Any:
    from markdown.extensions import Extension
    from markdown.preprocessors import Preprocessor

    class Pre(Preprocessor):
        run = _DoctestFences.run

    class DoctestFences(Extension):
        def extendMarkdown(self, md: Any) -> None:
            md.preprocessors.register(Pre(md), "seqpack_doctests", 40)  # before fenced code (25)

    return DoctestFences()


def on_config(config: Any) -> Any:
    config.markdown_extensions.append(_doctest_extension())
    return config


on_config.mkdocs_priority = 100  # type: ignore[attr-defined]  # mkdocs reads it off the function; before mkdocstrings copies the extensions for docstrings
