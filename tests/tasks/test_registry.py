"""The task registry: one object per task, asked instead of string comparisons."""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

import pytest

from seqpack.pipeline import PackConfig
from seqpack.tasks import REGISTRY, TASKS, get_task

SRC = Path(__file__).resolve().parents[2] / "src" / "seqpack"


def test_unknown_task_lists_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown task 'ner'; known: clm\|mlm\|classification\|multilabel\|qa"):
        get_task("ner")
    with pytest.raises(ValueError, match="unknown task 'ner'"):
        PackConfig(task="ner", max_len=8)


@pytest.mark.parametrize("name", TASKS)
def test_every_task_owns_its_options(name: str) -> None:
    task = REGISTRY[name]
    assert task.name == name and task.models, name
    opts = task.options()
    assert dataclasses.is_dataclass(opts) and type(opts) is task.options_type
    assert PackConfig(task=name, max_len=64).options == opts  # the defaults live in the dataclass only
    with pytest.raises(ValueError, match=f"--no-such-option does not apply to task {name}"):
        task.options(no_such_option=1)


def test_options_validate_and_stay_apart() -> None:
    assert PackConfig.for_task("clm", max_len=8, overflow="drop").options.overflow == "drop"
    assert PackConfig.for_task("classification", max_len=8).options.overflow == "truncate"
    with pytest.raises(ValueError, match=r"overflow must be one of truncate\|drop\|error"):
        PackConfig.for_task("classification", max_len=8, overflow="split")
    with pytest.raises(ValueError, match="mask_prob must be in"):
        PackConfig.for_task("mlm", max_len=8, mask_prob=2.0)
    with pytest.raises(TypeError, match="takes CLMOptions options"):
        PackConfig(task="clm", max_len=8, options=get_task("qa").options())


def test_no_task_name_is_compared_outside_the_registry() -> None:
    pattern = re.compile(r"""task["'\]\)]*\s*(==|!=)\s*["']|task["'\]\)]*\s+(not\s+)?in\s*\(""")
    offenders = [f"{p.relative_to(SRC)}:{i}" for p in SRC.rglob("*.py") if "tasks" not in p.parts
                 for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if pattern.search(line)]
    assert offenders == []


def test_gpt_does_not_import_bert() -> None:
    tree = ast.parse((SRC / "nn" / "models" / "gpt.py").read_text(encoding="utf-8"))
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert "seqpack.nn.models.bert" not in imported


def test_tasks_import_no_torch() -> None:
    import subprocess
    import sys

    code = "import sys, seqpack.tasks, seqpack.data; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)
