"""``chat``: conversations (``messages``) for a causal LM, with the loss where ``--train-on`` says.

The task's one home: `.task` (options, the task object: sequences, model hooks, warnings),
`.sequences` (conversations -> labelled sequences, truncation at turn boundaries) and
`.template` (Jinja chat templates and where each assistant turn lies in the text).
"""

from __future__ import annotations

from seqpack.tasks.chat.task import TASK, ChatOptions, ChatTask

__all__ = ["TASK", "ChatOptions", "ChatTask"]
