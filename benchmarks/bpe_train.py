"""BPE training: seqpack vs HF tokenizers, whole-process wall time, side by side.

Shakespeare (42 works joined in sorted name order with <|endoftext|>), vocab 10,000,
special token <|endoftext|>. Each run is a fresh interpreter (start-up, imports
and JIT included), alternating seqpack and HF; we report medians over --runs.
The numba cache is warmed by one untimed run; --cold also times a run with an
empty numba cache (compilation included).

    python benchmarks/bpe_train.py [--runs 5] [--cold] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile

from _common import EOT, PEAK_MB, median, run_child, shakespeare_file

SEQPACK = PEAK_MB + """
import json, time
from seqpack.tokenizer import BPEConfig, train_bpe_corpus
r = train_bpe_corpus([{path!r}], config=BPEConfig(vocab_size={vocab}, special_tokens=({eot!r},)))
print(json.dumps({{"vocab": len(r.vocab), "pretokenize": r.pretokenize_seconds,
                  "merges": r.merge_seconds, "peak_mb": peak_mb()}}))
"""

HF = PEAK_MB + """
import json
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.Sequence([
    pre_tokenizers.Split({eot!r}, "removed"),
    pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
trainer = trainers.BpeTrainer(vocab_size={vocab}, special_tokens=[{eot!r}], show_progress=False)
tok.train([{path!r}], trainer)
print(json.dumps({{"vocab": tok.get_vocab_size(), "peak_mb": peak_mb()}}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--vocab-size", type=int, default=10_000)
    ap.add_argument("--cold", action="store_true", help="also time one run with an empty numba cache")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    path = str(shakespeare_file())
    fill = {"path": path, "vocab": args.vocab_size, "eot": EOT}
    seq_code, hf_code = SEQPACK.format(**fill), HF.format(**fill)
    out: dict = {"corpus_bytes": __import__("os").path.getsize(path), "vocab_size": args.vocab_size}
    if args.cold:
        cold = run_child(seq_code, env={"NUMBA_CACHE_DIR": tempfile.mkdtemp()})
        out["seqpack_cold_wall"] = round(cold["wall"], 3)
    run_child(seq_code)  # warm the numba cache (untimed)
    seq, hf = [], []
    for _ in range(args.runs):
        seq.append(run_child(seq_code))
        hf.append(run_child(hf_code))
    out.update(
        seqpack_wall=round(median([r["wall"] for r in seq]), 3),
        hf_wall=round(median([r["wall"] for r in hf]), 3),
        seqpack_pretokenize=round(median([r["pretokenize"] for r in seq]), 3),
        seqpack_merges=round(median([r["merges"] for r in seq]), 3),
        seqpack_peak_mb=max(r["peak_mb"] for r in seq),
        hf_peak_mb=max(r["peak_mb"] for r in hf),
        seqpack_walls=[round(r["wall"], 3) for r in seq],
        hf_walls=[round(r["wall"], 3) for r in hf],
        runs=args.runs,
    )
    out["ratio"] = round(out["seqpack_wall"] / out["hf_wall"], 3)
    assert seq[0]["vocab"] == hf[0]["vocab"] == args.vocab_size
    if args.json:
        print(json.dumps(out))
        return
    print(f"corpus: Shakespeare, {out['corpus_bytes'] / 1e6:.2f} MB; vocab {args.vocab_size}; median of {args.runs} runs")
    print(f"  seqpack  {out['seqpack_wall']:.3f} s  (pre-tokenize {out['seqpack_pretokenize']:.3f} s, merges {out['seqpack_merges']:.3f} s, peak {out['seqpack_peak_mb']} MB)")
    print(f"  HF       {out['hf_wall']:.3f} s  (peak {out['hf_peak_mb']} MB)")
    print(f"  seqpack / HF = {out['ratio']:.3f}")
    if "seqpack_cold_wall" in out:
        print(f"  seqpack, empty numba cache (compiles): {out['seqpack_cold_wall']:.3f} s")


if __name__ == "__main__":
    sys.exit(main())
