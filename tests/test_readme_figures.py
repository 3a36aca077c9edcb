"""Every number in the measurement tables of the README and the docs is found in the stored result it cites.

A table of measurements cites its evidence: a row names ``results/NAME.json`` (or ``.jsonl``), or the
paragraph just above the table names the files for all its rows. Each number in a row's measured
cells (every cell but the first, which says what was run) must equal, at the precision the README
prints, a number in one of those files (a JSON number, or a number inside a JSON string such as the
stored command); a percentage may also be stored as a fraction. So a figure cannot drift from its
evidence: re-running a benchmark and forgetting the README, or editing the README by hand, fails here.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
README = ROOT / "README.md"
#: the pages whose tables are checked: the README and every docs page (the generated ones are not files)
PAGES = [README, *sorted(p for p in (ROOT / "docs").rglob("*.md") if "_gen" not in p.parts)]
BENCHMARK_PAGES = ("docs/benchmarks/",)  # every table of these pages cites its files
FILE = re.compile(r"([A-Za-z0-9_./-]+\.jsonl?)\b")
NUMBER = re.compile(r"(?<![\w.])(\d{1,3}(?:,\d{3})+(?!\d)|\d+)(\.\d+)?(?![\d.])")  # a unit may follow: 1.9x, 48 MB
CAPTION_LINES = 8  # how far above a table its citing paragraph may start
STORED = {p.name for p in RESULTS.glob("*.json*")}


def _cited(text: str) -> list[str]:
    """The result files a text cites: a path through ``results/``, or the name of a stored result
    (``chat.jsonl`` in a docs page is the user's data, not evidence)."""
    return [f for f in FILE.findall(text) if "results/" in f or Path(f).name in STORED]


def _tables(text: str) -> list[tuple[int, list[str], list[str]]]:
    """``(line of the header, caption files, row lines)`` for every markdown table."""
    lines = text.splitlines()
    out, i = [], 0
    while i < len(lines):
        if lines[i].startswith("|") and i + 1 < len(lines) and set(lines[i + 1]) <= set("|-: "):
            j = i + 2
            while j < len(lines) and lines[j].startswith("|"):
                j += 1
            caption = [ln for ln in lines[max(0, i - CAPTION_LINES) : i] if not ln.startswith("|")]
            out.append((i + 1, _cited(" ".join(caption)), lines[i + 2 : j]))
            i = j
        else:
            i += 1
    return out


def _numbers_in(obj: object, out: list[float]) -> None:
    if isinstance(obj, bool):
        return
    if isinstance(obj, (int, float)):
        out.append(float(obj))
    elif isinstance(obj, str):
        out += [float(m.group(0)) for m in re.finditer(r"\d+(?:\.\d+)?(?:e-?\d+)?", obj)]
    elif isinstance(obj, dict):
        for k, v in obj.items():
            _numbers_in(k, out)
            _numbers_in(v, out)
    elif isinstance(obj, list):
        for v in obj:
            _numbers_in(v, out)


def _evidence(name: str) -> list[float]:
    path = RESULTS / Path(name).name
    assert path.is_file(), f"a page cites {name}, which is not in benchmarks/results/"
    text = path.read_text(encoding="utf-8")
    docs = [json.loads(ln) for ln in text.splitlines() if ln.strip()] if path.suffix == ".jsonl" else [json.loads(text)]
    out: list[float] = []
    _numbers_in(docs, out)
    return out


def _figures(cell: str) -> list[tuple[str, float, int, bool]]:
    """``(as printed, value, decimals, may be a percentage)`` for each number in a cell; code spans
    and issue numbers are names, not figures. In a cell that prints a percentage any number may be
    one (ranges such as "7.6–24.6%" print the sign once)."""
    cell = re.sub(r"`[^`]*`", " ", cell)
    cell = re.sub(r"issues? \d+( and \d+)?", " ", cell)
    percent = "%" in cell
    out = []
    for m in NUMBER.finditer(cell):
        value, decimals = float(m.group(1).replace(",", "") + (m.group(2) or "")), len(m.group(2) or ".") - 1
        if cell[m.end() : m.end() + 1] == "K":  # thousands: "217K", "18.3K"
            value, decimals = value * 1000, decimals - 3
        elif cell[m.end() : m.end() + 1] == "M":  # millions: "33.2M tokens/s"
            value, decimals = value * 1e6, decimals - 6
        out.append((m.group(0), value, decimals, percent))
    return out


def _found(value: float, decimals: int, percent: bool, pool: list[float]) -> bool:
    half = 0.5 * 10.0**-decimals + 1e-9  # what rounding to the printed digits can hide
    targets = [(value, half)] + ([(value / 100, half / 100)] if percent else [])
    return any(abs(abs(v) - t) <= h for t, h in targets for v in pool)  # signs are printed apart


def _name(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


def _rows() -> list[tuple[str, list[str], str]]:
    rows = []
    for page in PAGES:
        for line_no, caption, body in _tables(page.read_text(encoding="utf-8")):
            for row in body:
                files = _cited(row) or caption
                if files:
                    rows.append((f"{_name(page)}:{line_no}", files, row))
    return rows


def test_measurement_tables_cite_results():
    """Every table with a 'measured' column, and every table of the benchmark pages, cites files."""
    uncited = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        lines = text.splitlines()
        everything = _name(page).startswith(BENCHMARK_PAGES)
        for line_no, caption, body in _tables(text):
            if "measured" in lines[line_no - 1] or everything:
                uncited += [f"{_name(page)}:{line_no}: {row[:100]}" for row in body if not (_cited(row) or caption)]
    assert not uncited, "rows that cite no result file:\n" + "\n".join(uncited)


def test_the_pages_hold_measurement_tables():
    """The check reads the pages where the figures are (an empty selection would pass anything)."""
    where = {w.split(":")[0] for w, _, _ in _rows()}
    assert {"README.md", "docs/benchmarks/index.md", "docs/guides/preference.md"} <= where, where


@pytest.mark.parametrize("where,files,row", _rows(), ids=lambda x: x if isinstance(x, str) and ".md:" in x else "")
def test_every_figure_is_in_its_result(where, files, row):
    pool = [x for f in files for x in _evidence(f)]
    cells = row.strip().strip("|").split("|")[1:]
    missing = [
        printed
        for cell in cells
        for printed, value, decimals, percent in _figures(cell)
        if not _found(value, decimals, percent, pool)
    ]
    assert not missing, f"{where}: {missing} not found in {files}: {row[:120]}"


def test_the_check_can_fail():
    """The matcher itself: rounding at the printed precision, percentages as fractions, nothing else."""
    pool = [1.8743, 0.142, 8143852.0]
    assert _found(1.874, 3, False, pool) and _found(1.87, 2, False, pool)
    assert not _found(1.875, 3, False, pool) and not _found(1.9, 1, False, pool[1:])
    assert _found(14.2, 1, True, pool) and not _found(14.3, 1, True, pool)
    assert _found(8143852, 0, False, pool) and not _found(8143853, 0, False, pool)
    assert [f[:3] for f in _figures("**8,143,852 packs** in 0.48 s, `--max-len 512`, issue 30, 1.9x, 14.2%")] == [
        ("8,143,852", 8143852.0, 0),
        ("0.48", 0.48, 2),
        ("1.9", 1.9, 1),
        ("14.2", 14.2, 1),
    ]
    assert [f[1:3] for f in _figures("217K -> 18.3K")] == [(217000.0, -3), (18300.0, -2)]
    ((_, value, decimals, _),) = _figures("33.2M tokens/s")
    assert value == pytest.approx(33.2e6) and decimals == -5
    assert _found(217000.0, -3, False, [216_600.0]) and not _found(217000.0, -3, False, [216_400.0])
