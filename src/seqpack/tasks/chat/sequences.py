"""Conversations -> sequences with labels only where the model should learn (``train_on``).

Each record's ``messages`` are rendered with the chat template and tokenized as one text (the
way ``apply_chat_template(tokenize=True)`` does); a token is a target when it starts inside an
assistant turn's span (`seqpack.tasks.chat.template`). Labels follow the causal-LM
convention of ``clm`` (the model shifts): ``labels[t] = input_ids[t]`` at a target, -100
elsewhere and always at the first token.

``train_on``: ``assistant`` (every assistant turn), ``last`` (the final assistant turn kept),
``all`` (every token). A conversation longer than ``max_len`` is cut after the last assistant
turn that fits (``overflow="truncate"``); one with no target left is dropped and counted
(``Sequences.dropped``; ``build_packed_dataset`` warns with the job's totals), never kept without targets.

    >>> from seqpack.tasks.chat.template import ChatTemplate
    >>> from seqpack.tokenizer.tokenizer import Tokenizer
    >>> tok = Tokenizer({i: bytes([i]) for i in range(256)}, [], special_tokens=["<|im_start|>", "<|im_end|>"])
    >>> t = ChatTemplate("{% for m in messages %}{% if m.role == 'assistant' %}{% generation %}"
    ...                  "{{ m.content }}<|im_end|>{% endgeneration %}{% else %}{{ m.content }}{% endif %}{% endfor %}")
    >>> s = chat_sequences([{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}],
    ...                    tok, template=t, max_len=8)
    >>> s.sequence(0)["input_ids"].tolist(), s.sequence(0)["labels"].tolist()
    ([113, 97, 257], [-100, 97, 257])
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

from seqpack.corpus.records import iter_records
from seqpack.data.sequences import (
    IGNORE_INDEX,
    Sequences,
    check_overflow,
    id_dtype,
    label_dtype,
    offsets_of,
    overflow_error,
)
from seqpack.errors import UserError
from seqpack.packing.histogram import check_max_len
from seqpack.tasks.chat.template import ChatTemplate, check_message
from seqpack.tasks.examples import get_field

if TYPE_CHECKING:
    from seqpack.tokenizer.types import AnyTokenizer

TRAIN_ON = ("assistant", "last", "all")
CHAT_OVERFLOW = ("truncate", "truncate-tokens", "drop", "error")


def target_mask(spans: np.ndarray, turns: list[tuple[int, int]]) -> np.ndarray:
    """Tokens (character ``spans`` ``(n, 2)``) that start inside one of ``turns``.  # (n,) bool

    >>> target_mask(np.array([[0, 2], [2, 3], [3, 5]]), [(2, 5)]).tolist()
    [False, True, True]
    """
    starts = spans[:, 0]
    mask = np.zeros(starts.size, dtype=bool)
    for a, b in turns:
        mask |= (starts >= a) & (starts < b)
    return mask


def turn_ends(spans: np.ndarray, turns: list[tuple[int, int]]) -> np.ndarray:
    """Per turn: how many tokens there are up to and including its last token.  # (turns,)"""
    return np.searchsorted(spans[:, 0], [b for _, b in turns], side="left").astype(np.int64)


def chat_sequences(
    examples: str | os.PathLike[str] | Iterable[Any],
    tokenizer: AnyTokenizer,
    *,
    template: ChatTemplate,
    max_len: int,
    messages_field: str = "messages",
    train_on: str = "assistant",
    overflow: str = "truncate",
) -> Sequences:
    """Conversations -> one sequence each, with ``labels`` at the targets; see the module docstring."""
    check_max_len(max_len)
    check_overflow(overflow, allowed=CHAT_OVERFLOW)
    if train_on not in TRAIN_ON:
        raise UserError(f"train_on must be one of {'|'.join(TRAIN_ON)}, got {train_on!r}")
    texts, turns, keep_ids, n_examples, dropped = _render_all(
        examples, template, messages_field, need_turns=train_on != "all"
    )
    seqs, labs, ex, truncated, too_long = [], [], [], 0, 0
    for k, (ids, spans) in enumerate(tokenizer.encode_with_offsets(texts)):
        n, ends = ids.size, turn_ends(spans, turns[k])
        cut = n > max_len
        if cut:
            too_long += 1
            if overflow == "truncate-tokens":  # TRL's rule: the first max_len tokens, a turn cut anywhere
                n = max_len
            else:
                fit = ends[ends <= max_len]
                n = int(fit.max()) if overflow == "truncate" and fit.size else 0
            if n == 0:
                dropped["too_long"] = dropped.get("too_long", 0) + 1
                continue
        starts = np.searchsorted(spans[:, 0], [a for a, _ in turns[k]], side="left")
        ids, spans = ids[:n], spans[:n]
        kept = [t for t, start in zip(turns[k], starts) if start < n]  # whole turns, and a cut one's kept part
        target = (
            np.ones(n, dtype=bool)
            if train_on == "all"
            else target_mask(spans, kept[-1:] if train_on == "last" else kept)
        )
        lab = np.where(target, ids, IGNORE_INDEX)
        lab[:1] = IGNORE_INDEX
        if not (lab != IGNORE_INDEX).any():
            dropped["no_target"] = dropped.get("no_target", 0) + 1
            continue
        seqs.append(ids)
        labs.append(lab)
        ex.append(keep_ids[k])
        truncated += cut  # conversations kept, but cut
    if too_long and overflow == "error":
        raise overflow_error(too_long, max_len, CHAT_OVERFLOW)
    return _sequences(
        seqs,
        labs,
        ex,
        n_examples,
        dropped,
        tokenizer,
        info={
            "train_on": train_on,
            "overflow": overflow,
            "truncated": truncated,
            "chat_template": template.name,
        },
    )


def _render_all(
    examples: str | os.PathLike[str] | Iterable[Any],
    template: ChatTemplate,
    messages_field: str,
    *,
    need_turns: bool,
) -> tuple[list[str], list[list[tuple[int, int]]], list[int], int, dict[str, int]]:
    """Each kept record's text and assistant spans, its index; records read; records dropped."""
    texts, turns, keep_ids, n_examples = [], [], [], 0
    dropped: dict[str, int] = {}
    for i, row in enumerate(iter_records(examples)):
        n_examples += 1
        messages = check_message(get_field(row, messages_field, i, "--messages-field", list), i)
        try:
            text, spans = template.render_with_spans(messages)
        except ValueError:
            raise
        except Exception as e:  # jinja2's errors, and whatever a template's own code raises
            raise UserError(f"example {i}: the chat template {template.name} failed to render: {e}") from e
        if need_turns and not spans:
            dropped["no_assistant"] = dropped.get("no_assistant", 0) + 1
            continue
        texts.append(text)
        turns.append(spans)
        keep_ids.append(i)
    return texts, turns, keep_ids, n_examples, dropped


def _sequences(
    seqs: list[np.ndarray],
    labs: list[np.ndarray],
    ex: list[int],
    n_examples: int,
    dropped: dict[str, int],
    tokenizer: AnyTokenizer,
    info: dict[str, Any],
) -> Sequences:
    lengths = np.array([s.size for s in seqs], dtype=np.int64)
    flat = np.concatenate(seqs) if seqs else np.zeros(0, np.int64)
    flat_lab = np.concatenate(labs) if labs else np.zeros(0, np.int64)
    vocab = tokenizer.vocab_size
    return Sequences(
        task="chat",
        offsets=offsets_of(lengths),
        example_ids=np.asarray(ex, dtype=np.int64),
        token_fields={"input_ids": flat.astype(id_dtype(vocab - 1)), "labels": flat_lab.astype(label_dtype(vocab - 1))},
        num_examples=n_examples,
        dropped=dropped,
        info={**info, "vocab_size": vocab, "target_tokens": int((flat_lab != IGNORE_INDEX).sum())},
    )
