"""BPE training, whole process, side by side: seqpack vs rustbpe vs HF tokenizers.

Arms: the library (``train_bpe_corpus``), the CLI (``seqpack train-tokenizer``, which also writes
the tokenizer's four files), rustbpe and HF tokenizers.
Corpora: Shakespeare (42 works joined with <|endoftext|>, 5 MB; vocab 10K) and a generated
200 MB corpus with a varied vocabulary (``_common.generated_corpus``; vocab 32K). Each run is a
fresh interpreter (start-up and imports included); the three trainers alternate and we
report medians over --runs, seqpack's pre-tokenize and merge times separately, and peak
memory (VmHWM, the process's own high-water mark: ru_maxrss carries a large parent's RSS across exec). Every trainer gets the GPT-2 pattern and the same number of merges
(rustbpe has no special tokens: it gets the documents split at <|endoftext|>, or the
file's lines). Also: the CS336 speed case (corpus.en, vocab 500, a new process).

    python benchmarks/bpe_train.py [--runs 5] [--big-runs 3] [--big-mb 200] [--vocab-size 10000]
        [--big-vocab-size 32000] [--json] [--out results/bpe_train.json]

No arm imports another arm's package: the rustbpe and HF processes get the GPT-2 pattern as a
string (importing seqpack for it would add 0.12-0.19 s and 24 MB to the rustbpe process).
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from _common import (
    EOT,
    PEAK_MB,
    RESULTS,
    SHARED,
    generated_corpus,
    median,
    run_child,
    shakespeare_file,
    write_result,
)

SEQPACK = (
    PEAK_MB
    + """
import json
from seqpack.tokenizer import BPEConfig, train_bpe_corpus
r = train_bpe_corpus([{path!r}], config=BPEConfig(vocab_size={vocab}, special_tokens={specials!r}))
print(json.dumps({{"vocab": len(r.vocab), "pretokenize": r.pretokenize_seconds,
                  "merges": r.merge_seconds, "peak_mb": peak_mb()}}))
"""
)

RUSTBPE = (
    PEAK_MB
    + """
import json, rustbpe
def docs():
    if {specials!r}:
        with open({path!r}, encoding="utf-8") as f:
            yield from f.read().split({eot!r})
    else:
        with open({path!r}, encoding="utf-8") as f:
            yield from f
tok = rustbpe.Tokenizer()
tok.train_from_iterator(docs(), {vocab} - len({specials!r}), pattern={pattern!r})
print(json.dumps({{"vocab": tok.vocab_size + len({specials!r}), "peak_mb": peak_mb()}}))
"""
)

HF = (
    PEAK_MB
    + """
import json
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
tok = Tokenizer(models.BPE())
pre = [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)]
if {specials!r}:
    pre.insert(0, pre_tokenizers.Split({eot!r}, "removed"))
tok.pre_tokenizer = pre_tokenizers.Sequence(pre)
trainer = trainers.BpeTrainer(vocab_size={vocab}, special_tokens=list({specials!r}), show_progress=False)
tok.train([{path!r}], trainer)
print(json.dumps({{"vocab": tok.get_vocab_size(), "peak_mb": peak_mb()}}))
"""
)

# the command a user types: it also writes the tokenizer (vocab.json, merges.txt, tokenizer.json,
# meta.json), which no other arm does
CLI = (
    PEAK_MB
    + """
import json, subprocess, sys, tempfile, time
from pathlib import Path
exe = str(Path(sys.executable).with_name("seqpack"))
out = tempfile.mkdtemp()
specials = [a for t in {specials!r} for a in ("--special-token", t)]
t0 = time.perf_counter()
subprocess.run([exe, "train-tokenizer", {path!r}, "--vocab-size", str({vocab}), *specials, "--out", out, "--overwrite"],
               check=True, capture_output=True)
seconds = time.perf_counter() - t0
vocab = len(json.load(open(out + "/vocab.json")))
print(json.dumps({{"vocab": vocab, "seconds": seconds, "peak_mb": peak_mb()}}))
"""
)

CS336 = """
import json, time
t0 = time.perf_counter()
from seqpack.tokenizer import train_bpe
vocab, merges = train_bpe({path!r}, 500, [{eot!r}])
print(json.dumps({{"in_process": time.perf_counter() - t0, "vocab": len(vocab)}}))
"""


def compare(name: str, path: str, vocab: int, specials: tuple[str, ...], runs: int) -> dict:
    from seqpack.tokenizer.pretokenize import (
        GPT2_PATTERN,  # read here: the rustbpe process imports no seqpack
    )

    fill = {"path": path, "vocab": vocab, "specials": specials, "eot": EOT, "pattern": GPT2_PATTERN}
    code = {
        "seqpack": SEQPACK.format(**fill),
        "rustbpe": RUSTBPE.format(**fill),
        "hf": HF.format(**fill),
        "seqpack_cli": CLI.format(**fill),
    }
    res: dict[str, list[dict]] = {k: [] for k in code}
    for i in range(runs):
        order = list(code) if i % 2 == 0 else list(reversed(code))
        for k in order:
            res[k].append(run_child(code[k]))
    out: dict[str, Any] = {"corpus": name, "bytes": os.path.getsize(path), "vocab_size": vocab, "runs": runs}
    for k, rs in res.items():
        assert rs[0]["vocab"] == vocab, (k, rs[0]["vocab"])
        out[f"{k}_wall"] = round(median([r["wall"] for r in rs]), 3)
        out[f"{k}_walls"] = [round(r["wall"], 3) for r in rs]
        out[f"{k}_peak_mb"] = max(r["peak_mb"] for r in rs)
    out["seqpack_pretokenize"] = round(median([r["pretokenize"] for r in res["seqpack"]]), 3)
    out["seqpack_merges"] = round(median([r["merges"] for r in res["seqpack"]]), 3)
    # the CLI arm's process starts the command's own: its time is the command's, from its parent
    out["seqpack_cli_wall"] = round(median([r["seconds"] for r in res["seqpack_cli"]]), 3)
    out["seqpack_cli_walls"] = [round(r["seconds"], 3) for r in res["seqpack_cli"]]
    out["seqpack_over_rustbpe"] = round(out["seqpack_wall"] / out["rustbpe_wall"], 3)
    out["seqpack_cli_over_rustbpe"] = round(out["seqpack_cli_wall"] / out["rustbpe_wall"], 3)
    out["seqpack_over_hf"] = round(out["seqpack_wall"] / out["hf_wall"], 3)
    out["peak_over_hf"] = round(out["seqpack_peak_mb"] / out["hf_peak_mb"], 2)
    return out


def show(r: dict) -> None:
    print(f"{r['corpus']}: {r['bytes'] / 1e6:.1f} MB, vocab {r['vocab_size']}, median of {r['runs']} runs")
    print(
        f"  seqpack  {r['seqpack_wall']:.3f} s  (pre-tokenize {r['seqpack_pretokenize']:.3f} s, "
        f"merges {r['seqpack_merges']:.3f} s)  peak {r['seqpack_peak_mb']} MB"
    )
    print(
        f"  seqpack train-tokenizer (CLI, writes the tokenizer)  {r['seqpack_cli_wall']:.3f} s  "
        f"({r['seqpack_cli_over_rustbpe']:.3f}x rustbpe)"
    )
    print(f"  rustbpe  {r['rustbpe_wall']:.3f} s  peak {r['rustbpe_peak_mb']} MB")
    print(f"  HF       {r['hf_wall']:.3f} s  peak {r['hf_peak_mb']} MB")
    print(
        f"  seqpack / rustbpe = {r['seqpack_over_rustbpe']:.3f}; seqpack / HF = {r['seqpack_over_hf']:.3f}; "
        f"peak / HF's = {r['peak_over_hf']}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--big-runs", type=int, default=3)
    ap.add_argument("--big-mb", type=int, default=200, help="0 skips the generated corpus")
    ap.add_argument("--vocab-size", type=int, default=10_000, help="for Shakespeare")
    ap.add_argument("--big-vocab-size", type=int, default=32_000, help="for the generated corpus")
    ap.add_argument("--json", action="store_true")
    ap.add_argument(
        "--out",
        default=str(RESULTS / "bpe_train.json"),
        help="the results (with the command, machine and versions) as JSON",
    )
    args = ap.parse_args()
    results = [compare("shakespeare", str(shakespeare_file()), args.vocab_size, (EOT,), args.runs)]
    if args.big_mb:
        big = str(generated_corpus(args.big_mb))
        results.append(compare(f"generated-{args.big_mb}mb", big, args.big_vocab_size, (), args.big_runs))
    corpus_en = str(SHARED / "cs336" / "corpus.en")
    cs = [run_child(CS336.format(path=corpus_en, eot=EOT)) for _ in range(args.runs)]
    speed = {
        "corpus": "cs336 corpus.en, vocab 500, new process",
        "wall": round(median([r["wall"] for r in cs]), 3),
        "in_process": round(median([r["in_process"] for r in cs]), 3),
        "walls": [round(r["wall"], 3) for r in cs],
    }
    results.append(speed)
    write_result(args.out, results, ("rustbpe", "tokenizers"))
    if args.json:
        print(json.dumps(results))
        return
    for r in results[:-1]:
        show(r)
    print(
        f"CS336 speed case (limit 1.5 s): {speed['wall']:.3f} s whole process "
        f"({speed['in_process']:.3f} s from import to result)"
    )


if __name__ == "__main__":
    main()
