"""`hf_dataset`: the one way from a packed directory to a ``datasets.Dataset``, with every column
the seqpack readers give (the derived ones made again), after the same checks."""

from __future__ import annotations

import numpy as np
import pytest

from seqpack.data import PackedDataset, hf_dataset
from tests.golden.make_packed import build

pytest.importorskip("datasets")


@pytest.mark.parametrize("case", ["clm-store", "chat-records", "qa-records"])
def test_it_holds_what_the_seqpack_reader_gives(tmp_path, case) -> None:
    m = build(case, tmp_path / "p", tmp_path / "w")
    ds = hf_dataset(tmp_path / "p", cache_dir=tmp_path / "hf")
    ours = PackedDataset(tmp_path / "p")
    assert len(ds) == len(ours) == m["num_packs"]
    for k in (0, len(ds) - 1):
        want = ours[k]
        got = ds[k]
        assert set(want) <= set(got), set(want) - set(got)  # the derived columns too
        for name, value in want.items():
            assert np.array_equal(np.asarray(got[name]), np.asarray(value)), name


def test_it_refuses_a_damaged_part(tmp_path) -> None:
    build("clm-store", tmp_path / "p", tmp_path / "w")
    part = next((tmp_path / "p" / "data").glob("*.parquet"))
    data = bytearray(part.read_bytes())
    data[len(data) // 2] ^= 0xFF
    part.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"checksum|changed|corrupt"):
        hf_dataset(tmp_path / "p", cache_dir=tmp_path / "hf")
