"""Training over packed datasets: the loop, its config, checkpoints, bench and compare.

from seqpack.train import TrainConfig, train
summary = train(TrainConfig(data="packed_mlm/", out="runs/packed", size="tiny", steps=100))
"""

from __future__ import annotations

from seqpack.train.config import TrainConfig
from seqpack.train.loop import train

__all__ = ["TrainConfig", "train"]
