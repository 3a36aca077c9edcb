"""Regenerate docs/integrations/models.md and the pinned statuses from one run of the model matrix
and the encoder matrix: ``python docs/_gen/models.py``.

Both are outputs, never edited by hand. ``tests/nn/test_model_matrix.py`` writes them again with
`write` into a temporary folder and compares: the whole page where the installed transformers and
torch are the ones it names, and otherwise every line that no version decides (the prose, the
headings, the columns), reporting which rows differ; and it fails when any architecture's build or
any cell's status differs from ``tests/nn/model_matrix_status.json``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from seqpack.experiments.encoder_matrix import EncoderRow, encoder_statuses, render_encoders, run_encoder_matrix
from seqpack.experiments.model_matrix import Row, render_markdown, run_matrix, statuses

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "integrations" / "models.md"
STATUS = ROOT / "tests" / "nn" / "model_matrix_status.json"


def dump(pinned: dict[str, Any]) -> str:
    """The statuses as JSON with one architecture (or encoder) a line, so that a change reads as a
    one-line diff."""
    blocks = [k for k in ("architectures", "encoders") if k in pinned]
    head = {k: v for k, v in pinned.items() if k not in blocks}
    parts = []
    for key in blocks:
        lines = [f"  {json.dumps(t)}: {json.dumps(v)}" for t, v in pinned[key].items()]
        parts.append(f"{json.dumps(key)}: {{\n" + ",\n".join(lines) + "\n}")
    return json.dumps(head)[:-1] + ", " + ", ".join(parts) + "}\n"


def write(rows: list[Row], encoders: list[EncoderRow], page: Path = PAGE, status: Path = STATUS) -> tuple[Path, Path]:
    """The page and the pinned statuses from one run of each matrix, written to ``page`` and ``status``."""
    page.write_text(render_markdown(rows) + "\n" + render_encoders(encoders), encoding="utf-8")
    status.write_text(dump({**statuses(rows), "encoders": encoder_statuses(encoders)}), encoding="utf-8")
    return page, status


if __name__ == "__main__":
    print("wrote {} and {}".format(*write(run_matrix(), run_encoder_matrix())))
