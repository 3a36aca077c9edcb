"""Regenerate docs/integrations/models.md and the pinned statuses from one model matrix run:
``python docs/_gen/models.py``.

Both are outputs, never edited by hand. ``tests/nn/test_model_matrix.py`` checks the page against a
fresh run when the installed transformers is the one it names, and fails when any architecture's
build or any cell's status differs from ``tests/nn/model_matrix_status.json``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from seqpack.experiments.model_matrix import render_markdown, run_matrix, statuses

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "integrations" / "models.md"
STATUS = ROOT / "tests" / "nn" / "model_matrix_status.json"


def dump(pinned: dict[str, Any]) -> str:
    """The statuses as JSON with one architecture a line, so that a change reads as a one-line diff."""
    archs = pinned["architectures"]
    lines = [f"  {json.dumps(t)}: {json.dumps(archs[t])}" for t in archs]
    head = {k: v for k, v in pinned.items() if k != "architectures"}
    return json.dumps(head)[:-1] + ', "architectures": {\n' + ",\n".join(lines) + "\n}}\n"


if __name__ == "__main__":
    rows = run_matrix()
    PAGE.write_text(render_markdown(rows), encoding="utf-8")
    STATUS.write_text(dump(statuses(rows)), encoding="utf-8")
    print(f"wrote {PAGE} and {STATUS}")
