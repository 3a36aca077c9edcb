"""Progress bars: a real tqdm bar on a terminal; elsewhere a silent one that imports nothing."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from seqpack import _progress
from seqpack._progress import SilentBar, progress_bar


def test_silent_off_a_terminal(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(_progress, "on_terminal", lambda: False)
    bar = progress_bar(iterable=range(3), total=3, desc="x")
    assert isinstance(bar, SilentBar) and list(bar) == [0, 1, 2]
    with progress_bar(total=10) as b:
        b.update(4)
        b.set_postfix(loss=1.0)
    assert list(SilentBar()) == []


def test_tqdm_on_a_terminal(monkeypatch: pytest.MonkeyPatch):
    from tqdm.auto import tqdm

    monkeypatch.setattr(_progress, "on_terminal", lambda: True)
    with open(os.devnull, "w") as sink:
        bar = progress_bar(total=2, desc="x", file=sink)
        assert isinstance(bar, tqdm)
        bar.close()
    assert isinstance(progress_bar(False), SilentBar)


def test_silent_bar_imports_no_tqdm():
    code = "import sys\nfrom seqpack._progress import progress_bar\nlist(progress_bar(iterable=[1]))\nprint('tqdm' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"  # the child's stderr is captured, not a terminal: its bar is silent
