"""``chat``: conversations (``messages``) for a causal LM, with the loss where ``--train-on`` says.

The task's one home: `.task` (options, the task's spec: sequences, models, warnings),
`.sequences` (conversations -> labelled sequences, truncation at turn boundaries) and
`.template` (Jinja chat templates and where each assistant turn lies in the text).
"""

from __future__ import annotations

from seqpack.tasks.chat.task import TASK, ChatOptions, chat_template

__all__ = ["TASK", "ChatOptions", "chat_template"]
