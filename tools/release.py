"""Make a release: the new version in its one place, the changelog's "Unreleased" under it, the
install lines naming its wheel.

    python tools/release.py 0.2.0       # or: make release VERSION=0.2.0 (this, then the wheels)

It changes ``src/seqpack/_version.py``, ``CHANGELOG.md`` (what was under "Unreleased" goes under
"0.2.0 (DATE)", and an empty "Unreleased" starts above it) and the wheel's name in the README and
the getting-started page. It refuses a version that is not MAJOR.MINOR.PATCH in ASCII digits
without leading zeros, or not above the current one, an empty "Unreleased" (a release says what
changed), and a file missing or not holding what it replaces, before changing any file.
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


#: MAJOR.MINOR.PATCH in ASCII digits, no leading zeros: the one spelling the wheel, the README and
#: the tag agree on (``\d`` takes other scripts' digits; ``0.02.0`` names the wheel ``0.2.0``)
VERSION_RE = re.compile(r"(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)", re.ASCII)


def _parse(version: str) -> tuple[int, ...]:
    m = VERSION_RE.fullmatch(version)
    if not m:
        raise ValueError(
            f"a version is MAJOR.MINOR.PATCH in ASCII digits without leading zeros (e.g. 0.2.0), got {version!r}"
        )
    return tuple(int(x) for x in m.groups())


def current_version(root: Path = ROOT) -> str:
    m = re.search(r'__version__ = "([^"]+)"', (root / VERSION_FILE).read_text())
    assert m, "no __version__ in _version.py"
    return m.group(1)


def release(version: str, *, root: Path = ROOT, date: str | None = None) -> list[Path]:
    """Stamp ``version`` into the tree at ``root``; returns the files changed. Every file is read and
    checked first (present, holding what is replaced): a refusal leaves the tree as it was."""
    _parse(version)
    for rel in (VERSION_FILE, CHANGELOG, *INSTALL_PAGES):
        if not (root / rel).is_file():
            raise ValueError(f"{rel}: no such file; nothing was changed")
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
    vf = root / VERSION_FILE
    stamp = f'__version__ = "{old}"'
    if vf.read_text().count(stamp) != 1:
        raise ValueError(f"{VERSION_FILE}: expected one line {stamp}; nothing was changed")
    day = date or datetime.date.today().isoformat()
    new_text = {
        root / CHANGELOG: f"{head}{UNRELEASED}\n\n## {version} ({day}){rest}",
        vf: vf.read_text().replace(stamp, f'__version__ = "{version}"'),
    }
    for page in INSTALL_PAGES:
        p = root / page
        text = p.read_text()
        if f"seqpack-{old}-" not in text:
            raise ValueError(f"{page}: names no wheel seqpack-{old}-*; nothing was changed")
        new_text[p] = text.replace(f"seqpack-{old}-", f"seqpack-{version}-")
    for p, text in new_text.items():  # every check passed: now the writes
        p.write_text(text)
    return list(new_text)


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
