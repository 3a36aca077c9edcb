"""Process group set-up for ``torchrun`` (gloo on CPU, nccl on GPU); a no-op for one process.

torchrun --standalone --nproc-per-node 2 -m seqpack train --data packed/ --out run/
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class World:
    rank: int = 0
    size: int = 1
    device: torch.device = torch.device("cpu")

    @property
    def main(self) -> bool:
        return self.rank == 0

    def all_sum(self, t: torch.Tensor) -> torch.Tensor:
        """Sum over ranks (``t`` itself for one process)."""
        if self.size > 1:
            t = t.to(self.device)
            dist.all_reduce(t)
            t = t.cpu()
        return t

    def gather_objects(self, obj: Any) -> list[Any]:
        """Every rank's ``obj`` (picklable), in rank order, on every rank."""
        if self.size == 1:
            return [obj]
        out: list[Any] = [None] * self.size
        dist.all_gather_object(out, obj)
        return out

    def barrier(self) -> None:
        if self.size > 1:
            dist.barrier()


def init_world() -> World:
    """The ranks ``torchrun`` started (``WORLD_SIZE``/``RANK`` in the environment), or one."""
    size = int(os.environ.get("WORLD_SIZE", "1"))
    cuda = torch.cuda.is_available()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device(f"cuda:{local}") if cuda else torch.device("cpu")
    if size == 1:
        return World(device=device)
    if not dist.is_initialized():
        if cuda:
            torch.cuda.set_device(device)
        dist.init_process_group("nccl" if cuda else "gloo")
    return World(rank=dist.get_rank(), size=dist.get_world_size(), device=device)


def close_world(world: World) -> None:
    if world.size > 1 and dist.is_initialized():
        dist.destroy_process_group()
