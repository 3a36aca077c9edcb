"""Make a release: the new version in its one place, the changelog's "Unreleased" under it, the
install lines naming its wheel.

    python tools/release.py 0.2.0       # or: make release VERSION=0.2.0 (this, then the wheels)

It changes ``src/seqpack/_version.py``, ``CHANGELOG.md`` (what was under "Unreleased" goes under
"0.2.0 (DATE)", and an empty "Unreleased" starts above it) and the wheel's name in the README and
the getting-started page. It refuses a version that is not above the current one, and an empty
"Unreleased" (a release says what changed).
"""

from __future__ import annotations

import argparse
import datetime
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VERSION_FILE = Path("src/seqpack/_version.py")
CHANGELOG = Path("CHANGELOG.md")
INSTALL_PAGES = (Path("README.md"), Path("docs/getting-started.md"))
UNRELEASED = "## Unreleased"


def _parse(version: str) -> tuple[int, ...]:
    if not re.fullmatch(r"\d+\.\d+\.\d+", version):
        raise ValueError(f"a version is MAJOR.MINOR.PATCH, got {version!r}")
    return tuple(int(x) for x in version.split("."))


def current_version(root: Path = ROOT) -> str:
    m = re.search(r'__version__ = "([^"]+)"', (root / VERSION_FILE).read_text())
    assert m, "no __version__ in _version.py"
    return m.group(1)


def release(version: str, *, root: Path = ROOT, date: str | None = None) -> list[Path]:
    """Stamp ``version`` into the tree at ``root``; returns the files changed."""
    old = current_version(root)
    if _parse(version) <= _parse(old):
        raise ValueError(f"version {version} is not above the current {old}")
    log = (root / CHANGELOG).read_text()
    if UNRELEASED not in log:
        raise ValueError(f"{CHANGELOG}: no '{UNRELEASED}' section")
    head, rest = log.split(UNRELEASED, 1)
    body = rest.split("\n## ", 1)[0]
    if not body.strip():
        raise ValueError(f"{CHANGELOG}: '{UNRELEASED}' is empty; say what the release changes")
    day = date or datetime.date.today().isoformat()
    (root / CHANGELOG).write_text(f"{head}{UNRELEASED}\n\n## {version} ({day}){rest}")
    vf = root / VERSION_FILE
    vf.write_text(vf.read_text().replace(f'__version__ = "{old}"', f'__version__ = "{version}"'))
    changed = [root / CHANGELOG, vf]
    for page in INSTALL_PAGES:
        p = root / page
        text = p.read_text()
        new = text.replace(f"seqpack-{old}-", f"seqpack-{version}-")
        if new != text:
            p.write_text(new)
            changed.append(p)
    return changed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("version", help="the new version, MAJOR.MINOR.PATCH")
    args = ap.parse_args(argv)
    try:
        changed = release(args.version)
    except ValueError as e:
        print(f"release: error: {e}", file=sys.stderr)
        return 2
    for p in changed:
        print(f"changed {p.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
