"""Tasks: one module each, one frozen spec of parts each (`seqpack.tasks.spec.Task`), registered here.

    task = get_task("clm")
    seqs = task.packs().build(store, tokenizer, PackConfig.for_task("clm", max_len=512))

Adding a task is one new module (or folder, like `seqpack.tasks.chat`) defining its options
dataclass, its functions and ``TASK = Task(name=..., packing=Packing(...), training=Training(...),
models=OwnModels(...), hf=HFModels(...))`` (the parts it has; the others stay ``None``), plus one
entry in ``REGISTRY`` below; a task defined elsewhere (a plugin, a test) joins with `register_task`.

    >>> sorted(REGISTRY)
    ['chat', 'classification', 'clm', 'mlm', 'multilabel', 'preference', 'qa', 'token-classification', 'vision']
    >>> get_task("ner")
    Traceback (most recent call last):
    ...
    seqpack.errors.UserError: unknown task 'ner'; known: clm|mlm|classification|multilabel|qa|token-classification|chat|preference|vision
"""

from __future__ import annotations

from seqpack.errors import UserError
from seqpack.tasks import chat, classification, clm, mlm, multilabel, preference, qa, token_classification
from seqpack.tasks.base import COMPONENTS
from seqpack.tasks.spec import (
    Derived,
    HFModels,
    NoOptions,
    OwnModels,
    Packing,
    PackSettings,
    PackTokenizer,
    Rows,
    Streaming,
    Task,
    Training,
)
from seqpack.tasks.vision import task as vision

REGISTRY: dict[str, Task] = {
    t.name: t
    for t in (
        clm.TASK,
        mlm.TASK,
        classification.TASK,
        multilabel.TASK,
        qa.TASK,
        token_classification.TASK,
        chat.TASK,
        preference.TASK,
        vision.TASK,
    )
}
TASKS: tuple[str, ...] = tuple(REGISTRY)


def get_task(name: str) -> Task:
    """The registered task ``name``.

    Args:
        name: a task's name (``"clm"``, ``"chat"``, ...).

    Returns:
        Its `Task`.

    Raises:
        UserError: an unknown name (the message lists the known ones).
    """
    if name not in REGISTRY:
        raise UserError(f"unknown task {name!r}; known: {'|'.join(REGISTRY)}")
    return REGISTRY[name]


def register_task(task: Task) -> Task:
    """Add a task defined outside this package; the pack job, ``PackedDataset`` and ``seqpack train``
    then treat it like the built-in ones (the CLI's ``--task`` choices stay `TASKS`).

    Args:
        task: its spec.

    Returns:
        ``task``.

    Raises:
        TypeError: ``task`` is not a `Task`.
        UserError: a task of that name is registered already.
    """
    if not isinstance(task, Task):
        raise TypeError(f"register_task takes a seqpack.tasks.Task, got {type(task).__name__}")
    if task.name in REGISTRY:
        raise UserError(f"task {task.name!r} is already registered")
    REGISTRY[task.name] = task
    return task


__all__ = [
    "COMPONENTS",
    "REGISTRY",
    "TASKS",
    "Task",
    "Rows",
    "Packing",
    "Streaming",
    "Derived",
    "Training",
    "OwnModels",
    "HFModels",
    "NoOptions",
    "PackSettings",
    "PackTokenizer",
    "get_task",
    "register_task",
]
