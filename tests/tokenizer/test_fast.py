"""The corpus encoder (`seqpack.tokenizer.fast`): batches of flat ids equal to each document encoded
by the oracle, on one thread and on several (a batch encoded while the next is drawn)."""

from __future__ import annotations

import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqpack.tokenizer import BPEConfig, Tokenizer, train_bpe_corpus
from seqpack.tokenizer.fast import _one_ahead, encode_batches, encode_documents

EOT = "<|endoftext|>"


@pytest.fixture(scope="module")
def small() -> Tokenizer:
    docs = ["the cat sat on the mat. " * 20, "héllo wörld 123 don't stop", "tabs\tand\n\nnewlines  "] * 5
    r = train_bpe_corpus(documents=docs, config=BPEConfig(vocab_size=295, special_tokens=(EOT,), workers=1))
    return Tokenizer(r.vocab, r.merges, [EOT])


def test_one_ahead_runs_one_item_at_a_time_in_order():
    running, most, lock = [0], [0], threading.Lock()

    def square(x: int) -> int:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        try:
            return x * x
        finally:
            with lock:
                running[0] -= 1

    assert list(_one_ahead(square, iter(range(50)))) == [x * x for x in range(50)]
    assert most[0] == 1
    assert list(_one_ahead(square, [])) == []


def test_one_ahead_raises_in_the_failing_items_place_and_leaves_no_thread():
    def inverse(x: int) -> float:
        return 1 / x

    got = []
    with pytest.raises(ZeroDivisionError):
        for y in _one_ahead(inverse, iter([1, 2, 0, 4])):
            got.append(y)
    assert got == [1.0, 0.5]
    it = _one_ahead(inverse, iter([1, 2, 4, 8]))
    assert next(it) == 1.0
    it.close()  # stopped early: the item in flight is waited for
    assert not [t for t in threading.enumerate() if t.name == "seqpack-encode"]


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
