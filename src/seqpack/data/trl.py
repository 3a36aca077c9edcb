"""A packed dataset as TRL's padding-free examples: seqpack's global plan, TRL's collator.

TRL's ``SFTTrainer`` with ``padding_free=True`` flattens each batch with its own collator,
which reads per example ``input_ids``, ``labels`` and ``seq_lengths`` (the form its ``bfd``
packing writes). `trl_examples` writes a seqpack pack in that layout: the pack's real
tokens, their labels and the length of each sequence in it. Hand the result to TRL with
``dataset_kwargs={"skip_prepare_dataset": True}`` so that it is used as is::

    train = trl_examples("sft/")                                   # a datasets.Dataset, one row per pack
    SFTTrainer(model, args=SFTConfig(padding_free=True, dataset_kwargs={"skip_prepare_dataset": True}, ...),
               train_dataset=train)

TRL then trains on exactly seqpack's packs; its loss is the per-token mean (``--reduction token``).

    >>> import numpy as np
    >>> rows = {"input_ids": np.array([[5, 6, 7, 0]]), "labels": np.array([[-100, 6, -100, -100]]),
    ...         "segment_ids": np.array([[1, 1, 2, 0]])}
    >>> padding_free_examples(rows)
    [{'input_ids': [5, 6, 7], 'labels': [-100, 6, -100], 'seq_lengths': [2, 1]}]
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from seqpack.data.sequences import IGNORE_INDEX
from seqpack.errors import UserError

if TYPE_CHECKING:
    import datasets


def padding_free_examples(rows: dict[str, np.ndarray]) -> list[dict[str, list[int]]]:
    """TRL padding-free examples of a batch of packed rows ``(B, L)``."""
    out = []
    for b in range(rows["input_ids"].shape[0]):
        seg = np.asarray(rows["segment_ids"][b])
        real = seg > 0
        labels = rows["labels"][b][real] if "labels" in rows else np.full(int(real.sum()), IGNORE_INDEX)
        out.append(
            {
                "input_ids": rows["input_ids"][b][real].astype(np.int64).tolist(),
                "labels": np.asarray(labels, dtype=np.int64).tolist(),
                "seq_lengths": np.bincount(seg[real])[1:].astype(np.int64).tolist(),
            }
        )
    return out


def trl_examples(path: str | os.PathLike[str], packs: Sequence[int] | np.ndarray | None = None) -> datasets.Dataset:
    """A ``datasets.Dataset`` of TRL padding-free examples, one per pack (``packs``: these only).

    Args:
        path: a causal-LM packed dataset's directory.
        packs: the packs to convert (`None`: all).

    Returns:
        The `datasets.Dataset` of `input_ids`, `labels` and `seq_lengths`, one row per pack.

    Raises:
        UserError: a dataset whose task is not a causal LM.
    """
    import datasets

    from seqpack.data.format import DatasetFacts
    from seqpack.data.rows import PackedRows

    rows = PackedRows(path, columns=["input_ids", "labels", "segment_ids"])
    if not DatasetFacts.of(rows.manifest, path).causal_lm:
        raise UserError(
            f"{path}: a {rows.manifest.get('task')} dataset; TRL's SFTTrainer trains causal-LM datasets "
            "(packed by a task whose model is a causal LM, such as clm or chat)"
        )
    idx = np.arange(int(rows.manifest["num_packs"])) if packs is None else np.asarray(packs, dtype=np.int64)
    examples = []
    for lo in range(0, idx.size, 4096):
        examples += padding_free_examples(rows.take(idx[lo : lo + 4096]))
    return datasets.Dataset.from_list(examples)


__all__ = ["padding_free_examples", "trl_examples"]
