"""The corpus encoder (`seqpack.tokenizer.fast`): batches of flat ids equal to each document encoded
by the oracle, on one thread and on several (the next batch drawn while one is encoded)."""

from __future__ import annotations

import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqpack.tokenizer import BPEConfig, Tokenizer, train_bpe_corpus
from seqpack.tokenizer.fast import _DrawnAhead, encode_batches, encode_documents

EOT = "<|endoftext|>"


@pytest.fixture(scope="module")
def small() -> Tokenizer:
    docs = ["the cat sat on the mat. " * 20, "héllo wörld 123 don't stop", "tabs\tand\n\nnewlines  "] * 5
    r = train_bpe_corpus(documents=docs, config=BPEConfig(vocab_size=295, special_tokens=(EOT,), workers=1))
    return Tokenizer(r.vocab, r.merges, [EOT])


def test_drawn_ahead_gives_the_items_in_order_at_most_two_ahead():
    drawn = []

    def items():
        for i in range(50):
            drawn.append(i)
            yield i

    got = []
    for x in _DrawnAhead(items()):
        assert len(drawn) <= x + 3  # this one, one waiting, one being drawn
        got.append(x)
    assert got == list(range(50))
    assert list(_DrawnAhead(iter([]))) == []
    _DrawnAhead(iter(range(10**6))).close()  # never read: closing stops the drawing


def test_drawn_ahead_raises_in_the_failing_items_place_and_leaves_no_thread():
    def items():
        yield 1
        yield 2
        raise ZeroDivisionError

    got = []
    with pytest.raises(ZeroDivisionError):
        for y in _DrawnAhead(items()):
            got.append(y)
    assert got == [1, 2]
    it = iter(_DrawnAhead(iter(range(10**6))))
    assert next(it) == 0
    it.close()  # stopped early: the drawing stops too
    assert not [t for t in threading.enumerate() if t.name == "seqpack-draw"]


@settings(max_examples=40, deadline=None)
@given(docs=st.lists(st.text(max_size=30) | st.sampled_from([EOT, "the cat", "don't  stop\n\n"]), max_size=30),
       batch_chars=st.integers(1, 60), workers=st.sampled_from([1, 2]))
def test_encode_batches_equal_each_document_encoded(small, docs, batch_chars, workers):
    got = [a.tolist() for a in encode_documents(small, iter(docs), workers=workers, batch_chars=batch_chars)]
    assert got == [small.encode_oracle(d) for d in docs]
    for ids, offsets in encode_batches(small, docs, workers=workers, batch_chars=batch_chars):
        assert offsets[0] == 0 and offsets[-1] == len(ids) and (offsets[1:] >= offsets[:-1]).all()


@pytest.mark.parametrize("workers", [1, 2])
def test_a_document_that_is_not_text_fails_in_its_batch(small, workers):
    batches = encode_batches(small, ["the cat", "sat", 3, "mat"], workers=workers, batch_chars=4)  # type: ignore[list-item]
    assert next(batches)[0].tolist() == small.encode("the cat")
    with pytest.raises(TypeError, match="must be str, got int"):
        list(batches)
