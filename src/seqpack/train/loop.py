"""The training loop behind ``seqpack train``.

    summary = train(TrainConfig(data="packed_mlm/", out="runs/packed", steps=200))
    summary = train(cfg.replace(padded=True, out="runs/padded"))      # the baseline

Writes ``RUN/config.json`` (what ran), ``RUN/metrics.jsonl`` (one line per step, one per
evaluation), ``RUN/checkpoint.pt`` (every ``checkpoint_every`` steps, at the end and on
Ctrl-C) and ``RUN/summary.json``. Under ``torchrun`` each rank takes its share of every
micro-batch (see `seqpack.train.data`); gradients are averaged by
``DistributedDataParallel`` and the loss is normalised over the whole global step.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import json
import math
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from seqpack._atomic import (
    check_not_input,
    check_writable,
    foreign_directory,
    output_lock,
    replace_directory,
    write_text_atomic,
)
from seqpack._stages import partial_dir
from seqpack.errors import UserError
from seqpack.nn.heads import embedding_rows
from seqpack.nn.models.common import PackedOutput
from seqpack.tasks import get_task
from seqpack.train.checkpoint import (
    CHECKPOINT,
    CONFIG,
    METRICS,
    RUN,
    RUN_KIND,
    SUMMARY,
    MetricsLog,
    data_identity,
    load_checkpoint,
    save_checkpoint,
)
from seqpack.train.config import TrainConfig
from seqpack.train.context_parallel import CPGroups, CPTaskModule, check_cp_model, cp_groups, shard_batch
from seqpack.train.data import TrainData, Units
from seqpack.train.distributed import World, close_world, init_world
from seqpack.train.init_from import Loaded, init_from
from seqpack.train.lines import start_line
from seqpack.train.models import attention_of, build_model, enable_checkpointing, forward
from seqpack.train.plan import plan_run
from seqpack.train.reference import (
    load_reference,
    reference_columns,
    reference_logps,
    save_reference,
)
from seqpack.train.step_loss import EvalTotals, component_means, loss_units, step_loss
from seqpack.train.steps import (
    lr_at,
    make_optimizer,
    precision,
)
from seqpack.train.stream_data import StreamTrainData

#: off a terminal, a progress line at most this often (seconds), and at the first and last step
LOG_INTERVAL = 30.0


class TaskModule(torch.nn.Module):
    """The model and its task, so that ``DistributedDataParallel`` sees one forward call."""

    def __init__(self, model: torch.nn.Module, task: str, reduction: str, objective: Any = None) -> None:
        super().__init__()
        self.model, self.task, self.reduction, self.objective = model, task, reduction, objective

    def forward(self, batch: dict[str, torch.Tensor]) -> PackedOutput:
        return forward(self.model, batch, task=self.task, reduction=self.reduction, objective=self.objective)


class _Interrupt:
    """Turns SIGINT into a flag checked between steps (main thread only)."""

    def __init__(self) -> None:
        self.hit = False
        self._old: Any = None

    def __enter__(self) -> _Interrupt:
        if threading.current_thread() is threading.main_thread():
            self._old = signal.signal(signal.SIGINT, self._handle)
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        self.hit = True

    def __exit__(self, *exc: object) -> None:
        if self._old is not None:
            signal.signal(signal.SIGINT, self._old)


def train(
    cfg: TrainConfig,
    *,
    resume: bool = False,
    overwrite: bool = False,
    on_step: Callable[[int, dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Run (or continue, with ``resume``) a training run; returns ``RUN/summary.json``'s content."""
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
            return _Run(cfg, data, world, resume=resume, overwrite=overwrite).run(on_step)
    except KeyboardInterrupt as e:  # raised again below, without the run's frames (see the finally)
        interrupted = str(e)
    finally:
        # the run (its DistributedDataParallel, which holds the process group) goes before the group:
        # freed after it, from an exception's frames, gloo's teardown could wait for a peer that has exited
        gc.collect()
        close_world(world)
    raise KeyboardInterrupt(interrupted)


def open_train_data(cfg: TrainConfig, world: World) -> Units:
    """The run's data: a stream of examples (``cfg.stream``), or a packed dataset of any task (its
    task makes the batches: `seqpack.tasks.Training.batch_maker`)."""
    if cfg.stream:
        return StreamTrainData(cfg, rank=world.rank, world_size=world.size)
    return TrainData(
        cfg.data,
        padded=cfg.padded,
        by_pack=cfg.match == "packs",
        eval_fraction=cfg.eval_fraction,
        by_schedule=cfg.balance == "schedule",
        eval_tokens=cfg.eval_tokens or 0,
    )


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
    return partial  # made afresh once every check has passed (_Run)


class _Run:
    def __init__(
        self,
        cfg: TrainConfig,
        data: Units,
        world: World,
        *,
        resume: bool,
        overwrite: bool,
    ) -> None:
        """A run, made in named steps (each a method below, in this order): check the run directory,
        build the model, size the run, balance and record its options, build the optimizer and the
        objective, compute or restore the reference, restore a checkpoint, wrap the model (context
        parallel, DDP), prepare the run directory."""
        self.cfg, self.data, self.world = cfg, data, world
        self.task = data.task
        self.final = Path(cfg.out)
        self.run_dir = run_directory(cfg, resume=resume, overwrite=overwrite)
        #: how far the run is; a resume restores it
        self.state: dict[str, Any] = {"step": 0, "sequences": 0, "tokens": 0, "train_seconds": 0.0}
        self.saved_step: int | None = None  # the step of the last checkpoint written or resumed from
        self.log: MetricsLog | None = None  # the metrics log (the first rank's)
        self._build_model()
        self.plan = plan_run(cfg, data, world_size=world.size, model_config=self.spec["config"])
        self.optimizer = make_optimizer(self.model, cfg, self.plan.betas)
        self._build_objective()
        reference = self._reference(resume)
        if resume:
            self._restore()
        self.wrapped = self._wrap()
        if world.main:
            self._prepare_directory(resume, reference)

    def _build_model(self) -> None:
        """The model, seeded, checkpointed if asked, on the device."""
        cfg = self.cfg
        torch.manual_seed(cfg.seed)
        self.model, self.spec = build_model(self.data.manifest, cfg)
        self.attention = attention_of(self.model, cfg)
        if cfg.gradient_checkpointing:
            enable_checkpointing(self.model)
        self.model.to(self.world.device)
        self.vocab = embedding_rows(self.model)
        self.loaded: Loaded | None = None  # --init-from: what the earlier run's weights gave
        if cfg.init_from is not None:
            identity = data_identity(self.data.manifest, cfg.padded)
            self.loaded = init_from(cfg.init_from, self.model, self.spec, identity)
        # recorded in config.json and summary.json (a resumed run keeps its first run's)
        self.init_record: dict[str, Any] | None = None if self.loaded is None else self.loaded.to_dict()
        self.tokenizer_files = self._tokenizer_files() if cfg.hf_model and self.world.main else {}

    def _tokenizer_files(self) -> dict[str, bytes]:
        """What ``RUN/model/`` gets of the tokenizer: the --hf-model directory's (checked against the
        data when the weights were loaded), else a stream's --tokenizer (seqpack's exported), else the
        processor saved beside image-text rows."""
        from seqpack.tasks.vision.packed import PROCESSOR
        from seqpack.train.pretrained import tokenizer_files

        hf = Path(str(self.cfg.hf_model))
        files = tokenizer_files(hf) if hf.is_dir() else {}
        if not files and self.cfg.tokenizer:
            files = tokenizer_files(Path(self.cfg.tokenizer))
        if not files:  # image-text rows keep the processor they were made with
            files = tokenizer_files(Path(self.cfg.data) / PROCESSOR)
        return files

    def _build_objective(self) -> None:
        """The task's objective (a preference loss, say; None: the model's own loss)."""
        task = get_task(self.task)
        objective = task.trains().objective
        kind = task.model_kind(self.cfg.model, hf=bool(self.cfg.hf_model))
        self.objective = objective(self.cfg, kind) if objective is not None else None
        if self.objective is not None and self.cfg.padded:
            raise UserError(
                f"{self.cfg.data}: --padded is not offered for {self.task} data; its padded baseline is TRL "
                "(benchmarks/preference.py runs it beside seqpack's packed layouts)"
            )

    def _restore(self) -> None:
        """The weights, optimizer, counters, data position and random state of the run's checkpoint."""
        ck = load_checkpoint(self.run_dir, model=self.spec, data=self.plan.identity, options=self.plan.options)
        self.model.load_state_dict(ck["model_state"])
        self.optimizer.load_state_dict(ck["optimizer_state"])
        self.state = ck["state"]
        if ck["options"].get("init_from"):  # the run's record keeps where its first weights came from
            self.cfg = self.cfg.replace(init_from=ck["options"]["init_from"])
            self.plan = dataclasses.replace(self.plan, options={**self.plan.options, "init_from": self.cfg.init_from})
            with contextlib.suppress(OSError, ValueError):  # what it loaded then, as the run's config said
                self.init_record = json.loads((self.run_dir / CONFIG).read_text(encoding="utf-8")).get("init_from")
        if ck.get("data_state") is not None:  # a stream's position, one per rank
            self.data.load_state_dict(ck["data_state"][self.world.rank])
        self.saved_step = int(ck["state"]["step"])
        torch.set_rng_state(ck["rng"]["torch"])
        if torch.cuda.is_available() and ck["rng"].get("cuda") is not None:
            torch.cuda.set_rng_state(ck["rng"]["cuda"])

    def _wrap(self) -> torch.nn.Module:
        """The model with its task (and objective) in one module, split per document across a context-parallel group if
        asked, inside DDP across ranks."""
        cfg, world = self.cfg, self.world
        self.cpg = self._context_parallel(cfg, self.data, world)
        wrapped: torch.nn.Module = (
            TaskModule(self.model, self.task, cfg.reduction, self.objective)
            if self.cpg is None
            else CPTaskModule(self.model, self.cpg.group, cfg.reduction)
        )
        if world.size > 1:
            ids = [world.device.index] if world.device.type == "cuda" else None
            wrapped = torch.nn.parallel.DistributedDataParallel(
                wrapped, device_ids=ids, find_unused_parameters=get_task(self.task).trains().partial_graph
            )
        return wrapped

    def _prepare_directory(self, resume: bool, reference: np.ndarray | None) -> None:
        """The run directory (the first rank's): emptied for a new run, its metrics log, config and reference."""
        if not resume:  # a new run: nothing of an earlier one in its directory
            shutil.rmtree(self.run_dir, ignore_errors=True)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.log = MetricsLog(self.run_dir / METRICS, keep_until=self.state["step"] if resume else None)
        self._write_config()
        if reference is not None and not resume:
            save_reference(self.run_dir, reference)

    def _context_parallel(self, cfg: TrainConfig, data: Any, world: World) -> CPGroups | None:
        """With ``--context-parallel C``: the CP groups, once the data and the model are checked."""
        if cfg.context_parallel == 1:
            return None
        packed_for = int((data.manifest.get("config") or {}).get("context_parallel", 1))
        if packed_for != cfg.context_parallel:
            raise UserError(
                f"{cfg.data} was packed for --context-parallel {packed_for}; its rows split per document only "
                f"for that size: re-pack it with seqpack pack --context-parallel {cfg.context_parallel}"
            )
        if not data.facts.causal_lm:
            raise UserError(f"--context-parallel trains causal-LM rows (clm, chat); {cfg.data} holds {data.task} rows")
        check_cp_model(self.model)
        return cp_groups(world, cfg.context_parallel)

    def _reference(self, resume: bool) -> np.ndarray | None:
        """The reference model's log-probabilities when the objective needs them: the initial
        weights' (computed now, before any step), or on resume the run's saved ones."""
        if self.objective is None or not getattr(self.objective, "needs_reference", False):
            return None
        # only packed preference rows have a reference objective (the task refuses the other kinds)
        assert isinstance(self.data, TrainData), type(self.data)
        if resume:
            ref = load_reference(self.run_dir, self.data)
        else:
            # the reference is the policy's forward at step 0, in the same precision
            with precision(self.cfg, self.world.device):
                ref = reference_logps(
                    self.model, self.data, batch_size=self.cfg.eval_batch_size, device=self.world.device
                )
        self.data.pack_columns = reference_columns(ref)
        return ref

    def _write_config(self) -> None:
        from seqpack._version import __version__

        info = {
            "kind": RUN_KIND,
            "seqpack_version": __version__,
            "train": self.cfg.to_dict(),
            "model": self.spec,
            "attention": self.attention,
            "data": {**self.data.describe(), **self.plan.identity},
            "rows_per_batch": self.plan.rows,
            "total_steps": self.plan.total,
            "betas": list(self.plan.betas),
            "world_size": self.world.size,
            "balance": self.plan.balance,
            # the plan's sizes (its options and data identity are the train and data entries)
            "plan": {k: v for k, v in self.plan.to_dict().items() if k not in ("options", "identity")},
            "init_from": self.init_record,
        }
        (self.run_dir / CONFIG).write_text(json.dumps(info, indent=1, default=str) + "\n", encoding="utf-8")

    def _micro_batches(self, step: int) -> Iterator[tuple[np.ndarray, dict[str, torch.Tensor]]]:
        R = self.plan.rows * self.cfg.accumulation
        units = self.data.units_at(self.cfg.seed, step * R, R)
        for m in range(self.cfg.accumulation):
            dp_rank = self.world.rank if self.cpg is None else self.cpg.dp_rank  # a CP group shares its rows
            mine = units[m * self.plan.rows : (m + 1) * self.plan.rows][dp_rank :: self.plan.dp]
            batch = self._checked(self.data.batch(mine))
            yield mine, {k: v.to(self.world.device) for k, v in batch.items()}

    def _checked(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        top = int(batch["input_ids"].max()) if batch["input_ids"].numel() else -1
        if top >= self.vocab:  # an embedding lookup past the table would fail deep inside the model
            raise UserError(
                f"{self.cfg.data}: a batch holds token id {top}, past the model's {self.vocab} embeddings "
                "(a damaged dataset, or an --hf-model with a smaller vocab_size); re-pack the data "
                "or give the model a vocab_size above it"
            )
        return batch

    def _step(self, step: int) -> dict[str, Any]:
        cfg, world = self.cfg, self.world
        lr = lr_at(step, cfg, self.plan.total)
        for g in self.optimizer.param_groups:
            g["lr"] = lr
        self.model.train()
        t_data = time.perf_counter()
        batches = list(self._micro_batches(step))
        data_seconds = time.perf_counter() - t_data
        local = [loss_units(b, self.task, cfg.reduction) for _, b in batches]
        total = (
            world.all_sum(torch.stack(local).sum(0)) / cfg.context_parallel
        )  # a CP group's ranks count its rows once each
        if self.cpg is not None:  # each rank runs its per-document share of the rows (the units above: the whole rows')
            batches = [(u, shard_batch(b, cp=self.cpg.cp, rank=self.cpg.cp_rank)) for u, b in batches]
        logged = torch.zeros(3, dtype=torch.float64)  # loss, sequences, tokens (summed over ranks)
        # the loss stays on the device until the step is done: one wait for it per step, not per micro-batch
        loss_sum = torch.zeros((), dtype=torch.float64, device=world.device)
        for m, (units, b) in enumerate(batches):
            sync = world.size == 1 or m == len(batches) - 1
            ctx = contextlib.nullcontext() if sync else self.wrapped.no_sync()  # type: ignore[operator]  # DDP's no_sync, typed through nn.Module.__getattr__
            with ctx:
                with precision(self.cfg, self.world.device):
                    out = self.wrapped(b)
                    loss = step_loss(component_means(out, self.task), local[m], total, world=world.size)
                loss.backward()
            loss_sum += loss.detach().to(torch.float64) / world.size
            logged[1:] += torch.tensor(self.data.counts(units), dtype=torch.float64)
        logged[0] = loss_sum.cpu()
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.clip if cfg.clip > 0 else math.inf)
        logged = world.all_sum(logged)  # every rank sees the same loss and norm: all stop together
        logged[1:] /= cfg.context_parallel  # a CP group's ranks each counted its rows' sequences and tokens
        self._check_finite(step, float(logged[0]), float(norm))
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return {
            "lr": lr,
            "loss": float(logged[0]),
            "grad_norm": float(norm),
            "step_sequences": int(logged[1]),
            "step_tokens": int(logged[2]),
            "data_seconds": data_seconds,
        }

    def _check_finite(self, step: int, loss: float, norm: float) -> None:
        """Stop before a non-finite loss or gradient reaches the weights, in one line that says where."""
        if math.isfinite(loss) and math.isfinite(norm):
            return
        what = f"the loss is {loss}" if not math.isfinite(loss) else f"the gradient norm is {norm}"
        saved = self.saved_step
        where = (
            f"the last checkpoint in {self.run_dir} is from step {saved}; continue from it with --resume after the fix"
            if saved
            else "no checkpoint was written"
        )
        raise UserError(
            f"step {step + 1}: {what}; training stopped before that step changed the weights ({where}). "
            "Lower --lr, raise --warmup, set --clip, or check the data and the model's dtype"
        )

    @torch.no_grad()
    def evaluate(self) -> dict[str, float]:
        model = self.model
        was = model.training
        model.eval()
        totals = EvalTotals()
        for b in self.data.eval_batches(self.cfg.eval_batch_size):
            b = {k: v.to(self.world.device) for k, v in self._checked(b).items()}
            with precision(self.cfg, self.world.device):
                out = forward(model, b, task=self.task, reduction="sequence", objective=self.objective)
            totals.update(out, b, self.task)
        model.train(was)
        return totals.result()

    def _checkpoint(self) -> None:
        self.saved_step = self.state["step"]
        mine = self.data.state_dict()
        data_state = None if mine is None else self.world.gather_objects(mine)  # every rank's stream position
        if self.world.main:
            rng = {
                "torch": torch.get_rng_state(),
                "cuda": torch.cuda.get_rng_state() if torch.cuda.is_available() else None,
            }
            save_checkpoint(
                self.run_dir,
                {
                    "model": self.spec,
                    "data": self.plan.identity,
                    "options": self.plan.options,
                    "state": dict(self.state),
                    "model_state": self.model.state_dict(),
                    "optimizer_state": self.optimizer.state_dict(),
                    "rng": rng,
                    **({"data_state": data_state} if data_state is not None else {}),
                },
            )
            if self.cfg.hf_model:  # RUN/model/: what transformers' from_pretrained (or peft's) loads
                from seqpack.train.pretrained import write_model_dir

                write_model_dir(self.model, self.run_dir, tokenizer=self.tokenizer_files, merge=self.cfg.lora_merge)
        self.world.barrier()

    def _eval_record(self) -> None:
        if self.log is not None:  # the first rank evaluates and logs
            ev = self.evaluate()
            self.log.write(
                {
                    "step": self.state["step"],
                    "sequences": self.state["sequences"],
                    "train_seconds": self.state["train_seconds"],
                    "eval": ev,
                }
            )
            self.last_eval = ev
        self.world.barrier()

    def run(self, on_step: Callable[[int, dict[str, Any]], None] | None) -> dict[str, Any]:
        from seqpack.nn.attention import count_backends

        with count_backends() as self.ran:  # the backends the attention plans used, as they ran
            return self._run(on_step)

    def _run(self, on_step: Callable[[int, dict[str, Any]], None] | None) -> dict[str, Any]:
        from seqpack._progress import progress_bar

        cfg, st = self.cfg, self.state
        self.last_eval = {}
        desc = "padded" if cfg.padded else "packed"
        if cfg.progress and self.world.main:  # at once: a run in a log is never silent until its first step
            model = self.spec["class"]
            if cfg.hf_model:  # a checkpoint's weights, or a model initialised from its config
                from seqpack.train.pretrained import describe

                model = f"{model} ({describe(self.spec)})"
            print(
                start_line(
                    desc,
                    model,
                    attention=self.attention,
                    first=st["step"] + 1,
                    total=self.plan.total,
                    rows=self.plan.rows,
                    eval_every=self.plan.eval_every,
                    eval_packs=len(self.data.eval_packs),
                    eval_tokens=self.data.eval_tokens,
                    train_tokens=self.plan.train_tokens,
                    metrics=f"{self.final}/metrics.jsonl",
                    transformers=self.spec["library"] == "transformers",
                    init="" if self.loaded is None else self.loaded.text(),
                ),
                file=sys.stderr,
                flush=True,
            )
        if st["step"] == 0 and cfg.eval_at_start:
            self._eval_record()  # the curve starts at 0 sequences
        bar = progress_bar(
            cfg.progress and self.world.main,
            lines=LOG_INTERVAL,
            total=self.plan.total,
            initial=st["step"],
            desc=desc,
            unit="step",
            dynamic_ncols=True,
        )
        with _Interrupt() as stop:
            while st["step"] < self.plan.total:
                t0 = time.perf_counter()
                rec = self._step(st["step"])
                dt = time.perf_counter() - t0
                st["step"] += 1
                st["sequences"] += rec["step_sequences"]
                st["tokens"] += rec["step_tokens"]
                st["train_seconds"] += dt
                rec = {
                    "step": st["step"],
                    **rec,
                    "sequences": st["sequences"],
                    "tokens": st["tokens"],
                    "step_seconds": dt,
                    "compute_seconds": dt - rec["data_seconds"],
                    "train_seconds": st["train_seconds"],
                    "tokens_per_s": rec["step_tokens"] / dt,
                    "sequences_per_s": rec["step_sequences"] / dt,
                }
                if self.log is not None:  # the first rank's
                    self.log.write(rec)
                bar.set_postfix(loss=f"{rec['loss']:.3f}", refresh=False)  # before the update that shows it
                bar.update(1)
                if on_step is not None:
                    on_step(st["step"], rec)
                last = st["step"] == self.plan.total
                if (self.plan.eval_every and st["step"] % self.plan.eval_every == 0) or last:
                    self._eval_record()
                if (cfg.checkpoint_every and st["step"] % cfg.checkpoint_every == 0) or last or stop.hit:
                    self._checkpoint()
                if stop.hit and not last:
                    bar.close()
                    raise KeyboardInterrupt(
                        f"interrupted at step {st['step']}; checkpoint saved in {self.run_dir}, continue with --resume"
                    )
        bar.close()
        return self._summary()

    def _summary(self) -> dict[str, Any]:
        st = self.state
        summary = {
            "run": str(self.final),
            "padded": self.cfg.padded,
            "task": self.task,
            "model": self.spec["class"],
            "steps": st["step"],
            "sequences": st["sequences"],
            "tokens": st["tokens"],
            "train_seconds": st["train_seconds"],
            "tokens_per_s": st["tokens"] / max(st["train_seconds"], 1e-9),
            "sequences_per_s": st["sequences"] / max(st["train_seconds"], 1e-9),
            "rows_per_batch": self.plan.rows,
            "packing_factor": self.data.packing_factor,
            "eval": self.last_eval,
            "attention": {"implementation": self.attention, "plans": dict(self.ran)},
            "init_from": self.init_record,
        }
        if self.world.main:
            write_text_atomic(self.run_dir / SUMMARY, json.dumps(summary, indent=1) + "\n")
            if self.run_dir != self.final:  # the finished run replaces RUN in one rename
                replace_directory(self.run_dir, self.final, kind=RUN)
        self.world.barrier()
        return summary
