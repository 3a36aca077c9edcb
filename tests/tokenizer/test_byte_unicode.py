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


@given(st.lists(st.binary(max_size=12), max_size=20))
def test_batch_conversions_equal_one_at_a_time(items: list[bytes]):
    from seqpack.tokenizer.byte_unicode import bytes_to_strs, strs_to_bytes

    strs = bytes_to_strs(items)
    assert strs == [bytes_to_str(b) for b in items]
    assert strs_to_bytes(strs) == items


@given(st.lists(st.binary(min_size=1, max_size=6), min_size=1, max_size=8), st.data())
def test_strs_to_bytes_names_a_foreign_character(items: list[bytes], data):
    """A character outside the map (a space, a newline, a letter above U+0143) raises KeyError with it,
    as str_to_bytes does, wherever it sits among the items."""
    import pytest

    from seqpack.tokenizer.byte_unicode import bytes_to_strs, strs_to_bytes

    strs = bytes_to_strs(items)
    k = data.draw(st.integers(0, len(strs) - 1))
    bad = data.draw(st.sampled_from([" ", "\n", "\u0144", "\u20ac"]))
    strs[k] = strs[k][:1] + bad + strs[k][1:]
    with pytest.raises(KeyError) as got:
        strs_to_bytes(strs)
    assert got.value.args == (bad,)


def test_gpt2_strings_and_duplicate_strings():
    import pytest

    from seqpack.tokenizer.byte_unicode import gpt2_strings, string_ids

    vocab = {0: b" ", 1: b"a", 2: b" a", 3: b"\n"}
    strings, merges = gpt2_strings(vocab, [(b" ", b"a"), (b"\n", b"\n")])  # a half the vocab lacks: converted alone
    assert strings == {0: "Ġ", 1: "a", 2: "Ġa", 3: "Ċ"} and merges == [("Ġ", "a"), ("Ċ", "Ċ")]
    assert string_ids(strings, vocab, "vocab.json") == {"Ġ": 0, "a": 1, "Ġa": 2, "Ċ": 3}
    with pytest.raises(ValueError, match=r"token b'a' appears twice in the vocab \(ids 1 and 4\); vocab.json"):
        string_ids({**strings, 4: "a"}, {**vocab, 4: b"a"}, "vocab.json")
