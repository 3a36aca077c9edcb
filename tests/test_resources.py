"""small_pages: numpy's huge-page advice off inside the block, as it was after it (errors included)."""

import numpy as np
import pytest

from seqpack._resources import small_pages


def test_small_pages_switches_numpy_off_and_back():
    setter = getattr(np._core.multiarray, "_set_madvise_hugepage", None)
    if setter is None:
        pytest.skip("this numpy has no _set_madvise_hugepage: small_pages changes nothing")
    before = setter(True)  # the switch returns the state it replaces
    try:
        with small_pages():
            assert setter(False) is False  # off inside
        assert setter(True) is True  # back on after
        with pytest.raises(RuntimeError), small_pages():
            raise RuntimeError
        assert setter(True) is True
    finally:
        setter(before)


def test_collector_paused_restores_what_it_found():
    import gc

    import pytest

    from seqpack._resources import collector_paused

    assert gc.isenabled()
    with pytest.raises(RuntimeError), collector_paused():
        assert not gc.isenabled()
        raise RuntimeError("inside")
    assert gc.isenabled()  # back on, after an exception too
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()  # was off: stays off
    finally:
        gc.enable()

    @collector_paused()
    def made() -> bool:
        return gc.isenabled()

    assert made() is False and made() is False and gc.isenabled()  # as a decorator, call after call
