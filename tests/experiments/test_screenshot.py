"""The report as a browser shows it: headless Chromium renders it to a PNG (skipped without Chromium)."""

from __future__ import annotations

from pathlib import Path

import pytest

from seqpack.experiments.report import plot_speedups, write_html
from seqpack.experiments.screenshot import (
    PNG_MAGIC,
    find_browser,
    missing_images,
    screenshot,
)


def page(tmp_path: Path) -> Path:
    img = plot_speedups({"paper regime": (1.93, 2.0), "fine-tune": (2.9, 3.25)}, tmp_path / "s.png", title="t")
    return write_html(
        tmp_path / "report.html",
        "demo",
        [("What", [["claim", "met"], ["x", "yes"]]), ("Plot", img), ("Why", "because")],
    )


def test_missing_images_finds_broken_ones(tmp_path: Path) -> None:
    p = page(tmp_path)
    assert missing_images(p) == []
    (tmp_path / "s.png").write_bytes(b"not a png")
    assert missing_images(p) == ["s.png"]
    (tmp_path / "s.png").unlink()
    assert missing_images(p) == ["s.png"]


@pytest.mark.skipif(find_browser() is None, reason="no Chromium on PATH (Debian: apt-get install chromium)")
def test_chromium_renders_the_report(tmp_path: Path) -> None:
    import numpy as np
    from PIL import Image

    png = screenshot(page(tmp_path), tmp_path / "shot.png", width=900)
    assert png.read_bytes()[:8] == PNG_MAGIC
    img = np.asarray(Image.open(png).convert("RGB"))
    assert img.shape[1] == 900 and 300 < img.shape[0] < 3000  # cropped to the content
    assert (img < 128).any() and (img.std(axis=(0, 1)) > 0).all()  # text and the plot's colours, not a blank page


def test_screenshot_says_what_is_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import seqpack.experiments.screenshot as shot

    monkeypatch.setattr(shot, "find_browser", lambda: None)
    with pytest.raises(ValueError, match="apt-get install chromium"):
        shot.screenshot(page(tmp_path), tmp_path / "x.png")
