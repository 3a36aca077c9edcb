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
  and seqpack's ``encode_batch`` on 1 thread, for its scaling from 1 thread to 2, set against the
  **machine ceiling**: that 1-thread arm in two processes at once (:func:`machine_ceiling`);
- the mixed set in **small batches** (``--batch-size``, 64 documents: ~11 KB, what a data loader
  hands over), a call a batch: seqpack ``encode_batch`` on 1 and 2 threads, tiktoken
  ``encode_ordinary_batch`` and HF ``encode_batch`` on 2 (per-call overhead and thread start-up);
- seqpack's corpus encoder ``encode_batches`` (flat numpy ids + offsets, what ``seqpack tokenize``
  uses) on 1 and 2 threads: it has no counterpart in the others, so it is reported apart.

MB/s is the corpus's UTF-8 size over the median call; "per core" divides by the threads.

    python benchmarks/encode.py [--rounds 3] [--repeats 2] [--out results/encode.json]
"""

from __future__ import annotations

import argparse
import json
import sysconfig
from pathlib import Path

from _common import (
    EOT,
    RESULTS,
    SHARED,
    compare_arms,
    concurrent_arm,
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
        "e-mail": take([f.read_text(encoding="utf-8", errors="replace")
                        for f in sorted((STDLIB / "test" / "test_email" / "data").glob("msg_*.txt"))]),
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
    seqpack = load + (f"from seqpack.tokenizer import Tokenizer\n"
                      f"tok = Tokenizer.from_files({str(CS / 'gpt2_vocab.json')!r}, {str(CS / 'gpt2_merges.txt')!r}, [{EOT!r}])\n")
    tiktoken = load + (f"os.environ['TIKTOKEN_CACHE_DIR'] = {str(SHARED / 'tiktoken_cache')!r}\n"
                       "import tiktoken\nenc = tiktoken.get_encoding('gpt2')\n")
    hf = load + f"from tokenizers import Tokenizer\nhf = Tokenizer.from_file({str(hf_path)!r})\n"
    hf2 = "os.environ['TOKENIZERS_PARALLELISM'] = 'true'\n" + hf
    enc_batches = seqpack + "from seqpack.tokenizer.fast import encode_batches\n"
    return {
        "seqpack encode, per document, 1 thread, cold": (seqpack, "tok.clear_cache()\nreturn [tok.encode(d) for d in docs]", HASH),
        "seqpack encode, per document, 1 thread, warm": (seqpack, "return [tok.encode(d) for d in docs]", HASH),
        "tiktoken encode_ordinary, per document, 1 thread": (tiktoken, "return [enc.encode_ordinary(d) for d in docs]", HASH),
        "HF encode, per document, 1 thread": (hf, "return [hf.encode(d, add_special_tokens=False).ids for d in docs]", HASH),
        "seqpack encode_batch, 1 thread, cold": (seqpack, "tok.clear_cache()\nreturn tok.encode_batch(docs, workers=1)", HASH),
        "seqpack encode_batch, 2 threads, cold": (seqpack, "tok.clear_cache()\nreturn tok.encode_batch(docs, workers=2)", HASH),
        "tiktoken encode_ordinary_batch, 2 threads": (tiktoken, "return enc.encode_ordinary_batch(docs, num_threads=2)", HASH),
        "HF encode_batch, 2 threads": (hf2, "return [e.ids for e in hf.encode_batch(docs, add_special_tokens=False)]", HASH),
        "seqpack corpus encoder, 1 thread, cold": (enc_batches, "tok.clear_cache()\nreturn list(encode_batches(tok, docs, workers=1))", FLAT),
        "seqpack corpus encoder, 2 threads, cold": (enc_batches, "tok.clear_cache()\nreturn list(encode_batches(tok, docs, workers=2))", FLAT),
    }


def small_batch_arms(docs_path: Path, hf_path: Path, size: int) -> dict[str, tuple[str, str, str]]:
    """The corpus in batches of ``size`` documents, one call a batch (what a data loader does): seqpack's
    ``encode_batch`` on 1 and 2 threads (cold: its caches cleared before each pass), tiktoken's
    ``encode_ordinary_batch`` and HF's ``encode_batch`` on 2."""
    base = arms(docs_path, hf_path)
    split = f"batches = [docs[i : i + {size}] for i in range(0, len(docs), {size})]\n"
    seqpack, tiktoken, hf2 = (base[k][0] + split for k in (
        "seqpack encode, per document, 1 thread, cold", "tiktoken encode_ordinary, per document, 1 thread",
        "HF encode_batch, 2 threads"))
    every = "return [ids for b in batches for ids in {}]"
    return {
        "seqpack encode_batch, 1 thread, cold": (seqpack, "tok.clear_cache()\n" + every.format("tok.encode_batch(b, workers=1)"), HASH),
        "seqpack encode_batch, 2 threads, cold": (seqpack, "tok.clear_cache()\n" + every.format("tok.encode_batch(b, workers=2)"), HASH),
        "tiktoken encode_ordinary_batch, 2 threads": (tiktoken, every.format("enc.encode_ordinary_batch(b, num_threads=2)"), HASH),
        "HF encode_batch, 2 threads": (hf2, every.format("[e.ids for e in hf.encode_batch(b, add_special_tokens=False)]"), HASH),
    }


SCALING_ARM = "seqpack encode_batch, 1 thread, cold"


def machine_ceiling(arm: tuple[str, str, str], rounds: int) -> dict:
    """What 2 cores give this work when nothing is shared: the 1-thread ``encode_batch`` arm in one
    process, then in two processes at once (:func:`_common.concurrent_arm`), alternating over
    ``rounds``. The speed-up is 2 x (median call alone) / (median call of the two at once): on an
    ideal machine 2.0; shared caches, memory bandwidth and (on a VM) the host's other tenants take
    their part. No 1 -> 2 thread scaling of this work can beat it here."""
    setup, body, _ = arm
    alone: list[float] = []
    both: list[float] = []
    for _ in range(rounds):
        alone += concurrent_arm(setup, body, copies=1, threads=2)
        both += concurrent_arm(setup, body, copies=2, threads=2)
    a, b = ({k: v for k, v in summary(t).items() if k != "runs_s"} | {"calls": len(t)} for t in (alone, both))
    return {"alone": a, "two_at_once": b, "speedup": 2 * a["median_s"] / b["median_s"]}


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
    seqpack = (f"from seqpack.tokenizer import Tokenizer\n"
               f"ENCODE = Tokenizer.from_files({str(CS / 'gpt2_vocab.json')!r}, {str(CS / 'gpt2_merges.txt')!r}).encode\n")
    tiktoken = (f"import os; os.environ['TIKTOKEN_CACHE_DIR'] = {str(SHARED / 'tiktoken_cache')!r}\n"
                "import tiktoken\nENCODE = tiktoken.get_encoding('gpt2').encode_ordinary\n")
    out = {}
    for name, setup in (("seqpack encode", seqpack), ("tiktoken encode_ordinary", tiktoken)):
        code = LONG_LINE.replace("SETUP", setup)
        out[name] = run_child(code.replace("sys.argv[1]", repr(str(path))))
        r = out[name]
        print(f"  {mb} MB line, {name:<26} {r['seconds']:.2f} s, {r['ids']:,} ids, peak +{r['peak_over_input_mb']:.0f} MB "
              f"(list {r['list_mb']:.0f} MB, working {r['working_mb']:.0f} MB)")
    assert len({r["hash"] for r in out.values()}) == 1, "the encoders disagree on the long line"
    path.unlink()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--out", default=str(RESULTS / "encode.json"))
    ap.add_argument("--batch-size", type=int, default=64, help="the mixed set in batches of this many documents (0: not run)")
    ap.add_argument("--long-line-mb", type=int, default=150, help="a single line of this size, encoded whole (0: none)")
    args = ap.parse_args()
    from seqpack.tokenizer import Tokenizer

    work = scratch_dir("seqpack-encode-")
    Tokenizer.from_files(CS / "gpt2_vocab.json", CS / "gpt2_merges.txt", [EOT]).to_hf().save(str(work / "tokenizer.json"))
    results = {}
    sets = corpora()
    for name, docs in sets.items():
        (work / "docs.json").write_text(json.dumps(docs), encoding="utf-8")
        mb = sum(len(d.encode("utf-8")) for d in docs) / 1e6
        repeats = args.repeats * (10 if mb < 1 else 1)  # a call on the 0.14 MB corpus takes ~3 ms
        got = compare_arms(arms(work / "docs.json", work / "tokenizer.json"), rounds=args.rounds, repeats=repeats, threads=2)
        hashes = {r["info"] for r in got.values()}
        assert len(hashes) == 1, f"the encoders disagree on {name}: {hashes}"
        print(f"## {name}: {len(docs):,} documents, {mb:.2f} MB; MB/s (per core) over the median call; ids identical")
        for arm, r in got.items():
            threads = 2 if "2 threads" in arm else 1
            r["mb_per_s"] = mb / r["median_s"]
            r["mb_per_s_per_core"] = r["mb_per_s"] / threads
            print(f"  {arm:<50} {r['mb_per_s']:8.2f} ({r['mb_per_s_per_core']:.2f})  [{r['min_s']:.3f}-{r['max_s']:.3f} s]")
        pairs = {
            "per document, cold, vs tiktoken": ("seqpack encode, per document, 1 thread, cold", "tiktoken encode_ordinary, per document, 1 thread"),
            "per document, warm, vs tiktoken": ("seqpack encode, per document, 1 thread, warm", "tiktoken encode_ordinary, per document, 1 thread"),
            "batch, 2 threads, vs tiktoken": ("seqpack encode_batch, 2 threads, cold", "tiktoken encode_ordinary_batch, 2 threads"),
            "per document vs HF": ("seqpack encode, per document, 1 thread, cold", "HF encode, per document, 1 thread"),
            "batch, 2 threads, vs HF": ("seqpack encode_batch, 2 threads, cold", "HF encode_batch, 2 threads"),
        }
        pairs["encode_batch, 2 threads vs 1"] = ("seqpack encode_batch, 2 threads, cold", "seqpack encode_batch, 1 thread, cold")
        pairs["corpus encoder, 2 threads vs 1"] = ("seqpack corpus encoder, 2 threads, cold", "seqpack corpus encoder, 1 thread, cold")
        ratios = {k: got[b]["median_s"] / got[a]["median_s"] for k, (a, b) in pairs.items()}
        ceiling = machine_ceiling(arms(work / "docs.json", work / "tokenizer.json")[SCALING_ARM], args.rounds)
        ratios["machine ceiling, 2 processes vs 1"] = ceiling["speedup"]
        for k, v in ratios.items():
            print(f"  speed-up, {k}: {v:.2f}x")
        results[name] = {"documents": len(docs), "mb": mb, "rounds": args.rounds, "repeats": repeats, "arms": got,
                         "speedups": ratios, "machine_ceiling": ceiling}
    if args.batch_size:
        docs = sets["mixed"]
        (work / "docs.json").write_text(json.dumps(docs), encoding="utf-8")
        mb = sum(len(d.encode("utf-8")) for d in docs) / 1e6
        print(f"## mixed in batches of {args.batch_size} documents, a call a batch; MB/s over the median pass; ids identical")
        got = compare_arms(small_batch_arms(work / "docs.json", work / "tokenizer.json", args.batch_size),
                           rounds=args.rounds, repeats=args.repeats, threads=2)
        assert len({r["info"] for r in got.values()}) == 1, "the encoders disagree on the batches"
        for arm, r in got.items():
            r["mb_per_s"] = mb / r["median_s"]
            print(f"  {arm:<50} {r['mb_per_s']:8.2f}  [{r['min_s']:.3f}-{r['max_s']:.3f} s]")
        one, two = got["seqpack encode_batch, 1 thread, cold"], got["seqpack encode_batch, 2 threads, cold"]
        ratios = {"2 threads vs tiktoken": got["tiktoken encode_ordinary_batch, 2 threads"]["median_s"] / two["median_s"],
                  "2 threads vs HF": got["HF encode_batch, 2 threads"]["median_s"] / two["median_s"],
                  "2 threads vs 1": one["median_s"] / two["median_s"]}
        for k, v in ratios.items():
            print(f"  speed-up, {k}: {v:.2f}x")
        results[f"mixed, batches of {args.batch_size}"] = {"documents": len(docs), "mb": mb, "batch_size": args.batch_size,
                                                           "arms": got, "speedups": ratios}
    if args.long_line_mb:
        print(f"## one {args.long_line_mb} MB line (no newline), one call, fresh processes")
        results[f"{args.long_line_mb} MB line"] = long_line(work, args.long_line_mb)
    write_result(args.out, results, packages=("tiktoken", "tokenizers"))


if __name__ == "__main__":
    main()
