"""Derived columns (:mod:`seqpack.data.derived`): left out of the Parquet parts, rebuilt by every
seqpack reader equal to what the task would have stored."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqpack.data import load_packed, pack_sequences
from seqpack.data.derived import RULES, lm_labels, segments
from seqpack.data.rows import PackedRows
from seqpack.tasks import get_task
from seqpack.tasks.clm import clm_sequences
from tests.golden.make_packed import CASES, build


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.integers(0, 30), min_size=1, max_size=25),
    st.integers(2, 24),
    st.booleans(),
    st.integers(0, 3),
    st.sampled_from([0, 1, 2]),
    st.sampled_from(["best", "spfhp"]),
)
def test_the_rules_rebuild_the_clm_columns(
    doc_lens: list[int], max_len: int, eos: bool, seed: int, offset: int, algorithm: str
) -> None:
    """The rules rebuild exactly the labels clm builds (first token of every sequence and padding
    -100) and the segment ids of the layout, whatever the split pieces, empty documents, packs
    (full ones, and padded ones) and position offset."""
    rng = np.random.default_rng(seed)
    offsets = np.concatenate([[0], np.cumsum(doc_lens)])
    tokens = rng.integers(0, 500, int(offsets[-1]))
    seqs = clm_sequences(tokens, offsets, max_len=max_len, eos_id=7 if eos else None)
    if seqs.num_sequences == 0:
        return
    pc = pack_sequences(seqs, max_len, seed=seed, position_offset=offset, algorithm=algorithm)
    for name, rule in (("labels", lm_labels), ("segment_ids", segments)):
        want = pc.columns[name]
        got = rule(pc.columns, want.dtype, offset)
        assert got.dtype == want.dtype and np.array_equal(got, want), name


@pytest.mark.parametrize("case", list(CASES))
def test_every_tasks_rules_rebuild_what_it_would_store(case: str, tmp_path: Path) -> None:
    """Packed with ``write_derived`` (every column stored), each derived column of the task equals
    its rule applied to the stored ones; without it, every reader returns the same arrays."""
    full = build(case, tmp_path / "full", tmp_path / "w1", write_derived=True)
    lean = build(case, tmp_path / "lean", tmp_path / "w2")
    task = get_task(full["task"])
    assert "derived_columns" not in full and full["format_version"] == 1
    assert lean.get("derived_columns", {}) == dict(task.rows.derived_columns)
    assert lean["format_version"] == (2 if task.rows.derived_columns else 1)
    assert lean["columns"] == full["columns"]  # the manifest lists every column, in the same order
    _, cols = load_packed(tmp_path / "full", mmap=False)
    for name, rule in task.rows.derived_columns:
        assert np.array_equal(RULES[rule].make(cols, cols[name].dtype, full["position_offset"]), cols[name]), name
    _, got = load_packed(tmp_path / "lean", mmap=False)
    assert list(got) == list(cols) and all(
        np.array_equal(got[c], cols[c]) and got[c].dtype == cols[c].dtype for c in cols
    )
    rows = PackedRows(tmp_path / "lean", cache_groups=1)
    idx = np.arange(len(rows))[::-1]
    taken = rows.take(idx)
    assert all(np.array_equal(taken[c], cols[c][idx]) for c in cols)


def test_a_derived_column_alone_reads_only_what_it_needs(tmp_path: Path) -> None:
    build("clm-sharded", tmp_path / "p", tmp_path / "w")
    rows = PackedRows(tmp_path / "p", columns=["labels"])
    assert rows._stored == ["input_ids", "position_ids"]
    _, full = load_packed(tmp_path / "p", mmap=False)
    assert list(rows.take([2, 0])) == ["labels"] and np.array_equal(rows.take([2, 0])["labels"], full["labels"][[2, 0]])


def _edit_manifest(d: Path, **changes: object) -> None:
    m = json.loads((d / "manifest.json").read_text())
    m.update(changes)
    (d / "manifest.json").write_text(json.dumps(m))


def test_manifests_that_cannot_be_rebuilt_are_refused(tmp_path: Path) -> None:
    build("clm-store", tmp_path / "p", tmp_path / "w")
    _edit_manifest(tmp_path / "p", derived_columns={"labels": "shifted_by_two"})
    with pytest.raises(ValueError, match=r"rule 'shifted_by_two', which this seqpack does not know.*upgrade"):
        load_packed(tmp_path / "p")
    _edit_manifest(tmp_path / "p", derived_columns={"labels": "lm_labels"}, format_version=1)
    with pytest.raises(ValueError, match="derived_columns needs format_version 2"):
        load_packed(tmp_path / "p")
    _edit_manifest(tmp_path / "p", derived_columns={"nope": "lm_labels"}, format_version=2)
    with pytest.raises(ValueError, match="must map columns it lists"):
        load_packed(tmp_path / "p")


def test_a_reader_of_version_1_refuses_a_dataset_with_derived_columns(tmp_path: Path) -> None:
    """What an older seqpack does with the new format: refuses it in one line, not missing the labels."""
    from seqpack._atomic import read_versioned_json
    from seqpack.data.format import KIND, MANIFEST

    build("clm-store", tmp_path / "p", tmp_path / "w")
    with pytest.raises(ValueError, match="format version 2, this seqpack reads 1"):
        read_versioned_json(tmp_path / "p", MANIFEST, kind=KIND, version=1, what="packed dataset", hint="")
