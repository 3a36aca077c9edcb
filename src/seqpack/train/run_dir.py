"""A training run's directory: where it writes, what it records before its first step, its
checkpoints, and the rename that makes it finished.

    run_dir = run_directory(cfg, resume=False, overwrite=False)   # .RUN.partial/ (checked, not made)
    log = open_run(plan, data, world, step=0, init_record=None, reference=None)   # config.json, metrics.jsonl
    save_run(plan, model, optimizer, state, data_state, tokenizer_files)       # checkpoint.pt (+ RUN/model/)
    finish_run(plan, summary, world)                                # summary.json, then RUN in one rename

Only the first rank writes; the others get a log that writes nothing (`NoLog`).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from seqpack._atomic import check_not_input, check_writable, foreign_directory, replace_directory, write_text_atomic
from seqpack._stages import partial_dir
from seqpack.errors import UserError
from seqpack.train.checkpoint import CHECKPOINT, CONFIG, METRICS, RUN, RUN_KIND, SUMMARY, MetricsLog, save_checkpoint
from seqpack.train.config import TrainConfig
from seqpack.train.data import Units
from seqpack.train.distributed import World
from seqpack.train.plan import RunPlan
from seqpack.train.reference import save_reference


def run_directory(cfg: TrainConfig, *, resume: bool, overwrite: bool) -> Path:
    """Where this run writes: ``.RUN.partial/`` beside ``RUN`` (renamed to ``RUN`` when the run
    finishes, so a failed run never mixes with a finished one), or, resuming, wherever the
    unfinished run's checkpoint is."""
    final = Path(cfg.out)
    partial = partial_dir(final)
    if resume:
        if (partial / CHECKPOINT).is_file():
            return partial
        if (final / SUMMARY).is_file():
            raise UserError(
                f"{final} is a finished run ({SUMMARY} written); nothing to resume. "
                "Pass --overwrite to train it again, or a new --out"
            )
        return final  # a run from before runs were written aside, or nothing (load_checkpoint says so)
    check_not_input(final, [cfg.data, cfg.hf_model, cfg.init_from])
    check_writable(final)
    if final.exists() and not final.is_dir():
        raise UserError(f"--out {final}: exists and is not a directory; pick another --out")
    # the finished run replaces --out, and a new run empties its partial directory: never what it did not make
    for d in (final, partial):
        entries = sorted(os.listdir(d)) if d.is_dir() else []
        if entries and not RUN.made(d):
            raise UserError(foreign_directory(d, entries, RUN))
    if not overwrite:
        if RUN.made(final):
            raise UserError(f"{final} already holds a run; pass --resume to continue it, --overwrite to start again")
        if (partial / CHECKPOINT).exists():
            raise UserError(
                f"{final}: an unfinished run is in {partial}; pass --resume to continue it, --overwrite to start again"
            )
    return partial  # made afresh once every check has passed (open_run)


class NoLog:
    """The metrics log of a rank that writes none (every rank but the first)."""

    def write(self, record: dict[str, Any]) -> None:
        """Nothing: the first rank writes the run's metrics."""


RunLog = MetricsLog | NoLog


def config_record(plan: RunPlan, data: Units, world: World, init_record: dict[str, Any] | None) -> dict[str, Any]:
    """``RUN/config.json``: what ran (the options, the model, the data and the plan)."""
    from seqpack._version import __version__

    return {
        "kind": RUN_KIND,
        "seqpack_version": __version__,
        "train": plan.cfg.to_dict(),
        "model": plan.model,
        "attention": plan.attention,
        "data": {**data.describe(), **plan.identity},
        "rows_per_batch": plan.rows,
        "total_steps": plan.total,
        "betas": list(plan.betas),
        "world_size": world.size,
        "balance": plan.balance,
        "plan": plan.record(),  # the plan's sizes (its options, model and data are the entries above)
        "init_from": init_record,
    }


def open_run(
    plan: RunPlan,
    data: Units,
    world: World,
    *,
    step: int,
    init_record: dict[str, Any] | None,
    reference: np.ndarray | None,
) -> RunLog:
    """The run directory made ready (the first rank's): emptied for a new run, its metrics log kept
    up to ``step`` on resume, its config and the reference log-probabilities written; the log."""
    if not world.main:
        return NoLog()
    run_dir = plan.run_dir
    if not plan.resume:  # a new run: nothing of an earlier one in its directory
        shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True, exist_ok=True)
    log = MetricsLog(run_dir / METRICS, keep_until=step if plan.resume else None)
    record = config_record(plan, data, world, init_record)
    (run_dir / CONFIG).write_text(json.dumps(record, indent=1, default=str) + "\n", encoding="utf-8")
    if reference is not None and not plan.resume:
        save_reference(run_dir, reference)
    return log


def save_run(
    plan: RunPlan,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    state: dict[str, Any],
    data_state: list[Any] | None,
    tokenizer_files: dict[str, bytes],
) -> None:
    """``checkpoint.pt`` (the first rank's): the weights, the optimizer, the counters ``state``,
    every rank's stream position (``data_state``, None: the data has none) and the random state,
    with what a resume must match; and ``RUN/model/`` for an --hf-model run."""
    rng = {"torch": torch.get_rng_state(), "cuda": torch.cuda.get_rng_state() if torch.cuda.is_available() else None}
    save_checkpoint(
        plan.run_dir,
        {
            "model": plan.model,
            "data": plan.identity,
            "options": plan.options,
            "state": state,
            "model_state": model.state_dict(),
            "optimizer_state": optimizer.state_dict(),
            "rng": rng,
            **({"data_state": data_state} if data_state is not None else {}),
        },
    )
    if plan.cfg.hf_model:  # RUN/model/: what transformers' from_pretrained (or peft's) loads
        from seqpack.train.pretrained import write_model_dir

        write_model_dir(model, plan.run_dir, tokenizer=tokenizer_files, merge=plan.cfg.lora_merge)


def finish_run(plan: RunPlan, summary: dict[str, Any], world: World) -> None:
    """``summary.json`` written, and the run put in place of ``--out`` in one rename (first rank); all wait."""
    if world.main:
        write_text_atomic(plan.run_dir / SUMMARY, json.dumps(summary, indent=1) + "\n")
        if plan.run_dir != plan.final:  # the finished run replaces RUN in one rename
            replace_directory(plan.run_dir, plan.final, kind=RUN)
    world.barrier()


def read_record(run_dir: Path, key: str) -> Any:
    """``key`` of the run's ``config.json`` (None when the file is missing or damaged)."""
    try:
        return json.loads((run_dir / CONFIG).read_text(encoding="utf-8")).get(key)
    except (OSError, ValueError):
        return None
