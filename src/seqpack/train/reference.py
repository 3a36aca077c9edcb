"""The reference model's log-probabilities, computed once, packed, before training.

DPO and IPO compare the policy with a frozen reference (the initial weights). Instead of a second
model in memory, one packed pass with the initial weights computes every pair's summed
log-probabilities; they ride along with each batch as ``ref_chosen_logps`` / ``ref_rejected_logps``
(B, D), and are saved in the run directory so a resumed run reuses them::

    ref = reference_logps(model, data, batch_size=64)     # (P, D, 2) float64: chosen, rejected
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from seqpack.data.torch_dataset import to_tensors
from seqpack.errors import UserError
from seqpack.train.data import TrainData

REFERENCE = "reference_logps.npy"


def reference_logps(
    model: torch.nn.Module,
    data: TrainData,
    *,
    batch_size: int,
    device: torch.device | None = None,
) -> np.ndarray:
    """Every pack's ``(chosen, rejected)`` summed log-probabilities under ``model``.  # (P, D, 2)"""
    return packed_reference(
        model,
        data.rows.take,
        num_packs=int(data.manifest["num_packs"]),
        depth=int(data.manifest["max_depth"]),
        batch_size=batch_size,
        device=device,
    )


@torch.no_grad()
def packed_reference(
    model: torch.nn.Module,
    take: Callable[[np.ndarray], dict[str, Any]],
    *,
    num_packs: int,
    depth: int,
    batch_size: int,
    device: torch.device | None = None,
) -> np.ndarray:
    """`reference_logps` over any reader: ``take(packs)`` gives those packs' columns.  # (P, D, 2)"""
    from seqpack.tasks.preference.forward import policy_logps

    P, D = num_packs, depth
    out = np.zeros((P, D, 2), dtype=np.float64)
    was = model.training
    model.eval()
    device = device or next(model.parameters()).device
    for lo in range(0, P, batch_size):
        packs = np.arange(lo, min(P, lo + batch_size))
        cols = {k: np.asarray(v) for k, v in take(packs).items()}
        batch = {k: v.to(device) for k, v in to_tensors(cols).items()}
        lp = policy_logps(model, batch, depth=D)
        out[packs, :, 0] = lp.chosen.double().cpu().numpy()
        out[packs, :, 1] = lp.rejected.double().cpu().numpy()
    model.train(was)
    return out


def reference_columns(ref: np.ndarray) -> Callable[[np.ndarray], dict[str, np.ndarray]]:
    """The extra columns of packs ``packs``, for `TrainData.pack_columns`."""
    return lambda packs: {"ref_chosen_logps": ref[packs, :, 0], "ref_rejected_logps": ref[packs, :, 1]}


def save_reference(run_dir: Path, ref: np.ndarray) -> None:
    from seqpack._atomic import atomic_file

    with atomic_file(run_dir / REFERENCE) as tmp, open(tmp, "wb") as f:
        np.save(f, ref, allow_pickle=False)


def load_reference(run_dir: Path, data: TrainData) -> np.ndarray:
    path = run_dir / REFERENCE
    if not path.is_file():
        raise UserError(f"{run_dir}: the run has no {REFERENCE}; start it again with --overwrite")
    ref = np.load(path, allow_pickle=False)
    want = (int(data.manifest["num_packs"]), int(data.manifest["max_depth"]), 2)
    if ref.shape != want:
        raise UserError(f"{path} has shape {ref.shape}, the dataset needs {want}; start the run again with --overwrite")
    return ref
