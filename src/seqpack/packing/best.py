"""``best``: LP column generation, integer rounding that keeps the LP's packs, best-fit repair.

1. **Bound and columns.** Solve the LP relaxation (``seqpack.packing.lp``): Gilmore-Gomory
   column generation with knapsack pricing, seeded with the best-fit plan; at depth <= 3 all
   maximal packs are enumerated and solved at once. Its value bounds every plan from below.
2. **Round down.** Take ``floor(x_j)`` copies of every LP pack as templates: slot lengths
   that may hold the sequences of that length or any shorter one (the LP's flows).
3. **Fill.** Sequences, longest first, take the smallest free slot that holds them (optimal
   for nested slot sizes); empty slots are dropped, leaving gaps.
4. **Repeat** steps 2-3 on what is left, re-solving the LP over the same packs, while that
   still yields whole packs.
5. **Repair.** The few remaining sequences go by best fit into the gaps, then into new packs
   (``lpfhp`` with open packs).
6. **Never worse than the greedy plans**: return the fewest packs among this, LPFHP and SPFHP.

Before all this, when LPFHP or SPFHP already meets the counting bound (``counting_bound``: the
tokens over ``max_len``, the sequences over ``max_depth``), that plan is optimal and no LP runs:
long rows of short sequences (chat SFT at 2048), where the LP would only find again the packs
best fit had found.

On the Wikipedia histogram this lands within a few dozen packs of the LP bound
(`benchmarks/plan.py` times it).
"""

from __future__ import annotations

import bisect

import numpy as np

from seqpack._progress import progress_bar
from seqpack.packing.heuristics import lpfhp_packs, spfhp_packs
from seqpack.packing.lp import LPResult, resolve_lp, solve_lp

Packs = list[tuple[tuple[int, ...], int]]
MAX_ROUNDS = 4


class _Group:
    __slots__ = ("count", "filled", "free")

    def __init__(self, count: int, filled: list[int], free: list[int]) -> None:
        self.count, self.filled, self.free = count, filled, free


def fill_templates(templates: Packs, hist: np.ndarray) -> tuple[Packs, np.ndarray]:
    """Put sequences into the slots of template packs; return (packs, residual histogram).

    A slot of length ``s`` holds one sequence of length ``<= s``. Sequences go longest first
    into the smallest free slot that holds them. The compiled kernel (``csrc/packing.h``) runs
    `fill_templates_oracle` step for step (the same packs, in the same order), which is slow in
    Python on a large dataset and serial in every pack job's plan.

    >>> packs, rest = fill_templates([((3, 2), 2)], np.array([1, 2, 1]))
    >>> sorted(packs), rest.tolist()
    ([((2, 1), 1), ((3, 2), 1)], [0, 0, 0])
    """
    from seqpack._native import fill_templates as native

    slots = [s for strategy, _ in templates for s in strategy]
    starts = np.cumsum([0, *(len(strategy) for strategy, _ in templates)])
    counts = [int(c) for _, c in templates]
    packs, need = native(
        np.asarray(slots, dtype=np.int64), starts, np.asarray(counts, dtype=np.int64), np.asarray(hist, dtype=np.int64)
    )
    return packs, need


def fill_templates_oracle(templates: Packs, hist: np.ndarray) -> tuple[Packs, np.ndarray]:
    """`fill_templates` in Python (slow: the oracle the kernel is tested against)."""
    need = np.asarray(hist, dtype=np.int64).copy()
    groups: list[_Group] = []
    by_slot: dict[int, list[_Group]] = {}
    for strategy, count in templates:
        g = _Group(int(count), [], sorted(strategy, reverse=True))
        groups.append(g)
        for s in set(g.free):
            by_slot.setdefault(s, []).append(g)
    slots = sorted(by_slot)

    def register(g: _Group) -> None:
        groups.append(g)
        for s in set(g.free):
            if s not in by_slot:
                bisect.insort(slots, s)
                by_slot[s] = []
            by_slot[s].append(g)

    for idx in np.flatnonzero(need)[::-1].tolist():
        length, n = idx + 1, int(need[idx])
        k = bisect.bisect_left(slots, length)
        while n and k < len(slots):
            s = slots[k]
            for g in by_slot[s]:
                per = g.free.count(s)
                if not n or not g.count or not per:
                    continue
                full, r = divmod(min(n, per * g.count), per)
                rest = [x for x in g.free if x != s]
                if full:
                    register(_Group(full, g.filled + [length] * per, rest))
                if r:
                    register(_Group(1, g.filled + [length] * r, rest + [s] * (per - r)))
                g.count -= full + (1 if r else 0)
                n -= full * per + r
            by_slot[s] = [g for g in by_slot[s] if g.count and s in g.free]
            k += 1
        need[idx] = n
    packs = [(tuple(g.filled), g.count) for g in groups if g.count and g.filled]
    return packs, need


def round_lp(lp: LPResult, hist: np.ndarray, max_len: int, max_depth: int | None) -> Packs:
    """Steps 2-5 above: an exact plan (every sequence once) from an LP solution."""
    packs: Packs = []
    rest = np.asarray(hist, dtype=np.int64)
    x = lp.x
    for _ in range(MAX_ROUNDS):
        # the LP's solver may return a hair below 0 (-1e-8): a pack is used floor(x) >= 0 times, never -1
        whole = np.floor(np.maximum(x, 0.0) + 1e-9).astype(np.int64)
        if not whole.any():
            break
        templates = [(lp.patterns[j], int(whole[j])) for j in np.flatnonzero(whole).tolist()]
        filled, rest = fill_templates(templates, rest)
        packs += filled
        if not rest.any():
            return packs
        x = resolve_lp(lp, rest)
    return lpfhp_packs(rest, max_len, max_depth, open_packs=packs)


def counting_bound(hist: np.ndarray, max_len: int, max_depth: int | None = None) -> int:
    """Packs no plan can go below: the tokens over ``max_len``, and the sequences over ``max_depth``.

    >>> counting_bound(np.array([0, 0, 3]), 4), counting_bound(np.array([5]), 8, 2)   # 9 tokens; 5 sequences
    (3, 3)
    """
    h = np.asarray(hist, dtype=np.int64)
    tokens = int((h * np.arange(1, h.size + 1)).sum())
    count = int(h.sum())
    by_volume = -(-tokens // max_len)
    return max(by_volume, -(-count // max_depth)) if max_depth else by_volume


def _greedy(
    candidates: dict[str, Packs], sizes: dict[str, int], bound: int, why: str
) -> tuple[Packs, dict[str, object]]:
    winner = min(sizes, key=lambda k: (sizes[k], k != "lpfhp"))
    return candidates[winner], {
        "lp_value": None,
        "lp_optimal": None,
        "lp_bound": float(bound),
        "lp_iterations": 0,
        "lp_seconds": 0.0,
        "lp_stop": why,
        "chosen": winner,
        "candidates": sizes,
    }


#: ``best`` gives the LP at most this many rounds per pack it could still gain (the greedy plan's
#: packs minus the counting bound): a plan one pack from the bound gets a round, not a minute...
ROUNDS_PER_PACK = 1
#: ...and, unless the gain is at least this share of the packs (then it is worth the LP's full effort)...
WORTH = 0.01
#: ...at most this many knapsack cells of pricing (distinct lengths x max_len a round) per sequence:
#: a round's work grows with the distinct lengths and max_len, a greedy plan's (and TRL's best fit)
#: with the sequences, so a small dataset of many lengths keeps its greedy plan, made in the time
#: best fit takes, and a corpus gets the LP.
CELLS_PER_SEQUENCE = 50
#: a plan's LP says nothing for its first PROGRESS_DELAY seconds, then (off a terminal) a line at
#: most every PROGRESS_LINES seconds: a long plan is never silent, a short one never speaks
PROGRESS_DELAY, PROGRESS_LINES = 5.0, 10.0


def lp_rounds(gap: int, packs: int, hist: np.ndarray, max_len: int) -> int:
    """The rounds of column generation ``best`` gives the LP when the best greedy plan is ``gap``
    packs above the counting bound: ``ROUNDS_PER_PACK`` a pack it could win, and, unless that gain is
    at least ``WORTH`` of the packs, no more than the sequences pay for (``CELLS_PER_SEQUENCE`` cells
    of pricing, a round being distinct lengths x ``max_len``), so that a small dataset a few packs
    from the bound keeps its greedy plan, made in the time best fit takes, while a corpus, or a plan
    far from the bound, gets the LP. Depends on the input alone: equal inputs, equal plans.

        >>> h = np.zeros(2048, dtype=np.int64); h[9:2000] = 10        # 19,910 sequences, 1,991 lengths
        >>> lp_rounds(7, 4515, h, 2048), lp_rounds(524, 7358, h, 2048), lp_rounds(7, 4515, h * 100, 2048)
        (0, 524, 7)
    """
    by_gain = gap * ROUNDS_PER_PACK
    if gap >= WORTH * packs:
        return by_gain
    h = np.asarray(hist)
    return min(by_gain, int(h.sum()) * CELLS_PER_SEQUENCE // (int(np.count_nonzero(h)) * max_len))


def best_packs(
    hist: np.ndarray, max_len: int, max_depth: int | None = None, *, time_limit: float = 60.0
) -> tuple[Packs, dict[str, object]]:
    """The fewest packs among the LP rounding, LPFHP and SPFHP; ``info`` carries the LP bound."""
    greedy = lpfhp_packs(hist, max_len, max_depth)
    candidates = {"lpfhp": greedy, "spfhp": spfhp_packs(hist, max_len, max_depth)}
    sizes = {k: sum(c for _, c in v) for k, v in candidates.items()}
    bound = counting_bound(hist, max_len, max_depth)
    fewest = min(sizes.values())
    if fewest <= bound:  # a greedy plan is already optimal: no LP can do better
        return _greedy(candidates, sizes, bound, "counting bound met")
    rounds = lp_rounds(fewest - bound, fewest, hist, max_len)
    if rounds < 1:
        return _greedy(candidates, sizes, bound, "gain too small for an LP round")
    lower = None
    with progress_bar(
        lines=PROGRESS_LINES,
        delay=PROGRESS_DELAY,
        total=rounds,
        desc=f"plan: best, {fewest:,} greedy packs",
        unit="LP round",
        leave=False,
    ) as bar:

        def on_round(value: float, bound: float) -> None:
            bar.set_postfix(LP=f"{value:,.1f}", bound=f"{bound:,.1f}", refresh=False)
            bar.update(1)

        if max_depth is not None and max_depth > 3:  # the unlimited LP is fast and bounds this one
            free = lpfhp_packs(hist, max_len, None)
            lower = solve_lp(
                hist, max_len, None, start=[s for s, _ in free], time_limit=time_limit, max_rounds=rounds
            ).bound  # a proven lower bound, also when stopped early
        lp = solve_lp(
            hist,
            max_len,
            max_depth,
            start=[s for s, _ in greedy],
            time_limit=time_limit,
            lower=lower,
            max_rounds=rounds,
            on_round=on_round,
        )
    candidates["lp"] = round_lp(lp, hist, max_len, max_depth)
    sizes["lp"] = sum(c for _, c in candidates["lp"])
    winner = min(sizes, key=lambda k: (sizes[k], k != "lp"))
    info: dict[str, object] = {
        "lp_value": lp.value,
        "lp_optimal": lp.optimal,
        "lp_bound": lp.bound,
        "lp_iterations": lp.iterations,
        "lp_seconds": lp.seconds,
        "lp_stop": lp.stop,
        "chosen": winner,
        "candidates": sizes,
    }
    return candidates[winner], info
