"""Pairs -> one packing unit each, in one of two layouts (so no pair is ever split across rows).

``shared-prefix``: the prompt once, then both responses. ``branch_ids`` says which part a token
is (0 prompt, 1 chosen, 2 rejected); a token attends to the prompt and to its own response, never
to the other (`seqpack.nn.masks.attention_mask` with ``branch_ids``). The rejected response's
positions continue from the prompt's end, as if it followed the prompt alone::

    input_ids     p0 p1 p2 c0 c1 r0 r1 r2
    branch_ids    0  0  0  1  1  2  2  2
    position_ids  0  1  2  3  4  3  4  5
    labels        -  -  -  c0 c1 r0 r1 r2      (-: -100; no loss on the prompt)

``pairs``: ``prompt + chosen`` then ``prompt + rejected``, two sequences in one unit (branch 1
and 2, positions restarting), the layout TRL's ``DPOTrainer`` feeds, without its padding.

    >>> from seqpack.tasks.preference.records import Pairs
    >>> pairs = Pairs([np.array([5, 6])], [np.array([7])], [np.array([8, 9])], np.array([0]), None, 1)
    >>> s = preference_sequences(pairs, layout="shared-prefix", max_len=8)
    >>> s.sequence(0)["position_ids"].tolist(), s.sequence(0)["branch_ids"].tolist()
    ([0, 1, 2, 2, 3], [0, 0, 1, 2, 2])
    >>> s = preference_sequences(pairs, layout="pairs", max_len=8)
    >>> s.sequence(0)["input_ids"].tolist(), s.sequence(0)["labels"].tolist()
    ([5, 6, 7, 5, 6, 8, 9], [-100, -100, 7, -100, -100, 8, 9])

Too long for ``max_len``: ``truncate`` keeps the prompt and cuts the responses, the longer one
first (each keeps at least one token); ``drop`` drops the pair; ``error`` refuses. A pair whose
prompt leaves no room for a token of each response is dropped and counted (``too_long``).
"""

from __future__ import annotations

import numpy as np

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
from seqpack.tasks.preference.records import Pairs

LAYOUTS = ("shared-prefix", "pairs")
PREFERENCE_OVERFLOW = ("truncate", "drop", "error")
PROMPT, CHOSEN, REJECTED = 0, 1, 2  # branch ids


def fit_responses(chosen: int, rejected: int, budget: int) -> tuple[int, int]:
    """Response lengths within ``budget`` tokens, cutting the longer first.

    >>> fit_responses(10, 3, 8), fit_responses(10, 10, 8), fit_responses(2, 3, 8)
    ((5, 3), (4, 4), (2, 3))
    """
    if chosen + rejected <= budget:
        return chosen, rejected
    c = min(chosen, max(budget // 2, budget - rejected))
    return c, min(rejected, budget - c)


def _unit(p: np.ndarray, c: np.ndarray, r: np.ndarray, layout: str) -> tuple[np.ndarray, ...]:
    """``(input_ids, labels, branch_ids, position_ids)`` of one pair."""
    P, C, R = p.size, c.size, r.size
    ignore = np.full(P, IGNORE_INDEX, dtype=np.int64)
    if layout == "shared-prefix":
        ids = np.concatenate([p, c, r])
        labels = np.concatenate([ignore, c, r])
        branch = np.repeat(np.array([PROMPT, CHOSEN, REJECTED], np.uint8), [P, C, R])
        pos = np.concatenate([np.arange(P + C), P + np.arange(R)])
    else:
        ids = np.concatenate([p, c, p, r])
        labels = np.concatenate([ignore, c, ignore, r])
        branch = np.repeat(np.array([CHOSEN, REJECTED], np.uint8), [P + C, P + R])
        pos = np.concatenate([np.arange(P + C), np.arange(P + R)])
    return ids, labels, branch, pos


def preference_sequences(
    pairs: Pairs, *, layout: str, max_len: int, overflow: str = "truncate", vocab_size: int | None = None
) -> Sequences:
    """One sequence per pair in ``layout``; see the module docstring."""
    check_max_len(max_len)
    check_overflow(overflow, allowed=PREFERENCE_OVERFLOW)
    if layout not in LAYOUTS:
        raise UserError(f"layout must be one of {'|'.join(LAYOUTS)}, got {layout!r}")
    copies = 1 if layout == "shared-prefix" else 2
    parts: list[tuple[np.ndarray, ...]] = []
    keep: list[int] = []
    truncated = too_long = cut_tokens = 0
    for i, (p, c, r) in enumerate(zip(pairs.prompt, pairs.chosen, pairs.rejected)):
        need = copies * p.size + c.size + r.size
        if need > max_len:
            too_long += 1
            if overflow == "error":
                continue
            budget = max_len - copies * p.size
            if overflow == "drop" or budget < 2:
                continue
            nc, nr = fit_responses(c.size, r.size, budget)
            cut_tokens += c.size + r.size - nc - nr
            c, r = c[:nc], r[:nr]
            truncated += 1
        parts.append(_unit(p, c, r, layout))
        keep.append(i)
    if too_long and overflow == "error":
        raise overflow_error(too_long, max_len, PREFERENCE_OVERFLOW)
    lengths = np.array([u[0].size for u in parts], dtype=np.int64)
    cat = [np.concatenate([u[k] for u in parts]) if parts else np.zeros(0, np.int64) for k in range(4)]
    top = max(int(cat[0].max()) if cat[0].size else 0, (vocab_size or 1) - 1)
    kept = np.asarray(keep, dtype=np.int64)
    seq_fields = {} if pairs.margin is None else {"margin": pairs.margin[kept]}
    dropped = {"too_long": too_long - truncated} if too_long - truncated else {}
    return Sequences(
        task="preference",
        offsets=offsets_of(lengths),
        example_ids=pairs.example_ids[kept],
        token_fields={
            "input_ids": cat[0].astype(id_dtype(top)),
            "labels": cat[1].astype(label_dtype(top)),
            "branch_ids": cat[2].astype(np.uint8),
            "position_ids": cat[3].astype(np.int64),
        },
        seq_fields=seq_fields,
        num_examples=pairs.num_examples,
        dropped=dropped,
        info={
            "layout": layout,
            "overflow": overflow,
            "truncated": truncated,
            "truncated_tokens": cut_tokens,
            "target_tokens": int((cat[1] != IGNORE_INDEX).sum()),
            "vocab_size": vocab_size,
        },
    )
