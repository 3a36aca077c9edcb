"""Rollouts packed: every completion token exactly once, no row over the cap, a group whole in one
row where it fits, positions continuing from the prompt, and one line for each bad input."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqpack.rl import LAYOUTS, pack_rollouts


@st.composite
def rollouts(draw):
    cap = draw(st.integers(8, 64))
    prompts, groups = [], []
    for _ in range(draw(st.integers(1, 6))):
        p = draw(st.integers(1, cap // 2))
        prompts.append(draw(st.lists(st.integers(0, 50), min_size=p, max_size=p)))
        g = draw(st.sampled_from([1, 2, 4, 8]))
        groups.append([draw(st.lists(st.integers(0, 50), min_size=1, max_size=cap - p)) for _ in range(g)])
    return prompts, groups, cap


@settings(max_examples=150, deadline=None)
@given(rollouts(), st.sampled_from(LAYOUTS))
def test_every_completion_token_once_within_the_cap(case, layout):
    prompts, groups, cap = case
    r = pack_rollouts(prompts, groups, max_len=cap, layout=layout)
    real = r.segment_ids > 0
    assert real.sum(axis=1).max() <= cap and r.input_ids.shape[1] <= cap
    completions = [c for g in groups for c in g]
    assert r.offsets.tolist() == np.concatenate([[0], np.cumsum([len(c) for c in completions])]).tolist()
    at = set(zip(r.token_rows.tolist(), r.token_cols.tolist()))
    assert len(at) == r.offsets[-1]  # each token its own cell
    for c, toks in enumerate(completions):
        lo, hi = r.offsets[c], r.offsets[c + 1]
        rows, cols, preds = r.token_rows[lo:hi], r.token_cols[lo:hi], r.predictor_cols[lo:hi]
        assert (rows == rows[0]).all() and r.input_ids[rows, cols].tolist() == toks
        assert (np.diff(cols) == 1).all() and (preds[1:] == cols[:-1]).all()
        seg, row = r.segment_ids[rows[0]], rows[0]
        prompt_cols = np.flatnonzero(
            (seg == seg[cols[0]]) & ((r.branch_ids[row] == 0) if layout == "shared-prefix" else True)
        )
        prompt_cols = prompt_cols[prompt_cols < cols[0]]
        i = int(np.searchsorted(r.group_offsets, c, side="right") - 1)
        if layout == "pairs":
            prompt_cols = prompt_cols[-len(prompts[i]) :]
        assert r.input_ids[row, prompt_cols].tolist() == prompts[i]  # its own prompt, just before it (in its unit)
        assert preds[0] == prompt_cols[-1]  # its first token follows the prompt, not a sibling
        assert r.position_ids[rows, cols].tolist() == list(range(len(prompts[i]), len(prompts[i]) + len(toks)))
    if layout == "shared-prefix":  # a group that fits whole is one unit: its prompt once, in one row
        for i, (p, g) in enumerate(zip(prompts, groups)):
            if len(p) + sum(len(c) for c in g) <= cap:
                lo, hi = r.group_offsets[i], r.group_offsets[i + 1]
                toks = slice(r.offsets[lo], r.offsets[hi])
                assert (
                    len(
                        set(
                            zip(
                                r.token_rows[toks].tolist(),
                                r.segment_ids[r.token_rows[toks], r.token_cols[toks]].tolist(),
                            )
                        )
                    )
                    == 1
                )


def test_a_group_too_long_for_a_row_is_cut_with_its_prompt_again():
    r = pack_rollouts([[1, 2, 3]], [[[4], [5, 5, 5, 5, 5], [6, 6]]], max_len=8)
    # 3 + 1 + 5 + 2 = 11 > 8: first fit decreasing makes two units, [5 x5] and [4, 6 6], each after the prompt
    assert r.num_tokens == (3 + 5) + (3 + 1 + 2)
    units = sorted(row[seg > 0].tolist() for row, seg in zip(r.input_ids, r.segment_ids))
    assert units == [[1, 2, 3, 4, 6, 6], [1, 2, 3, 5, 5, 5, 5, 5]]


@pytest.mark.parametrize(
    ("prompts", "groups", "cap", "message"),
    [
        (
            [[1, 2]],
            [[[3] * 7]],
            8,
            "completion 0 of prompt 0 (7 tokens) with its prompt (2) is 9 tokens, over max_len=8",
        ),
        ([[1, 2]], [[]], 8, "prompt 0 has no completions (an empty group)"),
        ([[1, 2], [3]], [[[4]]], 8, "2 prompts but 1 lists of completions"),
        ([[]], [[[4]]], 8, "prompt 0 is empty"),
        ([[1]], [[[4], []]], 8, "completion 1 of prompt 0 is empty"),
        ([[1]], [[[-4]]], 8, "negative token id"),
        ([[1]], [[[4]]], 1, "max_len must be an int >= 2"),
        ([], [], 8, "no rollouts to pack"),
    ],
)
def test_bad_rollouts_are_one_line(prompts, groups, cap, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")) as e:
        pack_rollouts(prompts, groups, max_len=cap)
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match=r"layout must be one of shared-prefix\|pairs"):
        pack_rollouts([[1]], [[[2]]], max_len=8, layout="tree")


@settings(max_examples=60, deadline=None)
@given(rollouts(), st.sampled_from(LAYOUTS), st.integers(1, 4))
def test_ranks_get_as_many_rows_each(case, layout, world):
    """With ``world_size`` the rows are a multiple of the ranks (units moved out of the fullest rows,
    the cap kept), or one line says why not; ``rank_rows`` deals every row once, the same number to
    each rank."""
    prompts, groups, cap = case
    try:
        r = pack_rollouts(prompts, groups, max_len=cap, layout=layout, world_size=world)
    except ValueError as e:
        assert "packing units cannot fill" in str(e)
        return
    assert r.num_rows % world == 0 and (r.segment_ids > 0).sum(axis=1).max() <= cap
    assert (r.segment_ids > 0).sum(axis=1).min() > 0  # no empty row
    steps = r.rank_rows(world)
    assert steps.shape == (r.num_rows // world, world) and sorted(steps.ravel().tolist()) == list(range(r.num_rows))
    costs = r.row_costs()
    assert (costs > 0).all()


def test_row_costs_count_a_shared_prompt_once():
    group = pack_rollouts([[1] * 4], [[[2] * 3, [3] * 5]], max_len=16)
    flat = pack_rollouts([[1] * 4], [[[2] * 3, [3] * 5]], max_len=16, layout="pairs")
    assert group.squares.tolist() == [16 + (24 + 9) + (40 + 25)]  # the prompt's queries once, each completion's
    assert sorted(flat.squares.tolist()) == [7**2 + 9**2] and group.num_tokens == 12 and flat.num_tokens == 16
    with pytest.raises(ValueError, match="pack with world_size=3"):
        group.rank_rows(3)
