"""Cached pipeline stages for ``seqpack demo``: a stage re-runs only when its inputs change.

Each stage has a key, the hash of everything it depends on (the corpus's content, options,
the keys of the stages before it). ``OUT/stages.json`` records each finished stage's key and
result; a later run with the same key and its outputs still present reuses the result.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from seqpack._atomic import write_text_atomic

STAGES = "stages.json"


def content_hash(*parts: Any) -> str:
    """SHA-256 over JSON-able parts (strings are hashed as they are)."""
    h = hashlib.sha256()
    for p in parts:
        h.update((p if isinstance(p, str) else json.dumps(p, sort_keys=True, default=str)).encode("utf-8"))
        h.update(b"\x00")
    return h.hexdigest()


def corpus_hash(docs: Sequence[str]) -> str:
    h = hashlib.sha256()
    for d in docs:
        h.update(d.encode("utf-8", "surrogatepass"))
        h.update(b"\x00")
    return h.hexdigest()


class Stages:
    def __init__(self, out: Path, *, fresh: bool, total: int, echo: Callable[[str], None]) -> None:
        self.out, self.fresh, self.total, self.echo = out, fresh, total, echo
        self.done = 0
        self.seconds: dict[str, float] = {}  # this run's time per stage (0 when cached)
        out.mkdir(parents=True, exist_ok=True)
        p = out / STAGES
        self.record: dict[str, Any] = {} if fresh or not p.is_file() else json.loads(p.read_text(encoding="utf-8"))

    def run(self, name: str, key: str | None, fn: Callable[[], dict[str, Any]], *, outputs: Sequence[Path] = ()) -> dict[str, Any]:
        """``fn()``, or the result recorded under the same ``key``; ``key=None`` always runs."""
        self.done += 1
        prev = self.record.get(name)
        label = f"[{self.done}/{self.total}] {name}"
        if key is not None and prev and prev["key"] == key and all(Path(o).exists() for o in outputs):
            self.echo(f"{label}: cached ({key[:12]})")
            self.seconds[name] = 0.0
            return prev["result"]  # type: ignore[no-any-return]
        self.echo(f"{label} ...")
        t0 = time.perf_counter()
        result = fn()
        self.seconds[name] = time.perf_counter() - t0
        self.echo(f"{label}: done in {self.seconds[name]:.1f} s")
        self.record[name] = {"key": key, "result": result}
        write_text_atomic(self.out / STAGES, json.dumps(self.record, indent=1, default=str) + "\n")
        return result
