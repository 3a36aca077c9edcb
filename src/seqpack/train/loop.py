"""The training loop behind ``seqpack train``.

    summary = train(TrainConfig(data="packed_mlm/", out="runs/packed", steps=200))
    summary = train(cfg.replace(padded=True, out="runs/padded"))      # the baseline

Writes ``RUN/config.json`` (what ran), ``RUN/metrics.jsonl`` (one line per step, one per
evaluation), ``RUN/checkpoint.pt`` (every ``checkpoint_every`` steps, at the end and on
Ctrl-C) and ``RUN/summary.json``. Under ``torchrun`` each rank takes its share of every
micro-batch (see `seqpack.train.data`); gradients are averaged by
``DistributedDataParallel`` and the loss is normalised over the whole global step. The run is
built first (`seqpack.train.parts.build_run`, its plan: `seqpack.train.plan`); the loop below
only steps, evaluates, checkpoints and sums up.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import torch

from seqpack._atomic import output_lock
from seqpack.errors import UserError
from seqpack.train.config import TrainConfig
from seqpack.train.distributed import close_world, init_world
from seqpack.train.interrupt import StopFlag
from seqpack.train.lines import run_start_line
from seqpack.train.parts import Progress, RunParts, build_run, open_train_data
from seqpack.train.run_dir import finish_run, save_run
from seqpack.train.update import evaluate, train_step

#: off a terminal, a progress line at most this often (seconds), and at the first and last step
LOG_INTERVAL = 30.0


def train(
    cfg: TrainConfig,
    *,
    resume: bool = False,
    overwrite: bool = False,
    on_step: Callable[[int, dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Run (or continue, with ``resume``) a training run.

    Args:
        cfg: the run's options (`TrainConfig`): the packed data, the model, the schedule, ``out``.
        resume: continue ``cfg.out`` from its checkpoint (the same data and options, checked).
        overwrite: replace a finished run at ``cfg.out`` (only a run seqpack made).
        on_step: called after every step with its number and metrics line.

    Returns:
        ``RUN/summary.json``'s content: the run's directory, steps, sequences, tokens, throughput,
        the last evaluation, the attention plans that ran.

    Raises:
        UserError: options or data the run cannot honour (one line, before any step).
        KeyboardInterrupt: Ctrl-C, after the checkpoint is saved (``--resume`` continues it).
    """
    if resume and cfg.init_from:
        raise UserError(
            f"--init-from starts a new run from {cfg.init_from}'s weights; --resume continues {cfg.out} from its own "
            "checkpoint: drop --init-from"
        )
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    world = init_world()
    interrupted: str | None = None
    try:  # one writer per run directory: rank 0 holds its lock for the whole run
        data = open_train_data(cfg, world)
        with output_lock(cfg.out) if world.main else contextlib.nullcontext():
            return _Loop(build_run(cfg, data, world, resume=resume, overwrite=overwrite)).run(on_step)
    except KeyboardInterrupt as e:  # raised again below, without the run's frames (see the finally)
        interrupted = str(e)
    finally:
        # the run (its DistributedDataParallel, which holds the process group) goes before the group:
        # freed after it, from an exception's frames, gloo's teardown could wait for a peer that has exited
        gc.collect()
        close_world(world)
    raise KeyboardInterrupt(interrupted)


class _Loop:
    """The step loop over a built run: steps, evaluations and checkpoints at the plan's cadence, the summary."""

    def __init__(self, parts: RunParts) -> None:
        self.parts, self.plan, self.cfg, self.world = parts, parts.plan, parts.plan.cfg, parts.world
        resumed = parts.resumed
        self.progress = Progress() if resumed is None else dataclasses.replace(resumed)  # the loop's own counters
        self.saved_step: int | None = None if resumed is None else resumed.step  # the last checkpoint's step
        self.last_eval: dict[str, float] = {}  # the last evaluation's metrics (the first rank's)

    def run(self, on_step: Callable[[int, dict[str, Any]], None] | None) -> dict[str, Any]:
        from seqpack._progress import progress_bar
        from seqpack.nn.attention import count_backends

        cfg, st, total = self.cfg, self.progress, self.plan.total
        desc = "padded" if cfg.padded else "packed"
        show = cfg.progress and self.world.main
        with count_backends() as ran:  # the backends the attention plans used, as they ran
            if show:  # at once: a run in a log is never silent until its first step
                line = run_start_line(desc, self.plan, self.parts.data, first=st.step + 1, loaded=self.parts.loaded)
                print(line, file=sys.stderr, flush=True)
            if st.step == 0 and cfg.eval_at_start:
                self._eval_record()  # the curve starts at 0 sequences
            bar = progress_bar(
                show, lines=LOG_INTERVAL, total=total, initial=st.step, desc=desc, unit="step", dynamic_ncols=True
            )
            with StopFlag() as stop:
                while st.step < total:
                    rec = self._step()
                    bar.set_postfix(loss=f"{rec['loss']:.3f}", refresh=False)  # before the update that shows it
                    bar.update(1)
                    if on_step is not None:
                        on_step(st.step, rec)
                    last = st.step == total
                    if (self.plan.eval_every and st.step % self.plan.eval_every == 0) or last:
                        self._eval_record()
                    if (cfg.checkpoint_every and st.step % cfg.checkpoint_every == 0) or last or stop.hit:
                        self._checkpoint()
                    if stop.hit and not last:
                        bar.close()
                        raise KeyboardInterrupt(
                            f"interrupted at step {st.step}; checkpoint saved in {self.plan.run_dir}, continue with --resume"
                        )
            bar.close()
            return self._summary(dict(ran))

    def _step(self) -> dict[str, Any]:
        """One step, counted and logged: its metrics line."""
        st = self.progress
        t0 = time.perf_counter()
        rec = train_step(self.parts, st.step, saved_step=self.saved_step)
        dt = time.perf_counter() - t0
        st.step += 1
        st.sequences += rec["step_sequences"]
        st.tokens += rec["step_tokens"]
        st.train_seconds += dt
        rec = {
            "step": st.step,
            **rec,
            "sequences": st.sequences,
            "tokens": st.tokens,
            "step_seconds": dt,
            "compute_seconds": dt - rec["data_seconds"],
            "train_seconds": st.train_seconds,
            "tokens_per_s": rec["step_tokens"] / dt,
            "sequences_per_s": rec["step_sequences"] / dt,
        }
        self.parts.log.write(rec)  # the first rank's log; the others' write nothing
        return rec

    def _eval_record(self) -> None:
        if self.world.main:  # the first rank evaluates and logs
            ev = evaluate(self.parts)
            st = self.progress
            self.parts.log.write(
                {"step": st.step, "sequences": st.sequences, "train_seconds": st.train_seconds, "eval": ev}
            )
            self.last_eval = ev
        self.world.barrier()

    def _checkpoint(self) -> None:
        parts, world = self.parts, self.world
        self.saved_step = self.progress.step
        mine = parts.data.state_dict()
        data_state = None if mine is None else world.gather_objects(mine)  # every rank's stream position
        if world.main:
            save_run(parts.plan, parts.model, parts.optimizer, asdict(self.progress), data_state, parts.tokenizer_files)
        world.barrier()

    def _summary(self, ran: dict[str, int]) -> dict[str, Any]:
        st, plan = self.progress, self.plan
        summary = {
            "run": str(plan.final),
            "padded": self.cfg.padded,
            "task": self.parts.data.task,
            "model": plan.model["class"],
            "steps": st.step,
            "sequences": st.sequences,
            "tokens": st.tokens,
            "train_seconds": st.train_seconds,
            "tokens_per_s": st.tokens / max(st.train_seconds, 1e-9),
            "sequences_per_s": st.sequences / max(st.train_seconds, 1e-9),
            "rows_per_batch": plan.rows,
            "packing_factor": self.parts.data.packing_factor,
            "eval": self.last_eval,
            "attention": {"implementation": plan.attention, "plans": ran},
            "init_from": self.parts.init_record,
        }
        finish_run(plan, summary, self.world)
        return summary
