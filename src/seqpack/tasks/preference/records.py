"""Preference records -> token ids of each pair's prompt, chosen and rejected response.

The formats TRL reads (``prompt`` / ``chosen`` / ``rejected``):

* **standard**: three strings; each response gets the tokenizer's EOS unless it ends with it;
* **conversational**: message lists, rendered with the chat template (the prompt with the
  generation prompt, each response after the prompt);
* **implicit prompt**: no ``prompt`` field; ``chosen`` and ``rejected`` are whole texts or
  conversations and the prompt is their longest common prefix (TRL's ``extract_prompt``).

Tokenization follows TRL's ``DPOTrainer``: ``prompt``, ``prompt + chosen`` and ``prompt + rejected``
are tokenized whole and the prompt ends where the three stop agreeing, so a token merged across
the prompt's end belongs to the responses (as it does in the text the model reads).

    >>> common_prefix([1, 2, 3], [1, 2, 4, 5])
    2
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from seqpack.corpus.records import iter_records
from seqpack.errors import UserError
from seqpack.tasks.chat.template import check_message
from seqpack.tasks.examples import get_field

if TYPE_CHECKING:
    from seqpack.tasks.chat.template import ChatTemplate
    from seqpack.tokenizer.types import AnyTokenizer


@dataclass(frozen=True)
class Pairs:
    """Tokenized pairs, one entry each: ``prompt[i]``, ``chosen[i]``, ``rejected[i]`` (int64 arrays)."""

    prompt: list[np.ndarray]
    chosen: list[np.ndarray]
    rejected: list[np.ndarray]
    example_ids: np.ndarray  # (N,) the record each pair came from
    margin: np.ndarray | None  # (N,) float32, when the records have the margin field
    num_examples: int


def common_prefix(a: Any, b: Any) -> int:
    """Length of the longest common prefix of two sequences."""
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def split_implicit(chosen: Any, rejected: Any) -> tuple[Any, Any, Any]:
    """``(prompt, chosen, rejected)`` from two texts or conversations sharing a prefix (TRL's rule:
    a text's prompt does not keep the space before the first differing character).

    >>> split_implicit("Q: sky? A: blue", "Q: sky? A: green")
    ('Q: sky? A:', ' blue', ' green')
    """
    idx = common_prefix(chosen, rejected)
    if isinstance(chosen, str) and 0 < idx < min(len(chosen), len(rejected)) and chosen[idx - 1] == " ":
        idx -= 1
    return chosen[:idx], chosen[idx:], rejected[idx:]


def _texts(
    row: dict[str, Any], i: int, fields: tuple[str, str, str], template: ChatTemplate | None, eos: str | None
) -> tuple[str, str, str]:
    """The texts ``prompt``, ``prompt + chosen``, ``prompt + rejected`` of record ``i``."""
    pf, cf, rf = fields
    chosen = get_field(row, cf, i, "--chosen-field", (str, list))
    rejected = get_field(row, rf, i, "--rejected-field", (str, list))
    if type(chosen) is not type(rejected):
        raise UserError(f"example {i}: {cf!r} and {rf!r} must both be strings or both message lists")
    if pf in row and row[pf] is not None:
        prompt = get_field(row, pf, i, "--prompt-field", (str, list))
    else:
        prompt, chosen, rejected = split_implicit(chosen, rejected)
    if isinstance(chosen, str):
        if not isinstance(prompt, str):
            raise UserError(
                f"example {i}: the prompt is a message list but the responses are strings; give both in one form"
            )
        if eos:
            chosen, rejected = (r if r.endswith(eos) else r + eos for r in (chosen, rejected))
        return prompt, prompt + chosen, prompt + rejected
    if not isinstance(prompt, list) or not prompt:
        raise UserError(f"example {i}: empty prompt; every pair needs a prompt both responses answer")
    if template is None:
        raise UserError(f"example {i}: conversational pairs need a chat template; pass --chat-template FILE|chatml")
    check_message(prompt + chosen, i)
    check_message(prompt + rejected, i)
    try:
        return (
            template.render(prompt, add_generation_prompt=True),
            template.render(prompt + chosen),
            template.render(prompt + rejected),
        )
    except ValueError:
        raise
    except Exception as e:  # jinja2's errors, and whatever a template's own code raises
        raise UserError(f"example {i}: the chat template {template.name} failed to render: {e}") from e


def read_pairs(
    examples: str | os.PathLike[str] | Iterable[Any],
    tokenizer: AnyTokenizer,
    *,
    fields: tuple[str, str, str] = ("prompt", "chosen", "rejected"),
    margin_field: str = "margin",
    template: ChatTemplate | None = None,
    eos: str | None = None,
) -> Pairs:
    """Every record's pair, tokenized; a record that cannot make a pair is a ``ValueError`` naming it."""
    texts: list[str] = []
    margins: list[float] = []
    n = 0
    for i, row in enumerate(iter_records(examples)):
        texts.extend(_texts(row, i, fields, template, eos))
        if margin_field in row and row[margin_field] is not None:
            margin = float(get_field(row, margin_field, i, "--margin-field", (int, float)))
            if not math.isfinite(margin):  # a reward model would train to NaN on it
                raise UserError(f"example {i}: {margin_field!r} is {margin}; a margin must be a finite number")
            margins.append(margin)
        elif margins:
            raise UserError(f"example {i}: no {margin_field!r} but earlier examples have one; give every pair a margin")
        n = i + 1
    if margins and len(margins) != n:
        raise UserError(f"only {len(margins)} of {n} examples have a {margin_field!r}; give every pair a margin")
    ids = tokenizer.encode_batch(texts)
    prompt, chosen, rejected = [], [], []
    for i in range(n):
        p, pc, pr = (np.asarray(x, dtype=np.int64) for x in ids[3 * i : 3 * i + 3])
        k = min(common_prefix(p, pc), common_prefix(p, pr))
        if k == 0:
            raise UserError(f"example {i}: empty prompt (no tokens before the responses); every pair needs a prompt")
        c, r = pc[k:], pr[k:]
        if c.size == 0 or r.size == 0:
            raise UserError(f"example {i}: the {'chosen' if c.size == 0 else 'rejected'} response is empty")
        if np.array_equal(c, r):
            raise UserError(f"example {i}: chosen and rejected are identical, so the pair prefers nothing; remove it")
        prompt.append(p[:k])
        chosen.append(c)
        rejected.append(r)
    return Pairs(
        prompt,
        chosen,
        rejected,
        np.arange(n, dtype=np.int64),
        np.asarray(margins, dtype=np.float32) if margins else None,
        n,
    )
