"""``multilabel``: a multi-hot set of labels per text (BCE per label), from labelled examples."""

from __future__ import annotations

from seqpack.tasks.classification import ClassificationTask

TASK = ClassificationTask(
    name="multilabel",
    summary="a set of labels per text or text pair (multi-hot)",
    reads="examples",
    models=("bert",),
    multilabel=True,
    float_labels=True,
)
