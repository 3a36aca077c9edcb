"""Types and checks every packed model shares: the output record, named sizes, batch checks."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from seqpack.errors import UserError

SIZES: dict[str, dict[str, int]] = {
    "tiny": {"hidden": 128, "layers": 2, "heads": 2},
    "small": {"hidden": 256, "layers": 4, "heads": 4},
    "base": {"hidden": 768, "layers": 12, "heads": 12},
    "large": {"hidden": 1024, "layers": 24, "heads": 16},
}


def sized(size: str, overrides: dict[str, object]) -> dict[str, object]:
    """Keyword arguments of a named size, with ``overrides`` on top."""
    if size not in SIZES:
        raise UserError(f"size must be one of {'|'.join(SIZES)}, got {size!r}")
    return {**SIZES[size], **overrides}


@dataclass
class PackedOutput:
    """What the packed models return; slot tensors are ``(B, D, ...)``."""

    loss: torch.Tensor | None = None
    logits: torch.Tensor | None = None  # token logits (B, T, V), or (N, V) at the N target tokens
    slot_logits: torch.Tensor | None = None  # (B, D, C): NSP / classification
    per_sequence: torch.Tensor | None = None  # (B, D) loss of each sequence
    present: torch.Tensor | None = None  # (B, D) which slots hold a sequence (with a target)
    hidden: torch.Tensor | None = None  # (B, T, H)
    extra: dict[str, torch.Tensor] = field(default_factory=dict)


def check_batch(input_ids: torch.Tensor, segment_ids: torch.Tensor, **others: torch.Tensor | None) -> None:
    """Every per-token tensor must be ``(B, T)`` like ``input_ids``."""
    if input_ids.ndim != 2:
        raise UserError(f"input_ids must be (B, T), got shape {tuple(input_ids.shape)}")
    for name, x in {"segment_ids": segment_ids, **others}.items():
        if x is not None and x.shape != input_ids.shape:
            raise UserError(
                f"{name} has shape {tuple(x.shape)} but input_ids is {tuple(input_ids.shape)}; expected (B, T)"
            )
