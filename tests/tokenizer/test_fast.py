"""The corpus encoder (`seqpack.tokenizer.fast`): batches of flat ids equal to each document encoded
by the oracle, on one thread and on several."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqpack.tokenizer import BPEConfig, Tokenizer, train_bpe_corpus
from seqpack.tokenizer.fast import encode_batches, encode_documents

EOT = "<|endoftext|>"


@pytest.fixture(scope="module")
def small() -> Tokenizer:
    docs = ["the cat sat on the mat. " * 20, "héllo wörld 123 don't stop", "tabs\tand\n\nnewlines  "] * 5
    r = train_bpe_corpus(documents=docs, config=BPEConfig(vocab_size=295, special_tokens=(EOT,), workers=1))
    return Tokenizer(r.vocab, r.merges, [EOT])


@settings(max_examples=40, deadline=None)
@given(
    docs=st.lists(st.text(max_size=30) | st.sampled_from([EOT, "the cat", "don't  stop\n\n"]), max_size=30),
    batch_chars=st.integers(1, 60),
    workers=st.sampled_from([1, 2]),
)
def test_encode_batches_equal_each_document_encoded(small, docs, batch_chars, workers):
    got = [a.tolist() for a in encode_documents(small, iter(docs), workers=workers, batch_chars=batch_chars)]
    assert got == [small.encode_oracle(d) for d in docs]
    for ids, offsets in encode_batches(small, docs, workers=workers, batch_chars=batch_chars):
        assert offsets[0] == 0 and offsets[-1] == len(ids) and (offsets[1:] >= offsets[:-1]).all()


@pytest.mark.parametrize("workers", [1, 2])
def test_a_document_that_is_not_text_fails_in_its_batch(small, workers):
    batches = encode_batches(small, ["the cat", "sat", 3, "mat"], workers=workers, batch_chars=4)
    assert next(batches)[0].tolist() == small.encode("the cat")
    with pytest.raises(TypeError, match="must be str, got int"):
        list(batches)
