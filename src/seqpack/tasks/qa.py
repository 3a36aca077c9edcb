"""``qa``: extractive question answering (SQuAD-style) in doc-stride windows; span loss per
window; evaluation reports the exact match of the predicted span at token level.

Extractive QA: ``[CLS] question [SEP] context-window [SEP]`` + answer start/end token positions.

Answers are character spans of the context (SQuAD: ``{"text": [...], "answer_start": [...]}``,
the first answer is used). A context that does not fit is cut into windows that
overlap by ``doc_stride`` tokens (as Hugging Face's ``stride``); a window that does
not hold the whole answer points at its ``[CLS]`` (position 0), as SQuAD users expect.
Every window keeps its example id, its ``context_start`` (position of its first
context token) and ``window_start`` (index of that token in the whole context).

    >>> from seqpack.tokenizer.tokenizer import Tokenizer
    >>> tok = Tokenizer({i: bytes([i]) for i in range(256)}, [])
    >>> ex = {"question": "q", "context": "abcdef", "answers": {"text": ["cd"], "answer_start": [2]}}
    >>> s = qa_sequences([ex], tok, max_len=7, doc_stride=1)
    >>> [s.sequence(i)["input_ids"].tolist() for i in range(s.num_sequences)]
    [[256, 113, 257, 97, 98, 99, 257], [256, 113, 257, 99, 100, 101, 257], [256, 113, 257, 101, 102, 257]]
    >>> s.seq_fields["start_positions"].tolist(), s.seq_fields["end_positions"].tolist()
    ([0, 3, 0], [0, 4, 0])
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from seqpack.corpus.records import iter_records
from seqpack.data.sequences import IGNORE_INDEX, Sequences, id_dtype, offsets_of
from seqpack.errors import UserError
from seqpack.packing.histogram import MAX_LEN_LIMIT, check_max_len
from seqpack.tasks._lm import slot_mean
from seqpack.tasks.base import auto_model, check_examples, slot_loss_units
from seqpack.tasks.examples import get_field
from seqpack.tasks.spec import HFModels, OwnModels, Packing, PackSettings, Task, Totals, Training
from seqpack.tasks.specials import task_specials

if TYPE_CHECKING:
    import torch

    from seqpack.nn.models.common import PackedOutput
    from seqpack.tokenizer.types import AnyTokenizer


def first_answer(answers: Any, i: int, field: str) -> tuple[str, int] | None:
    """``(text, answer_start)`` of the first answer; ``None`` when there is none (SQuAD v2)."""
    if isinstance(answers, dict):
        texts, starts = answers.get("text"), answers.get("answer_start")
        if not isinstance(texts, list) or not isinstance(starts, list) or len(texts) != len(starts):
            raise UserError(f"example {i}: field {field!r} needs lists 'text' and 'answer_start' of equal length")
        if not texts:
            return None
        text, start = texts[0], starts[0]
    elif isinstance(answers, list):
        if not answers:
            return None
        a = answers[0]
        if not isinstance(a, dict) or "text" not in a or "answer_start" not in a:
            raise UserError(f"example {i}: each answer in {field!r} needs 'text' and 'answer_start'")
        text, start = a["text"], a["answer_start"]
    else:
        raise UserError(f"example {i}: field {field!r} is {type(answers).__name__}, expected a dict or list")
    if not isinstance(text, str) or isinstance(start, bool) or not isinstance(start, int):
        raise UserError(f"example {i}: answer text must be a string and answer_start an int")
    return text, start


def answer_tokens(context: str, spans: np.ndarray, text: str, start: int, i: int) -> tuple[int, int]:
    """First and last token (inclusive) of the context that overlap the answer's characters;
    ``spans`` is each context token's character span ``(n, 2)`` (from ``encode_with_offsets``).

    >>> answer_tokens("abcdef", np.array([[0, 2], [2, 4], [4, 6]]), "cde", 2, 0)
    (1, 2)
    """
    if start < 0 or start + len(text) > len(context) or not text:
        raise UserError(
            f"example {i}: answer at characters {start}..{start + len(text)} is outside the context ({len(context)} characters)"
        )
    if context[start : start + len(text)] != text:
        raise UserError(f"example {i}: answer {text[:40]!r} is not at character {start} of the context")
    end = start + len(text)
    overlap = np.flatnonzero((spans[:, 0] < end) & (spans[:, 1] > start))
    if overlap.size == 0:
        raise UserError(f"example {i}: no token of the context covers the answer {text[:40]!r}")
    return int(overlap[0]), int(overlap[-1])


def windows(n: int, room: int, stride: int) -> list[int]:
    """Start of each window of ``room`` tokens over ``n`` tokens, overlapping by ``stride``.

    >>> windows(10, 4, 1)
    [0, 3, 6]
    """
    starts = [0]
    while starts[-1] + room < n:
        starts.append(starts[-1] + room - stride)
    return starts


def _read_rows(
    examples: str | os.PathLike[str] | Iterable[Any], question_field: str, context_field: str, answers_field: str
) -> tuple[list[tuple[int, str, str, Any]], dict[str, int], int]:
    """``(record number, question, context, first answer)`` of each example with a context."""
    rows: list[tuple[int, str, str, Any]] = []
    dropped: dict[str, int] = {}
    n_examples = 0
    for i, row in enumerate(iter_records(examples)):
        n_examples += 1
        q = get_field(row, question_field, i, "--question-field")
        c = get_field(row, context_field, i, "--context-field")
        ans = first_answer(get_field(row, answers_field, i, "--answers-field", (dict, list)), i, answers_field)
        if not c.strip():
            dropped["empty"] = dropped.get("empty", 0) + 1
            continue
        rows.append((i, q, c, ans))
    return rows, dropped, n_examples


def qa_sequences(
    examples: str | os.PathLike[str] | Iterable[Any],
    tokenizer: AnyTokenizer,
    *,
    max_len: int,
    question_field: str = "question",
    context_field: str = "context",
    answers_field: str = "answers",
    doc_stride: int = 128,
    max_question_len: int = 64,
) -> Sequences:
    """QA examples -> one sequence per context window, with ``start/end_positions``."""
    check_max_len(max_len)
    specials = task_specials(tokenizer, "qa")
    (pre, mid, post), (q_type, c_type) = specials.pair.pieces()
    rows, dropped, n_examples = _read_rows(examples, question_field, context_field, answers_field)
    q_ids = tokenizer.encode_batch([r[1] for r in rows])
    c_enc = tokenizer.encode_with_offsets([r[2] for r in rows])
    seqs: list[list[int]] = []
    fields: dict[str, list[int]] = {
        k: [] for k in ("start_positions", "end_positions", "context_start", "window_start")
    }
    example_ids: list[int] = []
    types: list[list[int]] = []
    for (i, _q, context, ans), qi, (c_arr, c_spans) in zip(rows, q_ids, c_enc):
        qi, ci = qi[:max_question_len], c_arr.tolist()
        room = max_len - len(qi) - specials.pair.added
        if room <= doc_stride:
            raise UserError(
                f"max_len={max_len} leaves {room} context tokens after the question, not more than doc_stride={doc_stride}; raise --max-len or lower --doc-stride"
            )
        span = None if ans is None else answer_tokens(context, c_spans, ans[0], ans[1], i)
        for w in windows(len(ci), room, doc_stride):
            piece = ci[w : w + room]
            head = [*pre[0], *qi, *mid[0]]
            seqs.append(head + piece + post[0])
            types.append([*pre[1], *[q_type] * len(qi), *mid[1], *[c_type] * len(piece), *post[1]])
            first, last = span if span is not None else (-1, -1)
            inside = span is not None and w <= first and last < w + len(piece)
            fields["start_positions"].append(first - w + len(head) if inside else 0)
            fields["end_positions"].append(last - w + len(head) if inside else 0)
            fields["context_start"].append(len(head))
            fields["window_start"].append(w)
            example_ids.append(i)
    lengths = np.array([len(s) for s in seqs], dtype=np.int64)
    total = int(lengths.sum())
    flat = np.fromiter((t for s in seqs for t in s), dtype=np.int64, count=total)
    tt = np.fromiter((t for s in types for t in s), dtype=np.uint8, count=total)
    pos_dt = np.int16 if max_len < 1 << 15 else np.int32
    return Sequences(
        task="qa",
        offsets=offsets_of(lengths),
        example_ids=np.asarray(example_ids, dtype=np.int64),
        token_fields={"input_ids": flat.astype(id_dtype(specials.vocab_size - 1)), "token_type_ids": tt},
        seq_fields={k: np.asarray(v, dtype=pos_dt if k != "window_start" else np.int32) for k, v in fields.items()},
        position_fields=("start_positions", "end_positions", "context_start"),
        num_examples=n_examples,
        dropped=dropped,
        info={
            **specials.info(),
            "doc_stride": doc_stride,
            "max_question_len": max_question_len,
        },
    )


@dataclass(frozen=True, kw_only=True)
class QAOptions:
    question_field: str = field(default="question", metadata={"help": "the question column"})
    context_field: str = field(default="context", metadata={"help": "the context column"})
    answers_field: str = field(
        default="answers", metadata={"help": "SQuAD answers: {text: [...], answer_start: [...]}"}
    )
    doc_stride: int = field(
        default=128, metadata={"help": "overlap of context windows, tokens", "range": (0, MAX_LEN_LIMIT)}
    )
    max_question_len: int = field(
        default=64, metadata={"help": "question tokens kept at most", "range": (1, MAX_LEN_LIMIT)}
    )

    def __post_init__(self) -> None:
        if self.doc_stride < 0 or self.max_question_len < 1:
            raise UserError("doc_stride must be >= 0 and max_question_len >= 1")


def build(source: Any, tokenizer: AnyTokenizer, config: PackSettings) -> Sequences:
    """The doc-stride windows of question-answer examples (`qa_sequences`)."""
    check_examples(source, config.task)
    o: QAOptions = config.options
    return qa_sequences(
        source,
        tokenizer,
        max_len=config.max_len,
        question_field=o.question_field,
        context_field=o.context_field,
        answers_field=o.answers_field,
        doc_stride=o.doc_stride,
        max_question_len=o.max_question_len,
    )


def bert(kind: str, size: str, vocab: int, manifest: Mapping[str, Any], extra: dict[str, Any]) -> tuple[Any, Any]:
    """seqpack's BERT with a span head (start and end logits)."""
    from seqpack.nn.models import BertConfig, BertForQuestionAnswering

    mc = BertConfig.of_size(size, vocab_size=vocab, **extra)
    return BertForQuestionAnswering(mc), mc


def hf_config(d: dict[str, Any], manifest: Mapping[str, Any]) -> None:
    """Two labels: start, end."""
    d["num_labels"] = 2


def forward(
    model: torch.nn.Module, batch: Mapping[str, torch.Tensor], *, reduction: str, objective: Any = None
) -> PackedOutput:
    """The span model's forward pass, the loss at each window's start and end."""
    return model(
        batch["input_ids"],
        batch["segment_ids"],
        position_ids=batch["position_ids"],
        token_type_ids=batch.get("token_type_ids"),
        start_positions=batch.get("start_positions"),
        end_positions=batch.get("end_positions"),
    )


def update_eval(totals: Totals, out: PackedOutput, batch: Mapping[str, torch.Tensor]) -> None:
    """``span_loss`` (per window) and ``exact_match``: argmax start and argmax end both right."""
    start, end = batch.get("start_positions"), batch.get("end_positions")
    if start is None or end is None or out.per_sequence is None:
        return
    present = start != IGNORE_INDEX  # (B, D)
    totals.add("span_loss", float(out.per_sequence[present].sum()), float(present.sum()))
    s_logits, e_logits = out.extra["start_logits"], out.extra["end_logits"]  # (B, D', T), -inf outside
    D = start.shape[1]
    hit = (s_logits[:, :D].argmax(-1) == start) & (e_logits[:, :D].argmax(-1) == end)
    totals.add("exact_match", float(hit[present].sum()), float(present.sum()))


TASK = Task(
    name="qa",
    summary="extractive question answering in doc-stride windows",
    options_type=QAOptions,
    packing=Packing(reads="examples", build=build),
    training=Training(
        loss_units=slot_loss_units("start_positions"), component_means=slot_mean, update_eval=update_eval
    ),
    models=OwnModels(kinds=("bert",), build=bert, forward=forward),
    hf=HFModels(build=auto_model("AutoModelForQuestionAnswering"), config=hf_config, lora_task_type="QUESTION_ANS"),
)
