"""A Ray worker killed mid-job (SIGKILL: out of memory, a pre-empted node) changes nothing in what
the job writes: Ray runs the lost task again and the output is byte-identical to an undisturbed
run; a task that loses its worker on every attempt fails the job in one line, leaving no output
that a later command accepts, and the next run finishes it, byte-identical.

The kill is deterministic: `FaultyEngine` is the Ray engine with each task wrapped in `_faulty`,
which runs in the worker and kills that worker (``os.kill(os.getpid(), SIGKILL)``) when the task
is one of the chosen stage's, at a chosen point: before the stage starts, just before its first
finished temp file or directory is renamed into place (a half-done write left behind), or after
the stage has returned (its work done and recorded, its result lost). Each kill first claims a
marker file in ``tmp_path`` (``O_CREAT | O_EXCL``), so a stage is killed exactly as many times as
asked, whichever worker runs it, and the retried task runs undisturbed. The library has no hook.
"""

from __future__ import annotations

import filecmp
import json
import signal
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

from seqpack.pipeline import OutputOptions, PackConfig, build_packed_dataset, build_sharded_store
from seqpack.pipeline.engine import LocalEngine, RayEngine
from seqpack.tokenizer.tokenizer import Tokenizer
from tests.tasks.test_sequences import EOT, text_docs

pytestmark = pytest.mark.multiprocess

#: seconds a test may take before it fails (a hang fails the test, never the suite)
DEADLINE = 90
#: the store's shards and the dataset's parts: several of each, so that the Ray engine keeps two in flight
SHARD_CHARS = 2_500
SHARD_PACKS = 12
#: the stage a tokenize job runs its shards with (`seqpack.pipeline.tokenize.encode_shard`, through ``_call``)
TOKENIZE = "encode_shard"


def _die() -> None:
    import os

    os.kill(os.getpid(), signal.SIGKILL)


def _claim(markers: str, stage: str, times: int) -> bool:
    """Whether this task is to die: it creates the next of ``times`` marker files, atomically."""
    import os

    for i in range(times):
        try:
            os.close(os.open(os.path.join(markers, f"{stage}-{i}"), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            return True
        except FileExistsError:
            continue
    return False


def _faulty(
    fn: Callable[..., Any], kills: dict[str, tuple[str, int, str]], markers: str, *args: Any
) -> Any:
    """``fn(*args)`` in a Ray worker that kills itself when the stage is one of ``kills``
    (``{stage: (point, times, only)}``: ``only``, a part of the task's output path it must hold)."""
    stage, shown = fn.__name__, args
    if stage == "_call":  # the tokenize job's items: (stage, its arguments...)
        stage, shown = args[0][0].__name__, args[0][1:]
    if stage not in kills:
        return fn(*args)
    point, times, only = kills[stage]
    path = next((a for a in shown if isinstance(a, str) and "/" in a), "")
    if only not in path or not _claim(markers, stage, times):
        return fn(*args)
    if point == "start":
        _die()
    if point == "write":  # the first finished temp file or directory of the stage, never renamed into place
        import os

        def dying(*a: Any, **k: Any) -> None:
            if ".tmp-" in os.path.basename(str(a[0])):
                _die()
            raise AssertionError(f"a rename before any temp file's: {a}")

        os.rename = os.replace = dying  # this worker dies in the stage: nothing else ever sees the patch
    result = fn(*args)
    _die()  # "end": the stage's work done, its result lost
    return result


class FaultyEngine(RayEngine):
    """The Ray engine (on the Ray instance the tests started), its tasks run by `_faulty`."""

    def __init__(self, markers: Path, **kills: tuple[str, int, str]) -> None:
        super().__init__()
        self.markers = markers
        self.kills = kills
        markers.mkdir(parents=True, exist_ok=True)

    def map(self, fn: Callable[..., Any], items: Iterable[tuple[Any, ...]]) -> Iterator[Any]:
        return super().map(_faulty, ((fn, self.kills, str(self.markers), *item) for item in items))

    def killed(self) -> list[str]:
        return sorted(p.name for p in self.markers.iterdir())


@pytest.fixture(autouse=True)
def _deadline() -> Iterator[None]:
    """The test fails after `DEADLINE` seconds (a ``TimeoutError`` in its main thread)."""

    def expired(*_: Any) -> None:
        raise TimeoutError(f"the test ran over its {DEADLINE} s")

    old = signal.signal(signal.SIGALRM, expired)
    signal.alarm(DEADLINE)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[Any]:
    """A local Ray instance of two CPUs for the module; its workers import the code under test.

    `_faulty` lives in this module, which a worker need not be able to import: it travels by value."""
    ray = pytest.importorskip("ray")
    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    assert not ray.is_initialized()
    ray.init(num_cpus=2, log_to_driver=False, include_dashboard=False)
    try:

        @ray.remote
        def where() -> str:
            import seqpack

            return seqpack.__file__

        import seqpack

        assert ray.get(where.remote()) == seqpack.__file__  # PYTHONPATH reached the workers
        yield ray
    finally:
        ray.shutdown()
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    return Tokenizer({i: bytes([i]) for i in range(256)}, [], special_tokens=[EOT])


@pytest.fixture(scope="module")
def docs() -> list[str]:
    return text_docs(60)


@pytest.fixture(scope="module")
def store(tok, docs, tmp_path_factory) -> Path:
    """The undisturbed store, as the local engine writes it."""
    s = build_sharded_store(docs, tok, tmp_path_factory.mktemp("store") / "s", shard_chars=SHARD_CHARS)
    assert len(s.shards) >= 4
    return s.path


CFG = PackConfig.for_task("clm", max_len=64)
OUTPUT = OutputOptions(shard_packs=SHARD_PACKS)


@pytest.fixture(scope="module")
def packed(tok, store, tmp_path_factory) -> Path:
    """The undisturbed dataset, as the local engine writes it."""
    out = tmp_path_factory.mktemp("packed") / "p"
    m = build_packed_dataset(store, tok, out, CFG, output=OUTPUT, engine=LocalEngine())
    assert len(m["shards"]) >= 4
    return out


def _files(d: Path) -> list[str]:
    return sorted(p.relative_to(d).as_posix() for p in d.rglob("*") if p.is_file() or p.is_dir())


def assert_same_dataset(got: Path, want: Path) -> None:
    """Every file (and directory) of ``got`` is in ``want``, byte for byte, and no other."""
    assert _files(got) == _files(want)
    for f in _files(want):
        if (want / f).is_file():
            assert filecmp.cmp(got / f, want / f, shallow=False), f"{f} differs"


#: what a store's JSON files hold that depends on the clock, not on the input
TIMINGS = ("encode_seconds", "mb_per_s", "seconds")


def _untimed(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _untimed(v) for k, v in x.items() if k not in TIMINGS}
    if isinstance(x, list):
        return [_untimed(v) for v in x]
    return x


def assert_same_store(got: Path, want: Path) -> None:
    """The same files; every one byte-identical but the JSON, equal but for its timings."""
    assert _files(got) == _files(want)
    for f in _files(want):
        if f.endswith(".json"):
            a, b = (json.loads((d / f).read_text(encoding="utf-8")) for d in (got, want))
            assert _untimed(a) == _untimed(b), f
        elif (want / f).is_file():
            assert filecmp.cmp(got / f, want / f, shallow=False), f"{f} differs"


def _left_beside(out: Path) -> list[str]:
    return sorted(p.name for p in out.parent.iterdir())


@pytest.mark.parametrize("point", ["start", "write", "end"])
@pytest.mark.parametrize("stage", ["sequences_stage", "route_stage", "packs_stage"])
def test_a_worker_killed_during_pack_changes_no_byte(ray_cluster, tok, store, packed, tmp_path, stage, point):
    engine = FaultyEngine(tmp_path / "kills", **{stage: (point, 1, "")})
    m = build_packed_dataset(store, tok, tmp_path / "p", CFG, output=OUTPUT, engine=engine)
    assert engine.killed() == [f"{stage}-0"]  # the worker died once, in that stage
    assert_same_dataset(tmp_path / "p", packed)
    assert m["reused"] == [] and m["redone"] == {}
    assert _left_beside(tmp_path / "p") == ["kills", "p"]  # no work directory, temp or lock left


@pytest.mark.parametrize("point", ["start", "write", "end"])
def test_a_worker_killed_during_tokenize_changes_no_byte(ray_cluster, tok, docs, store, tmp_path, point):
    engine = FaultyEngine(tmp_path / "kills", **{TOKENIZE: (point, 1, "")})
    s = build_sharded_store(docs, tok, tmp_path / "s", shard_chars=SHARD_CHARS, engine=engine)
    assert engine.killed() == [f"{TOKENIZE}-0"]
    assert_same_store(tmp_path / "s", store)
    assert s.reused == [] and s.redone == {}
    assert _left_beside(tmp_path / "s") == ["kills", "s"]


def test_workers_killed_in_every_stage_of_one_job(ray_cluster, tok, docs, store, packed, tmp_path):
    """Two deaths in each stage of a tokenize job and a pack job (the stages' first two tasks: both in flight)."""
    kills = {TOKENIZE: ("write", 2, "")}
    engine = FaultyEngine(tmp_path / "kills", **kills)
    build_sharded_store(docs, tok, tmp_path / "s", shard_chars=SHARD_CHARS, engine=engine)
    assert_same_store(tmp_path / "s", store)
    kills = {stage: (point, 2, "") for stage, point in
             (("sequences_stage", "start"), ("route_stage", "write"), ("packs_stage", "end"))}
    engine = FaultyEngine(tmp_path / "kills", **kills)
    build_packed_dataset(tmp_path / "s", tok, tmp_path / "p", CFG, output=OUTPUT, engine=engine)
    assert len(engine.killed()) == 8
    assert_same_dataset(tmp_path / "p", packed)
