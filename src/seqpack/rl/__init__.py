"""RL rollouts packed: GRPO groups that share their prompt, per-token log-probabilities from packed
rows, and TRL's GRPO losses on them.

    packed = pack_rollouts(prompt_ids, completion_ids, max_len=4096)      # numpy: rows + the map back
    logps = packed_logprobs(model, prompt_ids, completion_ids, max_len=4096)  # per prompt, per completion

``pack_rollouts`` needs no torch; the rest loads it on first use.
"""

from __future__ import annotations

from typing import Any

from seqpack.rl.rollouts import LAYOUTS, PackedRollouts, pack_rollouts

TYPE_CHECKING = False  # typing.TYPE_CHECKING; the names below load torch, on first use
if TYPE_CHECKING:
    from seqpack.rl.logprobs import packed_logprobs, rollout_logprobs, split_completions, to_padded
    from seqpack.rl.losses import GRPOLoss, grpo_loss

__all__ = [
    "LAYOUTS",
    "GRPOLoss",
    "PackedRollouts",
    "grpo_loss",
    "pack_rollouts",
    "packed_logprobs",
    "rollout_logprobs",
    "split_completions",
    "to_padded",
]

_TORCH = {
    "packed_logprobs": "logprobs",
    "rollout_logprobs": "logprobs",
    "split_completions": "logprobs",
    "to_padded": "logprobs",
    "grpo_loss": "losses",
    "GRPOLoss": "losses",
}


def __getattr__(name: str) -> Any:
    if name in _TORCH:  # torch, loaded only when asked for
        import importlib

        return getattr(importlib.import_module(f"seqpack.rl.{_TORCH[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
