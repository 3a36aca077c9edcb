"""The encoder matrix: every encoder family of the installed transformers (the model types of its
masked-LM registry that are neither decoders nor encoder-decoders), built tiny on the CPU with each
of its task heads, run on packed rows through `seqpack.nn.hf_adapter.packed_forward`, and compared
with each document run alone through the model's own forward.

    rows = run_encoder_matrix()               # one EncoderRow per model_type
    rows[0].cells["sequence classification"]  # Cell(status="exact", error=2e-07) / "refused" / "wrong" / "absent"

Each model is built from `seqpack.experiments.tiny_configs.tiny_encoder_config` (32 wide, 4
layers, the layer kinds and position scheme of the family's checkpoints: ModernBERT's local layers in
windows of 8, DeBERTa's relative buckets), its weights drawn large enough that every layer matters.
`ROWS` packs several documents a row (with padding), token type 1 on each document's second half
where the model reads token types. A cell is

- ``exact``: every document's logits (classification, masked LM, token classification, start/end
  spans) within `TOLERANCE` of the document alone, and the gradient of the loss (the mean of the
  documents' own losses) within it too, relative to the model's largest gradient as the causal
  matrix judges it (`seqpack.experiments.model_matrix.GRAD_TOLERANCE_RATIO`), under every attention
  implementation the model has of ``sdpa`` and ``eager``;
- ``refused``: a one-line ``ValueError`` before any output;
- ``wrong``: anything else (the matrix test fails on it);
- ``absent``: transformers has no such head for the family.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from seqpack.errors import UserError
from seqpack.experiments.model_matrix import MAX_PARAMETERS, TOLERANCE, Cell, _quiet, _versions, gradient_error
from seqpack.experiments.tiny_configs import ENCODER_NOT_BUILT, NOT_BUILT, VOCAB, tiny_encoder_config

#: the documents of each packed row, in a row of `LENGTH` tokens (the last ones padding)
ROWS: tuple[tuple[int, ...], ...] = ((20, 5, 33), (12, 9, 17))
LENGTH = 64
#: the matrix's columns: a head and the transformers registry naming each family's class of it
HEADS: dict[str, str] = {
    "sequence classification": "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES",
    "masked LM": "MODEL_FOR_MASKED_LM_MAPPING_NAMES",
    "question answering": "MODEL_FOR_QUESTION_ANSWERING_MAPPING_NAMES",
    "token classification": "MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES",
}
#: labels of the classification heads
NUM_LABELS = 3


@dataclass
class EncoderRow:
    model_type: str
    built: bool = True
    why: str = ""  # not built: the error
    positions: str = ""  # how its positions count (restarting, from padding_idx + 1, relative...)
    attention: str = ""  # the implementations the cells ran
    cells: dict[str, Cell] = field(default_factory=dict)


def encoder_types() -> list[str]:
    """Every encoder ``model_type`` of the installed transformers: its masked-LM registry, less the
    encoder-decoders (BART's family) whose config says so."""
    from transformers import CONFIG_MAPPING
    from transformers.models.auto.modeling_auto import MODEL_FOR_MASKED_LM_MAPPING_NAMES

    out = []
    for t in sorted(MODEL_FOR_MASKED_LM_MAPPING_NAMES):
        try:
            if getattr(CONFIG_MAPPING[t](), "is_encoder_decoder", False):
                continue
        except Exception:  # noqa: BLE001 - a config whose defaults fail validation is listed (and not built)
            pass
        out.append(t)
    return out


def head_class(model_type: str, head: str) -> Any | None:
    """transformers' class of ``head`` for ``model_type``, or None."""
    import transformers
    from transformers.models.auto import modeling_auto

    name = getattr(modeling_auto, HEADS[head]).get(model_type)
    return getattr(transformers, name, None) if name else None


def build(model_type: str, head: str, impl: str = "eager") -> Any:
    """The tiny model of ``model_type`` with ``head``, float32, eval mode, seeded."""
    import torch

    cls = head_class(model_type, head)
    if cls is None:
        raise LookupError(head)
    cfg = tiny_encoder_config(model_type)
    cfg.num_labels = 2 if head == "question answering" else NUM_LABELS
    cfg._attn_implementation = impl
    with torch.device("meta"):
        size = sum(p.numel() for p in cls._from_config(cfg, attn_implementation=impl).parameters())
    if size > MAX_PARAMETERS:
        raise UserError(f"the tiny config still has {size:,} parameters")
    torch.manual_seed(0)
    model = cls._from_config(cfg, attn_implementation=impl).float().eval()
    with torch.no_grad():  # random weights large enough that every layer matters
        for p in model.parameters():
            if p.ndim >= 2:
                p.normal_(0.0, 0.2)
    return model


def _batch(model: Any, head: str, seed: int = 0) -> tuple[dict[str, Any], list[tuple[int, int, int, int]]]:
    """The packed batch of `ROWS` for ``head`` and its documents ``(row, slot, start, length)``."""
    import torch

    from seqpack.nn.hf_support import encoder_support

    g = torch.Generator().manual_seed(seed)
    B, T = len(ROWS), LENGTH
    ids = torch.zeros(B, T, dtype=torch.long)
    seg = torch.zeros(B, T, dtype=torch.long)
    types = torch.zeros(B, T, dtype=torch.long)
    docs = []
    for b, lengths in enumerate(ROWS):
        at = 0
        for k, n in enumerate(lengths):
            ids[b, at : at + n] = torch.randint(3, VOCAB, (n,), generator=g)
            seg[b, at : at + n] = k + 1
            if encoder_support(model).token_types:
                types[b, at + n // 2 : at + n] = 1
            docs.append((b, k, at, n))
            at += n
    D = max(len(r) for r in ROWS)
    batch: dict[str, Any] = {"input_ids": ids, "segment_ids": seg, "token_type_ids": types}
    if head in ("masked LM", "token classification"):
        labels = torch.full((B, T), -100, dtype=torch.long)
        top = VOCAB if head == "masked LM" else NUM_LABELS
        for b, _, at, n in docs:
            for j in range(at, at + n, 3):  # a third of each document's tokens
                labels[b, j] = int(torch.randint(0, top, (1,), generator=g))
        batch["labels"] = labels
    elif head == "sequence classification":
        labels = torch.full((B, D), -100, dtype=torch.long)
        for b, k, _, _ in docs:
            labels[b, k] = int(torch.randint(0, NUM_LABELS, (1,), generator=g))
        batch["labels"] = labels
    else:
        sp = torch.full((B, D), -100, dtype=torch.long)
        ep = torch.full((B, D), -100, dtype=torch.long)
        for b, k, at, n in docs:
            s = int(torch.randint(0, n, (1,), generator=g))
            sp[b, k], ep[b, k] = at + s, at + min(n - 1, s + 2)
        batch["start_positions"], batch["end_positions"] = sp, ep
    return batch, docs


def _alone(model: Any, head: str, batch: dict[str, Any], doc: tuple[int, int, int, int]) -> tuple[list[Any], Any]:
    """The document alone through the model's own forward: its outputs and its own loss."""
    from seqpack.nn.hf_support import encoder_support

    b, k, at, n = doc
    kw: dict[str, Any] = {"input_ids": batch["input_ids"][b : b + 1, at : at + n]}
    if encoder_support(model).token_types:
        kw["token_type_ids"] = batch["token_type_ids"][b : b + 1, at : at + n]
    if head in ("masked LM", "token classification"):
        out = model(**kw, labels=batch["labels"][b : b + 1, at : at + n])
        return [out.logits[0]], out.loss
    if head == "sequence classification":
        out = model(**kw, labels=batch["labels"][b, k : k + 1])
        return [out.logits[0]], out.loss
    out = model(
        **kw,
        start_positions=batch["start_positions"][b, k : k + 1] - at,
        end_positions=batch["end_positions"][b, k : k + 1] - at,
    )
    return [out.start_logits[0], out.end_logits[0]], out.loss


def _packed_outputs(out: Any, head: str, doc: tuple[int, int, int, int]) -> list[Any]:
    b, k, at, n = doc
    if head in ("masked LM", "token classification"):
        return [out.logits[b, at : at + n]]
    if head == "sequence classification":
        return [out.slot_logits[b, k]]
    return [out.extra["start_logits"][b, k, at : at + n], out.extra["end_logits"][b, k, at : at + n]]


def run_cell(model: Any, head: str) -> float:
    """The largest relative difference of packed rows from each document alone (outputs and
    gradients); raises ``ValueError`` to refuse."""
    from seqpack.nn.hf_adapter import packed_forward

    batch, docs = _batch(model, head)
    model.zero_grad(set_to_none=True)
    out = packed_forward(model, batch)
    assert out.loss is not None  # the batch has labels
    out.loss.backward()
    packed = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    err, losses = 0.0, []
    for doc in docs:
        want, loss = _alone(model, head, batch, doc)
        for got, ref in zip(_packed_outputs(out, head, doc), want):
            err = max(err, float((got.detach() - ref.detach()).abs().max()) / max(1.0, float(ref.abs().max())))
        losses.append(loss)
    total = sum(losses[1:], losses[0]) / len(losses)
    err = max(err, abs(float(out.loss) - float(total)) / max(1.0, abs(float(total))))
    total.backward()
    return max(err, gradient_error(model, packed))


def _positions(model: Any) -> str:
    from seqpack.nn.hf_support import encoder_support

    s = encoder_support(model)
    if s.refusal is not None:
        return "-"
    config = model.config
    parts = []
    if s.padding_idx is not None:
        parts.append("from padding_idx + 1")
    elif any("rotary" in type(m).__name__.lower() for m in model.modules()):
        parts.append("rotary")
    elif getattr(config, "relative_attention", False):
        parts.append("relative buckets" + (" + absolute" if getattr(config, "position_biased_input", False) else ""))
    else:
        parts.append("absolute")
    if s.windows:
        try:
            parts.append(f"local windows (±{int(config.sliding_window)})")
        except Exception:  # noqa: BLE001 - a window per layer (NeoMME's per_layer_config)
            parts.append("local windows (per layer)")
    return ", ".join(parts)


def run_row(model_type: str) -> EncoderRow:
    """One encoder family through each head, under ``sdpa`` (where it has it) and ``eager``."""
    from seqpack.nn.hf_support import encoder_support, is_encoder

    row = EncoderRow(model_type)
    why = ENCODER_NOT_BUILT.get(model_type) or NOT_BUILT.get(model_type)
    if why:
        row.built, row.why = False, why
        return row
    impls: list[str] = []
    for head in HEADS:
        if head_class(model_type, head) is None:
            row.cells[head] = Cell("absent")
            continue
        cell: Cell | None = None
        for impl in ("sdpa", "eager"):
            try:
                with _quiet():
                    model = build(model_type, head, impl)
            except Exception as e:  # noqa: BLE001 - a head or implementation it does not build
                if impl == "sdpa":
                    continue
                if not row.cells and not impls:
                    row.built, row.why = False, f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
                    return row
                cell = Cell("wrong", detail=f"not built: {type(e).__name__}: {str(e)[:160]}")
                break
            if impl not in impls:
                impls.append(impl)
            if not row.positions:
                try:
                    row.positions = _positions(model)
                except Exception:  # noqa: BLE001 - a model the door refuses still gets a row
                    row.positions = "-"
            try:
                with _quiet():
                    refusal = encoder_support(model).refusal if is_encoder(model) else None
                    if refusal is not None:
                        raise UserError(refusal)
                    err = run_cell(model, head)
            except ValueError as e:
                line = str(e)
                cell = Cell("refused", detail=line) if "\n" not in line else Cell("wrong", detail=line)
                break
            except Exception as e:  # noqa: BLE001 - an error that is not a one-line refusal is a wrong cell
                cell = Cell("wrong", detail=f"{impl}: {type(e).__name__}: {str(e)[:200]}")
                break
            ok = math.isfinite(err) and err <= TOLERANCE
            if not ok:
                cell = Cell("wrong", error=err, detail=f"{impl}: error {err:.3g}")
                break
            cell = Cell("exact", error=max(err, cell.error or 0.0) if cell is not None else err)
        row.cells[head] = cell if cell is not None else Cell("wrong", detail="no implementation ran")
    row.attention = ", ".join(impls)
    return row


def run_encoder_matrix(model_types: list[str] | None = None) -> list[EncoderRow]:
    import torch

    with torch.random.fork_rng():
        return [run_row(t) for t in (encoder_types() if model_types is None else model_types)]


# ---------------------------------------------------------------------------- pinned statuses and the page


def encoder_statuses(rows: list[EncoderRow]) -> dict[str, Any]:
    """Whether each encoder builds and each cell's status (``exact``, ``refused``, ``absent``)."""
    return {
        r.model_type: {"built": r.built, "cells": {h: r.cells[h].status for h in HEADS if h in r.cells}}
        for r in sorted(rows, key=lambda r: r.model_type)
    }


def render_encoders(rows: list[EncoderRow]) -> str:
    """The encoder section of the "Supported models" page."""
    tf, _ = _versions()
    built = [r for r in rows if r.built]
    present = lambda r: [c for c in r.cells.values() if c.status != "absent"]  # noqa: E731
    exact = [r for r in built if present(r) and all(c.status == "exact" for c in present(r))]
    refused = [r for r in built if r not in exact and all(c.status == "refused" for c in present(r))]
    docs = "; ".join(", ".join(map(str, r)) for r in ROWS)
    out = [
        "## Encoders",
        "",
        f"Every encoder family of transformers {tf} (the model types of its masked-LM registry that are neither "
        "decoders nor encoder-decoders), built tiny on the CPU in float32 (32 wide, 4 layers, the layer kinds and "
        "positions of the family's checkpoints: ModernBERT's local layers in windows of 8 tokens, DeBERTa's relative "
        "buckets) with each of its task heads, and run through `packed_forward` on rows of several documents "
        f"({docs} tokens, padded to {LENGTH}). Each document's logits are compared with the document run alone through "
        "the model's own forward, and the gradient of the mean of the documents' own losses with the packed loss's: "
        f"a cell is **exact** (within {TOLERANCE:g}, under `sdpa` where the model has it and `eager`) or **refused** "
        "in one line before any output; **absent** where transformers has no such head. "
        "`seqpack train --hf-model` runs the same paths (`--task classification`, `multilabel`, `qa`, `mlm`, "
        "`token-classification`), and its `--padded` baseline the model's own padded forward.",
        "",
        f"**{len(exact)}** encoders are exact on every head they have, **{len(refused)}** refused, "
        f"**{len(built) - len(exact) - len(refused)}** exact on some; {len(rows) - len(built)} do not build tiny on "
        "the CPU (listed at the end).",
        "",
        "Positions: how the family counts them, each document from its own start (`from padding_idx + 1`: "
        "RoBERTa's family; `relative buckets`: DeBERTa, a document's distances being its row's; `local windows`: "
        "layers whose mask is narrowed to the window inside each document).",
        "",
    ]
    heads = ["model_type", "positions", "attention", *HEADS]
    out += ["| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
    for r in built:
        cells = [r.cells[h].status if h in r.cells else "-" for h in HEADS]
        out.append("| " + " | ".join([f"`{r.model_type}`", r.positions or "-", r.attention or "-", *cells]) + " |")
    out += ["", "### Why an encoder is refused", "", "Each reason once per family, with the heads it refuses.", ""]
    for r in built:
        reasons: dict[str, list[str]] = {}
        for head, c in r.cells.items():
            if c.status == "refused":  # the same reason for each head but its class's name
                reasons.setdefault(c.detail.split(" ", 1)[-1], []).append(head)
        for heads in reasons.values():
            first = next(r.cells[h].detail for h in heads)
            out.append(f"- `{r.model_type}` ({', '.join(heads)}): {first}")
    out += ["", "### Encoders not built by the matrix", ""]
    out += [f"- `{r.model_type}`: {r.why}" for r in rows if not r.built]
    return "\n".join(out) + "\n"


__all__ = [
    "HEADS",
    "LENGTH",
    "ROWS",
    "EncoderRow",
    "build",
    "encoder_statuses",
    "encoder_types",
    "head_class",
    "render_encoders",
    "run_cell",
    "run_encoder_matrix",
    "run_row",
]
