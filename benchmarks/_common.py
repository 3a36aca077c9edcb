"""Helpers shared by the benchmarks (not part of the package)."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

T = TypeVar("T")

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
RESULTS = ROOT / "benchmarks" / "results"
EOT = "<|endoftext|>"


def shakespeare_file() -> Path:
    """The 42 works joined in sorted name order with <|endoftext|>, written once to the temp dir
    (each run used to leave a 5 MB copy of its own there)."""
    src = SHARED / "corpora" / "shakespeare"
    if not src.is_dir():
        sys.exit(f"benchmark needs {src} (the shared data folder)")
    text = EOT.join(p.read_text(encoding="utf-8") for p in sorted(src.glob("*.txt")))
    out = Path(tempfile.gettempdir()) / "seqpack-shakespeare.txt"
    if not out.is_file() or out.read_text(encoding="utf-8") != text:
        tmp = out.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.rename(out)
    return out


_COMPILED = False


def compile_bytecode() -> None:
    """Compile seqpack's modules to bytecode once, as ``pip install`` does: an editable install has
    none, and with ``PYTHONDONTWRITEBYTECODE`` set (as on this machine) every fresh process would
    compile them from source again (about 10 ms of the trainer's start-up, which a user's install
    never pays). Writes only ``__pycache__`` folders beside the sources (ignored by git)."""
    global _COMPILED
    if not _COMPILED:
        import compileall
        import importlib.util

        spec = importlib.util.find_spec("seqpack")
        assert spec is not None and spec.submodule_search_locations, "seqpack is not installed"
        compileall.compile_dir(spec.submodule_search_locations[0], quiet=1)
        _COMPILED = True


def run_child(code: str, env: dict[str, str] | None = None) -> dict:
    """Run ``code`` in a fresh interpreter (seqpack's bytecode compiled first: see
    :func:`compile_bytecode`); it prints one JSON line last."""
    import os
    import time

    compile_bytecode()
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, **(env or {})},
    )
    wall = time.perf_counter() - t0
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["wall"] = wall
    return result


# The process's own peak is VmHWM (this process image's high-water mark), not ru_maxrss: Linux carries
# ru_maxrss across exec, so a child started by a large parent reported the parent's RSS at the fork
# (two arms once showed the same 108.6 MB, the benchmark's own). Children: ru_maxrss of the command
# it started (which carries only this small process's RSS).
PEAK_MB = (
    "import resource\n"
    "def peak_mb():\n"
    "    try:\n"
    "        with open('/proc/self/status') as f:\n"
    "            s = next(int(line.split()[1]) for line in f if line.startswith('VmHWM:'))\n"
    "    except (OSError, StopIteration):\n"
    "        s = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
    "    c = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n"
    "    return round(max(s, c) / 1024, 1)\n"
)


def scratch_dir(prefix: str) -> Path:
    """A temporary directory removed when this process exits (a benchmark leaves nothing in /tmp)."""
    import atexit
    import shutil

    d = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, d, ignore_errors=True)
    return d


def median(xs: list[float]) -> float:
    return statistics.median(xs)


def wikipedia_lengths(n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` lengths drawn from the BERT Wikipedia histogram (lengths 1..512)."""
    from seqpack.packing import builtin_histogram

    h = builtin_histogram("wikipedia").astype(np.float64)
    return rng.choice(np.arange(1, h.size + 1), size=n, p=h / h.sum())


def generated_corpus(megabytes: int = 200, *, seed: int = 0) -> Path:
    """A ``megabytes`` MB corpus with a varied vocabulary, written once to the temp dir.

    400,000 distinct synthetic words (syllables, some capitalised, some with accents,
    Greek or CJK, numbers of 1-6 digits), drawn Zipf-like (rank^-1.1), with punctuation,
    in paragraphs of 20-400 words separated by blank lines. Deterministic for a seed.
    """
    out = Path(tempfile.gettempdir()) / f"seqpack-generated-{megabytes}mb-{seed}.txt"
    if out.exists() and out.stat().st_size >= megabytes * 10**6:
        return out
    rng = np.random.default_rng(seed)
    syll = [
        "ka",
        "to",
        "ri",
        "men",
        "sa",
        "lo",
        "vel",
        "qu",
        "an",
        "tor",
        "é",
        "ü",
        "ß",
        "pre",
        "st",
        "ing",
        "ion",
        "er",
        "y",
        "ch",
        "ou",
        "ä",
        "ñ",
        "ph",
        "th",
        "gr",
        "ble",
        "ous",
    ]
    greek, cjk = "αβγδεζηθικλμνξοπρστυφχψω", "的一是不了人我在有他这中大来上国个到说们为子和地出道"
    words = []
    for _i in range(400_000):
        kind = rng.random()
        if kind < 0.05:
            words.append(str(rng.integers(0, 10 ** rng.integers(1, 7))))
        elif kind < 0.08:
            words.append("".join(rng.choice(list(greek), rng.integers(2, 9))))
        elif kind < 0.10:
            words.append("".join(rng.choice(list(cjk), rng.integers(1, 5))))
        else:
            w = "".join(rng.choice(syll, rng.integers(1, 5)))
            words.append(w.capitalize() if rng.random() < 0.15 else w)
    words_arr = np.array(words, dtype=object)
    p = 1.0 / np.arange(1, len(words) + 1) ** 1.1
    p /= p.sum()
    punct = np.array(["", "", "", "", "", "", ",", ".", ";", "!", "?", "'s", ":"], dtype=object)
    written = 0
    with open(out.with_suffix(".tmp"), "w", encoding="utf-8") as f:
        while written < megabytes * 10**6:
            n = 200_000
            toks = words_arr[rng.choice(len(words), n, p=p)] + punct[rng.integers(0, len(punct), n)]
            cuts = np.cumsum(rng.integers(20, 400, n // 20))
            cuts = cuts[cuts < n]
            paras = [" ".join(part) for part in np.split(toks, cuts)]
            block = "\n\n".join(paras) + "\n\n"
            f.write(block)
            written += len(block.encode("utf-8"))
    out.with_suffix(".tmp").rename(out)
    return out


def median_time(fn: Callable[[], T], repeats: int) -> tuple[T, float]:
    """``(last result, median seconds)`` of ``repeats`` calls of ``fn``."""
    import time

    times: list[float] = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return out, statistics.median(times)


def result_meta(packages: tuple[str, ...] = ()) -> dict:
    """What a stored result needs to be re-run and compared: the command, the date, the machine and
    the versions of the packages the arms used."""
    import datetime
    import importlib.metadata
    import os
    import platform

    versions: dict[str, str | None] = {}
    for name in ("seqpack", "numpy", *packages):
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": {
            "platform": platform.platform(),
            "processor": platform.processor() or platform.machine(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
        },
        "versions": versions,
    }


def write_result(path: Path | str | None, results: object, packages: tuple[str, ...] = ()) -> None:
    """``{"meta": result_meta(...), "results": results}`` as JSON at ``path`` (nothing when None)."""
    if path is None:
        return
    Path(path).write_text(
        json.dumps({"meta": result_meta(packages), "results": results}, indent=1) + "\n", encoding="utf-8"
    )


ARM = """
import json, statistics, time, os
{setup}
def _run():
{body}
out = _run()  # the warm-up call (imports, caches, allocator), not timed
times = []
for _ in range({repeats}):
    out = None
    t0 = time.perf_counter()
    out = _run()
    times.append(time.perf_counter() - t0)
print(json.dumps({{"times": times, "info": {info}}}))
"""


def thread_env(threads: int | None) -> dict[str, str]:
    """The thread settings every arm runs under (none when ``threads`` is None).

    numpy's OpenBLAS gets one thread: no arm measures BLAS, and its idle threads spin for ~0.1 s after
    numpy's import. An arm that imports numpy just before its timed calls (seqpack's corpus encoder:
    ``seqpack.tokenizer.fast``) then had one of the 2 cores taken: CS336 on 2 threads took 1.13-1.22
    ms, as long as on 1 (1.03-1.05), and 0.61-0.63 ms with OPENBLAS_NUM_THREADS=1.
    """
    if not threads:
        return {}
    return {
        **{k: str(threads) for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "RAYON_NUM_THREADS")},
        "OPENBLAS_NUM_THREADS": "1",
    }


def _cpu_ticks() -> tuple[int, int]:
    """(all, idle) jiffies of every core since boot (/proc/stat's first line)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return sum(v), v[3] + v[4]


SCHEDULED_ARM = """
import json, time, os
{setup}
def _run():
{body}
out = _run()  # the warm-up call, not timed
late = time.time() > {windows}[0][0]
got = []
for start, end in {windows}:  # this process's windows: it sleeps through the others'
    while time.time() < start:
        time.sleep(0.0005)
    times, cpu = [], time.process_time()
    while time.time() < end:
        out = None
        t0 = time.perf_counter()
        out = _run()
        times.append(time.perf_counter() - t0)
    got.append({{"times": times, "cpu_s": time.process_time() - cpu}})
print(json.dumps({{"windows": got, "late": late}}))
"""


def interleaved_windows(
    kinds: dict[str, tuple[str, str, int]],
    *,
    rounds: int,
    seconds: float = 0.6,
    gap: float = 0.25,
    lead: float = 6.0,
    threads: int | None = None,
) -> dict[str, list[dict]]:
    """Arms timed in turn in short windows: ``kinds`` maps a name to ``(setup, body, copies)`` (as in
    `compare_arms`), each kind's ``copies`` processes started once; round ``r`` gives each kind one
    window of ``seconds`` (in order, reversed every other round), ``gap`` apart (a call begun in a
    window ends in the gap). Windows this short and this close see the same load from other processes,
    which on a shared machine the minutes between whole processes of `compare_arms` do not.

    Returns per kind its windows: ``times`` (every call of every copy), ``cpu_s`` (the copies' CPU
    over the window), ``calls`` and ``machine_busy_cores`` (every process's, from /proc/stat)."""
    import os
    import textwrap
    import time

    compile_bytecode()
    env = {**os.environ, **thread_env(threads)}
    first = time.time() + lead  # time enough for every process's set-up (imports, input, warm-up call)
    order = [k for r in range(rounds) for k in (list(kinds) if r % 2 == 0 else list(reversed(kinds)))]
    spans = [(first + i * (seconds + gap), first + i * (seconds + gap) + seconds) for i in range(len(order))]
    procs: dict[str, list[subprocess.Popen]] = {}
    for k, (setup, body, copies) in kinds.items():
        mine = [w for w, kk in zip(spans, order) if kk == k]
        code = SCHEDULED_ARM.format(
            setup=textwrap.dedent(setup), body=textwrap.indent(textwrap.dedent(body), "    "), windows=repr(mine)
        )
        procs[k] = [
            subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env)
            for _ in range(copies)
        ]
    busy = []
    for start, end in spans:
        time.sleep(max(0.0, start - time.time()))
        t0, i0 = _cpu_ticks()
        time.sleep(max(0.0, end - time.time()))
        t1, i1 = _cpu_ticks()
        busy.append((os.cpu_count() or 1) * (1 - (i1 - i0) / max(1, t1 - t0)))
    out: dict[str, list[dict]] = {}
    for k, ps in procs.items():
        wins = [w for w, kk in zip(busy, order) if kk == k]
        got = []
        for p in ps:
            text, _ = p.communicate()
            assert p.returncode == 0, f"a process of {k} failed ({p.returncode})"
            res = json.loads(text.strip().splitlines()[-1])
            assert not res["late"], f"a process of {k} set up too slowly for its first window"
            got.append(res["windows"])
        out[k] = [
            {
                "times": [t for g in got for t in g[i]["times"]],
                "cpu_s": sum(g[i]["cpu_s"] for g in got),
                "calls": sum(len(g[i]["times"]) for g in got),
                "machine_busy_cores": wins[i],
            }
            for i in range(len(wins))
        ]
    return out


def compare_arms(
    arms: Mapping[str, tuple[str, str, str | None]], *, rounds: int = 3, repeats: int = 1, threads: int | None = None
) -> dict[str, dict]:
    """The benchmark harness: every arm in a fresh interpreter of its own (so no arm carries another's
    imports), the same thread settings, a warm-up call then ``repeats`` timed calls per process, the
    arms alternating over ``rounds`` processes each (forward, then reversed, ...).

    ``arms``: ``name -> (setup, body, info)``: ``setup`` runs once (imports, the input: every arm must
    build the same input from the same seed), ``body`` is the timed function's body (indented by 4,
    returning its result), ``info`` an expression of ``out`` recorded once (a row count...).
    Returns per arm the median, min, max and every timed call, and the last ``info``.
    """
    import os
    import textwrap

    env = thread_env(threads)
    env["TOKENIZERS_PARALLELISM"] = os.environ.get("TOKENIZERS_PARALLELISM", "false")
    code = {
        name: ARM.format(
            setup=textwrap.dedent(setup),
            body=textwrap.indent(textwrap.dedent(body), "    "),
            repeats=repeats,
            info=info or "None",
        )
        for name, (setup, body, info) in arms.items()
    }
    times: dict[str, list[float]] = {k: [] for k in arms}
    info: dict[str, object] = {}
    for r in range(rounds):
        for name in list(arms) if r % 2 == 0 else list(reversed(list(arms))):
            got = run_child(code[name], env=env)
            times[name] += got["times"]
            info[name] = got["info"]
    return {k: {**summary(v), "info": info[k]} for k, v in times.items()}


def summary(times: list[float]) -> dict[str, Any]:
    """The median, min and max of timed runs, and the runs themselves (what every result stores)."""
    return {"median_s": statistics.median(times), "min_s": min(times), "max_s": max(times), "runs_s": times}
