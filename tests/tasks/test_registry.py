"""The task registry: one object per task, asked instead of string comparisons."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from seqpack.errors import UserError
from seqpack.pipeline import PackConfig
from seqpack.tasks import REGISTRY, TASKS, Task, get_task

SRC = Path(__file__).resolve().parents[2] / "src" / "seqpack"


def test_unknown_task_lists_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown task 'ner'; known: clm\|mlm\|classification\|multilabel\|qa"):
        get_task("ner")
    with pytest.raises(ValueError, match="unknown task 'ner'"):
        PackConfig(task="ner", max_len=8)


@pytest.mark.parametrize("name", TASKS)
def test_every_task_owns_its_options(name: str) -> None:
    task = REGISTRY[name]
    assert task.name == name and task.packing is not None and task.training is not None, name
    assert task.models is not None or task.hf is not None, name  # some model trains it
    opts = task.options()
    assert dataclasses.is_dataclass(opts) and type(opts) is task.options_type
    assert PackConfig(task=name, max_len=64).options == opts  # the defaults live in the dataclass only
    with pytest.raises(ValueError, match=f"--no-such-option does not apply to task {name}"):
        task.options(no_such_option=1)


def test_an_absent_part_is_refused_in_one_line_where_it_is_asked_for() -> None:
    bare = Task(name="bare", summary="nothing but a name")
    for ask, words in (
        (bare.packs, "task bare has no sequences of its own; the pack job cannot pack it"),
        (bare.trains, "task bare is not trained by seqpack train"),
        (bare.own_models, "task bare trains no seqpack model: pass --hf-model CONFIG"),
        (bare.hf_models, r"task bare trains seqpack's own models \(--model \.\.\.\), not --hf-model"),
    ):
        with pytest.raises(UserError, match=f"^{words}"):
            ask()
    vision, qa = get_task("vision"), get_task("qa")
    assert vision.model_kind(None, hf=True) == "hf" and qa.model_kind(None) == "bert"
    with pytest.raises(UserError, match=r"task vision trains no seqpack model: pass --hf-model CONFIG \(the config"):
        vision.model_kind(None)
    with pytest.raises(UserError, match="--model gpt does not train a qa dataset; use --model bert"):
        qa.model_kind("gpt")
    with pytest.raises(UserError, match="task vision is not streamed: its images go in"):
        vision.packs().stream_context(PackConfig(task="vision", max_len=8))
    assert get_task("clm").packs().derived_fields == ("labels",) and qa.packs().derived_fields == ()


def test_no_function_only_raises() -> None:
    """An absent part (of a task, of an attention backend, of the train data) is absent (``None``),
    not a function or method whose body only refuses; a helper that builds a refusal says so by its
    return type (``NoReturn``)."""
    offenders = []
    for path in sorted(SRC.rglob("*.py")):
        for n in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                and ast.unparse(n.returns or ast.Constant(None)) != "NoReturn"
            ):
                body = [b for b in n.body if not (isinstance(b, ast.Expr) and isinstance(b.value, ast.Constant))]
                if len(body) == 1 and isinstance(body[0], ast.Raise):
                    offenders.append(f"{path.relative_to(SRC)}:{n.lineno} {n.name}")
    assert not offenders, offenders


def test_options_validate_and_stay_apart() -> None:
    assert PackConfig.for_task("clm", max_len=8, overflow="drop").options.overflow == "drop"
    assert PackConfig.for_task("classification", max_len=8).options.overflow == "truncate"
    with pytest.raises(ValueError, match=r"overflow must be one of truncate\|drop\|error"):
        PackConfig.for_task("classification", max_len=8, overflow="split")
    with pytest.raises(ValueError, match="mask_prob must be in"):
        PackConfig.for_task("mlm", max_len=8, mask_prob=2.0)
    with pytest.raises(TypeError, match="takes CLMOptions options"):
        PackConfig(task="clm", max_len=8, options=get_task("qa").options())


#: modules outside seqpack/tasks/ that may spell a task's name: the demo runs named tasks (its own
#: plan); the encoders' head table is keyed by transformers' kinds of head, one of which
#: ("token-classification") is spelled like seqpack's task
TASK_NAMES_ALLOWED = {"experiments/demo_stages.py", "nn/hf_encoder.py"}


def _task_names_spelled(tree: ast.AST, names: set[str]) -> list[int]:
    """Lines where a task's name is compared (``==``, ``!=``, ``in``, on either side, whatever the
    variable is called) or keys a dict literal (a comparison in disguise)."""

    def strings(node: ast.AST) -> set[str]:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return {node.value}
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return {e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
        return set()

    out = []
    for n in ast.walk(tree):
        found: set[str] = set()
        if isinstance(n, ast.Compare):
            for side in (n.left, *n.comparators):
                found |= strings(side)
        elif isinstance(n, ast.Dict):
            for k in n.keys:
                if k is not None:
                    found |= strings(k)
        if found & names:
            out.append(getattr(n, "lineno", 0))
    return out


def test_no_task_name_is_compared_outside_the_registry() -> None:
    offenders = [
        f"{p.relative_to(SRC)}:{i}"
        for p in sorted(SRC.rglob("*.py"))
        if p.relative_to(SRC).parts[0] != "tasks" and str(p.relative_to(SRC)) not in TASK_NAMES_ALLOWED
        for i in _task_names_spelled(ast.parse(p.read_text(encoding="utf-8")), set(TASKS))
    ]
    assert offenders == []


def test_the_name_check_sees_any_spelling() -> None:
    """It fails whatever the variable is called, on either side, in a tuple or as a dict key."""
    for code in ('x = kind == "clm"', 'x = "qa" != name', 'x = t in ("chat", "other")', 'x = {"mlm": 1}[t]'):
        assert _task_names_spelled(ast.parse(code), {"clm", "qa", "chat", "mlm"}) == [1], code
    assert _task_names_spelled(ast.parse('x = mode == "fast"'), {"clm"}) == []


def test_gpt_does_not_import_bert() -> None:
    tree = ast.parse((SRC / "nn" / "models" / "gpt.py").read_text(encoding="utf-8"))
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert "seqpack.nn.models.bert" not in imported


def test_tasks_import_no_torch() -> None:
    import subprocess
    import sys

    code = "import sys, seqpack.tasks, seqpack.data; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)
