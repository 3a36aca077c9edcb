"""Helpers shared by the benchmarks (not part of the package)."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
EOT = "<|endoftext|>"


def shakespeare_file() -> Path:
    """The 42 works joined in sorted name order with <|endoftext|>, in a temp file."""
    src = SHARED / "corpora" / "shakespeare"
    if not src.is_dir():
        sys.exit(f"benchmark needs {src} (the shared data folder)")
    text = EOT.join(p.read_text(encoding="utf-8") for p in sorted(src.glob("*.txt")))
    out = Path(tempfile.mkdtemp(prefix="seqpack-bench-")) / "shakespeare.txt"
    out.write_text(text, encoding="utf-8")
    return out


def run_child(code: str, env: dict[str, str] | None = None) -> dict:
    """Run ``code`` in a fresh interpreter; it prints one JSON line last."""
    import os
    import time

    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True,
        env={**os.environ, **(env or {})},
    )
    wall = time.perf_counter() - t0
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["wall"] = wall
    return result


PEAK_MB = (
    "import resource\n"
    "def peak_mb():\n"
    "    s = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
    "    c = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n"
    "    return round(max(s, c) / 1024, 1)\n"
)


def median(xs: list[float]) -> float:
    return statistics.median(xs)


def wikipedia_lengths(n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` lengths drawn from the BERT Wikipedia histogram (lengths 1..512)."""
    from seqpack.packing import builtin_histogram

    h = builtin_histogram("wikipedia").astype(np.float64)
    return rng.choice(np.arange(1, h.size + 1), size=n, p=h / h.sum())
