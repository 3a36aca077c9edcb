"""Render a report page with headless Chromium to a PNG, as a person would see it in a browser.

    python -m seqpack.experiments.screenshot demo_out/report.html demo_out/report.png

Needs Debian's ``chromium`` package (or any Chromium/Chrome on PATH); nothing is downloaded.
The page is rendered at ``width`` CSS pixels in a tall window and the blank space below it is
cropped. `missing_images` lists the ``<img>`` files a page names that do not exist or are
not PNGs (what a browser would show as broken images).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from seqpack.errors import UserError

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "chrome")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def find_browser() -> str | None:
    """The first Chromium-like browser on PATH, or None."""
    return next((p for b in BROWSERS if (p := shutil.which(b))), None)


def missing_images(page: Path) -> list[str]:
    """``src`` of each ``<img>`` of ``page`` whose file is absent or not a PNG."""
    srcs = re.findall(r"<img\s[^>]*src=['\"]([^'\"]+)['\"]", page.read_text(encoding="utf-8"))
    bad = []
    for src in srcs:
        p = page.parent / src
        if not p.is_file() or p.read_bytes()[:8] != PNG_MAGIC:
            bad.append(src)
    return bad


def screenshot(page: Path, png: Path, *, width: int = 1280, height: int = 12000, timeout: float = 120.0) -> Path:
    """Render ``page`` to ``png`` (cropped to the content)."""
    browser = find_browser()
    if browser is None:
        raise UserError("no Chromium on PATH; install Debian's chromium package (apt-get install chromium)")
    page, png = Path(page).resolve(), Path(png).resolve()
    if not page.is_file():
        raise UserError(f"{page}: no such page")
    with tempfile.TemporaryDirectory(prefix="seqpack-chromium-") as profile:
        cmd = [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--force-device-scale-factor=1",
            f"--user-data-dir={profile}",
            f"--window-size={width},{height}",
            f"--screenshot={png}",
            page.as_uri(),
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0 or not png.is_file():
        raise RuntimeError(f"chromium failed ({proc.returncode}): {proc.stderr.strip()[-400:]}")
    _crop(png)
    return png


def _crop(png: Path, margin: int = 24) -> None:
    """Cut the blank rows below the content."""
    import numpy as np
    from PIL import Image

    img = Image.open(png).convert("RGB")
    a = np.asarray(img)
    ink = np.flatnonzero((a < 245).any(axis=(1, 2)))
    if ink.size:
        img.crop((0, 0, img.width, min(img.height, int(ink[-1]) + margin))).save(png)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m seqpack.experiments.screenshot REPORT.html OUT.png", file=sys.stderr)
        return 2
    bad = missing_images(Path(args[0]))
    if bad:
        print(f"broken images: {', '.join(bad)}", file=sys.stderr)
        return 1
    print(screenshot(Path(args[0]), Path(args[1])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
