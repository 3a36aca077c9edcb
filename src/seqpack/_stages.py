"""Resumable work, one mechanism for every job: each finished stage is recorded with the key of its inputs.

A stage's record is ``{"key": KEY, "result": RESULT, "files": {FILE: SIZE:CRC32}}`` in one small
JSON file, written atomically once the stage's outputs are complete. A later run reuses the stage
only when the record holds the key that run computes (a content hash, `content_hash`, of
everything the stage's bytes depend on: the inputs' fingerprints, the tokenizer's, the options)
and every file it recorded still has its checksum; otherwise the stage runs again, and
`StageLog.check` says why (``"inputs changed"``, ``"output changed"``). Three jobs use it:

- ``seqpack tokenize`` (`seqpack.pipeline.tokenize.build_sharded_store`): a stage per shard;
- ``seqpack pack`` (`seqpack.pipeline.job`): a stage per input shard, then per output shard;
- ``seqpack demo`` (`seqpack.experiments.demo`): a stage per step.

Jobs that write one output directory keep their stages in a work directory beside it
(`work_dir`, ``.OUT.partial/``), kept only for the same job.

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
import os
import shutil
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from seqpack._atomic import OutputKind, write_text_atomic
from seqpack.errors import UserError

JOB = "job.json"
#: a stage's output, inside its job's own work directory (which holds the job's ``JOB``)
STAGE = OutputKind("stage output", inside=JOB)
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
    """A 128-bit digest of documents' UTF-8, in order (``["ab"]`` and ``["a", "b"]`` differ): the
    compiled ``_native.text_digest`` (MurmurHash3's construction, not cryptographic: it tells
    changed inputs, which is what a resume key needs; faster than SHA-256,
    and the UTF-8 it makes is the encoder's next). Text UTF-8 cannot hold (lone surrogates) is
    hashed by SHA-256 instead.

    >>> corpus_hash(["ab"]) != corpus_hash(["a", "b"]), len(corpus_hash([]))
    (True, 32)
    """
    from seqpack import _native

    docs = docs if isinstance(docs, (list, tuple)) else list(docs)
    try:
        return _native.text_digest(docs)
    except UnicodeEncodeError:
        h = hashlib.sha256()
        for d in docs:
            h.update(d.encode("utf-8", "surrogatepass"))
            h.update(b"\x00")
        return h.hexdigest()


def file_sha256(path: str | Path, *, chunk: int = 1 << 20) -> str:
    """SHA-256 of a file's bytes, read a chunk at a time."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def file_checksum(path: str | Path, *, chunk: int = 1 << 20) -> str:
    """``"SIZE:CRC32"`` of a file: what a work file is checked against before reuse. CRC-32 catches
    truncation, bit flips and edits (not an adversary), faster than SHA-256.
    The file is read into one reused buffer: a fresh ``bytes`` per read costs a page fault
    per 4 KB.

    >>> import tempfile; p = tempfile.mktemp(); _ = open(p, "wb").write(b"abc"); file_checksum(p)
    '3:352441c2'
    """
    crc, size = 0, 0
    buf = bytearray(chunk)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buf):
            crc = zlib.crc32(view[:n], crc)
            size += n
    return f"{size}:{crc:08x}"


def file_fingerprint(path: str | Path) -> list[Any]:
    """``[size, mtime_ns]`` of a file: what changes whenever it is rewritten (cheap; see `file_sha256`)."""
    st = os.stat(path)
    return [st.st_size, st.st_mtime_ns]


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
            if not (work / JOB).is_file() and any(work.iterdir()):  # a folder of that name seqpack did not make
                raise FileExistsError(
                    f"{work}: holds files seqpack did not make (no {JOB}); move it away: a job writing {out} "
                    "keeps its unfinished work there"
                )
            shutil.rmtree(work)
    work.mkdir(parents=True, exist_ok=True)
    write_text_atomic(work / JOB, json.dumps(job, sort_keys=True, default=str))
    return work


@contextmanager
def discard_on_rejection(work: Path) -> Iterator[None]:
    """Remove the work directory when the job stops on a user error (``ValueError``/``TypeError``:
    rejected input, which a re-run cannot get past without new inputs); keep it on anything else
    (a killed job, a full disk), so that the re-run resumes."""
    try:
        yield
    except (ValueError, TypeError):
        shutil.rmtree(work, ignore_errors=True)
        raise


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

    def check(self, name: str, key: str, *, outputs: Sequence[str | Path] = ()) -> tuple[Any | None, str | None]:
        """``(result, None)`` when ``name`` finished with ``key`` and its recorded files are intact;
        ``(None, reason)`` otherwise: ``None`` (never finished), ``"inputs changed"`` (another key)
        or ``"output changed"`` (a recorded file missing or altered)."""
        try:
            rec = json.loads(self.path(name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None, None
        if not isinstance(rec, dict) or "key" not in rec:
            return None, "output changed"
        if rec["key"] != key:
            return None, "inputs changed"
        if not all(Path(o).exists() for o in outputs):
            return None, "output changed"
        for rel, digest in rec.get("files", {}).items():
            f = self.directory / rel
            try:
                if file_checksum(f) != digest:
                    return None, "output changed"
            except OSError:
                return None, "output changed"
        return rec.get("result"), None

    def result(self, name: str, key: str, *, outputs: Sequence[str | Path] = ()) -> Any | None:
        """The recorded result of ``name`` when it was made with ``key`` and its outputs are intact; else None."""
        return self.check(name, key, outputs=outputs)[0]

    def finish(self, name: str, key: str, result: Any, *, files: Iterable[str | Path] = ()) -> None:
        """Record ``name`` as finished with ``key`` (call once its outputs are complete); ``files``
        (files, or directories: every file under them) are checksummed (`file_checksum`), and
        verified before any reuse."""
        self.directory.mkdir(parents=True, exist_ok=True)
        sums = {}
        for f in files:
            p = Path(f)
            for q in sorted(p.rglob("*")) if p.is_dir() else [p]:
                if q.is_file():
                    sums[Path(os.path.relpath(q, self.directory)).as_posix()] = file_checksum(q)
        rec = {"key": key, "result": result, "files": sums}
        write_text_atomic(self.path(name), json.dumps(rec, default=str))

    def checksum(self, name: str, path: str | Path) -> str:
        """The checksum `finish` recorded for ``path`` (a file of stage ``name``'s outputs),
        without reading the file again."""
        rec = json.loads(self.path(name).read_text(encoding="utf-8"))
        return str(rec["files"][Path(os.path.relpath(path, self.directory)).as_posix()])

    def forget(self, name: str) -> None:
        self.path(name).unlink(missing_ok=True)

    def clear(self) -> None:
        """Remove every record (a work directory about to become the finished output)."""
        for p in self.directory.glob(f"*{SUFFIX}"):
            p.unlink()

    def run(
        self, name: str, key: str, fn: Callable[[], Any], *, outputs: Sequence[str | Path] = ()
    ) -> tuple[Any, bool]:
        """``(result, reused)``: the recorded result for ``key``, or ``fn()`` run and recorded
        (with checksums of ``outputs``)."""
        done = self.result(name, key, outputs=outputs)
        if done is not None:
            return done, True
        result = fn()
        self.finish(name, key, result, files=outputs)
        return result, False


def verify_file(f: Path, checksum: str | None) -> None:
    """The one check of a written file against the checksum its manifest recorded (``None``: written
    before checksums, nothing to check), made by every reader that trains or evaluates on it
    (`seqpack.data.format.check_part`, `seqpack.data.format.bin_column`, the example table): an edit, even with its mtime restored, is
    refused in one line."""
    if checksum is not None and file_checksum(f) != checksum:
        raise UserError(
            f"{f}: changed since seqpack pack wrote it (checksum mismatch with manifest.json); re-run seqpack pack"
        )
