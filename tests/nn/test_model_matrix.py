"""The model matrix (seqpack.experiments.model_matrix): every causal LM architecture of the
installed transformers, through every packed entry point, exact or refused in one line; and the
"Supported models" page and the pinned statuses (model_matrix_status.json) generated from the same
run by ``python docs/_gen/models.py``."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from seqpack.experiments.model_matrix import (
    ENTRY_POINTS,
    Row,
    architectures,
    compare_statuses,
    render_markdown,
    run_matrix,
    run_row,
    statuses,
)
from seqpack.experiments.tiny_configs import tiny_config

PAGE = Path(__file__).resolve().parents[2] / "docs" / "integrations" / "models.md"
STATUS = Path(__file__).resolve().parent / "model_matrix_status.json"
#: the hybrids and the layer kinds each tiny config must hold: a recurrent kind (Mamba, linear
#: attention, short convolution; "hybrid" layers run attention and Mamba side by side) and an attention kind
HYBRIDS: dict[str, set[str]] = {
    "jamba": {"linear_attention", "full_attention"},
    "bamba": {"linear_attention", "full_attention"},
    "granitemoehybrid": {"linear_attention", "full_attention"},
    "nemotron_h": {"linear_attention", "full_attention"},
    "qwen3_next": {"linear_attention", "full_attention"},
    "qwen3_5": {"linear_attention", "full_attention"},
    "qwen3_5_moe": {"linear_attention", "full_attention"},
    "qwen4_exp_text": {"linear_attention", "indexed_attention"},
    "kimi_linear": {"linear_attention", "full_attention"},
    "bailing_hybrid": {"linear_attention", "full_attention"},
    "olmo_hybrid": {"linear_attention", "full_attention"},
    "minimax": {"linear_attention", "full_attention"},
    "lara_mini": {"linear_attention", "sliding_attention", "full_attention"},
    "recurrent_gemma": {"linear_attention", "sliding_attention"},
    "zamba": {"linear_attention", "hybrid"},
    "zamba2": {"linear_attention", "hybrid"},
    "falcon_h1": {"hybrid"},
    "zaya": {"hybrid"},
    "inkling2_text": {"hybrid", "hybrid_sliding"},
    "lfm2": {"conv", "full_attention"},
    "lfm2_moe": {"conv", "full_attention"},
    "lfm3": {"conv", "sliding_attention", "full_attention"},
}


@pytest.fixture(scope="module")
def matrix() -> dict[str, Row]:
    return {r.model_type: r for r in run_matrix()}


@pytest.mark.parametrize("model_type", architectures())
def test_every_architecture_is_exact_or_refused(matrix: dict[str, Row], model_type: str) -> None:
    row = matrix[model_type]
    if not row.built:
        pytest.skip(f"not built tiny on the CPU: {row.why}")
    assert set(row.cells) == set(ENTRY_POINTS)
    for name, cell in row.cells.items():
        assert cell.status in ("exact", "refused"), f"{model_type} {name}: {cell.status} {cell.detail}"
        if cell.status == "refused":
            assert cell.detail and "\n" not in cell.detail


def test_the_families_users_fine_tune_are_exact_everywhere_they_run(matrix: dict[str, Row]) -> None:
    """Sliding windows, chunks, soft-capping, sinks and MLA, computed, not dropped."""
    for t in ("llama", "mistral", "qwen2", "gemma3_text", "llama4_text", "deepseek_v3", "phi3", "cohere2"):
        assert all(c.status == "exact" for c in matrix[t].cells.values()), t
    for t in ("gpt_oss", "gemma2"):  # transformers' sdpa refuses sinks and soft-capping itself
        assert [n for n, c in matrix[t].cells.items() if c.status != "exact"] == ["packed_forward sdpa"]
    assert {"window", "softcap"} <= set(matrix["gemma2"].features)
    assert {"window", "sinks"} <= set(matrix["gpt_oss"].features)
    assert "chunk" in matrix["llama4_text"].features


#: the hybrids users fine-tune: Gated DeltaNet, Mamba2, Mamba, short convolutions, lightning attention
HYBRIDS_EXACT = ("qwen3_5", "qwen3_5_moe", "qwen3_next", "olmo_hybrid", "kimi_linear", "nemotron_h", "granitemoehybrid",
                 "bamba", "falcon_h1", "zamba2", "jamba", "zamba", "lfm2", "lfm2_moe", "minimax", "rwkv")


def test_hybrids_are_exact_on_every_entry_point(matrix: dict[str, Row]) -> None:
    """Their state-carrying layers run on each document (seqpack.nn.hf_mixers), gradients included."""
    for t in HYBRIDS_EXACT:
        assert matrix[t].built, t
        assert all(c.status == "exact" for c in matrix[t].cells.values()), (t, matrix[t].cells)
    for t in ("mamba", "mamba2", "falcon_mamba"):  # no attention: transformers refuses to set sdpa on them
        assert [n for n, c in matrix[t].cells.items() if c.status != "exact"] == ["packed_forward sdpa"], t


def test_a_dropped_window_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The matrix fails where it should: with the layer's arguments ignored, a windowed model is wrong."""
    import seqpack.nn.hf_attention as hf_attention
    from seqpack.nn.attention import LayerAttention

    real = hf_attention.layer_attention
    monkeypatch.setattr(
        hf_attention,
        "layer_attention",
        lambda module, kwargs, causal=True: (real(module, kwargs, causal=causal), LayerAttention())[1],
    )
    row = run_row("mistral")
    assert row.cells["packed_forward"].status == "wrong"
    assert row.cells["logprobs pairs"].status == "wrong"


def test_the_supported_models_page_is_the_matrix(matrix: dict[str, Row]) -> None:
    import transformers

    text = PAGE.read_text(encoding="utf-8")
    if f"transformers {transformers.__version__} " not in text:
        pytest.skip(
            f"the page was made with another transformers than {transformers.__version__}: "
            "regenerate it with python docs/_gen/models.py"
        )
    assert text == render_markdown(list(matrix.values())), "regenerate it: python docs/_gen/models.py"


@pytest.mark.parametrize("model_type", sorted(HYBRIDS))
def test_a_hybrids_tiny_config_keeps_each_layer_kind(model_type: str) -> None:
    kinds = list(tiny_config(model_type).layer_types)
    assert HYBRIDS[model_type] <= set(kinds), (model_type, kinds)
    assert len(kinds) <= 6, (model_type, kinds)


def test_every_status_is_the_pinned_one(matrix: dict[str, Row]) -> None:
    """Each architecture builds (or not) and each cell is exact or refused as pinned: a cell that
    turns from exact to refused fails as loudly as one that turns wrong. An architecture of another
    transformers that the file does not have is reported, not failed."""
    changes, news = compare_statuses(json.loads(STATUS.read_text(encoding="utf-8")), statuses(list(matrix.values())))
    for line in news:
        warnings.warn(f"model matrix: {line}; pin it with python docs/_gen/models.py", stacklevel=1)
    assert not changes, (
        "statuses differ from tests/nn/model_matrix_status.json (if meant, regenerate it with "
        "python docs/_gen/models.py):\n" + "\n".join(changes)
    )


def test_a_status_change_is_caught_and_a_new_architecture_reported() -> None:
    def pin(archs: dict[str, object]) -> dict[str, object]:
        return {"transformers": "x", "torch": "y", "architectures": archs}

    exact = {"built": True, "cells": {"packed_forward": "exact", "logprobs pairs": "exact"}}
    pinned = pin({"llama": exact, "mamba": {"built": True, "cells": {"packed_forward": "refused"}}})
    assert compare_statuses(pinned, pinned) == ([], [])
    refused = {"built": True, "cells": {"packed_forward": "exact", "logprobs pairs": "refused"}}
    now = pin({"llama": refused, "mamba": {"built": False, "cells": {}}, "newcomer": exact})
    changes, news = compare_statuses(pinned, now)
    assert changes == ["llama / logprobs pairs: exact -> refused", "mamba: built -> not built"]
    assert news == ["newcomer: not pinned (new in transformers x)"]
