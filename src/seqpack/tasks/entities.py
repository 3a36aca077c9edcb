"""Entity-level precision, recall and F1 of tag sequences (CoNLL's ``conlleval``, seqeval's default
mode): the entities of IOB1/IOB2/IOBES tags are compared as ``(type, first, last)`` spans, an entity
counted right only when its type and both ends are.

    >>> sorted(entities(["B-PER", "I-PER", "O", "B-LOC"]))
    [('LOC', 3, 3), ('PER', 0, 1)]
    >>> sorted(entities(["I-PER", "I-PER", "I-LOC"]))  # an I- after O or another type starts one (IOB1)
    [('LOC', 2, 2), ('PER', 0, 1)]
    >>> entity_counts(["B-PER", "I-PER", "O"], ["B-PER", "O", "O"])  # (right, predicted, gold)
    (0, 1, 1)
"""

from __future__ import annotations

import re
from collections.abc import Sequence

#: a tag name of an IOB scheme: ``O``, or ``B-TYPE``/``I-TYPE`` (IOBES: ``E-``, ``S-`` too)
IOB_TAG = re.compile(r"^(O|[BIES]-.+)$")


def is_iob(names: Sequence[str] | None) -> bool:
    """Whether tag ``names`` are an IOB scheme (every name ``O`` or ``X-TYPE``, at least one typed).

    >>> is_iob(["O", "B-PER", "I-PER"]), is_iob(["NOUN", "VERB"]), is_iob(["O"])
    (True, False, False)
    """
    if not names:
        return False
    return all(IOB_TAG.match(n) for n in names) and any(n != "O" for n in names)


def _split(tag: str) -> tuple[str, str]:
    """``(prefix, type)`` as conlleval reads a tag: ``B-PER`` -> ``("B", "PER")``, ``O`` -> ``("O", "")``."""
    return (tag[0], tag[2:]) if tag != "O" else ("O", "")


def _ends(prev: str, prev_type: str, tag: str, kind: str) -> bool:
    """An entity ended at the previous tag."""
    if prev in ("E", "S"):
        return True
    if prev in ("B", "I") and tag in ("B", "S", "O"):
        return True
    return prev != "O" and prev_type != kind


def _starts(prev: str, prev_type: str, tag: str, kind: str) -> bool:
    """An entity starts at this tag."""
    if tag in ("B", "S"):
        return True
    if prev in ("E", "S", "O") and tag in ("E", "I"):
        return True
    return tag != "O" and prev_type != kind


def entities(tags: Sequence[str]) -> set[tuple[str, int, int]]:
    """The entities ``(type, first, last)`` (inclusive word indices) of one sequence's tags."""
    out: set[tuple[str, int, int]] = set()
    prev, prev_type, begin = "O", "", 0
    for i, tag in enumerate([*tags, "O"]):
        cur, kind = _split(tag)
        if _ends(prev, prev_type, cur, kind):
            out.add((prev_type, begin, i - 1))
        if _starts(prev, prev_type, cur, kind):
            begin = i
        prev, prev_type = cur, kind
    return out


def entity_counts(gold: Sequence[str], predicted: Sequence[str]) -> tuple[int, int, int]:
    """``(right, predicted, gold)`` entity counts of one sequence: precision is right / predicted,
    recall right / gold, F1 ``2 right / (predicted + gold)``."""
    g, p = entities(gold), entities(predicted)
    return len(g & p), len(p), len(g)


__all__ = ["IOB_TAG", "entities", "entity_counts", "is_iob"]
