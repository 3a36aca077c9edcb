"""The release step: the version in one place, the changelog's Unreleased under it, the install lines."""

from __future__ import annotations

import importlib.util
import re
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _tool():
    spec = importlib.util.spec_from_file_location("release_tool", ROOT / "tools" / "release.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["release_tool"] = mod
    try:
        spec.loader.exec_module(mod)
    finally:
        del sys.modules["release_tool"]
    return mod


def _copy(tmp_path: Path, tool) -> Path:
    for rel in (tool.VERSION_FILE, tool.CHANGELOG, *tool.INSTALL_PAGES):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, tmp_path / rel)
    return tmp_path


def test_the_tree_names_one_version() -> None:
    tool = _tool()
    from seqpack import __version__

    assert tool.current_version() == __version__
    log = (ROOT / "CHANGELOG.md").read_text()
    first = re.search(r"^## (.+)$", log, re.M)
    assert first and first.group(1) == "Unreleased"  # a release starts a new, empty one on top
    for page in tool.INSTALL_PAGES:
        named = set(re.findall(r"seqpack-(\d+\.\d+\.\d+)-", (ROOT / page).read_text()))
        assert named <= {__version__}, (page, named)


def test_a_release_moves_unreleased_under_the_version(tmp_path) -> None:
    tool = _tool()
    root = _copy(tmp_path, tool)
    old = tool.current_version(root)
    major, minor, _ = map(int, old.split("."))
    new = f"{major}.{minor + 1}.0"
    before = (root / "CHANGELOG.md").read_text()
    unreleased = before.split("## Unreleased", 1)[1].split("\n## ", 1)[0]
    tool.release(new, root=root, date="2026-12-01")
    log = (root / "CHANGELOG.md").read_text()
    assert f"## Unreleased\n\n## {new} (2026-12-01){unreleased}" in log
    assert tool.current_version(root) == new
    readme = (root / "README.md").read_text()
    assert f"seqpack-{new}-" in readme and f"seqpack-{old}-" not in readme
    with pytest.raises(ValueError, match="empty"):  # the new Unreleased says nothing yet
        tool.release(f"{major}.{minor + 2}.0", root=root)
    with pytest.raises(ValueError, match="not above"):
        tool.release(old, root=root)
    with pytest.raises(ValueError, match=r"MAJOR\.MINOR\.PATCH"):
        tool.release("1.0", root=root)


@pytest.mark.parametrize("version", ["0.\u0662.0", "0.02.0", "00.3.0", "1.0.0 ", "1.0.0\n", "v1.0.0", "1.0.0-rc1"])
def test_a_version_is_ascii_digits_without_leading_zeros(tmp_path, version: str) -> None:
    tool = _tool()
    root = _copy(tmp_path, tool)
    before = {rel: (root / rel).read_text() for rel in (tool.VERSION_FILE, tool.CHANGELOG, *tool.INSTALL_PAGES)}
    with pytest.raises(ValueError, match="ASCII digits without leading zeros"):
        tool.release(version, root=root)
    assert {rel: (root / rel).read_text() for rel in before} == before


@pytest.mark.parametrize("broken", ["missing page", "missing changelog", "page without the wheel", "no version line"])
def test_a_release_that_cannot_finish_changes_nothing(tmp_path, broken: str) -> None:
    tool = _tool()
    root = _copy(tmp_path, tool)
    page, vf = root / tool.INSTALL_PAGES[-1], root / tool.VERSION_FILE
    if broken == "missing page":
        page.unlink()
    elif broken == "missing changelog":
        (root / tool.CHANGELOG).unlink()
    elif broken == "page without the wheel":
        page.write_text(re.sub(r"seqpack-\d+\.\d+\.\d+-", "seqpack-X-", page.read_text()))
    else:
        vf.write_text(vf.read_text() + f'__version__ = "{tool.current_version(root)}"\n')  # two stamps
    files = [root / rel for rel in (tool.VERSION_FILE, tool.CHANGELOG, *tool.INSTALL_PAGES)]
    before = {p: p.read_text() for p in files if p.exists()}
    major, minor, _ = map(int, tool.current_version(root).split("."))
    with pytest.raises(ValueError, match=r"no such file|nothing was changed"):
        tool.release(f"{major}.{minor + 1}.0", root=root, date="2026-12-01")
    assert {p: p.read_text() for p in files if p.exists()} == before
