"""RL rollouts (a prompt and its G completions, made online) packed into rows of at most
``max_len`` tokens, with the map back to each completion's tokens.

Two layouts. ``shared-prefix``: the prompt once, then its completions, each attending to the prompt and to
itself, never to a sibling, its positions continuing from the prompt's end; ``pairs``: prompt +
completion as one sequence each (the prompt repeated G times)::

    prompt p0 p1, completions a0 a1 a2 and b0 b1, max_len 8

    group   input_ids     p0 p1 a0 a1 a2 b0 b1        one unit: the whole group
            branch_ids    0  0  1  1  1  2  2
            position_ids  0  1  2  3  4  2  3
            predicts      .  .  p1 a0 a1 p1 b0        (the output that predicts each completion token)

    flat    input_ids     p0 p1 a0 a1 a2 | p0 p1 b0 b1      two units, two segments

A group is one packing unit when it fits in ``max_len``; one that does not is cut into units of
whole completions (first fit decreasing), each with the prompt again. A completion that does not fit
with its prompt is refused. Units are packed by `seqpack.packing.pack_lengths` (``best`` by
default), so no row holds more than ``max_len`` tokens.

    >>> r = pack_rollouts([[5, 6]], [[[7, 8, 9], [10, 11]]], max_len=8)
    >>> r.input_ids.tolist(), r.branch_ids.tolist(), r.position_ids.tolist()
    ([[5, 6, 7, 8, 9, 10, 11]], [[0, 0, 1, 1, 1, 2, 2]], [[0, 1, 2, 3, 4, 2, 3]])
    >>> r.predictor_cols.tolist(), r.offsets.tolist()
    ([1, 2, 3, 1, 5], [0, 3, 5])
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from seqpack._ids import token_ids
from seqpack.errors import UserError
from seqpack.packing import DEFAULT_ALGORITHM, pack_lengths
from seqpack.packing.balance import DEFAULT_HIDDEN, RowCost, balanced_steps

LAYOUTS = ("shared-prefix", "pairs")


@dataclass(frozen=True)
class PackedRollouts:
    """Rows of packed rollouts (``R`` rows of ``T`` columns) and where each completion token sits.

    The ``N`` completion tokens are in rollout order (prompt by prompt, completion by completion,
    token by token): completion ``c`` (numbered across prompts) owns ``offsets[c]:offsets[c + 1]``,
    and prompt ``i`` owns completions ``group_offsets[i]:group_offsets[i + 1]``.
    """

    input_ids: np.ndarray  # (R, T) int64, 0 in padding
    segment_ids: np.ndarray  # (R, T) a unit per segment 1, 2, ...; 0 is padding
    branch_ids: np.ndarray  # (R, T) group: 0 the prompt, k the unit's k-th completion; flat: 1
    position_ids: np.ndarray  # (R, T)
    token_rows: np.ndarray  # (N,) row of each completion token
    token_cols: np.ndarray  # (N,) its column
    predictor_cols: np.ndarray  # (N,) the column whose output predicts it
    offsets: np.ndarray  # (C + 1,)
    group_offsets: np.ndarray  # (P + 1,)
    layout: str
    max_len: int
    squares: np.ndarray  # (R,) each row's attention work (sum of l^2, a shared prompt counted once)

    @property
    def num_rows(self) -> int:
        return int(self.input_ids.shape[0])

    @property
    def num_tokens(self) -> int:
        """Real tokens in the rows (prompts as often as the layout repeats them)."""
        return int((self.segment_ids > 0).sum())

    @property
    def completion_lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def row_costs(self, cost: RowCost | None = None) -> np.ndarray:
        """Each row's cost (`seqpack.packing.balance.RowCost`; default its FLOP model at the
        default hidden size).  # (R,)

        Args:
            cost: the cost model (`None`: its FLOP model at the default hidden size).

        Returns:
            Each row's cost, float `(R,)`.
        """
        cost = cost or RowCost.from_flops(hidden=DEFAULT_HIDDEN, layers=1)
        tokens = (self.segment_ids > 0).sum(axis=1)
        units = self.segment_ids.max(axis=1)
        return cost.per_token * tokens + cost.per_square * self.squares + cost.per_sequence * units

    def rank_rows(self, world: int, *, cost: RowCost | None = None, seed: int = 0) -> np.ndarray:
        """The rows dealt to ``world`` data-parallel ranks: ``(micro_batches, world)`` row indices,
        every rank the same number of micro-batches of one row, each micro-batch's rows of even cost
        (`seqpack.packing.balance.balanced_steps`). Pack with ``world_size=world``.

            >>> r = pack_rollouts([[1]] * 4, [[[2] * n] for n in (1, 5, 2, 6)], max_len=8, world_size=2)
            >>> r.rank_rows(2).shape
            (2, 2)

        Args:
            world: the data-parallel ranks.
            cost: the cost model (`None`: its FLOP model).
            seed: the seed of the order of micro-batches.

        Returns:
            Row indices, int `(micro_batches, world)`.

        Raises:
            UserError: rows not a multiple of `world`.
        """
        if self.num_rows % world:
            raise UserError(
                f"{self.num_rows} rows cannot be shared evenly by {world} ranks; pack with world_size={world}"
            )
        return balanced_steps(self.row_costs(cost), world=world, micro_batch=1, seed=seed)[:, :, 0]

    def padded_index(self) -> tuple[np.ndarray, np.ndarray]:
        """Where each completion token goes in TRL's right-padded ``(C, max completion length)``
        layout: ``(completion, column)``, each ``(N,)``.

        Returns:
            `(completion, column)`, each int `(N,)`.
        """
        lengths = self.completion_lengths
        completion = np.repeat(np.arange(lengths.size), lengths)
        return completion, np.arange(completion.size) - self.offsets[completion]


def _check(
    prompt_ids: Sequence[Sequence[int]], completion_ids: Sequence[Sequence[Sequence[int]]], max_len: int, layout: str
) -> tuple[list[np.ndarray], list[list[np.ndarray]]]:
    if layout not in LAYOUTS:
        raise UserError(f"layout must be one of {'|'.join(LAYOUTS)}, got {layout!r}")
    if isinstance(max_len, bool) or not isinstance(max_len, int) or max_len < 2:
        raise UserError(f"max_len must be an int >= 2, got {max_len!r}")
    if len(prompt_ids) != len(completion_ids):
        raise UserError(
            f"{len(prompt_ids)} prompts but {len(completion_ids)} lists of completions; give one list per prompt"
        )
    if not prompt_ids:
        raise UserError("no rollouts to pack (no prompts)")
    prompts, groups = [], []
    for i, (p, group) in enumerate(zip(prompt_ids, completion_ids)):
        pa = token_ids(p, what=f"prompt {i}")
        if pa.size == 0:
            raise UserError(f"prompt {i} is empty")
        if len(group) == 0:
            raise UserError(f"prompt {i} has no completions (an empty group); drop it or give its completions")
        comps = []
        for j, c in enumerate(group):
            ca = token_ids(c, what=f"completion {j} of prompt {i}")
            if ca.size == 0:
                raise UserError(f"completion {j} of prompt {i} is empty")
            if pa.size + ca.size > max_len:
                raise UserError(
                    f"completion {j} of prompt {i} ({ca.size} tokens) with its prompt ({pa.size}) is "
                    f"{pa.size + ca.size} tokens, over max_len={max_len}; raise max_len or "
                    "truncate the completion"
                )
            comps.append(ca)
        prompts.append(pa)
        groups.append(comps)
    return prompts, groups


def _units(
    prompts: list[np.ndarray], groups: list[list[np.ndarray]], max_len: int, layout: str
) -> list[tuple[int, list[int]]]:
    """``(prompt, completions)`` per packing unit: a whole group where it fits (shared-prefix layout), else
    bins of whole completions by first fit decreasing; one completion each (pairs layout)."""
    units: list[tuple[int, list[int]]] = []
    for i, (p, comps) in enumerate(zip(prompts, groups)):
        if layout == "pairs":
            units += [(i, [j]) for j in range(len(comps))]
            continue
        room = max_len - p.size
        bins: list[list[int]] = []
        free: list[int] = []
        for j in sorted(range(len(comps)), key=lambda k: -comps[k].size):  # stable: equal lengths keep their order
            at = next((b for b, f in enumerate(free) if f >= comps[j].size), None)
            if at is None:
                bins.append([j])
                free.append(room - comps[j].size)
            else:
                bins[at].append(j)
                free[at] -= comps[j].size
        units += [(i, sorted(b)) for b in bins]
    return units


def _balanced_rows(sizes: np.ndarray, costs: np.ndarray, max_len: int, rows: int, world: int) -> list[list[int]]:
    """Units dealt into a multiple of ``world`` rows of even cost: heaviest first, each to the
    cheapest row with token room (LPT under the cap), starting from the fewest multiple of ``world``
    at or above ``rows`` (the token plan's count) and adding ``world`` rows while a unit finds no room."""
    if sizes.size < world:
        raise UserError(
            f"{sizes.size} packing units cannot fill a row on each of world_size={world} ranks; "
            "give more rollouts or use fewer ranks"
        )
    order = np.argsort(-costs, kind="stable")
    k = max(world, -(-rows // world) * world)
    while True:
        load, fill = np.zeros(k), np.zeros(k, np.int64)
        out: list[list[int]] = [[] for _ in range(k)]
        for u in order:
            room = fill + sizes[u] <= max_len
            if not room.any():
                break
            r = int(np.argmin(np.where(room, load, np.inf)))
            out[r].append(int(u))
            load[r] += costs[u]
            fill[r] += sizes[u]
        else:
            if all(out):
                return _refine(out, sizes, costs, max_len)
            raise UserError(
                f"{sizes.size} packing units cannot fill {k} rows, one per rank and micro-batch; "
                "give more rollouts or use fewer ranks"
            )
        k += world


def _refine(rows: list[list[int]], sizes: np.ndarray, costs: np.ndarray, max_len: int) -> list[list[int]]:
    """Narrow the rows' spread of cost: in turn, the costliest row and the cheapest one each take the
    move of one unit, or the swap of two, with another row that brings both rows nearer the mean than
    the extreme was (within the cap), until neither has one (or ``8 x rows`` exchanges)."""
    load = np.array([costs[r].sum() for r in rows])
    fill = np.array([sizes[r].sum() for r in rows], np.int64)

    def exchange(a: int, high: bool) -> bool:
        """Row ``a`` (an extreme) gives (high) or takes (low) cost with the best partner row."""
        best: tuple[float, int, int, int] | None = (
            None  # (the pair's new extreme, partner, unit from the heavier, unit back or -1)
        )
        for b in (np.argsort(load) if high else np.argsort(-load))[: max(1, len(rows) // 2)].tolist():
            if b == a:
                continue
            hi, lo = (a, b) if high else (b, a)
            for u in rows[hi]:
                for v in [-1, *rows[lo]]:
                    dc = costs[u] - (costs[v] if v >= 0 else 0.0)
                    ds = int(sizes[u]) - (int(sizes[v]) if v >= 0 else 0)
                    if dc <= 0 or fill[lo] + ds > max_len or fill[hi] - ds > max_len or (v < 0 and len(rows[hi]) < 2):
                        continue
                    new_hi, new_lo = load[hi] - dc, load[lo] + dc
                    ok = max(new_hi, new_lo) < load[a] if high else min(new_hi, new_lo) > load[a]
                    key = max(new_hi, new_lo) if high else -min(new_hi, new_lo)
                    if ok and (best is None or key < best[0]):
                        best = (key, b, u, v)
        if best is None:
            return False
        _, b, u, v = best
        hi, lo = (a, b) if high else (b, a)
        rows[hi].remove(u)
        rows[lo].append(u)
        dc, ds = costs[u], int(sizes[u])
        if v >= 0:
            rows[lo].remove(v)
            rows[hi].append(v)
            dc, ds = dc - costs[v], ds - int(sizes[v])
        load[hi], load[lo], fill[hi], fill[lo] = load[hi] - dc, load[lo] + dc, fill[hi] - ds, fill[lo] + ds
        return True

    for _ in range(4 * len(rows)):
        moved_high = exchange(int(np.argmax(load)), True)
        moved_low = exchange(int(np.argmin(load)), False)
        if not (moved_high or moved_low):
            break
    return rows


def pack_rollouts(
    prompt_ids: Sequence[Sequence[int]],
    completion_ids: Sequence[Sequence[Sequence[int]]],
    *,
    max_len: int,
    layout: str = "shared-prefix",
    algorithm: str = DEFAULT_ALGORITHM,
    seed: int = 0,
    world_size: int = 1,
    cost: RowCost | None = None,
) -> PackedRollouts:
    """Pack prompts (lists of token ids) and, per prompt, its completions into rows of at most
    ``max_len`` tokens (see the module): the fewest rows the ``algorithm`` finds; with
    ``world_size`` > 1, a multiple of that many rows of even ``cost`` (each unit's, by
    `RowCost`, default its FLOP model), so that every data-parallel
    rank gets as many rows and each micro-batch's ranks the same work (`PackedRollouts.rank_rows`).

    Args:
        prompt_ids: each prompt's token ids.
        completion_ids: per prompt, its completions' token ids.
        max_len: the row length.
        layout: `shared-prefix` (the prompt once, each completion after it) or `pairs`.
        algorithm: the planner (`seqpack.packing.ALGORITHMS`).
        seed: the assignment's seed.
        world_size: data-parallel ranks: rows come in a multiple of it, balanced by cost.
        cost: the cost model (`None`: its FLOP model).

    Returns:
        The `PackedRollouts`.

    Raises:
        UserError: a bad option, an empty prompt or completion, or one that does not fit `max_len`.
    """
    prompts, groups = _check(prompt_ids, completion_ids, max_len, layout)
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise UserError(f"world_size must be an int >= 1, got {world_size!r}")
    units = _units(prompts, groups, max_len, layout)
    sizes = np.array([prompts[i].size + sum(groups[i][j].size for j in js) for i, js in units], dtype=np.int64)
    packing = pack_lengths(sizes, max_len, algorithm=algorithm, seed=seed)
    packs = [packing.pack(r).tolist() for r in range(packing.num_packs)]
    unit_squares = np.array(
        [_square(prompts[i].size, [groups[i][j].size for j in js], layout) for i, js in units], np.int64
    )
    if world_size > 1:
        rc = cost or RowCost.from_flops(hidden=DEFAULT_HIDDEN, layers=1)
        unit_costs = rc.per_token * sizes + rc.per_square * unit_squares + rc.per_sequence
        packs = _balanced_rows(sizes, unit_costs, max_len, len(packs), world_size)
    fill = np.array([sizes[p].sum() for p in packs])
    R, T = len(packs), int(fill.max())
    ids, seg, br, pos = (np.zeros((R, T), np.int64) for _ in range(4))
    lengths = np.array([c.size for comps in groups for c in comps], dtype=np.int64)
    group_offsets = np.concatenate([[0], np.cumsum([len(c) for c in groups])]).astype(np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    rows, cols, preds = (np.empty(int(offsets[-1]), np.int64) for _ in range(3))
    for r in range(R):
        col = 0
        for s, u in enumerate(packs[r], start=1):
            i, js = units[u]
            p = prompts[i]
            if layout == "shared-prefix":
                col = _write(ids, seg, br, pos, r, col, p, s, 0, 0)
                last = col - 1
            for k, j in enumerate(js, start=1):
                c, at = groups[i][j], int(offsets[group_offsets[i] + j])
                if layout == "pairs":  # a unit of one completion: the prompt, then it, as one branch
                    col = _write(ids, seg, br, pos, r, col, p, s, 1, 0)
                    last = col - 1
                start = col
                col = _write(ids, seg, br, pos, r, col, c, s, k if layout == "shared-prefix" else 1, p.size)
                rows[at : at + c.size] = r
                cols[at : at + c.size] = np.arange(start, col)
                preds[at : at + c.size] = np.arange(start - 1, col - 1)
                preds[at] = last  # the first token follows the prompt, not a sibling
    squares = np.array([unit_squares[p].sum() for p in packs], dtype=np.int64)
    return PackedRollouts(ids, seg, br, pos, rows, cols, preds, offsets, group_offsets, layout, max_len, squares)


def _square(p: int, completions: list[int], layout: str) -> int:
    """A unit's attention work in the units of `seqpack.packing.balance.RowCost`'s ``sum(l^2)``
    (a sequence of ``l`` tokens: ``l^2``): the prompt's ``p^2``, then each completion's ``2 p c + c^2``
    (its queries over the prompt and over itself); ``(p + c)^2`` for the pairs layout's one completion.

        >>> _square(3, [2, 4], "shared-prefix"), _square(3, [2], "pairs")        # 9 + (12 + 4) + (24 + 16)
        (65, 25)
    """
    if layout == "pairs":
        return (p + completions[0]) ** 2
    return p * p + sum(2 * p * c + c * c for c in completions)


def _write(
    ids: np.ndarray,
    seg: np.ndarray,
    br: np.ndarray,
    pos: np.ndarray,
    r: int,
    col: int,
    tokens: np.ndarray,
    segment: int,
    branch: int,
    first_position: int,
) -> int:
    end = col + tokens.size
    ids[r, col:end] = tokens
    seg[r, col:end] = segment
    br[r, col:end] = branch
    pos[r, col:end] = np.arange(first_position, first_position + tokens.size)
    return end
