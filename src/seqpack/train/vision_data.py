"""Deprecated: image-text rows are a packed dataset like any other, trained by
`seqpack.train.data.TrainData` (their task makes the batches). ``VisionTrainData`` is that class."""

from typing import Any


def __getattr__(name: str) -> Any:
    if name == "VisionTrainData":
        from seqpack._lazy import renamed
        from seqpack.train.data import TrainData

        return renamed("seqpack.train", f"vision_data.{name}", "data.TrainData", TrainData)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
