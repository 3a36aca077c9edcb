"""The solvers' preload: a planner waits for it before importing scipy itself (two threads importing
one package's modules at once can deadlock: importlib's _DeadlockError)."""

from __future__ import annotations

import threading

from seqpack.packing import solvers


def test_ready_waits_for_a_started_preload(monkeypatch):
    started, release = threading.Event(), threading.Event()

    def slow_import(name: str) -> None:
        started.set()
        release.wait(30)

    monkeypatch.setattr(solvers.importlib, "import_module", slow_import)
    monkeypatch.setattr(solvers, "_started", {})
    solvers.preload("seqpack-test-module")
    assert started.wait(30)
    waiter = threading.Thread(target=solvers.ready, args=("seqpack-test-module",))
    waiter.start()
    waiter.join(0.5)
    assert waiter.is_alive()  # still waiting: the import has not finished (a ready() that did not wait ends at once)
    release.set()
    waiter.join(30)
    assert not waiter.is_alive()
    solvers.preload("seqpack-test-module")  # once only
    assert list(solvers._started) == ["seqpack-test-module"]


def test_a_failed_preload_is_quiet_and_ready_returns(monkeypatch):
    """The planner's own import reports a failure; the background thread prints nothing."""
    seen: list[object] = []
    monkeypatch.setattr(threading, "excepthook", seen.append)

    def broken(name: str) -> None:
        raise ImportError(name)

    monkeypatch.setattr(solvers.importlib, "import_module", broken)
    monkeypatch.setattr(solvers, "_started", {})
    solvers.preload("seqpack-test-missing")
    solvers.ready("seqpack-test-missing")
    assert seen == []


def test_nothing_starts_for_an_imported_module_or_without_a_preload(monkeypatch):
    monkeypatch.setattr(solvers, "_started", {})
    solvers.preload("threading")
    solvers.ready("seqpack-never-preloaded")
    assert solvers._started == {}
