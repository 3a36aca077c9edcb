"""What the tasks that read labelled examples share: a checked field of a record, BERT's special ids.

>>> get_field({"text": "hi"}, "text", 0, "--text-field")
'hi'
>>> get_field({"text": 3}, "text", 4, "--text-field")
Traceback (most recent call last):
...
seqpack.errors.UserError: example 4: field 'text' is int, expected str
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from seqpack.errors import UserError

if TYPE_CHECKING:
    from seqpack.tokenizer.types import AnyTokenizer

BERT_SPECIALS = ("[CLS]", "[SEP]", "[MASK]")


def get_field(row: dict[str, Any], name: str, i: int, option: str, kind: type | tuple[type, ...] = str) -> Any:
    """``row[name]``, or a ``ValueError`` naming example ``i`` and the option that picks the field."""
    if name not in row:
        keys = ", ".join(sorted(map(str, row))[:8])
        raise UserError(f"example {i}: no field {name!r} (fields: {keys}); pass {option} NAME")
    v = row[name]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(v, kinds) or (isinstance(v, bool) and bool not in kinds):
        want = " or ".join(k.__name__ for k in kinds)
        raise UserError(f"example {i}: field {name!r} is {type(v).__name__}, expected {want}")
    return v


def special_ids(tokenizer: AnyTokenizer, names: Iterable[str] = BERT_SPECIALS) -> tuple[dict[str, int], int]:
    """Ids of ``names``: the tokenizer's own where it has them, else new ids after its vocab.

    Returns ``(ids, vocab_size)``, the vocab size a model needs to embed every id.
    """
    ids: dict[str, int] = {}
    nxt = tokenizer.vocab_size
    for n in names:
        i = tokenizer.token_to_id(n)
        if i is None:
            i, nxt = nxt, nxt + 1
        ids[n] = i
    return ids, nxt
