"""Regenerate docs/integrations/models.md from the model matrix: ``python docs/_gen/models.py``.

The page is never edited by hand; ``tests/nn/test_model_matrix.py`` checks it against a fresh run
when the installed transformers is the one it names.
"""

from __future__ import annotations

from pathlib import Path

from seqpack.experiments.model_matrix import render_markdown, run_matrix

PAGE = Path(__file__).resolve().parents[1] / "integrations" / "models.md"

if __name__ == "__main__":
    PAGE.write_text(render_markdown(run_matrix()), encoding="utf-8")
    print(f"wrote {PAGE}")
