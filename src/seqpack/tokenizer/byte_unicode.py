"""GPT-2's reversible map between bytes and printable unicode characters.

Printable Latin-1 bytes map to themselves; the other 68 bytes map to U+0100...
so that every token can be written as a readable string in ``vocab.json``.

    >>> bytes_to_str(b" hello\\n")
    'ĠhelloĊ'
    >>> str_to_bytes("Ġhello")
    b' hello'
"""

from __future__ import annotations

import codecs
from collections.abc import Sequence
from functools import lru_cache
from itertools import accumulate

from seqpack.errors import UserError

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from typing import Any


@lru_cache(maxsize=1)
def byte_to_char() -> tuple[str, ...]:
    """The 256 characters, indexed by byte value."""
    printable = (
        list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    )
    table: dict[int, int] = {b: b for b in printable}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = 256 + extra
            extra += 1
    return tuple(chr(table[b]) for b in range(256))


@lru_cache(maxsize=1)
def char_to_byte() -> dict[str, int]:
    return {c: b for b, c in enumerate(byte_to_char())}


@lru_cache(maxsize=1)
def _decoding_table() -> str:
    return "".join(byte_to_char())


def bytes_to_str(data: bytes) -> str:
    return codecs.charmap_decode(data, "strict", _decoding_table())[0]  # the table, byte by byte, in C


def str_to_bytes(text: str) -> bytes:
    """Inverse of `bytes_to_str`; raises ``KeyError`` on a foreign character."""
    table = char_to_byte()
    return bytes(table[c] for c in text)


@lru_cache(maxsize=1)
def _encoding_map() -> Any:  # codecs.charmap_build's EncodingMap, a private type
    return codecs.charmap_build(_decoding_table())


def _slices(text: str | bytes, lengths: list[int]) -> list:
    ends = list(accumulate(lengths))
    return [text[e - n : e] for e, n in zip(ends, lengths)]


def bytes_to_strs(items: Sequence[bytes]) -> list[str]:
    """`bytes_to_str` of each item, in one pass of the codec over them all (a vocabulary's
    tokens: one character a byte, so item k is the same slice of the joined text as of the joined bytes).

    >>> bytes_to_strs([b" a", b"b\\n"])
    ['Ġa', 'bĊ']
    """
    return _slices(bytes_to_str(b"".join(items)), [len(b) for b in items])


def gpt2_strings(
    vocab: dict[int, bytes], merges: Sequence[tuple[bytes, bytes]]
) -> tuple[dict[int, str], list[tuple[str, str]]]:
    """Every token's string (id -> string, in id order) and every merge's pair of strings, each token
    converted once (a merge's halves are tokens of the vocabulary; one that is not is converted alone).

    >>> gpt2_strings({0: b" ", 1: b"a", 2: b" a"}, [(b" ", b"a")])
    ({0: 'Ġ', 1: 'a', 2: 'Ġa'}, [('Ġ', 'a')])
    """
    ids = sorted(vocab)
    tokens = [vocab[i] for i in ids]
    strs = bytes_to_strs(tokens)
    of = dict(zip(tokens, strs))
    pairs = [(of.get(a) or bytes_to_str(a), of.get(b) or bytes_to_str(b)) for a, b in merges]
    return dict(zip(ids, strs)), pairs


def string_ids(strings: dict[int, str], vocab: dict[int, bytes], file: str) -> dict[str, int]:
    """``{string: id}`` in id order, as a vocabulary file holds it; refuses two ids with one string.

    >>> string_ids({0: "a", 1: "b"}, {0: b"a", 1: b"b"}, "vocab.json")
    {'a': 0, 'b': 1}
    """
    out = {s: i for i, s in strings.items()}
    if len(out) < len(strings):
        first: dict[str, int] = {}
        for i, key in strings.items():
            if key in first:
                raise UserError(
                    f"token {vocab[i]!r} appears twice in the vocab (ids {first[key]} and {i}); "
                    f"{file} cannot hold duplicates"
                )
            first[key] = i
    return out


def strs_to_bytes(items: Sequence[str]) -> list[bytes]:
    """`str_to_bytes` of each item, in one pass of the codec; raises ``KeyError`` with the first
    foreign character, as `str_to_bytes` does.

    >>> strs_to_bytes(["Ġa", "bĊ"])
    [b' a', b'b\\n']
    """
    text = "".join(items)
    try:
        data = codecs.charmap_encode(text, "strict", _encoding_map())[0]
    except UnicodeEncodeError as e:
        raise KeyError(text[e.start]) from e
    return _slices(data, [len(t) for t in items])
