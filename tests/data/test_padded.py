from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from seqpack.data import IGNORE_INDEX, pack_sequences
from seqpack.data.padded import padded_rows, padded_rows_oracle, sequence_spans
from tests.data.test_layout import random_sequences


def test_hand_golden():
    cols = {
        "input_ids": np.array([[7, 8, 9, 5], [3, 4, 0, 0]]),
        "segment_ids": np.array([[1, 1, 1, 2], [1, 1, 0, 0]]),
        "position_ids": np.array([[0, 1, 2, 0], [0, 1, 0, 0]]),
        "labels": np.array([[-100, 8, -100, 5], [3, -100, -100, -100]]),
        "next_sentence_label": np.array([[1, 0], [0, -100]]),
        "num_sequences": np.array([2, 1]),
    }
    spans = sequence_spans(cols["segment_ids"])
    assert spans.tolist() == [[0, 0, 3, 0], [0, 3, 1, 1], [1, 0, 2, 0]]
    rows = padded_rows(cols, spans[[1, 2]], token_labels=True)
    assert rows["input_ids"].tolist() == [[5, 0, 0, 0], [3, 4, 0, 0]]
    assert rows["segment_ids"].tolist() == [[1, 0, 0, 0], [1, 1, 0, 0]]
    assert rows["labels"].tolist() == [[5, -100, -100, -100], [3, -100, -100, -100]]
    assert rows["next_sentence_label"].tolist() == [[0], [0]]
    assert rows["num_sequences"].tolist() == [1, 1]


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10_000), n=st.integers(1, 50), max_len=st.integers(1, 30), chunk=st.sampled_from([1, 3, 65536])
)
def test_padded_rows_are_the_sequences_fast_equals_reference(seed, n, max_len, chunk):
    s = random_sequences(np.random.default_rng(seed), n, max_len)
    pc = pack_sequences(s, max_len, algorithm="best", seed=seed)
    spans = sequence_spans(pc.columns["segment_ids"], chunk=chunk)
    assert len(spans) == n and spans[:, 2].sum() == s.lengths.sum()
    fast = padded_rows(pc.columns, spans, token_labels=True, position_fields=("start",))
    ref = padded_rows_oracle(pc.columns, spans, token_labels=True, position_fields=("start",))
    for k in ref:
        assert fast[k].dtype == ref[k].dtype and np.array_equal(fast[k], ref[k]), k
    for r in range(n):  # each row is exactly one original sequence, unshifted
        i = int(np.flatnonzero(s.example_ids == fast["example_ids"][r, 0])[0])
        q = s.sequence(i)
        L = len(q["input_ids"])
        assert fast["input_ids"][r, :L].tolist() == q["input_ids"].tolist()
        assert fast["labels"][r, :L].tolist() == q["labels"].tolist() and np.all(fast["labels"][r, L:] == IGNORE_INDEX)
        assert fast["position_ids"][r, :L].tolist() == list(range(L))
        assert int(fast["start"][r, 0]) == int(q["start"]) and fast["multi"][r, 0].tolist() == q["multi"].tolist()
