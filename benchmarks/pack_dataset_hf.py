"""``seqpack.hf.pack_dataset`` against ``trl.pack_dataset`` as a user calls them: a ``datasets.Dataset``
of token lists in, packed rows out, on lognormal lengths (10-2,000 tokens, median ~300) at 2048.

Run: .venv/bin/python benchmarks/pack_dataset_hf.py [--sizes 20000 200000] [--out results/pack_dataset_hf.json]
Every arm in processes of its own (``_common.compare_arms``: the same rows from the same seed, a
warm-up call, then timed calls, the arms alternating). Reported per size: rows made and the median
time of seqpack ``best`` (the default), seqpack ``bfd`` and TRL's ``bfd`` (its 1,000-row chunks).
The goal: ``best`` at most TRL's time, with at most TRL's rows.
"""

from __future__ import annotations

import argparse

from _common import RESULTS, compare_arms, write_result

SEQ_LENGTH = 2048
SETUP = """
import numpy as np, datasets
datasets.disable_progress_bars()
rng = np.random.default_rng(0)
lengths = np.clip(np.exp(rng.normal(np.log(300), 1.0, {n})).astype(int), 10, 2000)
ids = rng.integers(0, 32000, int(lengths.sum()), dtype=np.int32)
ds = datasets.Dataset.from_dict({{"input_ids": [a.tolist() for a in np.split(ids, np.cumsum(lengths)[:-1])]}})
"""


def arms(n: int) -> dict[str, tuple[str, str, str]]:
    setup = SETUP.format(n=n)
    ours = setup + "from seqpack.hf import pack_dataset\n"
    theirs = setup + "from trl.data_utils import pack_dataset\n"
    rows = "len(out)"
    return {
        "seqpack best": (ours, f"return pack_dataset(ds, {SEQ_LENGTH})", rows),
        "seqpack bfd": (ours, f"return pack_dataset(ds, {SEQ_LENGTH}, strategy='bfd')", rows),
        "trl bfd": (theirs, f"return pack_dataset(ds, {SEQ_LENGTH}, strategy='bfd')", rows),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[20_000, 200_000])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=str(RESULTS / "pack_dataset_hf.json"))
    args = ap.parse_args()
    result: dict = {
        "seq_length": SEQ_LENGTH,
        "lengths": "lognormal, median 300, sigma 1, clipped to 10-2000",
        "by_rows": {},
    }
    for n in args.sizes:
        got = compare_arms(arms(n), rounds=args.rounds, repeats=2)
        trl = got["trl bfd"]
        ratios = {
            k: {"time_over_trl": v["median_s"] / trl["median_s"], "rows_minus_trl": v["info"] - trl["info"]}
            for k, v in got.items()
        }
        result["by_rows"][str(n)] = {"arms": got, "vs_trl": ratios}
        for k, v in got.items():
            print(
                f"{n:>8,} rows  {k:<13} {v['info']:>7,} packed rows  median {v['median_s']:.3f} s "
                f"(min {v['min_s']:.3f}, max {v['max_s']:.3f})  {ratios[k]['time_over_trl']:.2f}x TRL's time"
            )
    write_result(args.out, result, ("trl", "datasets"))


if __name__ == "__main__":
    main()
