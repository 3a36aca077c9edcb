"""Every CPU benchmark on two checkouts, side by side: is a change that meant to keep behaviour within noise?

    python benchmarks/before_after.py --before DIR [--after DIR] [--only NAME[,NAME]] [--pairs N]
        [--work /tmp/bench] [--reuse]

Each benchmark (``SPECS``: small settings, each run about a minute on one core) runs on the two
checkouts alternately, before then after, ``--pairs`` times (its own default where it is slow), each
with its own code (``PYTHONPATH=CHECKOUT/src``, the checkout's own ``benchmarks/X.py``),
``OMP_NUM_THREADS=1``, its results written under ``--work`` (never over ``benchmarks/results``). Options
renamed between the two are given each side's spelling (``RENAMED``). The load average is recorded
with every run: the machine is shared.

From each run's JSON every number is read (``flatten``; the per-run lists the benchmark keeps are
left out, its medians kept) plus the run's wall time. A figure is

  measured  a time, a rate, a speed-up or a memory peak (by its name), or any figure that differs
            between two runs of the same side: compared as the after/before ratio of the medians
            against the spread of the runs (the larger side's max/min): within noise when
            1/spread <= ratio <= spread (with one pair there is no spread: within 10% is reported)
  exact     everything else (packs, rows, efficiencies, losses, hashes), and any figure equal in every
            run of both sides: must be equal, or equal to a relative 1e-6 (what the benchmarks print)

Writes ``benchmarks/results/refactor_before_after.md`` (the headline figures of each benchmark, one row
each, and a row counting its exact figures) and the raw numbers beside it (``.json``). ``--reuse``
reads runs already under ``--work`` instead of running them again (to change the report only).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT_MD = ROOT / "benchmarks" / "results" / "refactor_before_after.md"
SIDES = ("before", "after")
#: options spelled differently before the change: {after's spelling: before's}
RENAMED = {"--shards-at-once": "--stages"}


@dataclass
class Spec:
    """One benchmark: the commands of a run ({py}, {bench}, {out}, {work} filled), where its JSON is,
    the pairs it gets by default, and which measured figures are its headline (regexes on the path)."""

    name: str
    steps: list[list[str]]
    result: str = "out"  # out: the file {out}; dir: every *.json under {work}/out; stdout: each step's stdout
    pairs: int = 3
    headline: list[str] = field(default_factory=list)
    note: str = ""

    @property
    def settings(self) -> str:
        return " ; ".join(" ".join(a for a in s[1:] if not a.startswith("{")) for s in self.steps)


def py(script: str, *args: str) -> list[str]:
    return ["{py}", f"{{bench}}/{script}", *args]


OUT = ("--out", "{out}")
SPECS = [
    Spec("balance", [py("balance.py", *OUT)], headline=[r"pack_seconds", r"W=512,B=4.balance_seconds"]),
    Spec(
        "balance_torchrun",
        [py("balance_torchrun.py", "--steps", "6", "--sequences", "600", *OUT)],
        headline=[r"step_seconds", r"total_seconds"],
        note="2 gloo ranks of one thread (the benchmark's own)",
    ),
    Spec(
        "bpe_train",
        [py("bpe_train.py", "--runs", "1", "--big-mb", "0", *OUT)],
        headline=[r"_wall$", r"pretok", r"merge"],
    ),
    Spec(
        "chat_sft",
        [py("chat_sft.py", "--quick", *OUT)],
        headline=[r"training.*tokens_per_s", r"training.*speedup"],
        note="training on 2 threads (the benchmark's own)",
    ),
    Spec(
        "checkpointing",
        [py("checkpointing.py", "--steps", "2", "--rounds", "1", *OUT)],
        headline=[r"step_s$", r"activations_mb", r"ratio"],
        note="2 threads (the benchmark's own)",
    ),
    Spec(
        "cli_bench",
        [py("cli_runs.py", "--only", "bench_bert,bench_gpt", "--out-dir", "{work}/out")],
        result="dir",
        headline=[r"wall_s", r"tokens_per_s"],
        note="seqpack bench --threads 2 at its default size, 3 commands a side (the first took over 2 minutes)",
    ),
    Spec(
        "context_parallel",
        [py("context_parallel.py", "--quick", *OUT)],
        headline=[r"tokens_per_s", r"speedup", r"step"],
        note="gloo, 2 ranks (the benchmark's own)",
    ),
    Spec(
        "dpo_head",
        [py("dpo_head.py", "--steps", "2", "--rounds", "1", *OUT)],
        headline=[r"step_s$", r"peak", r"ratio"],
        note="2 threads (the benchmark's own)",
    ),
    Spec(
        "encode",
        [
            py(
                "encode.py",
                *("--sets", "cs336", "--rounds", "1", "--repeats", "1", "--long-line-mb", "0"),
                *("--scaling-rounds", "2", *OUT),
            )
        ],
        headline=[r"mb_per_s", r"speedups"],
        note="1- and 2-thread arms (thread scaling is what it measures)",
    ),
    Spec(
        "encode_budget",
        [py("encode_budget.py", "--rounds", "1", "--repeats", "1", *OUT)],
        headline=[r"parts\..*_s$", r"over_budget"],
    ),
    Spec("encoders", [py("encoders.py", "--quick", "--threads", "1", *OUT)], headline=[r"seconds", r"per_s", r"ratio"]),
    Spec("first_command", [py("first_command.py", "--runs", "1", *OUT)], headline=[r"median_s"]),
    Spec(
        "helpers",
        [py("helpers.py", "--rounds", "1", *OUT)],
        headline=[r"mixed documents.*us$"],
        note="1 and 2 threads (what it measures)",
    ),
    Spec(
        "hybrid",
        [py("hybrid.py", "--quick", *OUT)],
        headline=[r"seconds", r"per_s", r"ratio"],
        note="2 threads (the benchmark's own)",
    ),
    Spec(
        "layer_attention",
        [py("layer_attention.py", "--quick", *OUT)],
        headline=[r"seconds", r"per_s"],
        note="2 threads (the benchmark's own)",
    ),
    Spec(
        "long_inputs",
        [py("long_inputs.py", "--rounds", "1", *OUT)],
        pairs=1,
        headline=[r"read_text\.", r"tokenize", r"train-tokenizer"],
        note="fixed 50-200 MB inputs, no smaller setting",
    ),
    Spec("pack_dataset", [py("pack_dataset.py", "--quick", *OUT)], headline=[r"median_s$", r"mb_per_s", r"_s$"]),
    Spec(
        "pack_dataset_hf",
        [py("pack_dataset_hf.py", "--sizes", "20000", "--rounds", "1", *OUT)],
        headline=[r"median_s", r"vs_trl"],
    ),
    Spec("plan", [py("plan.py", "--quick", *OUT)], headline=[r"pack_lengths.*median_s", r"depth max\.median_s"]),
    Spec(
        "preference",
        [py("preference.py", "--quick", "--max-lens", "1024", "--rounds", "1", *OUT)],
        headline=[r"throughput", r"ratios"],
        note="2 threads (the benchmark's own)",
    ),
    Spec(
        "rl_rollouts",
        [py("rl_rollouts.py", "--quick", "--balance-prompts", "128", *OUT)],
        headline=[r"median_seconds", r"speedup"],
        note="2 threads (the benchmark's own)",
    ),
    Spec(
        "row_groups",
        [
            py(
                "row_groups.py",
                *("--size", "200", "--groups", "512,128", "--rounds", "1", "--random", "5"),
                *OUT,
            )
        ],
        headline=[r"pack_s$", r"mtok_s", r"random_ms", r"peak"],
    ),
    Spec(
        "scale",
        [
            py(
                "scale.py",
                *("--sizes", "200", "--engines", "local", "--limit-gb", "0", "--repeats", "1"),
                *OUT,
            )
        ],
        headline=[r"tokenize_s", r"pack_s", r"mb_per_s", r"peak_rss_mb$"],
    ),
    Spec("stream", [py("stream.py", "--quick", *OUT)], headline=[r"throughput", r"tokens_per_s"]),
    Spec(
        "stream_train",
        [py("stream_train.py", "--quick", "--rounds", "1", *OUT)],
        headline=[r"tokens_per_s", r"pack_seconds", r"stream_over_packed"],
        note="2 threads (the benchmark's own)",
    ),
    Spec(
        "throughput",
        [py("throughput.py", "--repeats", "2", "--steps", "2", "--batch", "4", "--head", "targets", *OUT)],
        headline=[r"speedup", r"tokens_per_s", r"sdpa$", r"per_document$"],
        note="2 threads (the benchmark's own)",
    ),
    Spec(
        "tokenize_store",
        [py("tokenize_store.py", "--rounds", "1", *OUT)],
        headline=[r"mb_per_s", r"median_s"],
        note="1 and 2 threads (what it measures)",
    ),
    Spec(
        "trl_sft",
        [
            py("trl_sft.py", "prepare", "--conversations", "1000", "--out", "{work}/data"),
            py("trl_sft.py", "pack", "--data", "{work}/data", "--repeats", "3"),
        ],
        result="stdout",
        headline=[r"seconds", r"_s$"],
        note="the CPU steps only (prepare, pack); train needs a GPU",
    ),
    Spec(
        "vision",
        [py("vision.py", "--quick", "--rounds", "1", *OUT)],
        headline=[r"per_s", r"seconds", r"ms_per_image"],
        note="2 threads (the benchmark's own)",
    ),
]
BY_NAME = {s.name: s for s in SPECS}
#: CPU benchmarks left out of SPECS, and why
NOT_RUN = {
    "cli_runs.py compare, demo": "minutes a run even before training (60,000 sequences; the demo's whole job)",
    "gpu.py, gpu_sft.sh, trl_sft.py train, native/": "need a GPU, or are built and run by other benchmarks",
}

# a figure is measured by its name when its path says time, rate, speed-up or memory
MEASURED = re.compile(
    r"(second|_s$|_s\b|wall|time|per_s(\b|_)|mb_s|tok_s|_us$| us$|_ms$| ms$|_ms_|throughput|speed|ratio|peak|rss|_mb$|"
    r"activations|_over_|_s_|against|relative|overhead|causal\.|bidirectional\.|pretokenize|merges|in_process|windows|cores|calls|budget|vs_|vs |ceiling|inflation|share|saving|ms_per|load|cpu)",
    re.IGNORECASE,
)
# lists of per-run figures (their medians are kept) and what only says where or when
SKIP_LIST = re.compile(r"(runs|walls|times|_s$|_s\.|seconds|windows)", re.IGNORECASE)
RUN_ITEM = re.compile(
    r"\.runs\.\d+\.|per_round|\.rounds\.\d+"
)  # one run's figure of a benchmark that also gives their median
SKIP_KEY = re.compile(r"^(meta|command|date|path|paths|dir|out|cmd|min_s|max_s)$")


def flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    """path -> number, bool or short string, for every leaf worth comparing."""
    out: dict[str, Any] = {}
    if isinstance(obj, dict):
        for k, v in obj.items():
            if SKIP_KEY.match(str(k)):
                continue
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
    elif isinstance(obj, list):
        if SKIP_LIST.search(prefix) and all(isinstance(x, (int, float)) for x in obj):
            return out
        for i, v in enumerate(obj):
            out.update(flatten(v, f"{prefix}.{i}"))
    elif isinstance(obj, bool) or obj is None:
        out[prefix] = obj
    elif isinstance(obj, (int, float)):
        if not (isinstance(obj, float) and math.isnan(obj)):
            out[prefix] = obj
    elif isinstance(obj, str) and "/" not in obj and "seqpack-" not in obj and len(obj) < 200:
        out[prefix] = obj
    return out


def parse_stdout(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    for line in reversed(text.strip().splitlines()):
        try:
            return json.loads(line)
        except json.JSONDecodeError:
            continue
    return None


def run_once(spec: Spec, side: str, checkout: Path, index: int, work_root: Path, extra: str = "") -> dict[str, Any]:
    """One run of SPEC on CHECKOUT: its JSON flattened, wall time, load averages, or the error."""
    base = work_root / side / f"{spec.name}.{index}"
    work = Path(f"{base}.work")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    fill = {"py": sys.executable, "bench": str(checkout / "benchmarks"), "out": f"{base}.json", "work": str(work)}
    Path(fill["out"]).unlink(missing_ok=True)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in (str(checkout / "src"), extra) if p),
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }
    record: dict[str, Any] = {"side": side, "index": index, "load_before": os.getloadavg()}
    stdouts: list[Any] = []
    t0 = time.perf_counter()
    for step in spec.steps:
        cmd = [a.format(**fill) for a in step]
        if side == "before":
            cmd = [RENAMED.get(a, a) for a in cmd]
        record.setdefault("commands", []).append(" ".join(cmd))
        proc = subprocess.run(cmd, cwd=checkout, env=env, capture_output=True, text=True, timeout=900)
        with Path(f"{base}.log").open("a", encoding="utf-8") as log:
            log.write(proc.stdout + proc.stderr)
        if proc.returncode != 0:
            record["error"] = (proc.stderr or proc.stdout).strip().splitlines()[-12:]
            break
        stdouts.append(parse_stdout(proc.stdout))
    record["wall_s"] = time.perf_counter() - t0
    record["load_after"] = os.getloadavg()
    if "error" not in record:
        record["data"] = read_data(spec, base, stdouts)
        record["figures"] = flatten(record["data"])
    return record


def read_data(spec: Spec, base: Path, stdouts: list[Any] | None) -> Any:
    """What a run wrote: its --out file, the JSON files of its output folder, or its steps' stdout."""
    if spec.result == "out":
        return json.loads(Path(f"{base}.json").read_text(encoding="utf-8"))
    if spec.result == "dir":
        files = sorted(Path(f"{base}.work", "out").glob("*.json"))
        return {p.stem: json.loads(p.read_text(encoding="utf-8")) for p in files}
    return None if stdouts is None else {str(i): s for i, s in enumerate(stdouts)}


def refresh(spec: Spec, runs: list[dict[str, Any]], work_root: Path) -> None:
    """Read the figures of runs made earlier again (after a change to what is read)."""
    for r in runs:
        if "error" in r:
            continue
        data = r.get("data") or read_data(spec, work_root / r["side"] / f"{spec.name}.{r['index']}", None)
        if data is not None:
            r["figures"] = flatten(data)


def ran_with(runs: list[dict[str, Any]]) -> str:
    """The options the runs had (those of the "after" side), without the paths filled in."""
    for r in runs:
        if r["side"] == "after" and "commands" in r:
            steps = [[*c.split()[2:], ""] for c in r["commands"]]
            kept = [
                [a for a, b in itertools.pairwise(s) if a and not a.startswith("/") and not b.startswith("/")]
                for s in steps
            ]
            return " ; ".join(" ".join(s) for s in kept)
    return ""


def spread(xs: list[float]) -> float:
    lo, hi = min(xs), max(xs)
    if lo <= 0 or hi <= 0:
        return math.inf if lo != hi else 1.0
    return hi / lo


def compare(spec: Spec, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per figure: each side's values, medians, ratio, spread and verdict."""
    ok = {s: [r for r in runs if r["side"] == s and "figures" in r] for s in SIDES}
    errors = {s: [r["error"] for r in runs if r["side"] == s and "error" in r] for s in SIDES}
    out: dict[str, Any] = {"errors": errors, "figures": {}}
    if not ok["before"] or not ok["after"]:
        return out
    for s in SIDES:
        for r in ok[s]:
            r["figures"]["_run.wall_s"] = r["wall_s"]
    keys = list(ok["before"][0]["figures"])
    keys += [k for k in ok["after"][0]["figures"] if k not in ok["before"][0]["figures"]]
    for k in keys:
        vals = {s: [r["figures"].get(k) for r in ok[s]] for s in SIDES}
        has = {s: [k in r["figures"] for r in ok[s]] for s in SIDES}
        if not all(all(h) for h in has.values()):
            sides = [s for s in SIDES if any(has[s])]
            out["figures"][k] = {"kind": "exact", "values": vals, "verdict": f"only in {'/'.join(sides)} runs"}
            continue
        numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for s in SIDES for v in vals[s])
        varies = any(len({json.dumps(v) for v in vals[s]}) > 1 for s in SIDES)
        same = len({json.dumps(v) for s in SIDES for v in vals[s]}) == 1  # a time is never equal twice
        named = bool(MEASURED.search(k))
        measured = numeric and not same and (named or varies)
        if measured:
            med = {s: statistics.median(vals[s]) for s in SIDES}
            band = max(spread(vals["before"]), spread(vals["after"]))
            ratio = med["after"] / med["before"] if med["before"] else math.nan
            n = min(len(vals["before"]), len(vals["after"]))
            if n < 2:
                verdict = "~ (1 pair)" if abs(ratio - 1) <= 0.10 else "out? (1 pair)"
            elif med["before"] == med["after"]:
                verdict = "within noise"
            else:
                verdict = "within noise" if 1 / band <= ratio <= band else "OUT OF NOISE"
            out["figures"][k] = {
                "kind": "measured",
                "values": vals,
                "median": med,
                "ratio": ratio,
                "spread": band,
                "verdict": verdict,
                "headline": (any(re.search(p, k) for p in spec.headline) and not RUN_ITEM.search(k))
                or k == "_run.wall_s",
            }
        else:
            a, b = vals["before"][0], vals["after"][0]
            if a == b:
                verdict = "equal"
            elif numeric and b is not None and a is not None and math.isclose(a, b, rel_tol=1e-6):
                verdict = "equal to 1e-6"
            else:
                verdict = "DIFFERS"
            out["figures"][k] = {"kind": "exact", "values": vals, "verdict": verdict}
    return out


def fmt(x: float) -> str:
    if x == 0:
        return "0"
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    return f"{x:.4g}"


def report(specs: list[Spec], raw: dict[str, Any]) -> str:
    lines = [
        "# Before and after a refactor meant to keep behaviour: every CPU benchmark",
        "",
        "Each benchmark ran on both checkouts alternately (before, after, before, after, ...), small settings,",
        "`OMP_NUM_THREADS=1`; written by `benchmarks/before_after.py` (its docstring says how figures are",
        "sorted and judged). Ratio = after / before of the medians; spread = the larger side's max/min over",
        "its runs: within noise when the ratio lies in [1/spread, spread]. Exact figures (packs, rows,",
        "efficiencies, losses, hashes) must be equal. Load averages of every run are in the JSON beside this.",
        "",
        "| benchmark | settings | metric | before median | after median | ratio | spread | verdict |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for spec in specs:
        if spec.name not in raw:
            continue
        cmp = raw[spec.name]["compare"]
        settings = raw[spec.name]["settings"] + (f" ({spec.note})" if spec.note else "")
        settings += f"; {raw[spec.name]['pairs']} pair(s)"
        errs = {s: e for s, e in cmp["errors"].items() if e}
        if errs:
            for s, e in errs.items():
                tail = " / ".join(x.replace("|", "\\|") for x in e[0][-3:])
                lines.append(f"| {spec.name} | {settings} | run failed ({s}) | | | | | FAILED: {tail} |")
        figs = cmp["figures"]
        shown = [k for k, f in figs.items() if f["kind"] == "measured" and f["headline"]]
        for k in shown:
            f = figs[k]
            lines.append(
                f"| {spec.name} | {settings} | {k} | {fmt(f['median']['before'])} | {fmt(f['median']['after'])} |"
                f" {f['ratio']:.3f} | {f['spread']:.3f} | {f['verdict']} |"
            )
            settings = ""
        measured = [f for f in figs.values() if f["kind"] == "measured"]
        out_noise = [k for k, f in figs.items() if f["kind"] == "measured" and f["verdict"].startswith(("OUT", "out"))]
        if measured:
            tail = f"; out: {', '.join(out_noise[:6])}{' ...' if len(out_noise) > 6 else ''}" if out_noise else ""
            lines.append(
                f"| {spec.name} | {settings} | all {len(measured)} measured figures | | | | |"
                f" {len(measured) - len(out_noise)} within noise{tail} |"
            )
            settings = ""
        exact = {k: f for k, f in figs.items() if f["kind"] == "exact"}
        if exact:
            differ = [k for k, f in exact.items() if f["verdict"] not in ("equal", "equal to 1e-6")]
            verdict = "all equal" if not differ else f"{len(differ)} differ: {', '.join(differ[:6])}"
            lines.append(f"| {spec.name} | {settings} | {len(exact)} exact figures | | | | | {verdict} |")
    lines += ["", "Not run here:", ""]
    lines += [f"- {name}: {why}" for name, why in NOT_RUN.items()]
    lines += [f"- {s.name} ({s.settings}): not run; {s.note}" for s in specs if s.name not in raw]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", type=Path, required=True, help="the checkout before the change")
    ap.add_argument("--after", type=Path, default=ROOT, help="the checkout after it (default: this one)")
    ap.add_argument("--only", default="", help="these benchmarks (comma-separated names of SPECS)")
    ap.add_argument("--pairs", type=int, default=None, help="before/after pairs (default: each benchmark's own)")
    ap.add_argument("--work", type=Path, default=Path("/tmp/bench"))
    ap.add_argument("--extra-path", default="", help="appended to PYTHONPATH (packages the shared venv lacks)")
    ap.add_argument("--reuse", action="store_true", help="report the runs already under --work")
    ap.add_argument("--append", action="store_true", help="add pairs to the runs already under --work")
    ap.add_argument("--md", type=Path, default=OUT_MD)
    args = ap.parse_args()
    names = [n for n in args.only.split(",") if n] or [s.name for s in SPECS]
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        ap.error(f"unknown benchmarks {unknown}; choose from {', '.join(BY_NAME)}")
    raw_path = args.md.with_suffix(".json")
    raw: dict[str, Any] = json.loads(raw_path.read_text(encoding="utf-8")) if raw_path.is_file() else {}
    checkouts = {"before": args.before.resolve(), "after": args.after.resolve()}
    for name in names:
        spec = BY_NAME[name]
        runs_file = args.work / f"{name}.runs.json"
        if args.reuse:
            runs = json.loads(runs_file.read_text(encoding="utf-8"))
            refresh(spec, runs, args.work)
        else:
            runs = json.loads(runs_file.read_text(encoding="utf-8")) if args.append and runs_file.is_file() else []
            first = sum(r["side"] == "before" for r in runs)
            for i in range(first, first + (args.pairs or spec.pairs)):
                for side in SIDES:
                    r = run_once(spec, side, checkouts[side], i, args.work, args.extra_path)
                    state = "failed" if "error" in r else "ok"
                    print(f"{name} {side} {i}: {state} {r['wall_s']:.1f} s, load {r['load_before'][0]:.2f}", flush=True)
                    runs.append(r)
                    runs_file.write_text(json.dumps(runs, indent=1), encoding="utf-8")
        pairs = min(sum(r["side"] == s for r in runs) for s in SIDES)
        cmp = compare(spec, runs)
        kept = [{k: v for k, v in r.items() if k not in ("data", "figures")} for r in runs]  # in cmp: values
        raw[name] = {"settings": ran_with(runs) or spec.settings, "note": spec.note, "pairs": pairs, "runs": kept}
        raw[name]["compare"] = cmp
        raw_path.write_text(json.dumps(raw, indent=1), encoding="utf-8")
        args.md.write_text(report(SPECS, raw), encoding="utf-8")


if __name__ == "__main__":
    main()
