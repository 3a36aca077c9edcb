"""seqpack._parallel.map_threads: every item once, errors raised on the caller, no draw after a stop."""

from __future__ import annotations

import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqpack._parallel import map_threads


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(), max_size=50), st.integers(1, 4))
def test_every_item_once(items: list[int], workers: int):
    assert sorted(map_threads(lambda x: 2 * x, items, workers)) == sorted(2 * x for x in items)


def _mapping_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("seqpack-map-")]


def test_runs_on_worker_threads():
    names = set(map_threads(lambda _: threading.current_thread().name, range(20), 2))
    assert names and all(n.startswith("seqpack-map-") for n in names)


def test_first_error_is_raised_and_drawing_stops():
    drawn = []

    def items():
        for i in range(1000):
            drawn.append(i)
            yield i

    def fn(x: int) -> int:
        if x == 3:
            raise KeyError(x)
        return x

    with pytest.raises(KeyError):
        list(map_threads(fn, items(), 2))
    assert len(drawn) < 1000  # stopped early, not run to the end of the stream
    assert not _mapping_threads()  # every thread joined


def test_closing_early_joins_the_threads():
    it = map_threads(lambda x: x, range(10_000), 2)
    next(it)
    it.close()
    assert not _mapping_threads()
