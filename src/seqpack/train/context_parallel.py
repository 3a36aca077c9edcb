"""Context parallelism in ``seqpack train --context-parallel C``: the ranks of a run form groups of
``C`` consecutive ranks; the ``W / C`` groups are data-parallel (each takes its share of every
micro-batch's rows) and the ``C`` ranks of a group split each of the group's rows per document
(`seqpack.data.context_parallel`), attend across the group
(`seqpack.nn.attention.context_parallel`) and each compute their part of the rows' loss
(`seqpack.nn.losses.sharded_token_loss`), whose parts sum to the unsplit rows' loss.

    groups = cp_groups(world, cp=2)                  # a collective: every rank calls it
    shard = shard_batch(batch, cp=2, rank=groups.cp_rank)
    out = CPTaskModule(model, groups.group, "sequence")(shard)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from seqpack.data.context_parallel import cp_shard
from seqpack.data.sequences import IGNORE_INDEX
from seqpack.errors import UserError
from seqpack.nn.models.common import PackedOutput
from seqpack.train.config import TrainConfig
from seqpack.train.data import Units
from seqpack.train.distributed import World

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup


@dataclass(frozen=True)
class CPGroups:
    """This rank's place: ``cp_rank`` of ``cp`` in its CP ``group``, which is data-parallel rank
    ``dp_rank`` of ``dp_size``."""

    cp: int
    cp_rank: int
    dp_rank: int
    dp_size: int
    group: ProcessGroup | None


def dp_size(world_size: int, cp: int) -> int:
    """Data-parallel groups of ``cp`` ranks in ``world_size`` ranks; a ``ValueError`` when ``cp`` does not divide them."""
    if world_size % cp:
        raise UserError(
            f"--context-parallel {cp} does not divide the {world_size} ranks; run a multiple of {cp} "
            "ranks (ranks = data-parallel groups x context-parallel size)"
        )
    return world_size // cp


def cp_groups(world: World, cp: int) -> CPGroups:
    """The CP groups of ``world`` (ranks ``g*cp .. g*cp + cp - 1``); every rank must call it."""
    dp = dp_size(world.size, cp)
    group = None
    if world.size > 1:
        import torch.distributed as dist

        for g in range(world.size // cp):  # every rank creates every group, in the same order
            made = dist.new_group(list(range(g * cp, (g + 1) * cp)))
            if g == world.rank // cp:
                group = made
    return CPGroups(cp=cp, cp_rank=world.rank % cp, dp_rank=world.rank // cp, dp_size=dp, group=group)


def run_groups(cfg: TrainConfig, data: Units, model: torch.nn.Module, world: World) -> CPGroups | None:
    """A run's CP groups with ``--context-parallel C`` (None without), once the data (packed for
    ``C``, causal-LM rows) and the model are checked; every rank must call it."""
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
    check_cp_model(model)
    return cp_groups(world, cfg.context_parallel)


def aligned_targets(labels: torch.Tensor) -> torch.Tensor:
    """Causal-LM labels in the HF convention (the model shifts) -> the target of each position.  # (B, T)

    >>> aligned_targets(torch.tensor([[-100, 5, 6, -100, 7]])).tolist()
    [[5, 6, -100, 7, -100]]
    """
    out = torch.full_like(labels, IGNORE_INDEX)
    out[:, :-1] = labels[:, 1:]
    return out


def shard_batch(batch: dict[str, torch.Tensor], *, cp: int, rank: int) -> dict[str, torch.Tensor]:
    """Rank ``rank``'s share of every row of a causal-LM batch: ``input_ids``, ``segment_ids``,
    ``position_ids`` and the aligned ``targets``, each ``(B, T / cp)``."""
    cols = {
        "input_ids": batch["input_ids"],
        "segment_ids": batch["segment_ids"],
        "position_ids": batch["position_ids"],
        "targets": aligned_targets(batch["labels"]),
    }
    np_cols = {k: v.cpu().numpy() for k, v in cols.items()}
    rows = [
        cp_shard({k: v[b] for k, v in np_cols.items()}, np_cols["segment_ids"][b], cp=cp, rank=rank)
        for b in range(batch["input_ids"].shape[0])
    ]
    device = batch["input_ids"].device
    return {k: torch.from_numpy(np.stack([r[k] for r in rows])).to(device=device, dtype=cols[k].dtype) for k in cols}


def is_transformers(model: torch.nn.Module) -> bool:
    return type(model).__module__.startswith("transformers")


def check_cp_model(model: torch.nn.Module) -> None:
    """seqpack's GPT, or a transformers causal LM whose attention is ``seqpack_packed`` (it reads the
    plan each call passes); anything else is refused in one line."""
    from seqpack.nn.attention import REGISTRY
    from seqpack.nn.hf_attention import PACKED_IMPL
    from seqpack.nn.hf_support import check_packable

    if is_transformers(model):
        mixers = check_packable(model).mixers
        if mixers:
            raise UserError(
                f"--context-parallel splits each row across ranks, and {type(model).__name__}'s {', '.join(mixers)} "
                "layers carry state along the whole row; train it without --context-parallel"
            )
        impl = getattr(model.config, "_attn_implementation", None)
        if impl != PACKED_IMPL or not hasattr(model, "lm_head"):
            raise UserError(
                f"--context-parallel runs a transformers model through seqpack's attention, and "
                f"{type(model).__name__} runs {impl}: give a causal LM config that names no "
                "attn_implementation and no attention dropout"
            )
        missing = sorted(check_packable(model).needs - REGISTRY["context_parallel"].features)
        if missing:
            raise UserError(
                f"--context-parallel's attention cannot compute {type(model).__name__}'s "
                f"{' and '.join(missing)}; train it without --context-parallel"
            )
    elif not hasattr(model, "token_logits"):
        raise UserError(
            f"--context-parallel trains seqpack's GPT or a transformers causal LM, not {type(model).__name__}"
        )


class CPTaskModule(torch.nn.Module):
    """seqpack's GPT, or a transformers causal LM with ``seqpack_packed`` attention, on one rank's
    share (`shard_batch`); the output's loss is this rank's part."""

    def __init__(self, model: torch.nn.Module, group: ProcessGroup | None, reduction: str) -> None:
        super().__init__()
        self.model, self.group, self.reduction = model, group, reduction

    def forward(self, batch: dict[str, torch.Tensor]) -> PackedOutput:
        from seqpack.nn.attention import plan_context_parallel
        from seqpack.nn.losses import sharded_token_loss

        plan = plan_context_parallel(batch["segment_ids"], batch["position_ids"], group=self.group)
        if is_transformers(self.model):  # its attention is seqpack_packed: the plan goes in with the call
            logits = self.model(
                input_ids=batch["input_ids"], position_ids=batch["position_ids"], seqpack_plan=plan, use_cache=False
            ).logits
        else:
            h = self.model(
                batch["input_ids"], batch["segment_ids"], position_ids=batch["position_ids"], plan=plan, logits=False
            ).hidden
            logits = self.model.token_logits(h)  # type: ignore[operator]  # a seqpack GPT's method, typed through nn.Module.__getattr__
        loss = sharded_token_loss(
            logits, batch["targets"], batch["segment_ids"], group=self.group, reduction=self.reduction
        )
        return PackedOutput(loss=loss)


__all__ = [
    "CPGroups",
    "CPTaskModule",
    "aligned_targets",
    "check_cp_model",
    "cp_groups",
    "dp_size",
    "is_transformers",
    "run_groups",
    "shard_batch",
]
