"""Transformer building blocks that attend through a packed ``AttentionPlan``."""

from __future__ import annotations

from typing import Protocol

import torch
import torch.nn.functional as F
import torch.utils.checkpoint
from torch import nn

from seqpack.errors import UserError
from seqpack.nn.attention import (
    BACKENDS,
    AttentionPlan,
    packed_attention,
    plan_attention,
)
from seqpack.nn.masks import position_ids as make_position_ids


class SelfAttention(nn.Module):
    """Multi-head self-attention; the plan keeps sequences of one row apart.

    No dropout on attention probabilities (the packed backends share one kernel path);
    dropout is applied to the projected output instead.
    """

    def __init__(self, hidden: int, heads: int, *, dropout: float = 0.0, bias: bool = True) -> None:
        super().__init__()
        if hidden % heads:
            raise UserError(f"hidden={hidden} must be divisible by heads={heads}")
        self.heads = heads
        self.qkv = nn.Linear(hidden, 3 * hidden, bias=bias)
        self.out = nn.Linear(hidden, hidden, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, plan: AttentionPlan) -> torch.Tensor:
        B, T, H = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.heads, H // self.heads).permute(2, 0, 3, 1, 4)  # (B, h, T, d)
        y = packed_attention(q, k, v, plan)  # (B, h, T, d)
        return self.dropout(self.out(y.transpose(1, 2).reshape(B, T, H)))


class MLP(nn.Module):
    def __init__(self, hidden: int, intermediate: int, *, dropout: float = 0.0) -> None:
        super().__init__()
        self.up = nn.Linear(hidden, intermediate)
        self.down = nn.Linear(intermediate, hidden)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.down(F.gelu(self.up(x))))


class Block(nn.Module):
    """``pre_norm=False``: BERT (post-LN). ``pre_norm=True``: GPT-2 (pre-LN)."""

    def __init__(
        self, hidden: int, heads: int, intermediate: int, *, dropout: float, eps: float, pre_norm: bool
    ) -> None:
        super().__init__()
        self.attn = SelfAttention(hidden, heads, dropout=dropout)
        self.mlp = MLP(hidden, intermediate, dropout=dropout)
        self.ln1 = nn.LayerNorm(hidden, eps=eps)
        self.ln2 = nn.LayerNorm(hidden, eps=eps)
        self.pre_norm = pre_norm

    def forward(self, x: torch.Tensor, plan: AttentionPlan) -> torch.Tensor:
        if self.pre_norm:
            x = x + self.attn(self.ln1(x), plan)
            return x + self.mlp(self.ln2(x))
        x = self.ln1(x + self.attn(x, plan))
        return self.ln2(x + self.mlp(x))


def init_weights(module: nn.Module, std: float = 0.02) -> None:
    """BERT / GPT-2 initialisation: normal(0, std) weights, zero biases, unit LayerNorm."""
    for m in module.modules():
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=std)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.LayerNorm):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)


class _ModelShape(Protocol):
    @property
    def hidden(self) -> int: ...
    @property
    def heads(self) -> int: ...
    @property
    def dropout(self) -> float: ...
    @property
    def attention(self) -> str: ...


def check_config(cfg: _ModelShape, positive: tuple[str, ...]) -> None:
    """Shared validation of model configs (``ValueError`` naming the field)."""
    for name in positive:
        if getattr(cfg, name) < 1:
            raise UserError(f"{name} must be >= 1, got {getattr(cfg, name)}")
    hidden, heads = cfg.hidden, cfg.heads
    if hidden % heads:
        raise UserError(f"hidden={hidden} must be divisible by heads={heads}")
    if not 0.0 <= cfg.dropout < 1.0:
        raise UserError(f"dropout must be in [0, 1), got {cfg.dropout}")
    if cfg.attention not in BACKENDS:
        raise UserError(f"attention must be one of {'|'.join(BACKENDS)}, got {cfg.attention!r}")


@torch.compiler.disable  # data-dependent metadata, built eagerly once per batch; the body compiles
def positions_and_plan(
    segment_ids: torch.Tensor,
    position_ids: torch.Tensor | None,
    plan: AttentionPlan | None,
    *,
    max_position: int,
    causal: bool,
    backend: str,
    dtype: torch.dtype,
    branch_ids: torch.Tensor | None = None,
) -> tuple[torch.Tensor, AttentionPlan]:
    """Restarting positions (unless given, then range-checked) and the attention plan of a batch."""
    if position_ids is None:
        position_ids = make_position_ids(segment_ids)
    if position_ids.numel() and int(position_ids.max()) >= max_position:
        raise UserError(f"position_ids reach {int(position_ids.max())} but max_position={max_position}")
    if plan is None:
        plan = plan_attention(
            segment_ids,
            causal=causal,
            backend=backend,
            dtype=compute_dtype(segment_ids.device, dtype),
            branch_ids=branch_ids,
        )
    return position_ids, plan


def run_blocks(
    blocks: nn.ModuleList, x: torch.Tensor, plan: AttentionPlan, *, checkpoint: bool = False
) -> torch.Tensor:
    """Each block in turn.  # (B, T, H) -> (B, T, H)

    ``checkpoint`` (while gradients are recorded): a block keeps only its input, and its
    activations are recomputed in the backward pass (``torch.utils.checkpoint``, non-reentrant;
    the RNG state is replayed, so dropout draws the same masks and the gradients are the same)."""
    for block in blocks:
        if checkpoint and torch.is_grad_enabled():
            x = torch.utils.checkpoint.checkpoint(block, x, plan, use_reentrant=False)
        else:
            x = block(x, plan)
    return x


def compute_dtype(device: torch.device, dtype: torch.dtype) -> torch.dtype:
    """The dtype q/k/v will have: autocast's when autocast is on for ``device``, else ``dtype``."""
    if torch.is_autocast_enabled(device.type):
        return torch.get_autocast_dtype(device.type)
    return dtype
