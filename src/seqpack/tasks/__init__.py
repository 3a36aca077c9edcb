"""Tasks: one module each, one frozen task object each, registered here.

    task = get_task("clm")
    seqs = task.build_sequences(store, tokenizer, PackConfig.for_task("clm", max_len=512))

Adding a task is one new module defining ``TASK = MyTask(name=..., ...)`` (a subclass of
:class:`Task` with its options dataclass) plus one entry in ``REGISTRY`` below.

    >>> sorted(REGISTRY)
    ['chat', 'classification', 'clm', 'mlm', 'multilabel', 'qa']
    >>> get_task("ner")
    Traceback (most recent call last):
    ...
    ValueError: unknown task 'ner'; known: clm|mlm|classification|multilabel|qa|chat
"""

from __future__ import annotations

from seqpack.tasks import chat, classification, clm, mlm, multilabel, qa
from seqpack.tasks.base import COMPONENTS, Task

REGISTRY: dict[str, Task] = {t.name: t for t in (clm.TASK, mlm.TASK, classification.TASK, multilabel.TASK, qa.TASK, chat.TASK)}
TASKS: tuple[str, ...] = tuple(REGISTRY)


def get_task(name: str) -> Task:
    """The registered task ``name``; a ``ValueError`` listing the known tasks otherwise."""
    if name not in REGISTRY:
        raise ValueError(f"unknown task {name!r}; known: {'|'.join(TASKS)}")
    return REGISTRY[name]


__all__ = ["COMPONENTS", "REGISTRY", "TASKS", "Task", "get_task"]
