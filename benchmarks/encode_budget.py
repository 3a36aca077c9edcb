"""Where a per-document ``Tokenizer.encode`` call spends its time, against a tenth of tiktoken's.

The goal: ``Tokenizer.encode`` per document at >= 10x tiktoken's ``encode_ordinary``, first pass
(cold word cache) and warm. This splits seqpack's time on the sets of ``encode.py`` (GPT-2's merges):

- ``tiktoken``: ``[enc.encode_ordinary(d) for d in docs]`` (``_common.compare_arms``: processes of its
  own, alternating with the next two); the **budget** is a tenth of it;
- ``per document, cold`` / ``warm``: ``[tok.encode(d) for d in docs]``, the word cache cleared before
  the pass or kept (what ``encode.py`` measures);
- ``compiled, cold`` / ``warm``: the same encoder (``csrc/encode.h``) called on each document from C++
  (``native/encode_passes.cpp``, built here with the package's ``-O3``; its ids are checked against
  ``tok.encode``'s): what per-document encoding costs with no Python call, str or list in the way.

Derived, per pass: ``python`` = per-document warm minus compiled warm (the call, the str's UTF-8
view, the list made and freed), ``first_seen`` = compiled cold minus warm (the words the cache lacks:
BPE or a token table lookup, then an insertion), and each time over the budget (1.0 meets the goal).

    python benchmarks/encode_budget.py [--rounds 3] [--repeats 2] [--out results/encode_budget.json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import struct
import subprocess
from pathlib import Path

import numpy as np
from _common import EOT, RESULTS, ROOT, compare_arms, scratch_dir, write_result
from encode import CS, arms, corpora

from seqpack.tokenizer import Tokenizer

PER_DOC_COLD = "seqpack encode, per document, 1 thread, cold"
PER_DOC_WARM = "seqpack encode, per document, 1 thread, warm"
TIKTOKEN = "tiktoken encode_ordinary, per document, 1 thread"
DRIVER = Path(__file__).parent / "native" / "encode_passes.cpp"


def build_driver(work: Path) -> Path:
    """``encode_passes`` compiled against ``csrc/`` with the flags of ``setup.py``."""
    cxx = shutil.which("g++") or shutil.which("clang++")
    if cxx is None:
        raise SystemExit("encode_budget.py needs a C++ compiler (g++ or clang++) for its compiled arm")
    exe = work / "encode_passes"
    subprocess.run(
        [
            cxx,
            "-O3",
            "-ffp-contract=off",
            "-std=c++17",
            f"-I{ROOT / 'csrc'}",
            "-o",
            str(exe),
            str(DRIVER),
        ],
        check=True,
    )
    return exe


def write_tokenizer(tok: Tokenizer, path: Path) -> None:
    """The compiled encoder's inputs, as ``Tokenizer.native`` builds them, for ``encode_passes``."""
    parts = [
        tok._byte_ids,
        *tok._merge_ids,
    ]  # the columns Tokenizer.native passes (rank order)
    with open(path, "wb") as f:
        f.writelines(struct.pack("<I", len(a)) + np.asarray(a, dtype="<u4").tobytes() for a in parts)
        f.write(struct.pack("<I", len(tok.special_tokens)))
        for s in tok.special_tokens:
            b = s.encode("utf-8")
            f.write(struct.pack("<I", len(b)) + b + struct.pack("<I", tok.special_ids[s]))


def compiled(
    exe: Path,
    tok: Tokenizer,
    docs: list[str],
    work: Path,
    *,
    rounds: int,
    passes: int = 11,
) -> dict:
    """``rounds`` processes of ``passes`` cold and warm passes each; the median of their medians
    (``work / "tokenizer.bin"``: :func:`write_tokenizer`'s, for ``tok``)."""
    with open(work / "docs.bin", "wb") as f:
        for d in docs:
            b = d.encode("utf-8")
            f.write(struct.pack("<I", len(b)) + b)
    runs = []
    for _ in range(rounds):
        out = subprocess.run(
            [
                str(exe),
                str(work / "tokenizer.bin"),
                str(work / "docs.bin"),
                str(passes),
                str(work / "ids.bin"),
            ],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        runs.append(json.loads(out))
    got = np.fromfile(work / "ids.bin", dtype="<u4")
    want = np.concatenate([np.asarray([len(ids), *ids], dtype="<u4") for ids in map(tok.encode, docs)])
    assert np.array_equal(got, want), "the compiled driver's ids differ from Tokenizer.encode's"
    return {
        "cold_s": statistics.median(r["cold_s"] for r in runs),
        "warm_s": statistics.median(r["warm_s"] for r in runs),
        "passes": passes,
        "rounds": rounds,
        "runs": runs,
    }


def parts(got: dict[str, dict], native: dict) -> dict[str, float]:
    """The split of one set's per-document time: seconds a pass, and ratios to the budget."""
    t = {k: v["median_s"] for k, v in got.items()}
    budget = t[TIKTOKEN] / 10
    out = {
        "budget_s": budget,
        "per_document_cold_s": t[PER_DOC_COLD],
        "per_document_warm_s": t[PER_DOC_WARM],
        "compiled_cold_s": native["cold_s"],
        "compiled_warm_s": native["warm_s"],
        "first_seen_s": native["cold_s"] - native["warm_s"],
        "python_s": t[PER_DOC_WARM] - native["warm_s"],
        "vs_tiktoken_cold": t[TIKTOKEN] / t[PER_DOC_COLD],
        "vs_tiktoken_warm": t[TIKTOKEN] / t[PER_DOC_WARM],
    }
    for k in (
        "per_document_cold_s",
        "per_document_warm_s",
        "compiled_cold_s",
        "compiled_warm_s",
        "python_s",
    ):
        out[k.removesuffix("_s") + "_over_budget"] = out[k] / budget
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--out", default=str(RESULTS / "encode_budget.json"))
    args = ap.parse_args()
    work = scratch_dir("seqpack-encode-budget-")
    tok = Tokenizer.from_files(CS / "gpt2_vocab.json", CS / "gpt2_merges.txt", [EOT])
    tok.to_hf().save(str(work / "tokenizer.json"))
    exe = build_driver(work)
    write_tokenizer(tok, work / "tokenizer.bin")
    results = {}
    for name, docs in corpora().items():
        (work / "docs.json").write_text(json.dumps(docs), encoding="utf-8")
        mb = sum(len(d.encode("utf-8")) for d in docs) / 1e6
        repeats = args.repeats * (10 if mb < 1 else 1)
        base = arms(work / "docs.json", work / "tokenizer.json")
        got = compare_arms(
            {k: base[k] for k in (TIKTOKEN, PER_DOC_COLD, PER_DOC_WARM)},
            rounds=args.rounds,
            repeats=repeats,
            threads=1,
        )
        assert len({r["info"] for r in got.values()}) == 1, f"the encoders disagree on {name}"
        native = compiled(exe, tok, docs, work, rounds=args.rounds)
        p = parts(got, native)
        ms = ", ".join(f"{k.removesuffix('_s')} {v * 1e3:.2f}" for k, v in p.items() if k.endswith("_s"))
        print(f"## {name}: {len(docs):,} documents, {mb:.2f} MB; ms a pass: {ms}")
        print(
            f"  vs tiktoken: cold {p['vs_tiktoken_cold']:.2f}x, warm {p['vs_tiktoken_warm']:.2f}x; times the budget: "
            + ", ".join(f"{k.removesuffix('_over_budget')} {v:.2f}" for k, v in p.items() if k.endswith("_over_budget"))
        )
        results[name] = {
            "documents": len(docs),
            "mb": mb,
            "rounds": args.rounds,
            "repeats": repeats,
            "arms": got,
            "compiled": native,
            "parts": p,
        }
    write_result(args.out, results, packages=("tiktoken",))


if __name__ == "__main__":
    main()
