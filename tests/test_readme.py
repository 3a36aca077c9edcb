"""Every README block marked ``<!-- runnable -->`` runs as written (in order, in one directory that
holds ``corpus.txt``, ``chat.jsonl`` and ``prefs.jsonl``), so that a recipe cannot rot."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"<!-- runnable -->\n```(sh|python)\n(.*?)\n```", re.S)


def runnable_blocks() -> list[tuple[str, str]]:
    return BLOCK.findall((ROOT / "README.md").read_text(encoding="utf-8"))


def test_the_readme_has_runnable_recipes() -> None:
    kinds = [k for k, _ in runnable_blocks()]
    assert kinds.count("sh") >= 1 and kinds.count("python") >= 3


def test_every_runnable_recipe_runs(tmp_path: Path) -> None:
    pytest.importorskip("trl")
    from tests.hf_tokenizers import conversations, preference_records, texts

    (tmp_path / "corpus.txt").write_text("\n".join(texts(300)), encoding="utf-8")
    (tmp_path / "chat.jsonl").write_text("".join(json.dumps(r) + "\n" for r in conversations(60, seed=4)),
                                         encoding="utf-8")
    (tmp_path / "prefs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in preference_records(40, seed=5)),
                                          encoding="utf-8")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
           "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    for i, (kind, code) in enumerate(runnable_blocks()):
        argv = ["bash", "-euo", "pipefail", "-c", code] if kind == "sh" else [sys.executable, "-c", code]
        p = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
        assert p.returncode == 0, f"README block {i} ({kind}) failed:\n{code}\n{p.stderr[-3000:]}"
