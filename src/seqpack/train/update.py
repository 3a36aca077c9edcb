"""One training step (an optimizer update: its micro-batches, every rank's share, one clip and one
update) and one evaluation, on a run's parts (`seqpack.train.parts.RunParts`).

    rec = train_step(parts, step, saved_step=None)   # {"lr", "loss", "grad_norm", "step_sequences", ...}
    ev = evaluate(parts)                             # the task's metrics on the held-out rows

The loss is normalised over the whole step (`seqpack.train.step_loss`): every rank sees the same
loss and gradient norm, and a non-finite one stops the run before it reaches the weights.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from seqpack.errors import UserError
from seqpack.train.context_parallel import shard_batch
from seqpack.train.models import forward
from seqpack.train.parts import RunParts
from seqpack.train.step_loss import EvalTotals, component_means, loss_units, step_loss
from seqpack.train.steps import lr_at, precision


def micro_batches(parts: RunParts, step: int) -> Iterator[tuple[np.ndarray, dict[str, torch.Tensor]]]:
    """Step ``step``'s micro-batches on this rank: its units and their tensors, on the device."""
    plan, cfg, world = parts.plan, parts.plan.cfg, parts.world
    R = plan.rows * cfg.accumulation
    units = parts.data.units_at(cfg.seed, step * R, R)
    for m in range(cfg.accumulation):
        dp_rank = world.rank if parts.cpg is None else parts.cpg.dp_rank  # a CP group shares its rows
        mine = units[m * plan.rows : (m + 1) * plan.rows][dp_rank :: plan.dp]
        batch = checked(parts, parts.data.batch(mine))
        yield mine, {k: v.to(world.device) for k, v in batch.items()}


def checked(parts: RunParts, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``batch``, refused in one line when a token id is past the model's embeddings."""
    top = int(batch["input_ids"].max()) if batch["input_ids"].numel() else -1
    if top >= parts.vocab:  # an embedding lookup past the table would fail deep inside the model
        raise UserError(
            f"{parts.plan.cfg.data}: a batch holds token id {top}, past the model's {parts.vocab} embeddings "
            "(a damaged dataset, or an --hf-model with a smaller vocab_size); re-pack the data "
            "or give the model a vocab_size above it"
        )
    return batch


def train_step(parts: RunParts, step: int, *, saved_step: int | None) -> dict[str, Any]:
    """Step ``step`` (from 0): the weights updated; its record (``saved_step``: the step of the
    last checkpoint, which a refusal names)."""
    cfg, world, task = parts.plan.cfg, parts.world, parts.data.task
    lr = lr_at(step, cfg, parts.plan.total)
    for g in parts.optimizer.param_groups:
        g["lr"] = lr
    parts.model.train()
    t_data = time.perf_counter()
    batches = list(micro_batches(parts, step))
    data_seconds = time.perf_counter() - t_data
    local = [loss_units(b, task, cfg.reduction) for _, b in batches]
    total = (
        world.all_sum(torch.stack(local).sum(0)) / cfg.context_parallel
    )  # a CP group's ranks count its rows once each
    cpg = parts.cpg
    if cpg is not None:  # each rank runs its per-document share of the rows (the units above: the whole rows')
        batches = [(u, shard_batch(b, cp=cpg.cp, rank=cpg.cp_rank)) for u, b in batches]
    logged = torch.zeros(3, dtype=torch.float64)  # loss, sequences, tokens (summed over ranks)
    # the loss stays on the device until the step is done: one wait for it per step, not per micro-batch
    loss_sum = torch.zeros((), dtype=torch.float64, device=world.device)
    for m, (units, b) in enumerate(batches):
        sync = world.size == 1 or m == len(batches) - 1
        ctx = contextlib.nullcontext() if sync else parts.wrapped.no_sync()  # type: ignore[operator]  # DDP's no_sync, typed through nn.Module.__getattr__
        with ctx:
            with precision(cfg, world.device):
                out = parts.wrapped(b)
                loss = step_loss(component_means(out, task), local[m], total, world=world.size)
            loss.backward()
        loss_sum += loss.detach().to(torch.float64) / world.size
        logged[1:] += torch.tensor(parts.data.counts(units), dtype=torch.float64)
    logged[0] = loss_sum.cpu()
    norm = torch.nn.utils.clip_grad_norm_(parts.model.parameters(), cfg.clip if cfg.clip > 0 else math.inf)
    logged = world.all_sum(logged)  # every rank sees the same loss and norm: all stop together
    logged[1:] /= cfg.context_parallel  # a CP group's ranks each counted its rows' sequences and tokens
    check_finite(step, float(logged[0]), float(norm), saved_step=saved_step, run_dir=parts.plan.run_dir)
    parts.optimizer.step()
    parts.optimizer.zero_grad(set_to_none=True)
    return {
        "lr": lr,
        "loss": float(logged[0]),
        "grad_norm": float(norm),
        "step_sequences": int(logged[1]),
        "step_tokens": int(logged[2]),
        "data_seconds": data_seconds,
    }


def check_finite(step: int, loss: float, norm: float, *, saved_step: int | None, run_dir: Path) -> None:
    """Stop before a non-finite loss or gradient reaches the weights, in one line that says where."""
    if math.isfinite(loss) and math.isfinite(norm):
        return
    what = f"the loss is {loss}" if not math.isfinite(loss) else f"the gradient norm is {norm}"
    where = (
        f"the last checkpoint in {run_dir} is from step {saved_step}; continue from it with --resume after the fix"
        if saved_step
        else "no checkpoint was written"
    )
    raise UserError(
        f"step {step + 1}: {what}; training stopped before that step changed the weights ({where}). "
        "Lower --lr, raise --warmup, set --clip, or check the data and the model's dtype"
    )


@torch.no_grad()
def evaluate(parts: RunParts) -> dict[str, float]:
    """The task's metrics over the held-out rows the run evaluates on (the model's mode kept)."""
    model, cfg, device, task = parts.model, parts.plan.cfg, parts.world.device, parts.data.task
    was = model.training
    model.eval()
    totals = EvalTotals()
    for b in parts.data.eval_batches(cfg.eval_batch_size):
        b = {k: v.to(device) for k, v in checked(parts, b).items()}
        with precision(cfg, device):
            out = forward(model, b, task=task, reduction="sequence", objective=parts.objective)
        totals.update(out, b, task)
    model.train(was)
    return totals.result()
