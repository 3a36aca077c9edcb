"""What a training run is built of before its first step, in one frozen `RunParts`: its plan
(`seqpack.train.plan`), the model (seeded, on the device), the optimizer, the task's objective, the
reference log-probabilities, the restored checkpoint, the module a step calls (context parallel,
DDP) and the run directory's log.

    data = open_train_data(cfg, world)
    parts = build_run(cfg, data, world, resume=False, overwrite=False)
    parts.plan.total, parts.wrapped(batch).loss, parts.log.write({...})

`build_run` makes them in this order, each step a function below: check the run directory, build
the model, plan the run, the optimizer and the objective, compute or load the reference, restore a
checkpoint, wrap the model, prepare the run directory.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from seqpack.errors import UserError
from seqpack.nn.heads import embedding_rows
from seqpack.tasks import get_task
from seqpack.train.checkpoint import data_identity, load_checkpoint
from seqpack.train.config import TrainConfig
from seqpack.train.context_parallel import CPGroups, CPTaskModule, run_groups
from seqpack.train.data import TrainData, Units
from seqpack.train.distributed import World
from seqpack.train.init_from import Loaded, init_from
from seqpack.train.models import TaskModule, attention_of, build_model, enable_checkpointing
from seqpack.train.plan import RunPlan, plan_run
from seqpack.train.reference import load_reference, reference_columns, reference_logps
from seqpack.train.run_dir import RunLog, open_run, read_record, run_directory
from seqpack.train.steps import make_optimizer, precision
from seqpack.train.stream_data import StreamTrainData


@dataclass(kw_only=True)
class Progress:
    """How far a run is: what a checkpoint saves as its ``state`` and a resume restores."""

    step: int = 0
    sequences: int = 0
    tokens: int = 0
    train_seconds: float = 0.0


@dataclass(frozen=True, kw_only=True)
class RunParts:
    """A run ready for its first step (or, resumed, its next): what the loop reads."""

    plan: RunPlan  # what the run does (a resumed run's: with its first run's --init-from)
    data: Units
    world: World
    model: torch.nn.Module  # the model itself: its weights, what a checkpoint saves
    wrapped: torch.nn.Module  # the model with its task, split per document across a CP group, in DDP: what a step calls
    optimizer: torch.optim.Optimizer
    objective: object | None  # the task's objective (a preference loss); None: the model's own loss
    cpg: CPGroups | None  # this rank's context-parallel group (None: no context parallelism)
    vocab: int  # the model's embedding rows: every token id of a batch is below
    loaded: Loaded | None  # what --init-from's weights gave (None: none, or a resumed run)
    init_record: dict[str, Any] | None  # where the first weights came from, as config.json and summary.json record it
    tokenizer_files: dict[str, bytes]  # what RUN/model/ gets of the tokenizer (--hf-model, first rank)
    log: RunLog  # the metrics log: the first rank's metrics.jsonl, a log that writes nothing on the others
    resumed: Progress | None  # the checkpoint's counters (None: a new run, from step 0)


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


def build_run(cfg: TrainConfig, data: Units, world: World, *, resume: bool, overwrite: bool) -> RunParts:
    """The parts of a run of ``cfg`` on ``data`` (see the module), every refusal before any step."""
    run_dir = run_directory(cfg, resume=resume, overwrite=overwrite)
    torch.manual_seed(cfg.seed)
    model, spec = build_model(data.manifest, cfg)
    attention = attention_of(model, cfg)
    if cfg.gradient_checkpointing:
        enable_checkpointing(model)
    model.to(world.device)
    loaded = (
        None
        if cfg.init_from is None
        else init_from(cfg.init_from, model, spec, data_identity(data.manifest, cfg.padded))
    )
    init_record = None if loaded is None else loaded.to_dict()
    files = _tokenizer_files(cfg) if cfg.hf_model and world.main else {}
    plan = plan_run(cfg, data, world_size=world.size, model=spec, attention=attention, run_dir=run_dir, resume=resume)
    optimizer = make_optimizer(model, cfg, plan.betas)
    task = get_task(data.task)
    training = task.trains()
    kind = task.model_kind(cfg.model, hf=bool(cfg.hf_model))
    objective = training.objective(cfg, kind) if training.objective is not None else None
    if objective is not None and cfg.padded:
        raise UserError(
            f"{cfg.data}: --padded is not offered for {data.task} data; its padded baseline is TRL "
            "(benchmarks/preference.py runs it beside seqpack's packed layouts)"
        )
    reference = _reference(plan, model, data, world, objective)
    resumed = None
    if resume:
        resumed, plan, init_record = _restore(plan, model, optimizer, data, world, init_record)
    cpg = run_groups(cfg, data, model, world)
    wrapped: torch.nn.Module = (
        TaskModule(model, data.task, cfg.reduction, objective)
        if cpg is None
        else CPTaskModule(model, cpg.group, cfg.reduction)
    )
    if world.size > 1:
        ids = [world.device.index] if world.device.type == "cuda" else None
        wrapped = torch.nn.parallel.DistributedDataParallel(
            wrapped, device_ids=ids, find_unused_parameters=training.partial_graph
        )
    step = 0 if resumed is None else resumed.step
    log = open_run(plan, data, world, step=step, init_record=init_record, reference=reference)
    return RunParts(
        plan=plan,
        data=data,
        world=world,
        model=model,
        wrapped=wrapped,
        optimizer=optimizer,
        objective=objective,
        cpg=cpg,
        vocab=embedding_rows(model),
        loaded=loaded,
        init_record=init_record,
        tokenizer_files=files,
        log=log,
        resumed=resumed,
    )


def _tokenizer_files(cfg: TrainConfig) -> dict[str, bytes]:
    from seqpack.train.pretrained import run_tokenizer_files

    return run_tokenizer_files(str(cfg.hf_model), cfg.tokenizer, cfg.data)


def _reference(
    plan: RunPlan, model: torch.nn.Module, data: Units, world: World, objective: object | None
) -> np.ndarray | None:
    """The reference model's log-probabilities when the objective needs them: the initial
    weights' (computed now, before any step), or on resume the run's saved ones; the data's
    batches carry them from here on."""
    if objective is None or not getattr(objective, "needs_reference", False):
        return None
    # only packed preference rows have a reference objective (the task refuses the other kinds)
    assert isinstance(data, TrainData), type(data)
    if plan.resume:
        ref = load_reference(plan.run_dir, data)
    else:
        # the reference is the policy's forward at step 0, in the same precision
        with precision(plan.cfg, world.device):
            ref = reference_logps(model, data, batch_size=plan.cfg.eval_batch_size, device=world.device)
    data.pack_columns = reference_columns(ref)
    return ref


def _restore(
    plan: RunPlan,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    data: Units,
    world: World,
    init_record: dict[str, Any] | None,
) -> tuple[Progress, RunPlan, dict[str, Any] | None]:
    """The weights, optimizer, data position and random state of the run's checkpoint restored;
    its counters, the plan with its first run's --init-from, and where those weights came from."""
    ck = load_checkpoint(plan.run_dir, model=plan.model, data=plan.identity, options=plan.options)
    model.load_state_dict(ck["model_state"])
    optimizer.load_state_dict(ck["optimizer_state"])
    if ck["options"].get("init_from"):  # the run's record keeps where its first weights came from
        plan = plan.resumed_from(ck["options"]["init_from"])
        init_record = read_record(plan.run_dir, "init_from")  # what it loaded then, as the run's config said
    if ck.get("data_state") is not None:  # a stream's position, one per rank
        data.load_state_dict(ck["data_state"][world.rank])
    torch.set_rng_state(ck["rng"]["torch"])
    if torch.cuda.is_available() and ck["rng"].get("cuda") is not None:
        torch.cuda.set_rng_state(ck["rng"]["cuda"])
    return Progress(**ck["state"]), plan, init_record
