"""Pack + materialise + write 1,000,000 sequences with Wikipedia lengths, vs TRL.

Run: .venv/bin/python benchmarks/pack_dataset.py [--quick] [--no-trl] [--out results/pack_dataset.json]
Lengths are sampled from ../shared/data/histograms/wikipedia_len512_histogram.npy (seed 0),
token ids are random (vocab 30,522, as BERT's). Medians of several runs after a warm-up.
Times, in this order:
  sequences   building the causal-LM sequences (input_ids + labels) from a flat token array
  pack        plan (``best``/``lpfhp``) + assignment + all columns in memory
  write       Parquet shards (zstd-1 default, snappy, none) + manifest, MB/s over the columns' bytes
The head-to-head with TRL's ``pack_dataset(strategy="bfd")`` (its default 1000-row chunks, and
the whole table) runs in the harness (``_common.compare_arms``): every arm in processes of its own,
the same sequences from the same seed, a warm-up call then timed calls, arms alternating.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
from _common import RESULTS, compare_arms, wikipedia_lengths, write_result

from seqpack.data.columns import materialize, pack_sequences
from seqpack.data.format import WriteOptions, write_packed
from seqpack.packing import pack_lengths
from seqpack.tasks.clm import clm_sequences

MAX_LEN, VOCAB = 512, 30522
#: what a reader of the rows must know of the task (`seqpack.data.format.DatasetFacts`): a causal LM's rows
CLM_FACTS = {"token_labels": True, "float_labels": False, "causal_lm": True}


def sample(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    lengths = wikipedia_lengths(n, rng)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    tokens = rng.integers(0, VOCAB, size=int(offsets[-1]), dtype=np.uint16)
    return tokens, offsets


def timed(fn, runs):  # type: ignore[no-untyped-def]
    out = fn()
    times = []
    for _ in range(runs):
        out = None  # free the previous result first: one copy in memory, as a user has
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return out, statistics.median(times), times


SETUP = """
import sys
sys.path.insert(0, {bench!r})
import numpy as np
from pack_dataset import sample, MAX_LEN, VOCAB
tokens, offsets = sample({n})
"""


EFF = "[out.num_packs, out.packing.plan.efficiency]"  # [rows, real tokens / (rows x max_len)]
TRL_EFF = "[len(out), int(offsets[-1]) / (len(out) * MAX_LEN)]"


def head_to_head(n: int) -> dict[str, tuple[str, str, str]]:
    """seqpack's packers and TRL's ``pack_dataset`` as harness arms: each in processes of its own
    (none imports the other's package), the same sequences from the same seed, timed alike."""
    setup = SETUP.format(bench=str(Path(__file__).parent), n=n)
    ours = (
        setup
        + """
from dataclasses import replace
from seqpack.tasks.clm import clm_sequences
from seqpack.data.columns import materialize, pack_sequences
from seqpack.packing import pack_lengths
seqs = clm_sequences(tokens, offsets, max_len=MAX_LEN, eos_id=None, vocab_size=VOCAB)
ids = replace(seqs, token_fields={"input_ids": seqs.token_fields["input_ids"]}, seq_fields={})
"""
    )
    theirs = (
        setup
        + """
import datasets
from trl.data_utils import pack_dataset
datasets.disable_progress_bars()
ds = datasets.Dataset.from_dict({"input_ids": [a.tolist() for a in np.split(tokens.astype(np.int32), offsets[1:-1])]})
"""
    )
    return {
        "seqpack lpfhp, all columns": (ours, "return pack_sequences(seqs, MAX_LEN, algorithm='lpfhp', seed=0)", EFF),
        "seqpack best, all columns": (ours, "return pack_sequences(seqs, MAX_LEN, algorithm='best', seed=0)", EFF),
        "seqpack lpfhp, ids only": (
            ours,
            "return materialize(ids, pack_lengths(seqs.lengths, MAX_LEN, algorithm='lpfhp', seed=0), max_len=MAX_LEN)",
            "[len(out['input_ids']), int(offsets[-1]) / (len(out['input_ids']) * MAX_LEN)]",
        ),
        "trl chunks": (theirs, "return pack_dataset(ds, MAX_LEN, strategy='bfd')", TRL_EFF),
        "trl whole table": (
            theirs,
            "return pack_dataset(ds, MAX_LEN, strategy='bfd', map_kwargs={'batch_size': len(ds)})",
            TRL_EFF,
        ),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--quick", action="store_true", help="100,000 sequences, 2 runs")
    ap.add_argument("--no-trl", action="store_true")
    ap.add_argument(
        "--out",
        default=str(RESULTS / "pack_dataset.json"),
        help="the results (with the command, machine and versions) as JSON",
    )
    args = ap.parse_args()
    n, runs = (100_000, 2) if args.quick else (args.n, 5)
    tokens, offsets = sample(n)
    print(f"## {n:,} sequences, {offsets[-1]:,} tokens, max_len {MAX_LEN} (median of {runs} runs)")
    seqs, t_seq, _ = timed(lambda: clm_sequences(tokens, offsets, max_len=MAX_LEN, eos_id=None, vocab_size=VOCAB), runs)
    print(f"sequences (clm input_ids + labels)   {t_seq:7.3f} s")
    result: dict = {"sequences": n, "tokens": int(offsets[-1]), "runs": runs, "sequences_s": t_seq}
    t_pack, t_ids = {}, 0.0
    for algo in ("lpfhp", "best"):
        pc = None
        pc, t_pack[algo], all_t = timed(lambda a=algo: pack_sequences(seqs, MAX_LEN, algorithm=a, seed=0), runs)
        print(
            f"pack {algo:<5} plan+assign+columns      {t_pack[algo]:7.3f} s  ({pc.num_packs:,} packs, "
            f"efficiency {pc.packing.plan.efficiency:.4%}, {pc.nbytes / 1e9:.2f} GB of columns; runs "
            + ", ".join(f"{t:.2f}" for t in all_t)
            + ")"
        )
        result[f"pack_{algo}"] = {"median_s": t_pack[algo], "runs_s": all_t, "packs": pc.num_packs}

    def ids_only() -> dict[str, np.ndarray]:  # what TRL's output holds: packed input_ids (+ lengths)
        p = pack_lengths(seqs.lengths, MAX_LEN, algorithm="lpfhp", seed=0)
        return materialize(
            replace(seqs, token_fields={"input_ids": seqs.token_fields["input_ids"]}, seq_fields={}), p, max_len=MAX_LEN
        )

    pc = None
    _, t_ids, _ = timed(ids_only, runs)
    print(f"pack lpfhp, input_ids + segments only  {t_ids:7.3f} s  (TRL's output: packed ids and lengths)")
    result["pack_lpfhp_ids_only_s"] = t_ids
    pc, _, _ = timed(lambda: pack_sequences(seqs, MAX_LEN, algorithm="best", seed=0), 1)
    tmp = tempfile.mkdtemp(prefix="seqpack-bench-")

    for comp in ("zstd", "snappy", "none"):

        def write(c: str = comp) -> None:
            write_packed(pc, f"{tmp}/out", options=WriteOptions(overwrite=True, compression=c), extra=CLM_FACTS)

        _, t_write, _ = timed(write, max(2, runs // 2))
        size = sum(f.stat().st_size for f in Path(tmp, "out").rglob("*")) / 1e6
        print(
            f"write Parquet {comp:<6} + manifest        {t_write:7.3f} s  = {pc.nbytes / 1e6 / t_write:,.0f} MB/s of columns ({size:,.0f} MB on disk)"
        )
        result[f"write_{comp}"] = {
            "median_s": t_write,
            "mb_per_s": pc.nbytes / 1e6 / t_write,
            "mb_on_disk": size,
            "columns_gb": pc.nbytes / 1e9,
        }
    shutil.rmtree(tmp, ignore_errors=True)
    if args.no_trl:
        write_result(args.out, result)
        return
    result["arms"] = arms = compare_arms(head_to_head(n), rounds=3, repeats=max(1, runs // 2))
    for name, a in arms.items():
        print(
            f"{name:<28} median {a['median_s']:7.3f} s (min {a['min_s']:.3f}, max {a['max_s']:.3f}; "
            f"{len(a['runs_s'])} calls in 3 processes) {a['info']}"
        )
    result["speedups"] = {
        f"{trl} / {k}": arms[trl]["median_s"] / arms[k]["median_s"]
        for trl in ("trl chunks", "trl whole table")
        for k in arms
        if k.startswith("seqpack")
    }
    for trl in ("trl chunks", "trl whole table"):
        print(
            f"{trl}: seqpack is "
            + " / ".join(
                f"{arms[trl]['median_s'] / arms[k]['median_s']:.1f}x ({k})" for k in arms if k.startswith("seqpack")
            )
            + " faster"
        )
    write_result(args.out, result, ("trl", "datasets"))


if __name__ == "__main__":
    main()
