"""Tasks: one module each, one frozen task object each, registered here.

    task = get_task("clm")
    seqs = task.build_sequences(store, tokenizer, PackConfig.for_task("clm", max_len=512))

Adding a task is one new module (or folder, like `seqpack.tasks.chat`) defining
``TASK = MyTask(name=..., ...)`` (a subclass of `Task` with its options dataclass: its
sequences, model hooks, losses and metrics) plus one entry in ``REGISTRY`` below; a task defined
elsewhere (a plugin, a test) joins with `register_task`.

    >>> sorted(REGISTRY)
    ['chat', 'classification', 'clm', 'mlm', 'multilabel', 'preference', 'qa', 'vision']
    >>> get_task("ner")
    Traceback (most recent call last):
    ...
    seqpack.errors.UserError: unknown task 'ner'; known: clm|mlm|classification|multilabel|qa|chat|preference|vision
"""

from __future__ import annotations

from seqpack.errors import UserError
from seqpack.tasks import chat, classification, clm, mlm, multilabel, preference, qa
from seqpack.tasks.base import COMPONENTS, PacksSequences, Task, TaskBase, Trains
from seqpack.tasks.vision import task as vision

REGISTRY: dict[str, TaskBase] = {
    t.name: t
    for t in (
        clm.TASK,
        mlm.TASK,
        classification.TASK,
        multilabel.TASK,
        qa.TASK,
        chat.TASK,
        preference.TASK,
        vision.TASK,
    )
}
TASKS: tuple[str, ...] = tuple(REGISTRY)


def get_task(name: str) -> TaskBase:
    """The registered task ``name``; a ``ValueError`` listing the known tasks otherwise."""
    if name not in REGISTRY:
        raise UserError(f"unknown task {name!r}; known: {'|'.join(REGISTRY)}")
    return REGISTRY[name]


def sequence_task(name: str) -> PacksSequences:
    """The task ``name`` where its sequences are asked for (the pack job, a stream); a task without a
    sequence builder is refused in one line."""
    task = get_task(name)
    if isinstance(task, PacksSequences):
        return task
    raise UserError(f"task {name} has no sequence builder (seqpack.tasks.PacksSequences); the pack job cannot pack it")


def trained_task(name: str) -> Trains:
    """The task ``name`` where a model is trained on it; one that is not trained is refused."""
    task = get_task(name)
    if isinstance(task, Trains):
        return task
    raise UserError(f"task {name} has no model to train (seqpack.tasks.Trains)")


def register_task(task: TaskBase) -> TaskBase:
    """Add a task defined outside this package; the pack job, ``PackedDataset`` and ``seqpack train``
    then treat it like the built-in ones (the CLI's ``--task`` choices stay `TASKS`)."""
    if not isinstance(task, TaskBase):
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
    "TaskBase",
    "PacksSequences",
    "Trains",
    "get_task",
    "sequence_task",
    "trained_task",
    "register_task",
]
