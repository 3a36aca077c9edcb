from __future__ import annotations

import numpy as np
import pytest

from seqpack.packing import (
    check_histogram,
    histogram,
    length_stats,
    load_histogram,
    plan,
)
from seqpack.packing.histogram import save_histogram_csv


def test_histogram_and_stats():
    h = histogram([1, 3, 3, 4], 4)
    assert h.tolist() == [1, 0, 2, 1] and h.dtype == np.int64
    s = length_stats(h, 4)
    assert (s.sequences, s.tokens, s.longest) == (4, 11, 4)
    assert s.padding_fraction == pytest.approx(5 / 16)
    assert s.theoretical_speedup == pytest.approx(16 / 11)


@pytest.mark.parametrize(
    "hist,error,match",
    [
        ([1, -2, 3], ValueError, "negative counts"),
        ([1.5, 2], TypeError, "integers"),
        ([[1, 2]], ValueError, "1-D"),
        ([0, 0, 0], ValueError, "empty"),
        ([], ValueError, "empty"),
        ([1, 0, 0, 0, 5], ValueError, "5 sequences exceed max_len=4"),
    ],
)
def test_bad_histograms(hist, error, match):
    with pytest.raises(error, match=match):
        check_histogram(np.array(hist), 4)
    with pytest.raises(error, match=match):
        plan(np.array(hist), 4)


def test_bad_options():
    with pytest.raises(ValueError, match="max_depth must be >= 1"):
        plan([1, 2], 2, max_depth=0)
    with pytest.raises(ValueError, match="max_len must be >= 1"):
        plan([1], 0)
    with pytest.raises(ValueError, match="at most 3"):
        plan([1, 2], 2, algorithm="nnlshp", max_depth=4)


def test_files_round_trip_and_errors(tmp_path):
    h = np.array([0, 3, 0, 7], dtype=np.int64)
    np.save(tmp_path / "h.npy", h)
    assert load_histogram(tmp_path / "h.npy").tolist() == h.tolist()
    save_histogram_csv(h, tmp_path / "h.csv")
    assert (tmp_path / "h.csv").read_text().splitlines() == ["length,count", "2,3", "4,7"]
    assert load_histogram(tmp_path / "h.csv").tolist() == h.tolist()
    bad = {
        "header.csv": ("len,cnt\n1,2\n", "header 'length,count'"),
        "fields.csv": ("length,count\n1,2,3\n", ":2: expected 2 fields"),
        "ints.csv": ("length,count\n1,x\n", ":2: length and count must be integers"),
        "zero.csv": ("length,count\n0,4\n", ":2: length must be >= 1"),
        "neg.csv": ("length,count\n3,-4\n", ":2: count must be >= 0"),
        "fmt.txt": ("1 2 3", "unknown histogram format"),
        "junk.npy": ("not numpy", "not a readable .npy"),
    }
    for name, (text, match) in bad.items():
        (tmp_path / name).write_text(text)
        with pytest.raises(ValueError, match=match):
            load_histogram(tmp_path / name)
    np.save(tmp_path / "2d.npy", np.ones((2, 3)))
    with pytest.raises(ValueError, match="1-D"):
        load_histogram(tmp_path / "2d.npy")
    with pytest.raises(ValueError, match="not found"):
        load_histogram(tmp_path / "missing.npy")


def test_packing_imports_no_torch():
    import subprocess
    import sys

    code = (
        "import sys, seqpack.packing; from seqpack.packing import plan; plan([1, 2], 2); print('torch' in sys.modules)"
    )
    assert (
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
        == "False"
    )
