"""What a training step is: rows per micro-batch, the number of steps, the learning rate at a
step, the optimiser and the precision the forward runs in.

    rows = rows_per_batch(cfg, data)        # batch_size, or / packing factor with match="sequences"
    lr = lr_at(step, cfg, total_steps(cfg, data, rows))
    with precision(cfg, device):            # bf16 autocast when cfg.dtype == "bf16"
        loss = model(batch).loss
"""

from __future__ import annotations

import contextlib
import math
from typing import Any

import torch

from seqpack.nn.optim import Lamb
from seqpack.train.config import TrainConfig
from seqpack.train.data import Units


def lr_at(step: int, cfg: TrainConfig, total: int) -> float:
    """Linear warm-up, then linear / cosine decay to 0 (or constant)."""
    warm = int(cfg.warmup) if cfg.warmup >= 1 else round(cfg.warmup * total)
    if step < warm:
        return cfg.lr * (step + 1) / warm
    if cfg.schedule == "constant":
        return cfg.lr
    frac = (step - warm) / max(1, total - warm)
    return cfg.lr * (1 - frac if cfg.schedule == "linear" else 0.5 * (1 + math.cos(math.pi * frac)))


def make_optimizer(model: torch.nn.Module, cfg: TrainConfig, betas: tuple[float, float]) -> torch.optim.Optimizer:
    """AdamW or LAMB; no weight decay on biases, LayerNorms and embeddings' norms (1-D tensors)."""
    decay = [p for p in model.parameters() if p.requires_grad and p.ndim >= 2]
    rest = [p for p in model.parameters() if p.requires_grad and p.ndim < 2]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": rest, "weight_decay": 0.0}]
    if cfg.optimizer == "lamb":
        return Lamb(groups, lr=cfg.lr, betas=betas)
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=betas, foreach=False)


def rows_per_batch(cfg: TrainConfig, data: Units) -> int:
    """Rows per micro-batch: ``batch_size``, divided by the packing factor with ``match``."""
    if cfg.match == "sequences" and not cfg.padded:
        return max(1, round(cfg.batch_size / data.packing_factor))
    return cfg.batch_size


def total_steps(cfg: TrainConfig, data: Units, rows: int) -> int:
    per_step = rows * cfg.accumulation
    if cfg.steps is not None:
        return cfg.steps
    seqs_per_unit = float(data.unit_sequences.mean())
    if cfg.sequences is not None:
        return max(1, math.ceil(cfg.sequences / (per_step * seqs_per_unit)))
    return max(1, data.num_units // per_step)  # one epoch


def precision(cfg: TrainConfig, device: torch.device) -> contextlib.AbstractContextManager[Any]:
    """bf16 autocast over the fp32 weights when ``cfg.dtype == "bf16"`` (matrix products and
    attention in bf16; losses, softmax and the optimiser in fp32, as autocast's op lists decide)."""
    if cfg.dtype == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()
