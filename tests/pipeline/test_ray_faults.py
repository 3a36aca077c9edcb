"""A Ray worker killed mid-job (SIGKILL: out of memory, a pre-empted node) changes nothing in what
the job writes: Ray runs the lost task again and the output is byte-identical to an undisturbed
run; a task that loses its worker on every attempt fails the job in one line, leaving no output
that a later command accepts, and the next run finishes it, byte-identical.

The kill is deterministic: `FaultyEngine` is the Ray engine with each task wrapped in `_faulty`,
which runs in the worker and kills that worker (``os.kill(os.getpid(), SIGKILL)``) when the task
is one of the chosen stage's, at a chosen point: before the stage starts (``start``), just
before its first finished temp file or directory is renamed into place (``write``: a half-done
write left behind), just before its record is (``record``: its outputs in place, not recorded),
or after the stage has returned (``end``: its work done and recorded, its result lost). Each
kill first claims a marker file in ``tmp_path`` (``O_CREAT | O_EXCL``), so a stage is killed
exactly as many times as asked, whichever worker runs it, and the retried task runs undisturbed.
The library has no hook: `_faulty` reaches the workers by value (cloudpickle).
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

from seqpack.data import load_packed
from seqpack.pipeline import OutputOptions, PackConfig, build_packed_dataset, build_sharded_store
from seqpack.pipeline.engine import LocalEngine, RayEngine
from seqpack.tokenizer.tokenizer import Tokenizer
from tests.tasks.test_sequences import EOT, text_docs

pytestmark = pytest.mark.multiprocess

#: seconds a test may take (the slowest takes about 10): `_deadline`
DEADLINE = 120
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


def _faulty(fn: Callable[..., Any], kills: dict[str, tuple[str, int, str]], markers: str, *args: Any) -> Any:
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
    if point in ("write", "record"):  # a finished temp file or directory never renamed into place
        import os

        real = {"rename": os.rename, "replace": os.replace}

        def dying(name: str) -> Callable[..., Any]:
            def rename(src: Any, dst: Any, *a: Any, **k: Any) -> Any:
                base = os.path.basename(str(src))
                if ".tmp-" in base and (point == "write" or ".stage.json.tmp-" in base):  # the first / the record
                    _die()
                return real[name](src, dst, *a, **k)

            return rename

        os.rename, os.replace = dying("rename"), dying("replace")  # this worker dies in the stage: nothing else sees it
    result = fn(*args)
    _die()  # "end": the stage's work done, its result lost
    return result


class FaultyEngine(RayEngine):
    """The Ray engine (on the Ray instance the tests started), its tasks run by `_faulty`."""

    def __init__(self, markers: Path, *, retries: int = RayEngine.retries, **kills: tuple[str, int, str]) -> None:
        super().__init__()
        self.retries = retries
        self.markers = markers
        self.kills = kills
        markers.mkdir(parents=True, exist_ok=True)

    def map(self, fn: Callable[..., Any], items: Iterable[tuple[Any, ...]]) -> Iterator[Any]:
        return super().map(_faulty, ((fn, self.kills, str(self.markers), *item) for item in items))

    def killed(self) -> list[str]:
        return sorted(p.name for p in self.markers.iterdir())


@pytest.fixture(autouse=True)
def _deadline() -> Iterator[None]:
    """A test still running after `DEADLINE` seconds is interrupted (SIGINT: pytest stops the run
    and shows where it waited); one that still runs a minute later ends its process
    (`faulthandler`). An exception from a timer's signal handler would not
    do: the driver waits in Ray's compiled code, which lets only a keyboard interrupt through."""
    import faulthandler
    import os
    import threading

    timer = threading.Timer(DEADLINE, os.kill, (os.getpid(), signal.SIGINT))
    timer.daemon = True
    timer.start()
    faulthandler.dump_traceback_later(DEADLINE + 60, exit=True)
    try:
        yield
    finally:
        timer.cancel()
        faulthandler.cancel_dump_traceback_later()


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[Any]:
    """A local Ray instance of two CPUs for the module; its workers import the code under test.

    `_faulty` lives in this module, which a worker need not be able to import: it travels by value."""
    ray = pytest.importorskip("ray")
    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ours = not ray.is_initialized()  # else another test's, left running: used as it is
    if ours:
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
        if ours:
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


@pytest.mark.parametrize(
    ("stage", "point"),
    [
        ("sequences_stage", "start"),
        ("sequences_stage", "write"),
        ("route_stage", "write"),
        ("route_stage", "end"),
        ("packs_stage", "write"),
        ("packs_stage", "record"),
        ("packs_stage", "end"),
    ],
)
def test_a_worker_killed_during_pack_changes_no_byte(ray_cluster, tok, store, packed, tmp_path, stage, point):
    engine = FaultyEngine(tmp_path / "kills", **{stage: (point, 1, "")})
    m = build_packed_dataset(store, tok, tmp_path / "p", CFG, output=OUTPUT, engine=engine)
    assert engine.killed() == [f"{stage}-0"]  # the worker died once, in that stage
    assert_same_dataset(tmp_path / "p", packed)
    assert m["reused"] == [] and m["redone"] == {}
    assert _left_beside(tmp_path / "p") == ["kills", "p"]  # no work directory, temp or lock left


@pytest.mark.parametrize("point", ["start", "write", "record", "end"])
def test_a_worker_killed_during_tokenize_changes_no_byte(ray_cluster, tok, docs, store, tmp_path, point):
    engine = FaultyEngine(tmp_path / "kills", **{TOKENIZE: (point, 1, "")})
    s = build_sharded_store(docs, tok, tmp_path / "s", shard_chars=SHARD_CHARS, engine=engine)
    assert engine.killed() == [f"{TOKENIZE}-0"]
    assert_same_store(tmp_path / "s", store)
    assert s.reused == [] and s.redone == {}
    assert _left_beside(tmp_path / "s") == ["kills", "s"]


def test_workers_killed_twice_in_every_stage_of_one_job(ray_cluster, tok, store, packed, tmp_path):
    """The stages' first two tasks (both in flight at once) lose their workers."""
    kills = {
        stage: (point, 2, "")
        for stage, point in (("sequences_stage", "start"), ("route_stage", "write"), ("packs_stage", "end"))
    }
    engine = FaultyEngine(tmp_path / "kills", **kills)
    build_packed_dataset(store, tok, tmp_path / "p", CFG, output=OUTPUT, engine=engine)
    assert len(engine.killed()) == 6
    assert_same_dataset(tmp_path / "p", packed)


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    """The command's exit code and what it printed (stdout, then stderr)."""
    from seqpack.cli.main import main

    code = main(list(argv))
    got = capsys.readouterr()
    return code, got.out + got.err


def _ray_engines(monkeypatch: pytest.MonkeyPatch, engine: RayEngine) -> None:
    """``--engine ray`` gets ``engine``."""
    from seqpack.pipeline import engine as engine_mod

    real = engine_mod.get_engine
    monkeypatch.setattr(
        engine_mod, "get_engine", lambda name="local", **kw: engine if name == "ray" else real(name, **kw)
    )


def _one_line_error(code: int, err: str) -> str:
    lines = [x for x in err.splitlines() if "(raylet)" not in x]  # Ray's own notes, printed by its log monitor
    assert code == 2 and len(lines) == 1 and lines[0].startswith("seqpack: error: "), err
    return lines[0]


def test_a_pack_whose_task_loses_every_worker_fails_in_one_line_and_the_rerun_finishes(
    ray_cluster, capsys, monkeypatch, tok, store, tmp_path
):
    tok.save(tmp_path / "tok")
    argv = [
        "pack",
        str(store),
        "--task",
        "clm",
        "--max-len",
        "64",
        "--tokenizer",
        str(tmp_path / "tok"),
        "--shard-packs",
        str(SHARD_PACKS),
    ]
    assert _cli(capsys, *argv, "--out", str(tmp_path / "want"))[0] == 0  # undisturbed, on the local engine
    engine = FaultyEngine(tmp_path / "kills", retries=1, packs_stage=("write", 99, "part-00001"))
    _ray_engines(monkeypatch, engine)
    line = _one_line_error(*_cli(capsys, *argv, "--out", str(tmp_path / "p"), "--engine", "ray"))
    assert "a Ray worker died running a task of this job, 2 times" in line and "run the same command again" in line
    assert engine.killed() == ["packs_stage-0", "packs_stage-1"]  # part 1's task, and its one retry
    assert not (tmp_path / "p").exists()  # nothing a later command takes for a dataset
    with pytest.raises((OSError, ValueError)):
        load_packed(tmp_path / "p")
    assert (tmp_path / ".p.partial").is_dir()  # the finished stages, for the rerun
    monkeypatch.undo()
    code, said = _cli(capsys, *argv, "--out", str(tmp_path / "p"), "--engine", "ray")  # the rerun
    assert code == 0 and "reused" in said and "rebuilt" not in said, said
    assert_same_dataset(tmp_path / "p", tmp_path / "want")
    assert _left_beside(tmp_path / "p") == ["kills", "p", "tok", "want"]


def test_a_tokenize_whose_task_loses_every_worker_fails_in_one_line_and_the_rerun_finishes(
    ray_cluster, capsys, monkeypatch, tok, docs, tmp_path
):
    tok.save(tmp_path / "tok")
    corpus = tmp_path / "c.txt"
    corpus.write_text(EOT.join(docs), encoding="utf-8")
    argv = ["tokenize", str(corpus), "--tokenizer", str(tmp_path / "tok"), "--shard-mb", str(SHARD_CHARS / 2**20)]
    assert _cli(capsys, *argv, "--out", str(tmp_path / "want"))[0] == 0
    engine = FaultyEngine(tmp_path / "kills", retries=1, **{TOKENIZE: ("write", 99, "shard-00001")})
    _ray_engines(monkeypatch, engine)
    _one_line_error(*_cli(capsys, *argv, "--out", str(tmp_path / "s"), "--engine", "ray"))
    assert engine.killed() == [f"{TOKENIZE}-0", f"{TOKENIZE}-1"]
    assert not (tmp_path / "s").exists()
    code, err = _cli(
        capsys,
        "pack",
        str(tmp_path / "s"),
        "--task",
        "clm",
        "--max-len",
        "64",
        "--tokenizer",
        str(tmp_path / "tok"),
        "--out",
        str(tmp_path / "p"),
    )
    assert code == 2 and not (tmp_path / "p").exists(), err  # no store to pack
    monkeypatch.undo()
    code, said = _cli(capsys, *argv, "--out", str(tmp_path / "s"), "--engine", "ray")
    reused = said.split("finished shard(s): ", 1)[1].split(" -> ")[0].split(", ")
    assert code == 0 and "shard-00000" in reused and "shard-00001" not in reused and "rebuilt" not in said, said
    assert_same_store(tmp_path / "s", tmp_path / "want")
    assert _left_beside(tmp_path / "s") == ["c.txt", "kills", "s", "tok", "want"]
