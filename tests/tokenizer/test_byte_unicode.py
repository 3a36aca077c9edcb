"""GPT-2's byte <-> character map: the fast path (a charmap codec) equals the table read byte by byte."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from seqpack.tokenizer.byte_unicode import byte_to_char, bytes_to_str, str_to_bytes


def test_every_byte_has_its_own_printable_character():
    chars = byte_to_char()
    assert len(set(chars)) == 256 and all(c.isprintable() and not c.isspace() for c in chars)


@given(st.binary(max_size=64))
def test_bytes_to_str_is_the_table_and_round_trips(data: bytes):
    assert bytes_to_str(data) == "".join(byte_to_char()[b] for b in data)
    assert str_to_bytes(bytes_to_str(data)) == data
