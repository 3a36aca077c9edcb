"""Names renamed to the glossary's words keep their old name for one release, with a warning
that says the new one; the old name gives the very same object."""

from __future__ import annotations

import importlib

import pytest

RENAMED = [
    ("seqpack.data", "materialize_reference", "seqpack.data", "materialize_oracle"),
    ("seqpack.nn.attention", "reference_attention", "seqpack.nn.attention", "oracle_attention"),
    ("seqpack.packing.reference", "best_fit_decreasing", "seqpack.packing.oracle", "best_fit_decreasing"),
    ("seqpack.tokenizer.reference", "train_bpe_reference", "seqpack.tokenizer.oracle", "train_bpe_oracle"),
    ("seqpack.tokenizer.reference", "train_bpe_reference_from_counts", "seqpack.tokenizer.oracle",
     "train_bpe_oracle_from_counts"),
    ("seqpack.train.trl_dpo", "packed_rows_dataset", "seqpack.data", "hf_dataset"),
    ("seqpack.data.layout", "pack_sequences", "seqpack.data.columns", "pack_sequences"),
    ("seqpack.data.trl", "pack_examples", "seqpack.data.trl", "padding_free_examples"),
    ("seqpack.train.objective", "step_loss", "seqpack.train.step_loss", "step_loss"),
    ("seqpack.tasks.preference.objective", "pair_outputs", "seqpack.tasks.preference.forward", "pair_outputs"),
    ("seqpack.tasks.vision", "LAYOUTS", "seqpack.tasks.vision", "POSITION_SCHEMES"),
    ("seqpack.tasks.vision", "layout_of", "seqpack.tasks.vision", "position_scheme_of"),
    ("seqpack.tasks.vision.rope", "Layout", "seqpack.tasks.vision.rope", "PositionScheme"),
    ("seqpack.train.vision_data", "VisionTrainData", "seqpack.train.data", "TrainData"),
    ("seqpack.data.context_parallel", "cp_layout", "seqpack.data.context_parallel", "cp_placement"),
    ("seqpack.data.context_parallel", "CPLayout", "seqpack.data.context_parallel", "CPPlacement"),
]


@pytest.mark.parametrize(("old_mod", "old", "new_mod", "new"), RENAMED)
def test_an_old_name_warns_and_gives_the_new_object(old_mod, old, new_mod, new) -> None:
    if "nn" in old_mod or "train" in old_mod or "preference" in old_mod:
        pytest.importorskip("torch")
    if "trl_" in old_mod:
        pytest.importorskip("trl")
    with pytest.warns(DeprecationWarning, match="renamed"):
        got = getattr(importlib.import_module(old_mod), old)
    assert got is getattr(importlib.import_module(new_mod), new)


def test_an_unknown_name_is_still_an_attribute_error() -> None:
    with pytest.raises(AttributeError):
        importlib.import_module("seqpack.packing.reference").no_such_name  # noqa: B018


def test_the_tokenizer_keeps_encode_reference() -> None:
    from seqpack.tokenizer import Tokenizer

    tok = Tokenizer({i: bytes([i]) for i in range(256)}, [])
    with pytest.warns(DeprecationWarning, match="encode_oracle"):
        assert tok.encode_reference("hi there") == tok.encode_oracle("hi there") == tok.encode("hi there")


def test_rl_takes_max_tokens_as_the_old_name_of_max_len() -> None:
    from seqpack.rl import pack_rollouts

    new = pack_rollouts([[5, 6]], [[[7, 8, 9], [10, 11]]], max_len=8)
    with pytest.warns(DeprecationWarning, match="max_len"):
        old = pack_rollouts([[5, 6]], [[[7, 8, 9], [10, 11]]], max_tokens=8)
    assert (old.input_ids == new.input_ids).all() and new.max_len == 8
    with pytest.warns(DeprecationWarning, match="max_len"):
        assert new.max_tokens == 8
    with pytest.raises(TypeError, match="alone"):
        pack_rollouts([[5, 6]], [[[7, 8, 9]]], max_len=8, max_tokens=8)
    with pytest.raises(TypeError, match="max_len"):
        pack_rollouts([[5, 6]], [[[7, 8, 9]]])


def test_rl_layouts_take_their_old_names() -> None:
    from seqpack.rl import pack_rollouts

    for old, new in (("group", "shared-prefix"), ("flat", "pairs")):
        with pytest.warns(DeprecationWarning, match=new):
            a = pack_rollouts([[5, 6]], [[[7, 8, 9], [10, 11]]], max_len=8, layout=old)
        b = pack_rollouts([[5, 6]], [[[7, 8, 9], [10, 11]]], max_len=8, layout=new)
        assert a.layout == new and (a.input_ids == b.input_ids).all() and (a.branch_ids == b.branch_ids).all()
