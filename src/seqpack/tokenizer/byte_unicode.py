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
from functools import lru_cache


@lru_cache(maxsize=1)
def byte_to_char() -> tuple[str, ...]:
    """The 256 characters, indexed by byte value."""
    printable = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
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
    """Inverse of :func:`bytes_to_str`; raises ``KeyError`` on a foreign character."""
    table = char_to_byte()
    return bytes(table[c] for c in text)
