from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from seqpack.packing.pricing import price_packs, price_packs_oracle

# Values are sums of at most cap (<= 16) doubles in [0, 1]: rounding is below 16 * 16 * 2^-53,
# and the DP keeps an earlier choice unless a later one is better by 1e-12, which can cost
# at most 1e-12 per step; 1e-9 is far above both and far below any real difference (the
# values are drawn on a grid of 1/64, so distinct packs differ by at least 1/64).
TOL = 1e-9


@settings(max_examples=150, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 12), min_size=1, max_size=5, unique=True).map(sorted),
    data=st.data(),
    cap=st.integers(1, 16),
    depth=st.none() | st.integers(1, 4),
)
def test_pricing_finds_the_best_packs(lengths, data, cap, depth):
    values = np.array([data.draw(st.integers(0, 64)) / 64 for _ in lengths])
    lengths = np.array(lengths, dtype=np.int64)
    row_values, patterns = price_packs(lengths, values, cap, depth)
    assert np.allclose(row_values, price_packs_oracle(lengths, values, cap, depth), rtol=0, atol=TOL)
    n = len(lengths)
    for r in range(n + 1):
        pat = patterns[r]
        if r < n and lengths[r] > cap:
            assert not pat.any()
            continue
        assert pat @ lengths <= cap
        assert depth is None or pat.sum() <= depth
        assert r == n or pat[r] >= 1
        assert abs(pat @ values - row_values[r]) <= TOL


def test_pricing_golden():
    # cap 6, at most 2 items: {3, 3} is worth 2.0, {2, 4} 1.9; the pack holding 2 is {2, 4}
    values, patterns = price_packs(np.array([2, 3, 4]), np.array([0.5, 1.0, 1.4]), 6, 2)
    assert patterns.tolist() == [[1, 0, 1], [0, 2, 0], [1, 0, 1], [0, 2, 0]]
    assert np.allclose(values, [1.9, 2.0, 1.9, 2.0], rtol=0, atol=TOL)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.lists(st.integers(1, 12), min_size=1, max_size=5), st.integers(1, 6)), max_size=8),
    st.lists(st.integers(0, 9), min_size=1, max_size=12),
)
def test_fill_templates_kernel_is_the_reference(templates: list, hist: list[int]) -> None:
    """The compiled template fill gives the reference's packs, in its order, and its residual."""
    from seqpack.packing.best import fill_templates, fill_templates_oracle

    tpl = [(tuple(slots), count) for slots, count in templates]
    h = np.array(hist, dtype=np.int64)
    got, want = fill_templates(tpl, h), fill_templates_oracle(tpl, h)
    assert got[0] == want[0] and np.array_equal(got[1], want[1])
    placed = sum(len(p) * c for p, c in got[0])
    assert placed + int(got[1].sum()) == int(h.sum())  # every sequence placed once or left over
