"""Segment ids -> attention masks, position ids and varlen indices, batched (no loop over sequences).

A packed row holds sequences 1..k as contiguous runs, then padding 0::

    segment_ids   [1 1 1 2 2 0]        (B, T)
    position_ids  [0 1 2 0 1 0]        restart at each sequence
    attention_mask (bidirectional), row = query, column = key:
                   1 1 1 . . .
                   1 1 1 . . .
                   1 1 1 . . .
                   . . . 1 1 .
                   . . . 1 1 .
                   . . . . . .         padding attends to nothing (SDPA returns 0 there)

    >>> seg = torch.tensor([[1, 1, 1, 2, 2, 0]])
    >>> position_ids(seg).tolist()
    [[0, 1, 2, 0, 1, 0]]
    >>> attention_mask(seg, causal=True)[0, 0].int().tolist()[3:5]
    [[0, 0, 0, 1, 0, 0], [0, 0, 0, 1, 1, 0]]
    >>> cu, m = cu_seqlens(seg), max_seqlen(seg)
    >>> cu.tolist(), m
    ([0, 3, 5], 3)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from seqpack.errors import UserError

if TYPE_CHECKING:
    from torch.nn.attention.flex_attention import BlockMask


def _check_2d(x: torch.Tensor, name: str) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor (B, T), got {type(x).__name__}")
    if x.ndim != 2:
        raise UserError(f"{name} must be 2-D (B, T), got shape {tuple(x.shape)}")
    if x.dtype.is_floating_point or x.dtype.is_complex or x.dtype == torch.bool:
        raise UserError(f"{name} must hold integers, got dtype {x.dtype}")


def check_segment_ids(segment_ids: torch.Tensor, *, name: str = "segment_ids") -> None:
    """Check that every row is runs ``1, 2, .., k`` in order, then only 0s.

    >>> check_segment_ids(torch.tensor([[1, 1, 2, 0], [1, 2, 3, 3]]))
    >>> check_segment_ids(torch.tensor([[1, 0, 2, 2]]))
    Traceback (most recent call last):
    ...
    seqpack.errors.UserError: segment_ids row 0 is not contiguous runs 1..k followed by 0s: position 2 goes from 0 to 2

    Args:
        segment_ids: each token's sequence in its row, 0 for padding `(B, T)`.
        name: the argument's name, for the message.

    Raises:
        UserError: a row that is not runs `1..k` followed by 0s.
    """
    _check_2d(segment_ids, name)
    if segment_ids.shape[1] == 0:
        return
    s = segment_ids
    first_bad = (s[:, 0] != 0) & (s[:, 0] != 1)
    prev, cur = s[:, :-1], s[:, 1:]
    ok = (cur == prev) | ((prev > 0) & ((cur == prev + 1) | (cur == 0)))
    bad = torch.cat([first_bad[:, None], ~ok], dim=1)
    if bool(bad.any()):
        b, t = (int(v) for v in bad.nonzero()[0])
        what = f"starts at {int(s[b, 0])}" if t == 0 else f"goes from {int(s[b, t - 1])} to {int(s[b, t])}"
        raise UserError(f"{name} row {b} is not contiguous runs 1..k followed by 0s: position {t} {what}")


def position_ids(segment_ids: torch.Tensor, *, start: int = 0) -> torch.Tensor:
    """Position of each token inside its sequence, plus ``start``; padding gets ``start``.  # (B, T)

    Args:
        segment_ids: each token's sequence in its row, 0 for padding `(B, T)`.
        start: the first position of each sequence.

    Returns:
        The positions, int64 `(B, T)`.
    """
    _check_2d(segment_ids, "segment_ids")
    B, T = segment_ids.shape
    t = torch.arange(T, device=segment_ids.device).expand(B, T)
    is_start = torch.ones_like(segment_ids, dtype=torch.bool)
    is_start[:, 1:] = segment_ids[:, 1:] != segment_ids[:, :-1]
    first = torch.where(is_start, t, torch.zeros_like(t)).cummax(dim=1).values
    pos = t - first + start
    return torch.where(segment_ids > 0, pos, torch.full_like(pos, start))


def attention_mask(
    segment_ids: torch.Tensor,
    *,
    causal: bool = False,
    dtype: torch.dtype = torch.bool,
    branch_ids: torch.Tensor | None = None,
) -> torch.Tensor:
    """``(B, 1, T, T)`` mask: query ``i`` may see key ``j`` iff both share a non-zero segment
    (and ``j <= i`` when ``causal``).

    ``dtype=torch.bool`` gives True where allowed (SDPA); a float dtype gives an additive
    mask, 0 where allowed and ``finfo(dtype).min`` elsewhere (eager attention).

    ``branch_ids`` (B, T) shares a prefix between branches of one segment: key ``j`` is seen
    only if it is shared (branch 0) or on the query's own branch. The preference task's
    shared-prefix layout (prompt ``p``, chosen ``c``, rejected ``r``; causal)::

        branch  0 0 1 1 2 2
                p p c c r r
           p    1 . . . . .
           p    1 1 . . . .
           c    1 1 1 . . .
           c    1 1 1 1 . .
           r    1 1 . . 1 .        the rejected response never sees the chosen one
           r    1 1 . . 1 1

    >>> seg, br = torch.tensor([[1, 1, 1, 1, 1, 1]]), torch.tensor([[0, 0, 1, 1, 2, 2]])
    >>> attention_mask(seg, causal=True, branch_ids=br)[0, 0, 4].int().tolist()
    [1, 1, 0, 0, 1, 0]

    Args:
        segment_ids: each token's sequence in its row, 0 for padding `(B, T)`.
        causal: also hide the keys after each query.
        dtype: `torch.bool`, or a float dtype for an additive mask.
        branch_ids: each token's branch, 0 for the shared prefix `(B, T)` (`None`: no branches).

    Returns:
        The mask `(B, 1, T, T)`.
    """
    _check_2d(segment_ids, "segment_ids")
    s = segment_ids
    allowed = (s[:, :, None] == s[:, None, :]) & (s[:, None, :] > 0)  # (B, T, T)
    if branch_ids is not None:
        b = branch_ids
        allowed &= (b[:, None, :] == 0) | (b[:, :, None] == b[:, None, :])
    if causal:
        T = s.shape[1]
        allowed &= torch.ones(T, T, dtype=torch.bool, device=s.device).tril()
    allowed = allowed[:, None]  # (B, 1, T, T)
    if dtype == torch.bool:
        return allowed
    if not dtype.is_floating_point:
        raise UserError(f"attention_mask dtype must be torch.bool or a float dtype, got {dtype}")
    zero = torch.zeros((), dtype=dtype, device=s.device)
    return torch.where(allowed, zero, torch.finfo(dtype).min)


def segment_ids_from_eos(input_ids: torch.Tensor, eos_id: int, *, pad_id: int | None = None) -> torch.Tensor:
    """Segments of rows where each sequence ends with ``eos_id`` (the causal-LM form).

    Tokens after an EOS start the next segment; ``pad_id`` tokens after the last EOS become 0.

    >>> segment_ids_from_eos(torch.tensor([[5, 6, 0, 7, 0, 9, 9]]), 0, pad_id=9).tolist()
    [[1, 1, 1, 2, 2, 0, 0]]

    Args:
        input_ids: packed rows `(B, T)`.
        eos_id: the token that ends a sequence.
        pad_id: the padding token after the last EOS (`None`: no padding).

    Returns:
        The segment ids `(B, T)`.
    """
    _check_2d(input_ids, "input_ids")
    is_eos = input_ids == eos_id
    boundary = torch.zeros_like(is_eos)
    boundary[:, 1:] = is_eos[:, :-1]
    seg = boundary.long().cumsum(dim=1) + 1
    if pad_id is not None:
        seg = _zero_trailing_pad(seg, input_ids, pad_id, after=is_eos)
    return seg


def segment_ids_from_bos(input_ids: torch.Tensor, bos_id: int, *, pad_id: int | None = None) -> torch.Tensor:
    """Segments of rows where each sequence starts with ``bos_id``; a row's leading tokens
    before any BOS form segment 1; ``pad_id`` tokens at the end of the row become 0.

    >>> segment_ids_from_bos(torch.tensor([[1, 5, 1, 6, 6, 0]]), 1, pad_id=0).tolist()
    [[1, 1, 2, 2, 2, 0]]

    Args:
        input_ids: packed rows `(B, T)`.
        bos_id: the token that starts a sequence.
        pad_id: the padding token at a row's end (`None`: no padding).

    Returns:
        The segment ids `(B, T)`.
    """
    _check_2d(input_ids, "input_ids")
    starts = input_ids == bos_id
    starts[:, 0] = True
    seg = starts.long().cumsum(dim=1)
    if pad_id is not None:
        seg = _zero_trailing_pad(seg, input_ids, pad_id, after=None)
    return seg


def _zero_trailing_pad(
    seg: torch.Tensor, input_ids: torch.Tensor, pad_id: int, *, after: torch.Tensor | None
) -> torch.Tensor:
    """Zero the run of ``pad_id`` that ends each row (only once the row's last sequence ended)."""
    not_pad = input_ids != pad_id
    T = input_ids.shape[1]
    idx = torch.arange(T, device=input_ids.device).expand_as(input_ids)
    last_real = torch.where(not_pad, idx, torch.full_like(idx, -1)).max(dim=1, keepdim=True).values
    trailing = idx > last_real
    if after is not None:  # rows ending in EOS: padding only counts after the final EOS
        last_eos = torch.where(after, idx, torch.full_like(idx, -1)).max(dim=1, keepdim=True).values
        trailing &= last_eos == last_real
    return torch.where(trailing, torch.zeros_like(seg), seg)


def shares_prefix(segment_ids: torch.Tensor, branch_ids: torch.Tensor) -> bool:
    """True when some sequence has a shared part (a real token on branch 0) that branches see."""
    return bool(((branch_ids == 0) & (segment_ids > 0)).any())


def split_branches(segment_ids: torch.Tensor, branch_ids: torch.Tensor) -> torch.Tensor:
    """Segments where every branch of a sequence is a sequence of its own (exact when no branch
    shares a prefix: the preference task's ``pairs`` layout), so any backend can run them.  # (B, T)

    >>> split_branches(torch.tensor([[1, 1, 1, 2, 2, 0]]), torch.tensor([[1, 1, 2, 1, 2, 0]])).tolist()
    [[1, 1, 2, 3, 4, 0]]
    """
    _check_2d(segment_ids, "segment_ids")
    s, b = segment_ids, branch_ids
    start = torch.ones_like(s, dtype=torch.bool)
    start[:, 1:] = (s[:, 1:] != s[:, :-1]) | (b[:, 1:] != b[:, :-1])
    new = (start & (s > 0)).long().cumsum(dim=1)
    return torch.where(s > 0, new, torch.zeros_like(new)).to(s.dtype)


def unpad_index(segment_ids: torch.Tensor) -> torch.Tensor:
    """Flat indices ``b * T + t`` of the real tokens, row-major.  # (total,)

    Args:
        segment_ids: each token's sequence in its row, 0 for padding `(B, T)`.

    Returns:
        The indices, int64 `(total,)`.
    """
    _check_2d(segment_ids, "segment_ids")
    return (segment_ids.reshape(-1) > 0).nonzero().squeeze(1)


def sequence_lengths(segment_ids: torch.Tensor) -> torch.Tensor:
    """Length of every sequence, row-major (row 0's sequences, then row 1's...).  # (N,)

    Args:
        segment_ids: each token's sequence in its row, 0 for padding `(B, T)`.

    Returns:
        The lengths `(N,)`.
    """
    _check_2d(segment_ids, "segment_ids")
    s = segment_ids
    depth = int(s.max()) if s.numel() else 0
    key = (torch.arange(s.shape[0], device=s.device)[:, None] * (depth + 1) + s).reshape(-1)
    counts = torch.bincount(key, minlength=s.shape[0] * (depth + 1)).view(s.shape[0], depth + 1)[:, 1:]
    real = torch.arange(1, depth + 1, device=s.device)[None, :] <= s.max(dim=1, keepdim=True).values
    return counts[real]


def cu_seqlens(segment_ids: torch.Tensor) -> torch.Tensor:
    """Cumulative sequence lengths ``[0, l0, l0+l1, ...]`` as int32, for varlen kernels.  # (N+1,)

    Args:
        segment_ids: each token's sequence in its row, 0 for padding `(B, T)`.

    Returns:
        The boundaries, int32 `(N + 1,)`.
    """
    lengths = sequence_lengths(segment_ids)
    out = torch.zeros(lengths.numel() + 1, dtype=torch.int32, device=segment_ids.device)
    out[1:] = lengths.cumsum(0)
    return out


#: row-end padding is cut into runs of at most this many tokens (the flash kernels' tile)
PAD_BLOCK = 128


def row_runs(segment_ids: torch.Tensor, *, pad_block: int = PAD_BLOCK) -> torch.Tensor:
    """Boundaries of the runs of the flattened rows ``(B*T,)``, as int32 for varlen kernels.  # (R+1,)

    Every sequence is a run, and so is each row's padding, cut at multiples of ``pad_block``
    within the row: a varlen kernel then reads the rows as they are (``B*T`` tokens, no gather,
    no scatter), padding attends only to padding of its own block, and its cost stays under
    one ``pad_block``-square tile per block (128: the flash kernels' tile).

    >>> row_runs(torch.tensor([[1, 1, 2, 0, 0, 0], [1, 1, 1, 1, 1, 1]]), pad_block=2).tolist()
    [0, 2, 3, 4, 6, 12]

    Args:
        segment_ids: each token's sequence in its row, 0 for padding `(B, T)`.
        pad_block: the padding's run length at most.

    Returns:
        The boundaries, int32 `(R + 1,)`.
    """
    _check_2d(segment_ids, "segment_ids")
    if pad_block < 1:
        raise UserError(f"pad_block must be at least 1, got {pad_block}")
    s = segment_ids
    B, T = s.shape
    if B * T == 0:
        return torch.zeros(1, dtype=torch.int32, device=s.device)
    t = torch.arange(T, device=s.device)
    new = (s == 0) & (t % pad_block == 0)[None, :]  # (B, T): padding starts a run at each block
    new[:, 0] = True
    new[:, 1:] |= s[:, 1:] != s[:, :-1]
    starts = new.reshape(-1).nonzero().squeeze(1)
    out = torch.empty(starts.numel() + 1, dtype=torch.int32, device=s.device)
    out[:-1] = starts
    out[-1] = B * T
    return out


def max_seqlen(segment_ids: torch.Tensor) -> int:
    """The longest sequence in the batch (a Python int, as varlen kernels take it).

    Args:
        segment_ids: each token's sequence in its row, 0 for padding `(B, T)`.

    Returns:
        Its length (0 for no sequence).
    """
    lengths = sequence_lengths(segment_ids)
    return int(lengths.max()) if lengths.numel() else 0


def check_depth(segment_ids: torch.Tensor, max_depth: int | None) -> int:
    """Slots needed: ``max_depth`` (when given, after checking no row holds more) or the deepest row."""
    depth = int(segment_ids.max()) if segment_ids.numel() else 0
    if max_depth is None:
        return depth
    if depth > max_depth:
        raise UserError(
            f"segment_ids has a row with {depth} sequences but the head has max_depth={max_depth} slots; "
            "pack with a smaller --max-depth or build the head with more slots"
        )
    return max_depth


def sequence_starts(segment_ids: torch.Tensor, max_depth: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Index of each slot's first token (its [CLS]) and which slots are real; empty slots have start 0.

    >>> s, p = sequence_starts(torch.tensor([[1, 1, 2, 2, 2, 0]]), 3)
    >>> s.tolist(), p.tolist()
    ([[0, 2, 0]], [[True, True, False]])

    Args:
        segment_ids: each token's sequence in its row, 0 for padding `(B, T)`.
        max_depth: the slots per row `D`.

    Returns:
        `(starts, present)`: int64 and bool, each `(B, D)`.
    """
    _check_2d(segment_ids, "segment_ids")
    s = segment_ids
    B, _T = s.shape
    check_depth(s, max_depth)
    is_start = s > 0
    is_start[:, 1:] &= s[:, 1:] != s[:, :-1]
    b, t = is_start.nonzero(as_tuple=True)
    starts = torch.zeros(B, max_depth, dtype=torch.long, device=s.device)
    present = torch.zeros(B, max_depth, dtype=torch.bool, device=s.device)
    slot = s[b, t] - 1
    starts[b, slot] = t
    present[b, slot] = True
    return starts, present


def block_mask(
    segment_ids: torch.Tensor,
    *,
    causal: bool = False,
    block_size: int = 128,
    branch_ids: torch.Tensor | None = None,
    positions: torch.Tensor | None = None,
    window: int | None = None,
    chunk: int | None = None,
) -> BlockMask:
    """A FlexAttention ``BlockMask`` for the packed rows (blocks with no allowed pair are skipped);
    ``branch_ids`` as in `attention_mask` (a shared prefix: the blocks where one response
    would see the other are skipped too); ``window`` / ``chunk`` (with the tokens' document
    ``positions`` (B, T)) narrow it as `seqpack.nn.attention.LayerAttention` says.

    Works on CUDA and, forward only, on CPU (torch 2.13 has no CPU backward for FlexAttention).

    Args:
        segment_ids: each token's sequence in its row, 0 for padding `(B, T)`.
        causal: also hide the keys after each query.
        block_size: the mask's block, in tokens.
        branch_ids: each token's branch, 0 for the shared prefix `(B, T)`.
        positions: each token's position in its document `(B, T)`, needed by `window` and `chunk`.
        window: keys at most `window - 1` positions back (`None`: no window).
        chunk: keys in the query's chunk of `chunk` positions (`None`: no chunks).

    Returns:
        The `BlockMask`.

    Raises:
        UserError: a window or a chunk without `positions`.
    """
    _check_2d(segment_ids, "segment_ids")
    from torch.nn.attention.flex_attention import create_block_mask

    seg, br = segment_ids, branch_ids
    if (window is not None or chunk is not None) and positions is None:
        raise UserError("block_mask: a window or a chunk needs the tokens' positions")
    pos = positions if positions is not None else segment_ids  # read only under a window or a chunk

    def mask_mod(b: torch.Tensor, h: torch.Tensor, q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
        keep = (seg[b, q] == seg[b, kv]) & (seg[b, kv] > 0)
        if br is not None:
            keep = keep & ((br[b, kv] == 0) | (br[b, kv] == br[b, q]))
        if window is not None:
            keep = keep & (pos[b, kv] > pos[b, q] - window)
        if chunk is not None:
            keep = keep & (pos[b, kv] // chunk == pos[b, q] // chunk)
        return keep & (kv <= q) if causal else keep

    B, T = seg.shape
    return create_block_mask(mask_mod, B, None, T, T, device=str(seg.device), BLOCK_SIZE=block_size)
