"""Per-sequence losses of packed rows (paper §3.3): a packed batch gives the same loss as the
sequences run one by one.

Token losses (MLM, CLM) are binned by ``(row, segment)`` into ``(B, D)`` slots::

    reduction="sequence"  mean over each sequence's target tokens, then mean over sequences
                          (paper Listing 1; every sequence weighs the same)
    reduction="token"     sum over all target tokens / their count (the Hugging Face convention)

    >>> logits = torch.zeros(1, 4, 3)             # (B, T, V): uniform, every token costs log 3
    >>> labels = torch.tensor([[0, -100, 1, 2]])
    >>> seg = torch.tensor([[1, 1, 2, 2]])
    >>> round(float(token_loss(logits, labels, seg)), 4)
    1.0986
    >>> per, present = sequence_token_losses(logits, labels, seg)
    >>> present.tolist()
    [[True, True]]
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from seqpack.data.sequences import IGNORE_INDEX
from seqpack.errors import UserError
from seqpack.nn.cross_entropy import token_cross_entropy
from seqpack.nn.masks import check_depth

REDUCTIONS = ("sequence", "token")
PADDING_TARGET = "labels has a target (not -100) on a padding token (segment 0)"


def check_reduction(reduction: str) -> None:
    if reduction not in REDUCTIONS:
        raise UserError(f"reduction must be one of {'|'.join(REDUCTIONS)}, got {reduction!r}")


def _check_same(a: torch.Tensor, an: str, b: torch.Tensor, bn: str, dims: int) -> None:
    if tuple(a.shape[:dims]) != tuple(b.shape[:dims]):
        raise UserError(f"{an} {tuple(a.shape)} and {bn} {tuple(b.shape)} must agree in their first {dims} dims")


def _binned(losses: torch.Tensor, slots: torch.Tensor, num_slots: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Sum and count of ``losses`` (N,) per slot id (N,) -> two ``(num_slots,)`` tensors."""
    total = losses.new_zeros(num_slots).index_add(0, slots, losses)
    count = torch.bincount(slots, minlength=num_slots).to(losses.dtype)
    return total, count


def sequence_token_losses(
    logits: torch.Tensor,
    labels: torch.Tensor,
    segment_ids: torch.Tensor,
    *,
    max_depth: int | None = None,
    shift: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean cross-entropy of each sequence's target tokens. ``shift=True`` is the causal-LM
    convention: logits at ``t`` predict ``labels[t + 1]``.

    Args:
        logits: the logits `(B, T, V)`.
        labels: the targets `(B, T)`, -100 where there is none.
        segment_ids: each token's sequence in its row, 0 for padding `(B, T)`.
        max_depth: the slots per row `D` (`None`: the deepest row's).
        shift: logits at `t` predict `labels[t + 1]` (causal LM).

    Returns:
        `(losses, present)`, each `(B, D)`: a slot with no target has loss 0 and `present` False.
    """
    _check_same(logits, "logits", labels, "labels", 2)
    _check_same(labels, "labels", segment_ids, "segment_ids", 2)
    B, T = labels.shape
    k = 1 if shift else 0
    b, t = (labels[:, k:] != IGNORE_INDEX).nonzero(as_tuple=True)  # logits at t predict labels[t + k]
    if 2 * b.numel() >= B * T:  # packed rows: most positions are targets
        return _dense_token_losses(logits, labels, segment_ids, k, max_depth)
    return _gathered_token_losses(logits, labels, segment_ids, k, max_depth, (b, t))


def _gathered_token_losses(
    logits: torch.Tensor,
    labels: torch.Tensor,
    segment_ids: torch.Tensor,
    k: int,
    max_depth: int | None,
    where: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`sequence_token_losses` from the logits gathered at the N targets (few of them)."""
    B, T = labels.shape
    b, t = (labels[:, k:] != IGNORE_INDEX).nonzero(as_tuple=True) if where is None else where
    # index_select on the flat view: its backward is one index_add, not a scatter over (B, T, V)
    picked = logits.reshape(B * T, -1).index_select(0, b * T + t)  # (N, V)
    return _token_slot_losses(picked, labels[b, t + k], b, segment_ids[b, t + k], B, max_depth, segment_ids)


def _dense_token_losses(
    logits: torch.Tensor, labels: torch.Tensor, segment_ids: torch.Tensor, k: int, max_depth: int | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """`sequence_token_losses` when most positions have a target: the cross-entropy of every
    position (0 where none), no gather of the (N, V) logits and no scatter of their gradient.

    The labels and segments move left by ``k`` instead of the logits (a copy of (B, T, V)).
    Positions without a target fall into one extra slot, dropped at the end.
    """
    B, T = labels.shape
    D = check_depth(segment_ids, max_depth)
    target = torch.full_like(labels, IGNORE_INDEX)
    target[:, : T - k] = labels[:, k:]
    seg = torch.zeros_like(segment_ids)
    seg[:, : T - k] = segment_ids[:, k:]
    total, count = _aligned_slot_sums(logits, target, seg, D)
    present = count[:-1] > 0
    return (total[:-1] / count[:-1].clamp(min=1)).view(B, D), present.view(B, D)


def _aligned_slot_sums(
    logits: torch.Tensor, target: torch.Tensor, seg: torch.Tensor, D: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sum and count of the cross-entropy of each (row, sequence) slot, targets aligned with the
    logits (``target[t]`` is position ``t``'s): ``(B * D + 1,)`` each, the last slot gathering the
    positions without a target.  # (B, T, V), (B, T), (B, T) -> (B*D+1,), (B*D+1,)"""
    B, T = target.shape
    has = target != IGNORE_INDEX
    if bool((has & (seg == 0)).any()):
        raise UserError(PADDING_TARGET)
    ce = token_cross_entropy(logits.reshape(B * T, -1), target.reshape(-1))  # (B*T,) float32, 0 where no target
    rows = torch.arange(B, device=target.device)[:, None]
    slots = torch.where(has, rows * D + seg - 1, B * D).reshape(-1)
    return _binned(ce, slots, B * D + 1)


def _token_slot_losses(
    logits: torch.Tensor,
    targets: torch.Tensor,
    rows: torch.Tensor,
    segs: torch.Tensor,
    batch: int,
    max_depth: int | None,
    segment_ids: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits already gathered at the N target tokens: (N, V), targets (N,), rows/segs (N,)."""
    D = check_depth(segment_ids, max_depth)
    if segs.numel() and int(segs.min()) < 1:
        raise UserError(PADDING_TARGET)
    ce = token_cross_entropy(logits, targets)  # (N,) float32
    total, count = _binned(ce, rows * D + segs - 1, batch * D)
    present = count > 0
    return (total / count.clamp(min=1)).view(batch, D), present.view(batch, D)


def token_loss(
    logits: torch.Tensor,
    labels: torch.Tensor,
    segment_ids: torch.Tensor,
    *,
    reduction: str = "sequence",
    shift: bool = False,
) -> torch.Tensor:
    """Scalar MLM (``shift=False``) or causal-LM (``shift=True``) loss of a packed batch.

    Args:
        logits: the logits `(B, T, V)`.
        labels: the targets `(B, T)`, -100 where there is none.
        segment_ids: each token's sequence in its row, 0 for padding `(B, T)`.
        reduction: `sequence` (each sequence's mean, then their mean) or `token` (the mean over tokens).
        shift: logits at `t` predict `labels[t + 1]` (causal LM).

    Returns:
        The loss, a scalar.

    Raises:
        UserError: an unknown reduction.
    """
    check_reduction(reduction)
    if reduction == "token":
        _check_same(logits, "logits", labels, "labels", 2)
        if shift:
            logits, labels = logits[:, :-1], labels[:, 1:]
        return F.cross_entropy(
            logits.reshape(-1, logits.shape[-1]).float(), labels.reshape(-1), ignore_index=IGNORE_INDEX
        )
    per, present = sequence_token_losses(logits, labels, segment_ids, shift=shift)
    return mean_over(per, present)


def mean_over(values: torch.Tensor, present: torch.Tensor) -> torch.Tensor:
    """Mean of ``values`` where ``present`` (0 when nothing is present, with a gradient path)."""
    n = present.sum()
    return (values * present).sum() / n.clamp(min=1)


def target_loss(
    logits: torch.Tensor,
    targets: torch.Tensor,
    rows: torch.Tensor,
    segs: torch.Tensor,
    segment_ids: torch.Tensor,
    *,
    reduction: str = "sequence",
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Token loss from logits computed only at the N target tokens. Projecting onto the
    vocabulary only where there is a target is what BERT pre-training does (``max_predictions``).

    Args:
        logits: the logits at the targets `(N, V)`.
        targets: the target ids `(N,)`.
        rows: each target's row `(N,)`.
        segs: each target's segment id `(N,)`.
        segment_ids: each token's sequence in its row, 0 for padding `(B, T)`.
        reduction: `sequence` (each sequence's mean, then their mean) or `token` (the mean over tokens).

    Returns:
        `(loss, per_sequence, present)`: a scalar, `(B, D)` and bool `(B, D)`.

    Raises:
        UserError: an unknown reduction.
    """
    check_reduction(reduction)
    per, present = _token_slot_losses(logits, targets, rows, segs, segment_ids.shape[0], None, segment_ids)
    if reduction == "token":
        loss = F.cross_entropy(logits.float(), targets) if targets.numel() else logits.sum() * 0
    else:
        loss = mean_over(per, present)
    return loss, per, present


def slot_cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Classification / NSP cross-entropy over slots.

    Args:
        logits: per-slot logits `(B, D, C)`.
        labels: per-slot class ids `(B, D)`, -100 in empty slots.

    Returns:
        `(loss, per_slot)`: the mean over real slots, and `(B, D)`.

    Raises:
        UserError: shapes other than `(B, D, C)` and `(B, D)`.
    """
    if logits.ndim != 3 or labels.shape != logits.shape[:2]:
        raise UserError(
            f"logits must be (B, D, C) and labels (B, D); got {tuple(logits.shape)} and {tuple(labels.shape)}"
        )
    per = F.cross_entropy(logits.float().transpose(1, 2), labels, ignore_index=IGNORE_INDEX, reduction="none")
    return mean_over(per, labels != IGNORE_INDEX), per


def multilabel_loss(logits: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Multi-label BCE over slots: ``logits`` and ``targets`` (B, D, C), targets -100 in empty
    slots. Mean over real sequences x labels; also returns the per-slot mean (B, D), 0 in
    empty slots.

    Args:
        logits: per-slot logits `(B, D, C)`.
        targets: per-slot 0/1 targets `(B, D, C)`, -100 in empty slots.

    Returns:
        `(loss, per_slot)`: a scalar, and `(B, D)`.
    """
    if logits.shape != targets.shape or logits.ndim != 3:
        raise UserError(
            f"logits and targets must both be (B, D, C); got {tuple(logits.shape)} and {tuple(targets.shape)}"
        )
    present = (targets != IGNORE_INDEX).all(dim=-1)  # (B, D)
    t = torch.where(present[..., None], targets, torch.zeros_like(targets)).float()
    bce = F.binary_cross_entropy_with_logits(logits.float(), t, reduction="none").mean(dim=-1)  # (B, D)
    return mean_over(bce, present), bce * present


def qa_logits(
    start_logits: torch.Tensor, end_logits: torch.Tensor, segment_ids: torch.Tensor, max_depth: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Unpack row logits (B, T) into per-slot logits (B, D, T): slot ``d`` keeps its own
    sequence's tokens and is ``-inf`` everywhere else (0 would leak probability mass to the
    other sequences' tokens, a known pitfall).

    Args:
        start_logits: the rows' start logits `(B, T)`.
        end_logits: the rows' end logits `(B, T)`.
        segment_ids: each token's sequence in its row, 0 for padding `(B, T)`.
        max_depth: the slots per row `D`.

    Returns:
        `(start, end)`, each `(B, D, T)`.
    """
    for name, x in (("start_logits", start_logits), ("end_logits", end_logits)):
        if x.shape != segment_ids.shape:
            raise UserError(f"{name} {tuple(x.shape)} must have the shape of segment_ids {tuple(segment_ids.shape)}")
    check_depth(segment_ids, max_depth)
    slot = torch.arange(1, max_depth + 1, device=segment_ids.device)
    inside = segment_ids[:, None, :] == slot[None, :, None]  # (B, D, T)
    neg = torch.tensor(float("-inf"), dtype=start_logits.dtype, device=start_logits.device)
    return (
        torch.where(inside, start_logits[:, None, :], neg),
        torch.where(inside, end_logits[:, None, :], neg),
    )


def qa_loss(
    start_slots: torch.Tensor, end_slots: torch.Tensor, start_positions: torch.Tensor, end_positions: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """SQuAD loss per slot, ``(CE(start) + CE(end)) / 2``.

    Args:
        start_slots: per-slot start logits `(B, D, T)` (`qa_logits`).
        end_slots: per-slot end logits `(B, D, T)`.
        start_positions: each slot's answer start, in row coordinates `(B, D)`, -100 in empty slots.
        end_positions: each slot's answer end `(B, D)`.

    Returns:
        `(loss, per_slot)`: the mean over real slots, and `(B, D)`.

    Raises:
        UserError: positions that are not `(B, D)`.
    """
    if start_positions.shape != start_slots.shape[:2] or end_positions.shape != start_positions.shape:
        raise UserError(
            f"start/end_positions {tuple(start_positions.shape)}/{tuple(end_positions.shape)} must be (B, D) "
            f"of the slot logits {tuple(start_slots.shape)}"
        )
    present = start_positions != IGNORE_INDEX

    def ce(slots: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        slots = torch.where(present[..., None], slots.float(), 0.0)  # empty slots are all -inf: no nan
        logp = torch.log_softmax(slots, dim=-1)  # (B, D, T)
        idx = torch.where(present, pos, torch.zeros_like(pos))[..., None]
        return -torch.where(present, logp.gather(-1, idx).squeeze(-1), torch.zeros_like(idx[..., 0], dtype=logp.dtype))

    per = (ce(start_slots, start_positions) + ce(end_slots, end_positions)) / 2
    return mean_over(per, present), per


def _group_all_reduce(t: torch.Tensor, group: object, *, op: str = "sum") -> torch.Tensor:
    """``t`` reduced over ``group`` (itself without a process group)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size(group) == 1:  # type: ignore[arg-type]  # torch's stub wants a ProcessGroup; None is the default group
        return t
    t = t.clone()
    dist.all_reduce(t, op=dist.ReduceOp.MAX if op == "max" else dist.ReduceOp.SUM, group=group)
    return t


def sharded_token_loss(
    logits: torch.Tensor,
    targets: torch.Tensor,
    segment_ids: torch.Tensor,
    *,
    group: object = None,
    reduction: str = "sequence",
) -> torch.Tensor:
    """This rank's part of the loss of rows split across context-parallel ranks; the parts of all
    ranks of ``group`` sum to the loss of the unsplit rows.

    ``logits`` (B, T, V) and ``targets`` (B, T) are aligned (the target of position ``t`` is
    ``targets[t]``: shifted before the split), ``segment_ids`` (B, T) the documents' ids in the whole
    row. ``sequence``: the mean over documents of each document's mean target loss, every count
    taken over all ranks (a document split across ranks weighs as much as one that is not);
    ``token``: the sum over all target tokens divided by their count over all ranks. The counts
    carry no gradient; each rank's part differentiates its own tokens' terms.
    """
    check_reduction(reduction)
    _check_same(targets, "targets", segment_ids, "segment_ids", 2)
    local_depth = torch.tensor([int(segment_ids.max()) if segment_ids.numel() else 0], device=targets.device)
    D = max(1, int(_group_all_reduce(local_depth, group, op="max")))
    total, count = _aligned_slot_sums(logits, targets, segment_ids, D)
    count = _group_all_reduce(count.detach(), group)[:-1]
    if reduction == "token":
        return total[:-1].sum() / count.sum().clamp(min=1)
    present = count > 0
    return (total[:-1] / count.clamp(min=1))[present].sum() / present.sum().clamp(min=1)
