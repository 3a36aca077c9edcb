"""``classification``: one label per text (or text pair), read from labelled examples.

Sequence classification and multi-label: ``[CLS] A [SEP]`` or ``[CLS] A [SEP] B [SEP]`` + label(s)
(a pretrained tokenizer's own template and specials: `seqpack.tasks.specials`).

    >>> from seqpack.tokenizer.tokenizer import Tokenizer
    >>> tok = Tokenizer({i: bytes([i]) for i in range(256)}, [])
    >>> s = classification_sequences([{"text": "ab", "label": "pos"}, {"text": "c", "label": "neg"}], tok, max_len=8)
    >>> s.sequence(0)["input_ids"].tolist(), s.seq_fields["labels"].tolist(), s.info["label_names"]
    ([256, 97, 98, 257], [1, 0], ['neg', 'pos'])

Labels are ints, or strings mapped to ids in sorted order (``info["label_names"]``).
Multi-label gives a multi-hot row of ``num_labels`` per sequence. Overflow:
``truncate`` (default; longest segment first), ``drop`` or ``error``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

from seqpack.corpus.records import iter_records
from seqpack.data.sequences import (
    Sequences,
    check_overflow,
    id_dtype,
    offsets_of,
    overflow_error,
)
from seqpack.errors import UserError
from seqpack.packing.histogram import check_max_len
from seqpack.tasks._lm import slot_mean
from seqpack.tasks.base import add_slot_metrics, auto_model, check_examples, num_labels, slot_loss_units
from seqpack.tasks.examples import get_field
from seqpack.tasks.spec import HFModels, OwnModels, Packing, PackSettings, Rows, Streaming, Task, Totals, Training
from seqpack.tasks.specials import task_specials

if TYPE_CHECKING:
    import torch

    from seqpack.nn.models.common import PackedOutput
    from seqpack.tokenizer.types import AnyTokenizer


OVERFLOW = ("truncate", "drop", "error")


def truncate_pair(a: list[int], b: list[int], budget: int) -> tuple[list[int], list[int]]:
    """Drop tokens from the end of the longer segment until ``len(a) + len(b) <= budget``.

    >>> truncate_pair([1, 2, 3, 4], [5, 6], 4)
    ([1, 2], [5, 6])
    """
    na, nb = len(a), len(b)
    while na + nb > budget:
        if na >= nb:
            na -= 1
        else:
            nb -= 1
    return a[:na], b[:nb]


#: labels of one classifier at most: a model's head, and each multi-hot row, grow with the count
MAX_LABELS = 1 << 20


def check_label_count(count: int, field: str) -> int:
    """Refuse a class count past `MAX_LABELS` (one huge label id would size the head and every multi-hot row).

    >>> check_label_count(10**12, "label")
    Traceback (most recent call last):
    ...
    seqpack.errors.UserError: 1,000,000,000,000 labels (from the ids in field 'label' or --num-labels) is more than 1,048,576, the most one classifier takes; number the labels 0..N-1, or use strings
    """
    if count > MAX_LABELS:
        raise UserError(
            f"{count:,} labels (from the ids in field {field!r} or --num-labels) is more than {MAX_LABELS:,}, "
            "the most one classifier takes; number the labels 0..N-1, or use strings"
        )
    return count


def label_space(
    examples: str | os.PathLike[str] | Iterable[Any], field: str, *, multilabel: bool, num_labels: int | None
) -> tuple[list[str] | None, int]:
    """The names of string labels (sorted) and the class count, over all ``examples`` (one pass)."""
    kind: type | tuple[type, ...] = list if multilabel else (int, str)
    strings: set[str] = set()
    top, kinds = -1, set()
    for i, row in enumerate(iter_records(examples)):
        label = get_field(row, field, i, "--label-field", kind)
        for x in label if multilabel else [label]:
            kinds.add(type(x))
            if isinstance(x, str):
                strings.add(x)
            elif isinstance(x, int) and not isinstance(x, bool):
                if x < 0:
                    raise UserError(
                        f"example {i}: label in field {field!r} is negative; labels must be ints >= 0 or strings"
                    )
                top = max(top, x)
    if len(kinds) > 1:
        raise UserError(
            f"labels in field {field!r} mix {' and '.join(sorted(k.__name__ for k in kinds))}; use all ints or all strings"
        )
    names = sorted(strings) if strings else None
    have = len(names) if names is not None else top + 1
    count = num_labels if num_labels is not None else have
    if have > count:
        raise UserError(f"a label id is {have - 1} but num_labels={count}; pass a larger --num-labels")
    return names, check_label_count(count, field)


def _labels(
    raw: list[Any], multilabel: bool, num_labels: int | None, field: str, names: list[str] | None = None
) -> tuple[np.ndarray, list[str] | None, int]:
    """Label ids ((N,), or multi-hot (N, C)), the names of string labels, and the class count C.

    ``names``: the label set of all examples (a sharded job), instead of this batch's.
    """
    flat = [x for r in raw for x in r] if multilabel else raw
    kinds = {type(x) for x in flat}
    given = names
    names = None
    if kinds <= {int}:
        ids = flat
        if any(x < 0 for x in ids):
            i = next(k for k, r in enumerate(raw) if any(x < 0 for x in (r if multilabel else [r])))
            raise UserError(f"example {i}: label in field {field!r} is negative; labels must be ints >= 0 or strings")
    elif kinds <= {str}:
        names = given if given is not None else sorted(set(flat))
        index = {n: k for k, n in enumerate(names)}
        ids = [index[x] for x in flat]
    else:
        raise UserError(
            f"labels in field {field!r} mix {' and '.join(sorted(k.__name__ for k in kinds))}; use all ints or all strings"
        )
    top = max(ids, default=-1) + 1 if names is None else len(names)
    c = num_labels if num_labels is not None else top
    if top > c:
        raise UserError(f"a label id is {top - 1} but num_labels={c}; pass a larger --num-labels")
    check_label_count(c, field)
    if not multilabel:
        return np.asarray(ids, dtype=np.int16 if c < 1 << 15 else np.int64), names, c
    hot = np.zeros((len(raw), max(c, 1)), dtype=np.int8)
    rows = np.repeat(np.arange(len(raw)), [len(r) for r in raw])
    hot[rows, np.asarray(ids, dtype=np.int64)] = 1
    return hot, names, hot.shape[1]


def _read(
    examples: str | os.PathLike[str] | Iterable[Any],
    text_field: str,
    text_pair_field: str | None,
    label_field: str,
    multilabel: bool,
) -> tuple[list[str], list[str | None], list[Any], list[int], int, dict[str, int]]:
    """Texts, pairs and raw labels of the non-empty examples, checked; their indices; counts."""
    label_kind: type | tuple[type, ...] = list if multilabel else (int, str)
    texts: list[str] = []
    pairs: list[str | None] = []
    raw: list[Any] = []
    keep_ids: list[int] = []
    dropped: dict[str, int] = {}
    n_examples = 0
    for i, row in enumerate(iter_records(examples)):
        n_examples += 1
        text = get_field(row, text_field, i, "--text-field")
        pair = get_field(row, text_pair_field, i, "--text-pair-field") if text_pair_field else None
        label = get_field(row, label_field, i, "--label-field", label_kind)
        if multilabel and not all(isinstance(x, (int, str)) and not isinstance(x, bool) for x in label):
            raise UserError(f"example {i}: field {label_field!r} must be a list of ints or strings")
        if not text.strip() and not (pair or "").strip():
            dropped["empty"] = dropped.get("empty", 0) + 1
            continue
        texts.append(text)
        pairs.append(pair)
        raw.append(label)
        keep_ids.append(i)
    return texts, pairs, raw, keep_ids, n_examples, dropped


def classification_sequences(
    examples: str | os.PathLike[str] | Iterable[Any],
    tokenizer: AnyTokenizer,
    *,
    max_len: int,
    text_field: str = "text",
    text_pair_field: str | None = None,
    label_field: str = "label",
    multilabel: bool = False,
    num_labels: int | None = None,
    overflow: str = "truncate",
    label_names: list[str] | None = None,
) -> Sequences:
    """Labelled examples -> sequences with per-sequence ``labels`` ((N,) or multi-hot (N, C)).

    ``label_names``: map string labels through this list (the label set of a whole sharded job).
    """
    check_max_len(max_len)
    check_overflow(overflow, allowed=OVERFLOW)
    specials = task_specials(tokenizer, "multilabel" if multilabel else "classification")
    template = specials.pair if text_pair_field else specials.single
    texts, pairs, raw, keep_ids, n_examples, dropped = _read(
        examples, text_field, text_pair_field, label_field, multilabel
    )
    labels, names, n_classes = _labels(raw, multilabel, num_labels, label_field, label_names)
    enc_a = tokenizer.encode_batch(texts)
    enc_b = tokenizer.encode_batch([p or "" for p in pairs]) if text_pair_field else [[] for _ in texts]
    seqs, types, keep = [], [], []
    budget = max_len - template.added
    if budget < 1:
        raise UserError(f"max_len={max_len} leaves no room for text after the special tokens; raise --max-len")
    too_long = sum(len(a) + len(b) > budget for a, b in zip(enc_a, enc_b))
    if too_long and overflow == "error":
        raise overflow_error(too_long, max_len, OVERFLOW)
    for k, (a, b) in enumerate(zip(enc_a, enc_b)):
        if len(a) + len(b) > budget:
            if overflow == "drop":
                continue
            a, b = truncate_pair(a, b, budget)
        ids, kinds, _ = template.build(a, b if text_pair_field else None)
        seqs.append(ids)
        types.append(kinds)
        keep.append(k)
    if too_long and overflow == "drop":
        dropped["too_long"] = too_long
    lengths = np.array([len(s) for s in seqs], dtype=np.int64)
    flat = np.fromiter((t for s in seqs for t in s), dtype=np.int64, count=int(lengths.sum()))
    tt = np.fromiter((t for s in types for t in s), dtype=np.uint8, count=int(lengths.sum()))
    kept = np.asarray(keep, dtype=np.int64)
    return Sequences(
        task="multilabel" if multilabel else "classification",
        offsets=offsets_of(lengths),
        example_ids=np.asarray(keep_ids, dtype=np.int64)[kept] if kept.size else np.zeros(0, np.int64),
        token_fields={"input_ids": flat.astype(id_dtype(specials.vocab_size - 1)), "token_type_ids": tt},
        seq_fields={"labels": labels[kept] if kept.size else labels[:0]},
        num_examples=n_examples,
        dropped=dropped,
        info={
            **specials.info(),
            "label_names": names,
            "num_labels": n_classes,
            "overflow": overflow,
            "truncated": too_long if overflow == "truncate" else 0,
        },
    )


@dataclass(frozen=True, kw_only=True)
class ClassificationOptions:
    text_field: str = field(default="text", metadata={"help": "the text column"})
    text_pair_field: str | None = field(default=None, metadata={"help": "a second text column (pairs)"})
    label_field: str = field(default="label", metadata={"help": "the label column (int or string)"})
    num_labels: int | None = field(
        default=None, metadata={"help": "labels in all (default: from the data)", "range": (1, MAX_LABELS)}
    )
    overflow: str = field(default="truncate", metadata={"help": "examples longer than max_len: truncate|drop|error"})

    def __post_init__(self) -> None:
        check_overflow(self.overflow, allowed=("truncate", "drop", "error"))
        if self.num_labels is not None and self.num_labels < 1:
            raise UserError(f"num_labels must be >= 1, got {self.num_labels}")
        if self.num_labels is not None:
            check_label_count(self.num_labels, self.label_field)


def _sequences(
    source: Any,
    tokenizer: AnyTokenizer,
    config: PackSettings,
    context: Mapping[str, Any],
    *,
    multilabel: bool,
) -> Sequences:
    o: ClassificationOptions = config.options
    return classification_sequences(
        source,
        tokenizer,
        max_len=config.max_len,
        text_field=o.text_field,
        text_pair_field=o.text_pair_field,
        label_field=o.label_field,
        multilabel=multilabel,
        num_labels=context.get("num_labels", o.num_labels),
        overflow=o.overflow,
        label_names=context.get("label_names"),
    )


def build(source: Any, tokenizer: AnyTokenizer, config: PackSettings, *, multilabel: bool) -> Sequences:
    """The sequences of labelled examples, their label set read from them."""
    check_examples(source, config.task)
    return _sequences(source, tokenizer, config, {}, multilabel=multilabel)


def build_shard(
    records: list[dict[str, Any]],
    tokenizer: AnyTokenizer,
    config: PackSettings,
    context: dict[str, Any],
    *,
    multilabel: bool,
) -> Sequences:
    """One shard's sequences, its labels mapped by the whole job's label set (``context``)."""
    return _sequences(records, tokenizer, config, context, multilabel=multilabel)


def shard_context(source: Any, config: PackSettings, *, multilabel: bool) -> dict[str, Any]:
    """The label set of all examples, so that every shard maps labels the same way."""
    o: ClassificationOptions = config.options
    names, count = label_space(source, o.label_field, multilabel=multilabel, num_labels=o.num_labels)
    return {"label_names": names, "num_labels": count}


def stream_context(config: PackSettings) -> dict[str, Any]:
    """A stream cannot be read ahead for its label set: integer labels and ``num_labels``."""
    o: ClassificationOptions = config.options
    if o.num_labels is None:
        raise UserError(
            f"a stream of {config.task} examples needs num_labels (integer labels): its label set "
            "cannot be read ahead; pass options={'num_labels': N}"
        )
    return {"label_names": None, "num_labels": o.num_labels}


def bert(
    kind: str, size: str, vocab: int, manifest: Mapping[str, Any], extra: dict[str, Any], *, multilabel: bool
) -> tuple[Any, Any]:
    """seqpack's BERT with a classification head over the dataset's labels."""
    from seqpack.nn.models import BertConfig, BertForSequenceClassification

    mc = BertConfig.of_size(size, vocab_size=vocab, num_labels=num_labels(manifest), multilabel=multilabel, **extra)
    return BertForSequenceClassification(mc), mc


def hf_config(d: dict[str, Any], manifest: Mapping[str, Any], *, multilabel: bool) -> None:
    """The label count and, for named labels, ``id2label``/``label2id`` the data's (so a pipeline
    over ``RUN/model/`` answers with the data's label names; integer labels keep a checkpoint's
    names of the same count)."""
    n = num_labels(manifest)
    names = (manifest.get("task_info") or {}).get("label_names")
    d["num_labels"] = n
    # the data's kind of labels, whatever a checkpoint's config said
    d["problem_type"] = "multi_label_classification" if multilabel else "single_label_classification"
    if names and len(names) == n:
        d["id2label"] = {str(i): str(x) for i, x in enumerate(names)}
        d["label2id"] = {str(x): i for i, x in enumerate(names)}
    elif len(d.get("id2label") or ()) != n:  # a checkpoint's names of another label count
        d.pop("id2label", None)
        d.pop("label2id", None)


def forward(
    model: torch.nn.Module, batch: Mapping[str, torch.Tensor], *, reduction: str, objective: Any = None
) -> PackedOutput:
    """The classifier's forward pass: one prediction per sequence, the loss at its labels."""
    return model(
        batch["input_ids"],
        batch["segment_ids"],
        position_ids=batch["position_ids"],
        labels=batch.get("labels"),
        token_type_ids=batch.get("token_type_ids"),
    )


def update_eval(totals: Totals, out: PackedOutput, batch: Mapping[str, torch.Tensor]) -> None:
    """``cls_loss`` over labelled sequences and, single-label, ``cls_accuracy``."""
    add_slot_metrics(totals, "cls", out.per_sequence, batch.get("labels"), out.slot_logits)


def classification_task(*, name: str, summary: str, multilabel: bool) -> Task:
    """The spec of a classification task: one label (or, ``multilabel``, a multi-hot set) per text."""
    return Task(
        name=name,
        summary=summary,
        options_type=ClassificationOptions,
        rows=Rows(float_labels=multilabel),
        packing=Packing(
            reads="examples",
            build=partial(build, multilabel=multilabel),
            shard=partial(build_shard, multilabel=multilabel),
            context=partial(shard_context, multilabel=multilabel),
            stream=Streaming(context=stream_context),
        ),
        training=Training(loss_units=slot_loss_units("labels"), component_means=slot_mean, update_eval=update_eval),
        models=OwnModels(kinds=("bert",), build=partial(bert, multilabel=multilabel), forward=forward),
        hf=HFModels(
            build=auto_model("AutoModelForSequenceClassification"),
            config=partial(hf_config, multilabel=multilabel),
            lora_task_type="SEQ_CLS",
        ),
    )


TASK = classification_task(name="classification", summary="one label per text or text pair", multilabel=False)
