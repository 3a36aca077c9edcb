"""The model matrix: every causal LM architecture of the installed transformers, built tiny on the
CPU, run through each of seqpack's packed entry points, and compared with each document run alone.

    results = run_matrix()                    # one Row per architecture
    rows[0].cells["packed_forward"]           # Cell(status="exact", error=3e-07) / "refused" / "wrong"

Each architecture gets a tiny random config (`seqpack.experiments.tiny_configs`): 32-wide, two
heads (one key/value head), a few layers covering every layer kind its family has (a hybrid keeps
its linear attention, Mamba or convolution layers next to its attention layers), sliding windows
and chunks of `WINDOW` tokens (shorter than the documents, so that they matter), MoE with four
experts; a composite config (text and another modality) is built through its text model. The
documents are `DOCUMENTS` long; the shared-prefix layout packs `GROUPS` (a prompt, then
completions that share it). A cell is

- ``exact``: every document's log-probabilities (and, on the entry points marked so, the
  gradient of their sum) within `TOLERANCE` of the document alone, in float32;
- ``refused``: a one-line ``ValueError`` before any output;
- ``wrong``: anything else. The matrix test fails on it.

An architecture that does not build tiny on the CPU (it needs another model's cache, a language
set at run time, a multimodal input...) is listed as not built, with why.
"""

from __future__ import annotations

import contextlib
import io
import math
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from seqpack.errors import UserError
from seqpack.experiments.tiny_configs import VOCAB, WINDOW, causal_lm_class, tiny_config

#: the documents of every packed row test: several to a row, of unequal lengths
DOCUMENTS: tuple[int, ...] = (20, 5, 33, 12)
#: (prompt, completions) of the shared-prefix layout
GROUPS: tuple[tuple[int, tuple[int, ...]], ...] = ((9, (6, 13)), (14, (4, 7, 10)))
#: float32 forward over at most 60 tokens and 4 layers of width 32: the packed and the lone runs
#: differ in summation order only (bucketed or masked kernels, MoE dispatch order), each op
#: rounding at 2^-24 relative; the difference, relative to the largest log-prob (when above 1), is
#: ~100 ulps at 1e-5, while a dropped window, chunk, cap or sink moves log-probs by 1e-3 and more
#: (measured: 0.008-4.5)
TOLERANCE = 1e-5
#: a gradient is a sum over every token of the rows (~60) and every head and position of the layers
#: above, each rounding at 2^-24 relative: its difference is judged relative to the model's largest
#: gradient entry, against 1e-4 (scaled by this ratio onto `TOLERANCE`); a window or sink missing from
#: the backward moves gradients by 1e-2 and more
GRAD_TOLERANCE_RATIO = TOLERANCE / 1e-4
#: a tiny model is far smaller; a bigger one means a size key the overrides missed
MAX_PARAMETERS = 2_000_000


@dataclass
class Cell:
    status: str  # exact | refused | wrong
    error: float | None = None  # the largest absolute log-prob (or gradient) difference
    detail: str = ""  # the refusal's line, or what was wrong


@dataclass
class Row:
    model_type: str
    cls: str = ""
    built: bool = True
    why: str = ""  # not built: the error
    features: tuple[str, ...] = ()  # the layer arguments its layers use
    mixers: tuple[str, ...] = ()  # its layers that carry state along the sequence, run per document
    cells: dict[str, Cell] = field(default_factory=dict)


# ---------------------------------------------------------------------------- the runs


def gradient_error(model: Any, packed: dict[str, Any]) -> float:
    """How far ``model``'s gradients (each document alone, just back-propagated) are from the packed
    run's ``packed`` ones (name -> gradient), on the tolerance's scale: relative to the model's
    largest gradient (a tensor whose exact gradient is ~0 holds rounding only), times
    `GRAD_TOLERANCE_RATIO`. Different parameters reached is a bug; the gradients are cleared."""
    missing = sorted(set(packed) ^ {n for n, p in model.named_parameters() if p.grad is not None})
    if missing:
        raise RuntimeError(f"gradients reach different parameters: {missing[:3]}")
    scale = max(float(p.grad.abs().max()) for p in model.parameters() if p.grad is not None) + 1e-30
    err = 0.0
    for n, p in model.named_parameters():
        if p.grad is not None:
            err = max(err, float((packed[n] - p.grad).abs().max()) / scale * GRAD_TOLERANCE_RATIO)
    model.zero_grad(set_to_none=True)
    return err


def _documents(seed: int = 0) -> list[list[int]]:
    import torch

    g = torch.Generator().manual_seed(seed)
    return [torch.randint(3, VOCAB, (n,), generator=g).tolist() for n in DOCUMENTS]


def _groups(seed: int = 1) -> tuple[list[list[int]], list[list[list[int]]]]:
    import torch

    g = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(3, VOCAB, (p,), generator=g).tolist() for p, _ in GROUPS]
    completions = [[torch.randint(3, VOCAB, (c,), generator=g).tolist() for c in cs] for _, cs in GROUPS]
    return prompts, completions


def _alone(model: Any, ids: list[int], start: int) -> Any:
    """log p(ids[t] | ids[:t]) for t >= start, the sequence run alone through the model's own eager
    attention (its own masks, caps and sinks).  # (len - start,)"""
    import torch

    logits = model(input_ids=torch.tensor([ids]), use_cache=False).logits[0].float()  # (L, V)
    logp = logits.log_softmax(-1)
    t = torch.arange(max(start, 1), len(ids))
    return logp[t - 1, torch.tensor(ids)[t]]


def _relative(got: Any, want: Any) -> float:
    """The largest difference, relative to the largest log-prob when that is above 1 (a log-prob of
    -20 holds 2e-6 of float32 rounding per op).  # (n,), (n,) -> float"""
    return float((got - want).abs().max()) / max(1.0, float(want.abs().max()))


def _with_impl(model: Any, impl: str) -> None:
    from seqpack.nn.hf_attention import register_packed_attention
    from seqpack.nn.hf_padding_free import register_varlen_attention

    register_packed_attention()
    register_varlen_attention()
    model.set_attn_implementation(impl)


def _flat_logprobs(model: Any, docs: list[list[int]], *, layout: str) -> list[Any]:
    """The documents as completions of empty-ish prompts through ``seqpack.rl.packed_logprobs``."""
    from seqpack.rl import packed_logprobs

    out = packed_logprobs(model, [d[:1] for d in docs], [[d[1:]] for d in docs], max_len=128, layout=layout)
    return [o[0] for o in out]


def _entry_points() -> dict[str, Callable[[Any], float]]:
    """name -> run(model): the largest |packed - alone| log-prob difference (raises to refuse)."""
    import torch

    def packed_forward_cell(impl: str) -> Callable[[Any], float]:
        return lambda model: _packed_forward(model, impl)

    def _packed_forward(model: Any, impl: str) -> float:
        from seqpack.nn.hf_adapter import packed_forward

        docs = _documents()
        ids = torch.tensor([[t for d in docs for t in d]])
        seg = torch.repeat_interleave(torch.arange(1, len(docs) + 1), torch.tensor([len(d) for d in docs]))[None]
        _with_impl(model, impl)
        out = packed_forward(model, {"input_ids": ids, "segment_ids": seg})
        assert out.logits is not None  # no labels: the forward returns logits
        logits = out.logits[0].float()
        _with_impl(model, "eager")
        err, at = 0.0, 0
        for d in docs:
            lp = logits[at : at + len(d)].log_softmax(-1)
            got = lp[torch.arange(len(d) - 1), torch.tensor(d[1:])]
            err = max(err, _relative(got, _alone(model, d, 1)))
            at += len(d)
        return err

    def rl(layout: str, impl: str, grad: bool) -> Callable[[Any], float]:
        def run(model: Any) -> float:
            if layout == "shared-prefix":
                prompts, completions = _groups()
            else:
                docs = _documents()
                prompts, completions = [d[:1] for d in docs], [[d[1:]] for d in docs]
            from seqpack.rl import packed_logprobs

            _with_impl(model, impl)
            model.zero_grad(set_to_none=True)
            got = packed_logprobs(model, prompts, completions, max_len=128, layout=layout)
            if grad:
                torch.stack([x.sum() for g in got for x in g]).sum().backward()
                packed = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
                model.zero_grad(set_to_none=True)
            _with_impl(model, "eager")
            err = 0.0
            total: Any = 0
            for p, cs, g in zip(prompts, completions, got):
                for c, lp in zip(cs, g):
                    want = _alone(model, p + c, len(p))
                    err = max(err, _relative(lp.detach(), want.detach()))
                    total = total + want.sum()
            if grad:
                total.backward()
                err = max(err, gradient_error(model, packed))
            return err

        return run

    return {
        "packed_forward": packed_forward_cell("seqpack_packed"),
        "packed_forward sdpa": packed_forward_cell("sdpa"),
        "packed_forward padding-free": packed_forward_cell("seqpack_varlen"),
        "logprobs pairs": rl("pairs", "seqpack_packed", True),
        "logprobs shared-prefix": rl("shared-prefix", "seqpack_packed", True),
        "logprobs shared-prefix eager": rl("shared-prefix", "eager", False),
    }


#: the columns of the matrix: seqpack's entry points and the attention implementation each runs
ENTRY_POINTS: tuple[str, ...] = (
    "packed_forward",
    "packed_forward sdpa",
    "packed_forward padding-free",
    "logprobs pairs",
    "logprobs shared-prefix",
    "logprobs shared-prefix eager",
)


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    from transformers.utils import logging

    level = logging.get_verbosity()
    logging.set_verbosity_error()
    try:
        with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.set_verbosity(level)


def build(model_type: str) -> Any:
    """The tiny model of ``model_type`` in float32, eval mode, seeded."""
    import torch

    cfg = tiny_config(model_type)
    cls = causal_lm_class(model_type)
    torch.manual_seed(0)
    cfg._attn_implementation = "eager"
    with torch.device(
        "meta"
    ):  # count first: a size key neither the generic keys nor the overrides set can make it huge
        size = sum(p.numel() for p in cls._from_config(cfg, attn_implementation="eager").parameters())
    if size > MAX_PARAMETERS:
        raise UserError(f"the tiny config still has {size:,} parameters")
    model = cls._from_config(cfg, attn_implementation="eager").float().eval()
    with torch.no_grad():  # random weights large enough that every layer matters
        for p in model.parameters():
            if p.ndim >= 2:
                p.normal_(0.0, 0.2)
    return model


def run_row(model_type: str) -> Row:
    """One architecture through every entry point."""
    import torch

    from seqpack.nn.hf_support import packing_support

    row = Row(model_type)
    try:
        with _quiet():
            model = build(model_type)
            model(input_ids=torch.tensor([[3, 4, 5]]), use_cache=False)
    except Exception as e:  # noqa: BLE001 - any failure to build is a row "not built", with its reason
        row.built, row.why = False, f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
        return row
    row.cls = type(model).__name__
    support = packing_support(model)
    row.features = tuple(sorted(support.needs))
    row.mixers = support.mixers
    for name, run in _entry_points().items():
        try:
            with _quiet():
                err = run(model)
        except ValueError as e:
            line = str(e)
            row.cells[name] = Cell("refused", detail=line) if "\n" not in line else Cell("wrong", detail=line)
            continue
        except Exception as e:  # noqa: BLE001 - an error that is not a one-line refusal is a wrong cell
            row.cells[name] = Cell("wrong", detail=f"{type(e).__name__}: {str(e)[:200]}")
            continue
        ok = math.isfinite(err) and err <= TOLERANCE
        row.cells[name] = Cell("exact" if ok else "wrong", error=err, detail="" if ok else f"error {err:.3g}")
    return row


def architectures() -> list[str]:
    """Every causal LM ``model_type`` of the installed transformers."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    return sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)


def run_matrix(model_types: list[str] | None = None) -> list[Row]:
    import torch

    with torch.random.fork_rng():
        return [run_row(t) for t in (architectures() if model_types is None else model_types)]


__all__ = [
    "DOCUMENTS",
    "ENTRY_POINTS",
    "GROUPS",
    "TOLERANCE",
    "WINDOW",
    "Cell",
    "Row",
    "architectures",
    "build",
    "run_matrix",
    "run_row",
    "tiny_config",
]


# ---------------------------------------------------------------------------- pinned statuses


def statuses(rows: list[Row]) -> dict[str, Any]:
    """The pinned form of a matrix run: whether each architecture builds and each cell's status
    (``exact`` or ``refused``; a ``wrong`` cell fails the matrix test before it is pinned).

        {"transformers": "5.24.0", "torch": "2.9.0",
         "architectures": {"llama": {"built": true, "cells": {"packed_forward": "exact", ...}}, ...}}
    """
    tf, pt = _versions()
    archs = {
        r.model_type: {"built": r.built, "cells": {e: r.cells[e].status for e in ENTRY_POINTS if e in r.cells}}
        for r in sorted(rows, key=lambda r: r.model_type)
    }
    return {"transformers": tf, "torch": pt, "architectures": archs}


def compare_statuses(pinned: dict[str, Any], now: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(changes, news) between a pinned `statuses` and a fresh one. A change is a cell whose status
    differs (either way), a pinned cell gone, or an architecture that builds in one and not the other;
    a news is an architecture only one of them has (a new or removed one in another transformers)."""
    before, after = pinned["architectures"], now["architectures"]
    changes: list[str] = []
    news = [f"{t}: not pinned (new in transformers {now['transformers']})" for t in sorted(set(after) - set(before))]
    news += [f"{t}: pinned, gone from transformers {now['transformers']}" for t in sorted(set(before) - set(after))]
    for t in sorted(set(before) & set(after)):
        b, a = before[t], after[t]
        if b["built"] != a["built"]:
            changes.append(f"{t}: {'built' if b['built'] else 'not built'} -> {'built' if a['built'] else 'not built'}")
            continue
        for e in sorted(set(b["cells"]) | set(a["cells"])):
            if b["cells"].get(e) != a["cells"].get(e):
                changes.append(f"{t} / {e}: {b['cells'].get(e, 'absent')} -> {a['cells'].get(e, 'absent')}")
    return changes, news


def _versions() -> tuple[str, str]:
    import torch
    import transformers

    return transformers.__version__, torch.__version__.split("+")[0]


def render_markdown(rows: list[Row]) -> str:
    """The "Supported models" page from a matrix run (docs/integrations/models.md)."""
    tf, pt = _versions()
    built = [r for r in rows if r.built]
    exact = [r for r in built if all(c.status == "exact" for c in r.cells.values())]
    some = [r for r in built if r not in exact and any(c.status == "exact" for c in r.cells.values())]
    out = [
        "# Supported models",
        "",
        "<!-- generated by docs/_gen/models.py from the model matrix (seqpack.experiments.model_matrix); do not edit -->",
        "",
        f"Made with transformers {tf} and torch {pt}, on the CPU in float32. Every causal LM architecture of that "
        "transformers is built tiny (32 wide, a few layers covering each layer kind its config names, sliding windows "
        f"and chunks of {WINDOW} tokens, MoE with four experts) and run through each of seqpack's packed entry points "
        f"on documents of {', '.join(map(str, DOCUMENTS))} tokens in one row (and prompts shared by their completions "
        "in the shared-prefix layout). Each document's log-probabilities are compared with the document run alone through "
        "the model's own eager attention; `logprobs` also compares the gradients. A cell is **exact** "
        f"(within {TOLERANCE:g}, relative to the largest log-prob above 1) or **refused** in one line before any "
        "output; a silently wrong cell fails the test suite (`tests/nn/test_model_matrix.py`), and a new "
        "architecture in a new transformers shows up as a new row.",
        "",
        f"**{len(exact)}** architectures are exact on every entry point, **{len(some)}** on some (the others "
        f"refused), **{len(built) - len(exact) - len(some)}** refused on all; {len(rows) - len(built)} do not build "
        "tiny on the CPU (listed at the end).",
        "",
        "The columns: `packed_forward` with `attn_implementation` `seqpack_packed` (seqpack's attention backends), "
        "`sdpa` (seqpack's 4-D masks, one per layer kind) and `seqpack_varlen` (the padding-free form); "
        "`seqpack.rl.packed_logprobs` in the `pairs` and `shared-prefix` layouts under `seqpack_packed`, and `shared-prefix` "
        "under `eager` (a branch mask). `seqpack train --hf-model`, the TRL trainers and `attach_packed_attention` "
        "run these same paths and refuse what they refuse. Layer arguments: what the architecture's layers compute "
        "beyond plain attention (a sliding `window`, a `chunk`, `softcap`, attention `sinks`). State layers: its layers "
        "that carry state along the sequence (Gated DeltaNet, Mamba, short convolutions...), each run on every "
        "document from a zero state ([Hybrid models](hybrids.md)).",
        "",
    ]
    heads = ["model_type", "class", "layer arguments", "state layers", *ENTRY_POINTS]
    out += ["| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
    for r in built:
        cells = [r.cells[e].status for e in ENTRY_POINTS]
        state = ", ".join(f"`{m}`" for m in r.mixers) or "-"
        out.append(
            "| " + " | ".join([f"`{r.model_type}`", f"`{r.cls}`", ", ".join(r.features) or "-", state, *cells]) + " |"
        )
    out += ["", "## Why a cell is refused", ""]
    for r in built:
        reasons = dict.fromkeys(c.detail for c in r.cells.values() if c.status == "refused")
        for why in reasons:
            out.append(f"- `{r.model_type}`: {why}")
    out += [
        "",
        "## Not built by the matrix",
        "",
        "A composite config (text and another modality) is built through its text model and that model's causal "
        "LM class (`qwen3_5` as `Qwen3_5ForCausalLM` on its text config). The architectures below do not build "
        "tiny on the CPU; seqpack's entry points still read such a model's config and layers and refuse what they "
        "cannot compute.",
        "",
    ]
    out += [f"- `{r.model_type}`: {r.why}" for r in rows if not r.built]
    return "\n".join(out) + "\n"


__all__ += ["compare_statuses", "render_markdown", "statuses"]
