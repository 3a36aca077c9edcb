"""Every task packs to the same bytes as the committed goldens.

The goldens are written by ``tests/golden/make_packed.py`` (regenerate, never edit). Every file
must be equal byte for byte: Parquet parts, ``.bin`` columns and ``manifest.json``. When a change
of the format makes them again on purpose, the regenerated files are checked against the previous
ones first: every column read back equal, value for value, and every manifest equal but for the
keys the change adds.
"""

from __future__ import annotations

import filecmp
import json
from pathlib import Path

import pytest

from seqpack.tasks import get_task
from tests.golden.make_packed import CASES, GOLDEN, build, files_of


def _assert_same(golden: Path, got: Path) -> None:
    assert files_of(got) == files_of(golden)
    for f in files_of(golden):
        assert filecmp.cmp(golden / f, got / f, shallow=False), f"{f} differs from the golden"
    m = json.loads((got / "manifest.json").read_text(encoding="utf-8"))
    assert {k: m[k] for k in ("token_labels", "float_labels", "causal_lm")} == get_task(m["task"]).facts()


@pytest.mark.parametrize("case", list(CASES))
def test_packs_byte_identical_to_golden(case: str, tmp_path: Path) -> None:
    build(case, tmp_path / "out", tmp_path / "work")
    _assert_same(GOLDEN / case, tmp_path / "out")


def test_ray_engine_packs_byte_identical_to_golden(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    from seqpack.pipeline.engine import get_engine

    engine = get_engine("ray", num_cpus=2)
    try:
        for case in ("clm-sharded", "mlm-sharded", "chat-jsonl"):
            build(case, tmp_path / case, tmp_path / f"work-{case}", engine=engine)
            _assert_same(GOLDEN / case, tmp_path / case)
    finally:
        engine.close()
