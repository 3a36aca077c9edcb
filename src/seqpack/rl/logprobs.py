"""Per-token log-probabilities (and entropies) of RL completions, from packed rows.

The model runs once over the packed rows (`seqpack.nn.branch_states.causal_states`: seqpack's
attention plan, a branch mask, or padding-free, as the model's attention takes them), and its
vocabulary head only at the ``N`` positions that predict a completion token, never at prompt or
padding positions. Log-softmax runs in float32 over ``logits / temperature`` (TRL's sampling
temperature), ``CHUNK`` positions at a time, each chunk recomputed in the backward pass when
gradients are needed, so the ``(N, V)`` logits are never held whole.

    logps = packed_logprobs(model, prompt_ids, completion_ids, max_len=4096)
    logps[i][j]          # (len(completion_ids[i][j]),) float32, carrying gradients to the model
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from seqpack._ids import check_vocab
from seqpack.errors import UserError
from seqpack.nn.branch_states import causal_states
from seqpack.nn.heads import embedding_rows
from seqpack.rl.rollouts import PackedRollouts, pack_rollouts

#: positions whose logits are made at once: 2,048 x a 128K vocabulary in float32 is 1 GiB
CHUNK = 2048


def rollout_tensors(packed: PackedRollouts, device: torch.device | str | None = None) -> dict[str, torch.Tensor]:
    """The rows as a batch: ``input_ids``, ``segment_ids``, ``position_ids`` and, in the group
    layout, ``branch_ids``.  # each (R, T)"""
    out = {k: torch.from_numpy(getattr(packed, k)).to(device) for k in ("input_ids", "segment_ids", "position_ids")}
    if packed.layout == "shared-prefix":
        out["branch_ids"] = torch.from_numpy(packed.branch_ids).to(device)
    return out


def _chunk(
    head: Callable[[torch.Tensor], torch.Tensor],
    hidden: torch.Tensor,
    targets: torch.Tensor,
    temperature: float,
    entropy: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    logits = head(hidden).float() / temperature  # (n, V)
    logp = F.log_softmax(logits, dim=-1)
    token = logp.gather(1, targets[:, None]).squeeze(1)
    ent = -(logp.exp() * logp).sum(-1) if entropy else torch.zeros_like(token)
    return token, ent


def rollout_logprobs(
    model: torch.nn.Module, packed: PackedRollouts, *, temperature: float = 1.0, entropies: bool = False
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Each completion token's log-probability under ``model`` (and the entropy of the distribution
    that predicts it), in rollout order.  # (N,), (N,) or None

    Args:
        model: a transformers causal LM or seqpack's `GPT`.
        packed: the packed rollouts.
        temperature: the logits are divided by it, > 0.
        entropies: also return each distribution's entropy (detached).

    Returns:
        `(logps, entropies)`: float32 `(N,)`, and `(N,)` or `None`.

    Raises:
        UserError: a temperature <= 0, or an id past the model's vocabulary.
    """
    if not temperature > 0:
        raise UserError(f"temperature must be > 0, got {temperature}")
    device = next(model.parameters()).device
    if packed.input_ids.size:  # an id past the embedding table: one line, not torch's IndexError inside the model
        check_vocab(int(packed.input_ids.max()), embedding_rows(model), what="the rollouts")
    batch = rollout_tensors(packed, device)
    hidden, head = causal_states(model, batch)
    rows = torch.from_numpy(packed.token_rows).to(device)
    at = hidden[rows, torch.from_numpy(packed.predictor_cols).to(device)]  # (N, H)
    targets = batch["input_ids"][rows, torch.from_numpy(packed.token_cols).to(device)]
    parts = []
    for lo in range(0, targets.numel(), CHUNK):
        h, t = at[lo : lo + CHUNK], targets[lo : lo + CHUNK]
        if torch.is_grad_enabled() and h.requires_grad:  # the chunk's logits are made again in backward
            parts.append(checkpoint(_chunk, head, h, t, temperature, entropies, use_reentrant=False))
        else:
            parts.append(_chunk(head, h, t, temperature, entropies))
    logps = torch.cat([p[0] for p in parts]) if parts else at.new_zeros(0)
    ents = torch.cat([p[1] for p in parts]).detach() if entropies and parts else None
    return logps, ents


def split_completions(values: torch.Tensor, packed: PackedRollouts) -> list[list[torch.Tensor]]:
    """``(N,)`` values in rollout order -> per prompt, per completion, a 1-D tensor.

    Args:
        values: one value per completion token, in rollout order `(N,)`.
        packed: the packed rollouts.

    Returns:
        Per prompt, per completion, `(completion length,)`.
    """
    flat = list(torch.split(values, packed.completion_lengths.tolist()))
    g = packed.group_offsets
    return [flat[g[i] : g[i + 1]] for i in range(len(g) - 1)]


def to_padded(
    values: torch.Tensor, packed: PackedRollouts, *, width: int | None = None, fill: float = 0.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(N,)`` values in rollout order -> TRL's right-padded ``(C, width)`` form and its mask.

    Args:
        values: one value per completion token, in rollout order `(N,)`.
        packed: the packed rollouts.
        width: the padded width (`None`: the longest completion).
        fill: the value of padding.

    Returns:
        `(padded, mask)`: `(C, width)` each, the mask bool.
    """
    completion, column = (torch.from_numpy(x).to(values.device) for x in packed.padded_index())
    width = int(packed.completion_lengths.max()) if width is None else width
    out = values.new_full((packed.completion_lengths.size, width), fill)
    out = out.index_put((completion, column), values)
    mask = torch.zeros(out.shape, dtype=torch.bool, device=values.device).index_put(
        (completion, column), torch.tensor(True)
    )
    return out, mask


def packed_logprobs(
    model: torch.nn.Module,
    prompt_ids: Sequence[Sequence[int]],
    completion_ids: Sequence[Sequence[Sequence[int]]],
    *,
    max_len: int,
    layout: str = "shared-prefix",
    temperature: float = 1.0,
) -> list[list[torch.Tensor]]:
    """Per prompt, per completion, a 1-D float32 tensor of its tokens' log-probabilities under
    ``model`` (a transformers causal LM or seqpack's GPT), carrying gradients to it; the rollouts
    packed into rows of at most ``max_len`` tokens (`seqpack.rl.pack_rollouts`, ``layout``
    ``shared-prefix`` or ``pairs``), the model run once over them.

    Args:
        model: a transformers causal LM or seqpack's `GPT`.
        prompt_ids: each prompt's token ids.
        completion_ids: per prompt, its completions' token ids.
        max_len: the row length.
        layout: `shared-prefix` or `pairs`.
        temperature: the logits are divided by it, > 0.

    Returns:
        Per prompt, per completion, float32 `(completion length,)`.

    Raises:
        UserError: a temperature <= 0, an id past the model's vocabulary, or rollouts that do not fit.
    """
    packed = pack_rollouts(prompt_ids, completion_ids, max_len=max_len, layout=layout)
    logps, _ = rollout_logprobs(model, packed, temperature=temperature)
    return split_completions(logps, packed)


__all__ = ["CHUNK", "packed_logprobs", "rollout_logprobs", "rollout_tensors", "split_completions", "to_padded"]
