"""Resumable work, one mechanism for every job: each finished stage is recorded with the key of its inputs.

A stage's record is ``{"key": KEY, "result": RESULT}`` in one small JSON file, written atomically
once the stage's outputs are complete. A later run reuses the stage only when the record holds
the key that run computes (and the stage's outputs still exist); any other record is ignored and
the stage runs again. Keys are content hashes (:func:`content_hash`) of what the stage's bytes
depend on. Three jobs use it:

- ``seqpack tokenize`` (:func:`seqpack.pipeline.tokenize.build_sharded_store`): a stage per shard;
- ``seqpack pack`` (:mod:`seqpack.pipeline.job`): a stage per input shard, then per output shard;
- ``seqpack demo`` (:mod:`seqpack.experiments.demo`): a stage per step.

Jobs that write one output directory keep their stages in a work directory beside it
(:func:`work_dir`, ``.OUT.partial/``), kept only for the same job.

    >>> import tempfile
    >>> log = StageLog(Path(tempfile.mkdtemp()))
    >>> log.run("square", content_hash(3), lambda: {"y": 9})
    ({'y': 9}, False)
    >>> log.run("square", content_hash(3), lambda: {"y": -1})   # same key: reused
    ({'y': 9}, True)
    >>> log.run("square", content_hash(4), lambda: {"y": 16})   # other inputs: run again
    ({'y': 16}, False)
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from seqpack._atomic import write_text_atomic

JOB = "job.json"
SUFFIX = ".stage.json"


def content_hash(*parts: Any) -> str:
    """SHA-256 over JSON-able parts (strings are hashed as they are).

    >>> content_hash("a", 1) == content_hash("a", 1) != content_hash("a", 2)
    True
    """
    h = hashlib.sha256()
    for p in parts:
        h.update((p if isinstance(p, str) else json.dumps(p, sort_keys=True, default=str)).encode("utf-8"))
        h.update(b"\x00")
    return h.hexdigest()


def corpus_hash(docs: Iterable[str]) -> str:
    """SHA-256 of documents, each followed by a NUL (so ``["ab"]`` and ``["a", "b"]`` differ)."""
    h = hashlib.sha256()
    for d in docs:
        h.update(d.encode("utf-8", "surrogatepass"))
        h.update(b"\x00")
    return h.hexdigest()


def partial_dir(out: Path) -> Path:
    """Where an unfinished job writing ``out`` keeps its finished stages (beside ``out``)."""
    return out.resolve().parent / f".{out.name}.partial"


def work_dir(out: Path, job: Mapping[str, Any]) -> Path:
    """The job's work directory: kept if it belongs to the same ``job`` (a JSON-able identity), else started afresh."""
    work = partial_dir(out)
    if work.is_dir():
        try:
            same = json.loads((work / JOB).read_text(encoding="utf-8")) == json.loads(json.dumps(job, default=str))
        except (OSError, ValueError):
            same = False
        if not same:
            shutil.rmtree(work)
    work.mkdir(parents=True, exist_ok=True)
    write_text_atomic(work / JOB, json.dumps(job, sort_keys=True, default=str))
    return work


class StageLog:
    """The records of finished stages, one file each (``DIR/<name>.stage.json``).

    Each record is its own file, so stages running in other processes (Ray workers) record
    themselves without sharing a file.
    """

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)

    def path(self, name: str) -> Path:
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
        return self.directory / f"{safe}{SUFFIX}"

    def result(self, name: str, key: str, *, outputs: Sequence[str | Path] = ()) -> Any | None:
        """The recorded result of ``name`` when it was made with ``key`` and its outputs exist; else None."""
        try:
            rec = json.loads(self.path(name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if not isinstance(rec, dict) or rec.get("key") != key or not all(Path(o).exists() for o in outputs):
            return None
        return rec.get("result")

    def finish(self, name: str, key: str, result: Any) -> None:
        """Record ``name`` as finished with ``key`` (call once its outputs are complete)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        write_text_atomic(self.path(name), json.dumps({"key": key, "result": result}, default=str))

    def forget(self, name: str) -> None:
        self.path(name).unlink(missing_ok=True)

    def clear(self) -> None:
        """Remove every record (a work directory about to become the finished output)."""
        for p in self.directory.glob(f"*{SUFFIX}"):
            p.unlink()

    def run(self, name: str, key: str, fn: Callable[[], Any], *, outputs: Sequence[str | Path] = ()) -> tuple[Any, bool]:
        """``(result, reused)``: the recorded result for ``key``, or ``fn()`` run and recorded."""
        done = self.result(name, key, outputs=outputs)
        if done is not None:
            return done, True
        result = fn()
        self.finish(name, key, result)
        return result, False
