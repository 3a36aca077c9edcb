"""Encoding throughput, like for like: seqpack vs tiktoken vs HF tokenizers, each arm alone.

GPT-2's vocabulary and merges (the CS336 fixtures), so every encoder gives the same ids (each arm
reports a hash of its ids; they must all agree). Corpora: the CS336 text fixtures, Shakespeare, the
Python documentation's reST sources (markup-heavy real text, the built-in corpus), a **mixed**
held-out-like set (:func:`mixed`: prose, code, e-mail, markup and non-Latin scripts from what ships
with Python and this machine) and **20-byte strings** cut from it (per-call overhead); documents
are paragraphs (split at blank lines), with <|endoftext|> removed so that ``encode_ordinary`` applies.

The harness (``_common.compare_arms``) runs every arm in processes of its own (the tiktoken and HF
arms never import seqpack), a warm-up call then ``--repeats`` timed calls, arms alternating over
``--rounds``. Pairs compared (the same API shape on both sides):

- per document, 1 thread, a list of ids per call: seqpack ``Tokenizer.encode`` (cold: its word cache
  cleared before each call; warm: kept) vs tiktoken ``encode_ordinary`` vs HF ``encode``;
- a batch of documents on 2 threads, a list of lists: seqpack ``Tokenizer.encode_batch(workers=2)``
  vs tiktoken ``encode_ordinary_batch(num_threads=2)`` vs HF ``encode_batch`` (2 rayon threads);
- the mixed set in **small batches** (``--batch-size``, 64 documents: ~11 KB, what a data loader
  hands over), a call a batch: seqpack ``encode_batch`` on 1 and 2 threads, tiktoken
  ``encode_ordinary_batch`` and HF ``encode_batch`` on 2 (per-call overhead and thread start-up).

**Thread scaling** (:func:`scaling`), per set, of seqpack's ``encode_batch`` (lists) and of its
corpus encoder ``encode_batches`` (flat numpy ids + offsets through ``Tokenizer.encode_batch_flat``,
what ``seqpack tokenize`` runs), cold, in ``--scaling-rounds`` rounds of three windows of
``--scaling-seconds`` each: the 1-thread arm, the 2-thread arm, and the **machine ceiling**, the
1-thread arm in two processes at once (what 2 cores give work that shares nothing; no 1 -> 2 thread
speed-up can beat it here). The processes are started once and take turns, so the three kinds of
window see the same load from the machine's other processes. Reported: the speed-up and the ceiling
over every window, and per round (their medians), with **of ceiling**, the speed-up over the ceiling:
per round it compares the 2-thread window with the ceiling's beside it alone (2 threads in one process
against 2 processes of one), the figure least moved by other work. Each window also records its
processes' CPU time (the 2-thread call's CPU over the 1-thread call's is the **work inflation**: what a
second thread costs in extra work, whatever the machine gives) and how many cores other processes took
meanwhile (/proc/stat); the load average is recorded with each set. On a machine shared with other
work the wall-clock figures mean little without them.

MB/s is the corpus's UTF-8 size over the median call; "per core" divides by the threads.

    python benchmarks/encode.py [--rounds 3] [--repeats 2] [--sets mixed shakespeare] [--out results/encode.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sysconfig
from pathlib import Path
from typing import Any

from _common import (
    EOT,
    RESULTS,
    SHARED,
    compare_arms,
    interleaved_windows,
    scratch_dir,
    shakespeare_file,
    summary,
    write_result,
)

CS = SHARED / "cs336"
HASH = "__import__('hashlib').sha256(repr(out).encode()).hexdigest()[:16]"
FLAT = "__import__('hashlib').sha256(repr([ids[o[i]:o[i+1]].tolist() for ids, o in out for i in range(len(o) - 1)]).encode()).hexdigest()[:16]"


STDLIB = Path(sysconfig.get_paths()["stdlib"])
LOCALE = Path("/usr/share/locale")
#: non-Latin scripts: Russian, Ukrainian, Greek, Arabic, Hebrew, Hindi, Thai, Chinese, Japanese, Korean
SCRIPTS = ("ru", "uk", "el", "ar", "he", "hi", "th", "zh_CN", "zh_TW", "ja", "ko")
CATALOGS = ("coreutils", "bash", "apt", "dpkg", "findutils", "diffutils", "tar", "grep", "sed", "gettext-tools")


def mixed(limit: int = 1_200_000) -> dict[str, str]:
    """Held-out-like text from what ships with Python and this machine, up to ``limit`` bytes a kind:

    - ``prose``: pydoc's help topics (``pydoc_data.topics``, English reference prose);
    - ``code``: the standard library's top-level ``*.py`` modules, in name order;
    - ``e-mail``: the ``email`` package's test messages (headers, MIME parts: news-like);
    - ``markup``: the Python docs' reST sources (the built-in corpus), from its end;
    - ``non-Latin``: the gettext catalogs (``/usr/share/locale/LANG/LC_MESSAGES/*.mo``) of common
      tools in :data:`SCRIPTS`' languages (translated messages, 20 a document), and CPython's CJK
      test texts. A kind whose files are missing here is left out (the result file says what ran).
    """
    import gettext
    import pydoc_data.topics

    from seqpack.corpus import python_docs

    def take(texts: list[str]) -> str:
        out, n = [], 0
        for t in texts:
            if n >= limit:
                break
            out.append(t)
            n += len(t.encode("utf-8"))
        return "\n\n".join(out)

    kinds = {
        "prose": take(list(pydoc_data.topics.topics.values())),
        "code": take([f.read_text(encoding="utf-8", errors="replace") for f in sorted(STDLIB.glob("*.py"))]),
        "e-mail": take(
            [
                f.read_text(encoding="utf-8", errors="replace")
                for f in sorted((STDLIB / "test" / "test_email" / "data").glob("msg_*.txt"))
            ]
        ),
        "markup": take(list(reversed(python_docs()))),
    }
    foreign = [f.read_text(encoding="utf-8") for f in sorted((STDLIB / "test" / "cjkencodings").glob("*-utf8.txt"))]
    for lang in SCRIPTS:
        for cat in CATALOGS:
            f = LOCALE / lang / "LC_MESSAGES" / f"{cat}.mo"
            if f.is_file():
                with open(f, "rb") as fh:
                    msgs = [v for k, v in gettext.GNUTranslations(fh)._catalog.items() if k and isinstance(v, str)]  # type: ignore[attr-defined]  # gettext's catalog: private, untyped
                foreign += ["\n".join(msgs[i : i + 20]) for i in range(0, len(msgs), 20)]
    # interleave the scripts, so that a byte limit keeps some of each
    kinds["non-Latin"] = take(foreign[::2] + foreign[1::2])
    return {k: v for k, v in kinds.items() if v}


def corpora() -> dict[str, list[str]]:
    from seqpack.corpus import python_docs

    fixtures = "".join(
        (CS / n).read_text(encoding="utf-8")
        for n in ("tinystories_sample.txt", "german.txt", "address.txt", "corpus.en")
    )
    texts = {
        "cs336": fixtures,
        "shakespeare": shakespeare_file().read_text(encoding="utf-8"),
        "python-docs": "\n\n".join(python_docs()),
    }
    texts["mixed"] = "\n\n".join(mixed().values())
    docs = {k: [p for p in t.replace(EOT, "\n\n").split("\n\n") if p] for k, t in texts.items()}
    flat = "".join(docs["mixed"])
    docs["20-byte strings"] = [flat[i : i + 20] for i in range(0, min(len(flat), 2_000_000), 20)]
    return docs


def arms(docs_path: Path, hf_path: Path) -> dict[str, tuple[str, str, str]]:
    load = f"docs = json.load(open({str(docs_path)!r}, encoding='utf-8'))\n"
    seqpack = load + (
        f"from seqpack.tokenizer import Tokenizer\n"
        f"tok = Tokenizer.from_files({str(CS / 'gpt2_vocab.json')!r}, {str(CS / 'gpt2_merges.txt')!r}, [{EOT!r}])\n"
    )
    tiktoken = load + (
        f"os.environ['TIKTOKEN_CACHE_DIR'] = {str(SHARED / 'tiktoken_cache')!r}\n"
        "import tiktoken\nenc = tiktoken.get_encoding('gpt2')\n"
    )
    hf = load + f"from tokenizers import Tokenizer\nhf = Tokenizer.from_file({str(hf_path)!r})\n"
    hf2 = "os.environ['TOKENIZERS_PARALLELISM'] = 'true'\n" + hf
    enc_batches = seqpack + "from seqpack.tokenizer.fast import encode_batches\n"
    return {
        "seqpack encode, per document, 1 thread, cold": (
            seqpack,
            "tok.clear_cache()\nreturn [tok.encode(d) for d in docs]",
            HASH,
        ),
        "seqpack encode, per document, 1 thread, warm": (seqpack, "return [tok.encode(d) for d in docs]", HASH),
        "tiktoken encode_ordinary, per document, 1 thread": (
            tiktoken,
            "return [enc.encode_ordinary(d) for d in docs]",
            HASH,
        ),
        "HF encode, per document, 1 thread": (
            hf,
            "return [hf.encode(d, add_special_tokens=False).ids for d in docs]",
            HASH,
        ),
        "seqpack encode_batch, 2 threads, cold": (
            seqpack,
            "tok.clear_cache()\nreturn tok.encode_batch(docs, workers=2)",
            HASH,
        ),
        "tiktoken encode_ordinary_batch, 2 threads": (
            tiktoken,
            "return enc.encode_ordinary_batch(docs, num_threads=2)",
            HASH,
        ),
        "HF encode_batch, 2 threads": (
            hf2,
            "return [e.ids for e in hf.encode_batch(docs, add_special_tokens=False)]",
            HASH,
        ),
        "seqpack corpus encoder, 2 threads, cold": (
            enc_batches,
            "tok.clear_cache()\nreturn list(encode_batches(tok, docs, workers=2))",
            FLAT,
        ),
    }


def scaling_arms(base: dict[str, tuple[str, str, str]]) -> dict[str, tuple[str, str, str]]:
    """``what -> (setup, 1-thread body, 2-thread body)``, cold (caches cleared before each call), from `arms`."""
    seqpack = base["seqpack encode, per document, 1 thread, cold"][0]
    enc_batches = base["seqpack corpus encoder, 2 threads, cold"][0]
    lists = "tok.clear_cache()\nreturn tok.encode_batch(docs, workers={})"
    flat = "tok.clear_cache()\nreturn list(encode_batches(tok, docs, workers={}))"
    return {
        "encode_batch": (seqpack, lists.format(1), lists.format(2)),
        "corpus encoder": (enc_batches, flat.format(1), flat.format(2)),
    }


def small_batch_arms(docs_path: Path, hf_path: Path, size: int) -> dict[str, tuple[str, str, str]]:
    """The corpus in batches of ``size`` documents, one call a batch (what a data loader does): seqpack's
    ``encode_batch`` on 1 and 2 threads (cold: its caches cleared before each pass), tiktoken's
    ``encode_ordinary_batch`` and HF's ``encode_batch`` on 2."""
    base = arms(docs_path, hf_path)
    split = f"batches = [docs[i : i + {size}] for i in range(0, len(docs), {size})]\n"
    seqpack, tiktoken, hf2 = (
        base[k][0] + split
        for k in (
            "seqpack encode, per document, 1 thread, cold",
            "tiktoken encode_ordinary, per document, 1 thread",
            "HF encode_batch, 2 threads",
        )
    )
    every = "return [ids for b in batches for ids in {}]"
    return {
        "seqpack encode_batch, 1 thread, cold": (
            seqpack,
            "tok.clear_cache()\n" + every.format("tok.encode_batch(b, workers=1)"),
            HASH,
        ),
        "seqpack encode_batch, 2 threads, cold": (
            seqpack,
            "tok.clear_cache()\n" + every.format("tok.encode_batch(b, workers=2)"),
            HASH,
        ),
        "tiktoken encode_ordinary_batch, 2 threads": (
            tiktoken,
            every.format("enc.encode_ordinary_batch(b, num_threads=2)"),
            HASH,
        ),
        "HF encode_batch, 2 threads": (
            hf2,
            every.format("[e.ids for e in hf.encode_batch(b, add_special_tokens=False)]"),
            HASH,
        ),
    }


PER_DOCUMENT = (
    "seqpack encode, per document, 1 thread, cold",
    "seqpack encode, per document, 1 thread, warm",
    "tiktoken encode_ordinary, per document, 1 thread",
)


def per_document(all_arms: dict[str, tuple[str, str, str]], rounds: int, seconds: float, gap: float) -> dict:
    """seqpack's ``encode`` per document (cold, warm) against tiktoken's ``encode_ordinary``, in
    windows that take turns (:func:`_common.interleaved_windows`), so that each round's three see the
    same load: the ratios over every window's calls, and the median of the rounds' ratios."""
    kinds = {k: (all_arms[k][0], all_arms[k][1], 1) for k in PER_DOCUMENT}
    got = interleaved_windows(kinds, rounds=rounds, seconds=seconds, gap=gap, threads=1)
    cold, warm, tiktoken = PER_DOCUMENT

    def ratios(w: dict[str, list[dict]]) -> dict[str, float]:
        med = {k: statistics.median([t for x in v for t in x["times"]]) for k, v in w.items()}
        return {
            "cold_vs_tiktoken": med[tiktoken] / med[cold],
            "warm_vs_tiktoken": med[tiktoken] / med[warm],
            **{f"median_s, {k}": v for k, v in med.items()},
        }

    out: dict[str, Any] = dict(ratios(got))
    per_round = [ratios({k: [v[r]] for k, v in got.items()}) for r in range(rounds)]
    out["rounds_"] = per_round
    for k in ("cold_vs_tiktoken", "warm_vs_tiktoken"):
        out[f"{k}_median_of_rounds"] = statistics.median(r[k] for r in per_round)
    out["others_cores"] = {
        k: [round(x["machine_busy_cores"] - x["cpu_s"] / seconds, 2) for x in v] for k, v in got.items()
    }
    return out


#: other processes' cores under which a window counts as quiet
QUIET = 0.15


def scaling(arm: tuple[str, str, str], rounds: int, seconds: float) -> dict:
    """1 thread, 2 threads, and the machine ceiling (the 1-thread arm in two processes at once), in
    windows of ``seconds`` that alternate ``rounds`` times (:func:`_common.interleaved_windows`: they
    see the same load from this machine's other processes).

    ``speedup``: the 1-thread median call over the 2-thread one; ``ceiling``: 2 x (1-thread median
    alone) / (its median two at once): on an idle ideal machine 2.0, less where caches, memory
    bandwidth, the host's other tenants or this machine's other processes take their part;
    ``of_ceiling``: their ratio. ``work_inflation``: the 2-thread call's CPU time over the 1-thread
    call's (what the second thread costs in extra work: duplicated first-seen words, thread start).
    ``others_cores``: per window, the cores other processes kept busy. Per round too (``rounds_``)."""
    setup, one_body, two_body = arm
    kinds = {"1 thread": (setup, one_body, 1), "2 threads": (setup, two_body, 1), "ceiling": (setup, one_body, 2)}
    got = interleaved_windows(kinds, rounds=rounds, seconds=seconds, threads=2)

    def ratios(w: dict[str, list[dict]]) -> dict[str, float]:
        med = {k: statistics.median([t for x in v for t in x["times"]]) for k, v in w.items()}
        cpu = {k: sum(x["cpu_s"] for x in v) / sum(x["calls"] for x in v) for k, v in w.items()}
        speedup, ceiling = med["1 thread"] / med["2 threads"], 2 * med["1 thread"] / med["ceiling"]
        return {
            "speedup": speedup,
            "ceiling": ceiling,
            "of_ceiling": speedup / ceiling,
            "work_inflation": cpu["2 threads"] / cpu["1 thread"],
            "median_1_thread_s": med["1 thread"],
            "median_2_threads_s": med["2 threads"],
            "median_ceiling_s": med["ceiling"],
            "cpu_1_thread_s": cpu["1 thread"],
            "cpu_2_threads_s": cpu["2 threads"],
        }

    out: dict[str, Any] = dict(ratios(got))
    per_round = [ratios({k: [v[r]] for k, v in got.items()}) for r in range(rounds)]
    out["rounds_"] = per_round
    # per round, of_ceiling needs only the 2-thread window and the ceiling's beside it (the 1-thread
    # window cancels): 2 threads in one process against 2 processes of 1 thread, under the same load
    for k in ("speedup", "ceiling", "of_ceiling", "work_inflation"):
        out[f"{k}_median_of_rounds"] = statistics.median(r[k] for r in per_round)
    out["others_cores"] = {
        k: [round(x["machine_busy_cores"] - x["cpu_s"] / seconds, 2) for x in v] for k, v in got.items()
    }
    # the rounds in which other processes took under QUIET cores in each of the three windows: what
    # the machine gives when it is ours
    quiet = [r for i, r in enumerate(per_round) if all(v[i] < QUIET for v in out["others_cores"].values())]
    out["quiet_rounds"] = len(quiet)
    if quiet:
        for k in ("speedup", "ceiling", "of_ceiling"):
            out[f"{k}_median_of_quiet_rounds"] = statistics.median(r[k] for r in quiet)
    # each window's summary (its calls' median, min, max and count), not every call: a window of the CS336
    # set holds hundreds
    out["windows"] = {
        k: [
            {
                **{s: t for s, t in summary(x["times"]).items() if s != "runs_s"},
                "calls": x["calls"],
                "cpu_s": x["cpu_s"],
                "machine_busy_cores": x["machine_busy_cores"],
            }
            for x in v
        ]
        for k, v in got.items()
    }
    return out


LONG_LINE = """
import array, hashlib, json, sys, time
def kb(field):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))
text = open(sys.argv[1], encoding="utf-8").read()
SETUP
ENCODE("warm-up")  # the tokenizer built (seqpack builds its compiled encoder at the first call)
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # the peak (VmHWM) starts again from the current RSS: kept by the kernel, whoever holds the GIL
before = kb("VmRSS")
t0 = time.perf_counter()
ids = ENCODE(text)
seconds = time.perf_counter() - t0
peak = kb("VmHWM")
# what the list holds: its pointers, and its int objects where the call made them (one per id
# above 256, tiktoken's) rather than sharing one per token id made beforehand (seqpack's)
big = [x for x in ids if x > 256]
objects = len({id(x) for x in big})
fresh = objects if objects > len(set(big)) else 0
list_mb = (8 * len(ids) + 32 * fresh) / 2**20
print(json.dumps({"seconds": seconds, "ids": len(ids), "peak_over_input_mb": (peak - before) / 1024,
                  "list_mb": list_mb, "working_mb": (peak - before) / 1024 - list_mb,
                  "hash": hashlib.sha256(array.array("I", ids).tobytes()).hexdigest()[:16]}))
"""


def long_line(work: Path, mb: int) -> dict[str, dict]:
    """One line of ``mb`` MB (the Python docs' paragraphs joined by spaces, repeated), encoded whole
    by seqpack ``encode`` and tiktoken ``encode_ordinary``, each in a fresh process: time, peak RSS
    above the read text (the kernel's VmHWM, reset before the call: a sampling thread would miss
    the peak of a call that holds the GIL), what the returned list holds (its pointers, and its
    ints where the call made them: 32 bytes each) and the difference, the call's working memory."""
    from _common import run_child

    from seqpack.corpus import python_docs

    path = work / f"line-{mb}mb.txt"
    base = " ".join(d.replace("\n", " ") for d in python_docs())
    path.write_text((base * (mb * 10**6 // len(base) + 1))[: mb * 10**6], encoding="utf-8")
    seqpack = (
        f"from seqpack.tokenizer import Tokenizer\n"
        f"ENCODE = Tokenizer.from_files({str(CS / 'gpt2_vocab.json')!r}, {str(CS / 'gpt2_merges.txt')!r}).encode\n"
    )
    tiktoken = (
        f"import os; os.environ['TIKTOKEN_CACHE_DIR'] = {str(SHARED / 'tiktoken_cache')!r}\n"
        "import tiktoken\nENCODE = tiktoken.get_encoding('gpt2').encode_ordinary\n"
    )
    out = {}
    for name, setup in (("seqpack encode", seqpack), ("tiktoken encode_ordinary", tiktoken)):
        code = LONG_LINE.replace("SETUP", setup)
        out[name] = run_child(code.replace("sys.argv[1]", repr(str(path))))
        r = out[name]
        print(
            f"  {mb} MB line, {name:<26} {r['seconds']:.2f} s, {r['ids']:,} ids, peak +{r['peak_over_input_mb']:.0f} MB "
            f"(list {r['list_mb']:.0f} MB, working {r['working_mb']:.0f} MB)"
        )
    assert len({r["hash"] for r in out.values()}) == 1, "the encoders disagree on the long line"
    path.unlink()
    return out


PAIRS = {
    "per document, cold, vs tiktoken": (
        "seqpack encode, per document, 1 thread, cold",
        "tiktoken encode_ordinary, per document, 1 thread",
    ),
    "per document, warm, vs tiktoken": (
        "seqpack encode, per document, 1 thread, warm",
        "tiktoken encode_ordinary, per document, 1 thread",
    ),
    "batch, 2 threads, vs tiktoken": (
        "seqpack encode_batch, 2 threads, cold",
        "tiktoken encode_ordinary_batch, 2 threads",
    ),
    "per document vs HF": ("seqpack encode, per document, 1 thread, cold", "HF encode, per document, 1 thread"),
    "batch, 2 threads, vs HF": ("seqpack encode_batch, 2 threads, cold", "HF encode_batch, 2 threads"),
}


def measure_set(name: str, docs: list[str], work: Path, args: argparse.Namespace) -> dict:
    """One corpus: every arm (per document and batches against tiktoken and HF), then the thread scaling."""
    (work / "docs.json").write_text(json.dumps(docs), encoding="utf-8")
    mb = sum(len(d.encode("utf-8")) for d in docs) / 1e6
    repeats = args.repeats * (10 if mb < 1 else 1)  # a call on the 0.14 MB corpus takes ~3 ms
    load_before = os.getloadavg()
    got = compare_arms(
        arms(work / "docs.json", work / "tokenizer.json"), rounds=args.rounds, repeats=repeats, threads=2
    )
    hashes = {r["info"] for r in got.values()}
    assert len(hashes) == 1, f"the encoders disagree on {name}: {hashes}"
    print(
        f"## {name}: {len(docs):,} documents, {mb:.2f} MB; MB/s (per core) over the median call; ids identical; "
        f"load average {load_before[0]:.2f}"
    )
    for arm, r in got.items():
        threads = 2 if "2 threads" in arm else 1
        r["mb_per_s"] = mb / r["median_s"]
        r["mb_per_s_per_core"] = r["mb_per_s"] / threads
        print(f"  {arm:<50} {r['mb_per_s']:8.2f} ({r['mb_per_s_per_core']:.2f})  [{r['min_s']:.3f}-{r['max_s']:.3f} s]")
    ratios = {k: got[b]["median_s"] / got[a]["median_s"] for k, (a, b) in PAIRS.items()}
    for k, v in ratios.items():
        print(f"  speed-up, {k}: {v:.2f}x")
    all_arms = arms(work / "docs.json", work / "tokenizer.json")
    slowest = got[PER_DOCUMENT[2]]["median_s"]  # tiktoken's call: a window holds two, a gap one
    doc = per_document(
        all_arms, args.scaling_rounds, max(args.scaling_seconds, 2.2 * slowest), gap=max(0.25, 1.5 * slowest)
    )
    print(
        f"  per document, windows taking turns: cold {doc['cold_vs_tiktoken']:.2f}x tiktoken, warm {doc['warm_vs_tiktoken']:.2f}x "
        f"(medians of the rounds: {doc['cold_vs_tiktoken_median_of_rounds']:.2f}x, {doc['warm_vs_tiktoken_median_of_rounds']:.2f}x)"
    )
    scale = {}
    for what, scaled in scaling_arms(all_arms).items():
        scale[what] = s = scaling(scaled, args.scaling_rounds, args.scaling_seconds)
        print(
            f"  {what}, 1 -> 2 threads: {s['speedup']:.2f}x, machine ceiling {s['ceiling']:.2f}x, {s['of_ceiling']:.0%} "
            f"of it (medians of the rounds: {s['speedup_median_of_rounds']:.2f}x, {s['ceiling_median_of_rounds']:.2f}x, "
            f"{s['of_ceiling_median_of_rounds']:.0%}); work inflation {s['work_inflation']:.2f}x; "
            f"1 thread {mb / s['median_1_thread_s']:.1f} MB/s, 2 threads {mb / s['median_2_threads_s']:.1f} MB/s"
        )
        for k, v in s["others_cores"].items():
            print(f"    other processes' cores, {k} windows: {' '.join(f'{x:.2f}' for x in v)}")
        if s["quiet_rounds"]:
            print(
                f"    the {s['quiet_rounds']} quiet rounds (other processes under {QUIET} cores in each window): "
                f"{s['speedup_median_of_quiet_rounds']:.2f}x, ceiling {s['ceiling_median_of_quiet_rounds']:.2f}x"
            )
    load_after = os.getloadavg()
    return {
        "documents": len(docs),
        "mb": mb,
        "rounds": args.rounds,
        "repeats": repeats,
        "arms": got,
        "speedups": ratios,
        "per_document": doc,
        "scaling": scale,
        "load_average": {"before": load_before, "after": load_after},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--out", default=str(RESULTS / "encode.json"))
    ap.add_argument(
        "--batch-size", type=int, default=64, help="the mixed set in batches of this many documents (0: not run)"
    )
    ap.add_argument("--long-line-mb", type=int, default=150, help="a single line of this size, encoded whole (0: none)")
    ap.add_argument("--sets", nargs="+", help="only these corpora (default: all)")
    ap.add_argument("--scaling-rounds", type=int, default=10, help="windows of each kind in the thread scaling")
    ap.add_argument("--scaling-seconds", type=float, default=0.4, help="each scaling window's length")
    args = ap.parse_args()
    from seqpack.tokenizer import Tokenizer

    work = scratch_dir("seqpack-encode-")
    Tokenizer.from_files(CS / "gpt2_vocab.json", CS / "gpt2_merges.txt", [EOT]).to_hf().save(
        str(work / "tokenizer.json")
    )
    results = {}
    sets = corpora()
    for name, docs in sets.items():
        if args.sets and name not in args.sets:
            continue
        results[name] = measure_set(name, docs, work, args)
    if args.batch_size:
        docs = sets["mixed"]
        (work / "docs.json").write_text(json.dumps(docs), encoding="utf-8")
        mb = sum(len(d.encode("utf-8")) for d in docs) / 1e6
        print(
            f"## mixed in batches of {args.batch_size} documents, a call a batch; MB/s over the median pass; ids identical"
        )
        got = compare_arms(
            small_batch_arms(work / "docs.json", work / "tokenizer.json", args.batch_size),
            rounds=args.rounds,
            repeats=args.repeats,
            threads=2,
        )
        assert len({r["info"] for r in got.values()}) == 1, "the encoders disagree on the batches"
        for arm, r in got.items():
            r["mb_per_s"] = mb / r["median_s"]
            print(f"  {arm:<50} {r['mb_per_s']:8.2f}  [{r['min_s']:.3f}-{r['max_s']:.3f} s]")
        one, two = got["seqpack encode_batch, 1 thread, cold"], got["seqpack encode_batch, 2 threads, cold"]
        ratios = {
            "2 threads vs tiktoken": got["tiktoken encode_ordinary_batch, 2 threads"]["median_s"] / two["median_s"],
            "2 threads vs HF": got["HF encode_batch, 2 threads"]["median_s"] / two["median_s"],
            "2 threads vs 1": one["median_s"] / two["median_s"],
        }
        for k, v in ratios.items():
            print(f"  speed-up, {k}: {v:.2f}x")
        results[f"mixed, batches of {args.batch_size}"] = {
            "documents": len(docs),
            "mb": mb,
            "batch_size": args.batch_size,
            "arms": got,
            "speedups": ratios,
        }
    if args.long_line_mb:
        print(f"## one {args.long_line_mb} MB line (no newline), one call, fresh processes")
        results[f"{args.long_line_mb} MB line"] = long_line(work, args.long_line_mb)
    write_result(args.out, results, packages=("tiktoken", "tokenizers"))


if __name__ == "__main__":
    main()
