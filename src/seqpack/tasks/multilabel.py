"""``multilabel``: a multi-hot set of labels per text (BCE per label), from labelled examples."""

from __future__ import annotations

from seqpack.tasks.classification import classification_task

TASK = classification_task(
    name="multilabel", summary="a set of labels per text or text pair (multi-hot)", multilabel=True
)
