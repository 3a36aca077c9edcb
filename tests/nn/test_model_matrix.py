"""The model matrix (seqpack.experiments.model_matrix): every causal LM architecture of the
installed transformers, through every packed entry point, exact or refused in one line; the encoder
matrix (seqpack.experiments.encoder_matrix): every encoder family with each of its heads, the same;
and the "Supported models" page and the pinned statuses (model_matrix_status.json) generated from
the same runs by ``python docs/_gen/models.py``."""

from __future__ import annotations

import json
import re
import sys
import warnings
from pathlib import Path

import pytest

from seqpack.experiments.encoder_matrix import (
    HEADS,
    EncoderRow,
    encoder_statuses,
    encoder_types,
    run_encoder_matrix,
)
from seqpack.experiments.model_matrix import (
    ENTRY_POINTS,
    Row,
    architectures,
    compare_statuses,
    run_matrix,
    run_row,
    statuses,
)
from seqpack.experiments.tiny_configs import tiny_config

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "integrations" / "models.md"
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


@pytest.fixture(scope="module")
def encoders() -> dict[str, EncoderRow]:
    """Every encoder family with each head, each tiny model built once (~15 s on one core)."""
    return {r.model_type: r for r in run_encoder_matrix()}


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
HYBRIDS_EXACT = (
    "qwen3_5",
    "qwen3_5_moe",
    "qwen3_next",
    "olmo_hybrid",
    "kimi_linear",
    "nemotron_h",
    "granitemoehybrid",
    "bamba",
    "falcon_h1",
    "zamba2",
    "jamba",
    "zamba",
    "lfm2",
    "lfm2_moe",
    "minimax",
    "rwkv",
)


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


def test_the_supported_models_page_is_the_matrix(
    matrix: dict[str, Row], encoders: dict[str, EncoderRow], tmp_path: Path
) -> None:
    """The page and the pinned statuses written again by their generator (docs/_gen/models.py) from
    this run: the same bytes where the installed transformers and torch are those the page names;
    under others, the same lines where no version decides (the prose, the headings, the columns),
    and the rows that differ (which the installed transformers decides) named in one warning."""
    sys.path.insert(0, str(ROOT / "docs" / "_gen"))
    try:
        import models
    finally:
        sys.path.pop(0)
    page, status = models.write(
        list(matrix.values()), list(encoders.values()), tmp_path / "models.md", tmp_path / "status.json"
    )
    committed, generated = PAGE.read_text(encoding="utf-8"), page.read_text(encoding="utf-8")
    fix = "regenerate it: python docs/_gen/models.py"
    fixed, rows = page_differences(committed, generated)
    assert not fixed, f"the page and its generator disagree beyond the versions ({fix}):\n" + "\n".join(fixed)
    made, now = MADE_WITH.search(committed), MADE_WITH.search(generated)
    assert made and now, "the page names no versions"
    if made.groups() == now.groups():
        assert not rows, f"rows that differ from this run ({fix}):\n" + "\n".join(rows)
        assert committed == generated, fix
        assert status.read_text(encoding="utf-8") == STATUS.read_text(encoding="utf-8"), f"{STATUS.name}: {fix}"
    elif rows:
        warnings.warn(
            f"the supported-models page was made with transformers {made[1]} and torch {made[2]}, this run has "
            f"{now[1]} and {now[2]}; {len(rows)} rows differ: {'; '.join(rows)} ({fix})",
            stacklevel=1,
        )


#: the page's sentence naming the versions it was made with
MADE_WITH = re.compile(r"Made with transformers (\S+) and torch (\S+),")
#: a line of the page that an architecture or encoder decides: a table row or a reason, by its model type
ROW = re.compile(r"(?:\| |- )`([^`]+)`")


def page_parts(text: str) -> tuple[list[str], dict[tuple[str, str], list[str]]]:
    """The page's lines that no version decides (its versions and counts masked), and its rows by
    (section, model type)."""
    fixed: list[str] = []
    rows: dict[tuple[str, str], list[str]] = {}
    section = ""
    for line in text.splitlines():
        if line.startswith("#"):
            section = line.lstrip("# ")
        row = ROW.match(line)
        if row:
            rows.setdefault((section, row[1]), []).append(line)
            continue
        line = re.sub(r"\b(transformers|torch) \d[\w.+]*", r"\1 V", line)
        fixed.append(re.sub(r"\*\*\d+\*\*", "**N**", re.sub(r"\b\d+ do not build", "N do not build", line)))
    return fixed, rows


def page_differences(committed: str, generated: str) -> tuple[list[str], list[str]]:
    """What differs between two pages: the lines no version decides (as a diff, `-` committed, `+`
    generated), and the rows that differ, each named by its model type and section."""
    import difflib

    fixed_a, rows_a = page_parts(committed)
    fixed_b, rows_b = page_parts(generated)
    fixed = [d for d in difflib.unified_diff(fixed_a, fixed_b, lineterm="", n=0) if d[:2] not in ("--", "++", "@@")]
    if [k for k in rows_a if k in rows_b] != [k for k in rows_b if k in rows_a]:
        fixed.append("the rows are in another order")
    rows = [
        f"`{t}` in {section}: " + ("only in the committed page" if (section, t) not in rows_b else "differs")
        for (section, t), lines in rows_a.items()
        if rows_b.get((section, t)) != lines
    ]
    rows += [f"`{t}` in {section}: only in the generated page" for section, t in rows_b if (section, t) not in rows_a]
    return fixed, rows


def test_what_the_page_comparison_catches() -> None:
    """Versions and counts are no difference; a changed sentence or column is one under any versions;
    a changed, new or gone row is named by its model type and section."""
    page = "\n".join(
        [
            "# Supported models",
            "Made with transformers 5.0.0 and torch 2.0.0, on the CPU.",
            "**2** architectures are exact; 1 do not build tiny.",
            "| model_type | a |",
            "|---|---|",
            "| `llama` | exact |",
            "| `gpt2` | exact |",
            "## Why a cell is refused",
            "- `gpt2`: no",
        ]
    )
    other = page.replace("5.0.0", "6.1.0.dev0").replace("2.0.0", "2.1.0+cpu").replace("**2**", "**3**")
    assert page_differences(page, other.replace("1 do not", "4 do not")) == ([], [])
    assert page_differences(page, page.replace("on the CPU", "on a GPU").replace("| a |", "| b |")) == (
        [
            "-Made with transformers V and torch V, on the CPU.",
            "+Made with transformers V and torch V, on a GPU.",
            "-| model_type | a |",
            "+| model_type | b |",
        ],
        [],
    )
    changed = page.replace("| `llama` | exact", "| `llama` | refused").replace("- `gpt2`", "- `mamba`")
    assert page_differences(page, changed) == (
        [],
        [
            "`llama` in Supported models: differs",
            "`gpt2` in Why a cell is refused: only in the committed page",
            "`mamba` in Why a cell is refused: only in the generated page",
        ],
    )
    swapped = page.replace("`llama` | exact |\n| `gpt2`", "`gpt2` | exact |\n| `llama`")
    assert page_differences(page, swapped) == (["the rows are in another order"], [])
    made = MADE_WITH.search(other)
    assert made and made.groups() == ("6.1.0.dev0", "2.1.0+cpu")


@pytest.mark.parametrize("model_type", sorted(HYBRIDS))
def test_a_hybrids_tiny_config_keeps_each_layer_kind(model_type: str) -> None:
    kinds = list(tiny_config(model_type).layer_types)
    assert HYBRIDS[model_type] <= set(kinds), (model_type, kinds)
    assert len(kinds) <= 6, (model_type, kinds)


def test_every_status_is_the_pinned_one(matrix: dict[str, Row], encoders: dict[str, EncoderRow]) -> None:
    """Each architecture and encoder builds (or not) and each cell is exact or refused as pinned: a
    cell that turns from exact to refused fails as loudly as one that turns wrong. An architecture of
    another transformers that the file does not have is reported, not failed."""
    pinned = json.loads(STATUS.read_text(encoding="utf-8"))
    now = statuses(list(matrix.values()))
    changes, news = compare_statuses(pinned, now)
    more, later = compare_statuses(
        {**pinned, "architectures": pinned.get("encoders", {})},
        {**now, "architectures": encoder_statuses(list(encoders.values()))},
    )
    changes += [f"encoder {c}" for c in more]
    news += [f"encoder {n}" for n in later]
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


# ---------------------------------------------------------------------------- encoders


@pytest.mark.parametrize("model_type", encoder_types())
def test_every_encoder_is_exact_or_refused_on_each_head(encoders: dict[str, EncoderRow], model_type: str) -> None:
    row = encoders[model_type]
    if not row.built:
        pytest.skip(f"not built tiny on the CPU: {row.why}")
    assert set(row.cells) == set(HEADS)
    for head, cell in row.cells.items():
        assert cell.status in ("exact", "refused", "absent"), f"{model_type} {head}: {cell.status} {cell.detail}"
        if cell.status == "refused":
            assert cell.detail and "\n" not in cell.detail


#: the encoders users fine-tune: absolute, from-padding_idx, rotary, relative and windowed positions
ENCODERS_EXACT = (
    "bert",
    "roberta",
    "xlm-roberta",
    "camembert",
    "data2vec-text",
    "electra",
    "distilbert",
    "albert",
    "deberta",
    "deberta-v2",
    "modernbert",
    "ernie",
    "megatron-bert",
    "mpnet",
    "esm",
    "eurobert",
    "gte",
    "nomic_bert",
)


def test_the_encoders_users_fine_tune_are_exact_on_every_head(encoders: dict[str, EncoderRow]) -> None:
    for t in ENCODERS_EXACT:
        cells = {h: c.status for h, c in encoders[t].cells.items() if c.status != "absent"}
        assert cells and set(cells.values()) == {"exact"}, (t, cells)
    assert "local windows" in encoders["modernbert"].positions
    assert encoders["roberta"].positions == "from padding_idx + 1"
    assert encoders["deberta-v2"].positions.startswith("relative buckets")
    for t in ("fnet", "convbert", "big_bird", "roformer", "nystromformer", "longformer", "funnel"):
        assert {c.status for c in encoders[t].cells.values()} <= {"refused", "absent"}, t


def test_what_the_encoder_matrix_would_catch(monkeypatch: pytest.MonkeyPatch) -> None:
    """The encoder matrix fails where it should: a dropped window (ModernBERT), positions from 0 where
    RoBERTa counts from padding_idx + 1, and a classifier pooling the row's first token instead of
    each document's are wrong cells."""
    import contextlib
    import dataclasses

    import seqpack.nn.hf_encoder as enc
    from seqpack.experiments.encoder_matrix import run_row as run_encoder

    with monkeypatch.context() as m:
        m.setattr(enc, "_windows", lambda base: contextlib.nullcontext())
        assert {c.status for c in run_encoder("modernbert").cells.values()} == {"wrong"}
    real = enc._document_positions
    with monkeypatch.context() as m:
        m.setattr(enc, "_document_positions", lambda ids, seg, padding_idx: real(ids, seg, None))
        assert {c.status for c in run_encoder("roberta").cells.values()} == {"wrong"}
    unpack = enc.Documents.unpack
    with monkeypatch.context() as m:
        m.setattr(
            enc.Documents, "unpack", lambda self, x, w: unpack(dataclasses.replace(self, start=self.start * 0), x, w)
        )
        assert run_encoder("electra").cells["sequence classification"].status == "wrong"
