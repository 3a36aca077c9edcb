"""The code blocks of the README and the docs, as the test suite runs them.

A fenced block is run when its language is ``sh``, ``bash`` or ``python``; one preceded by
``<!-- not run: REASON -->`` is not, and REASON must be one of ``NOT_RUN``. Every other block is
output or data, and says so by its language (``text``, ``json``, ...): a block with no language is
refused, so that nothing meant to run is skipped by accident.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
RUN = ("sh", "bash", "python")
SHOWN = ("text", "json", "jinja", "yaml", "toml", "console", "diff")
#: why a block may be left out, and nothing else: set-up commands (they install, or run this suite),
#: work that needs hardware this machine does not have
NOT_RUN = ("set-up", "needs a GPU", "needs a cluster")
FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<lang>[\w+-]*)[^\n]*\n(?P<body>.*?)^(?P=indent)```[ \t]*$", re.M | re.S)
MARK = re.compile(r"<!--\s*not run:\s*(?P<why>[^>]*?)\s*-->\s*$")


@dataclass(frozen=True)
class Block:
    page: str
    line: int
    lang: str
    code: str
    not_run: str | None  # the reason, when the page marks it

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def pages() -> list[Path]:
    """README.md and every page under docs/ (the generated pages are not files)."""
    return [ROOT / "README.md", *sorted(p for p in DOCS.rglob("*.md") if "_gen" not in p.parts)]


def blocks(path: Path) -> list[Block]:
    text = path.read_text(encoding="utf-8")
    out = []
    for m in FENCE.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        before = text[: m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        mark = MARK.search(before)
        body = textwrap.dedent(m.group("body")) if m.group("indent") else m.group("body")
        out.append(Block(str(path.relative_to(ROOT)), line, m.group("lang"), body, mark.group("why") if mark else None))
    return out
