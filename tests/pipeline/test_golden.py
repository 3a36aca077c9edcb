"""Every task packs to the same bytes as the committed goldens (made before the layering moved code).

The goldens are written by ``tests/golden/make_packed.py`` (regenerate, never edit). Parquet
parts and ``.bin`` columns must be equal byte for byte; so must ``manifest.json``, but for the
task facts the layering added to it (:data:`ADDED`: the format reads them instead of the task
registry), whose lines are taken out before comparing the bytes.
"""

from __future__ import annotations

import filecmp
import json
from pathlib import Path

import pytest

from seqpack.tasks import get_task
from tests.golden.make_packed import CASES, GOLDEN, build, files_of

#: manifest keys written since the goldens were made (issue 23), one line each in manifest.json
ADDED = ("token_labels", "float_labels", "causal_lm")
#: keys of the plan's ``info`` written since then: how the LP stopped (issue 27's session: input-only rules)
ADDED_PLAN_INFO = ("lp_stop",)


def _without_added_plan_info(line: str) -> str:
    """The manifest's ``"plan"`` line without :data:`ADDED_PLAN_INFO` (other lines unchanged)."""
    if not line.startswith(' "plan": '):
        return line
    plan = json.loads(line[len(' "plan": ') :].rstrip().rstrip(","))
    for k in ADDED_PLAN_INFO:
        plan.get("info", {}).pop(k, None)
    return ' "plan": ' + json.dumps(plan) + ("," if line.rstrip().endswith(",") else "") + "\n"


def _assert_same(golden: Path, got: Path) -> None:
    assert files_of(got) == files_of(golden)
    for f in files_of(golden):
        if f == "manifest.json":
            continue
        assert filecmp.cmp(golden / f, got / f, shallow=False), f"{f} differs from the golden"
    lines = (got / "manifest.json").read_text(encoding="utf-8").splitlines(keepends=True)
    kept = [_without_added_plan_info(ln) for ln in lines if not any(ln.startswith(f' "{k}": ') for k in ADDED)]
    assert len(lines) - len(kept) == len(ADDED)
    assert "".join(kept).replace(",\n }", "\n }") == (golden / "manifest.json").read_text(encoding="utf-8")
    m = json.loads("".join(lines))
    assert {k: m[k] for k in ADDED} == get_task(m["task"]).facts()


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
