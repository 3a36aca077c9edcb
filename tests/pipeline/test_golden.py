"""Every task packs to the same bytes as the committed goldens.

The goldens are written by ``tests/golden/make_packed.py`` (regenerate, never edit). Every file
must be equal byte for byte: Parquet parts, ``.bin`` columns and ``manifest.json``.

They were made before the layering moved code (issue 23) and regenerated once since, when the
Parquet parts became BYTE_STREAM_SPLIT-encoded REQUIRED columns (issue 28): every column of
every part was then checked equal, value for value, to the previous goldens', and every manifest
equal but for the keys written since (the task facts; the plan's ``lp_stop``). The ``clm`` goldens were
made again when their parts began to leave out the derived labels (format version 2): every column
read back through :func:`seqpack.data.load_packed` (labels rebuilt), from the Parquet parts and from
the ``.bin`` files, was checked equal to the previous goldens'. The manifests were made again when
they began to record each part's checksum: every other file was byte-identical to the previous
goldens', and every manifest equal to its previous one but for the new ``checksum`` entries.
They were made again when manifests began to record ``seqpack_version`` and the ``bin/`` columns'
``bin_checksums``: every other file byte-identical, every manifest equal but for those keys.
They were made again when manifests began to carry their own checksum (``manifest_checksum``, the
last key): every other file byte-identical, every manifest equal but for that key.
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
