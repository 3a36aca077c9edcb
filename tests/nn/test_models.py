"""Exactness: every packed model/head equals its sequences run one by one, unpadded."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from hypothesis import given, settings

from seqpack.nn import (
    GPT,
    BertConfig,
    BertForPreTraining,
    BertForQuestionAnswering,
    BertForSequenceClassification,
    GPTConfig,
)
from tests.nn._packs import packs, segment_rows, spans

V, BACKENDS = 40, ("sdpa", "per_document", "eager")
TOL = 1e-5


def f(x: Any) -> float:
    return float(x.detach()) if isinstance(x, torch.Tensor) else float(x)


def heads_for(backend: str) -> int:
    """2 heads of 8 dims; FlexAttention's CUDA kernel needs head dims >= 16, so 1 head of 16 there."""
    return 1 if backend == "flex" and torch.cuda.is_available() else 2


def bert_cfg(backend: str, heads: int | None = None, **kw: Any) -> BertConfig:
    return BertConfig(
        vocab_size=V,
        hidden=16,
        layers=2,
        heads=heads or heads_for(backend),
        max_position=64,
        dropout=0.0,
        attention=backend,
        **kw,
    )


def make_batch(T: int, rows: list[list[int]], seed: int, *, num_labels: int = 3) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    seg = segment_rows(T, rows)
    B, D = seg.shape[0], 4
    real = seg > 0
    ids = torch.randint(0, V, (B, T), generator=g) * real
    mlm = torch.where(real & (torch.rand(B, T, generator=g) < 0.4), ids, -100)
    clm = torch.where(real, ids, -100)
    start, end = torch.full((B, D), -100), torch.full((B, D), -100)
    cls, nsp = torch.full((B, D), -100), torch.full((B, D), -100)
    multi = torch.full((B, D, num_labels), -100.0)
    for b, k, at, n in spans(rows):
        clm[b, at] = -100  # no target for a sequence's first token
        s = at + int(torch.randint(0, n, (1,), generator=g))
        start[b, k], end[b, k] = s, s + int(torch.randint(0, at + n - s, (1,), generator=g))
        cls[b, k] = int(torch.randint(0, num_labels, (1,), generator=g))
        nsp[b, k] = int(torch.randint(0, 2, (1,), generator=g))
        multi[b, k] = torch.randint(0, 2, (num_labels,), generator=g).float()
    return {
        "input_ids": ids,
        "segment_ids": seg,
        "token_type_ids": torch.randint(0, 2, (B, T), generator=g) * real,
        "mlm": mlm,
        "clm": clm,
        "start": start,
        "end": end,
        "cls": cls,
        "nsp": nsp,
        "multi": multi,
    }


def alone(batch: dict[str, torch.Tensor], b: int, k: int, at: int, n: int) -> dict[str, torch.Tensor]:
    """Sequence ``(b, k)`` as a batch of its own: (1, n), one slot, positions in its own frame."""
    out = {}
    for key, x in batch.items():
        if (
            x.dim() >= 2
            and x.shape[1] == batch["segment_ids"].shape[1]
            and key not in ("start", "end", "cls", "nsp", "multi")
        ):
            out[key] = x[b : b + 1, at : at + n].clone()
        else:
            out[key] = x[b : b + 1, k : k + 1].clone()
    out["segment_ids"] = torch.ones(1, n, dtype=torch.long, device=batch["segment_ids"].device)
    out["start"], out["end"] = out["start"] - at, out["end"] - at
    return out


def run(model: torch.nn.Module, kind: str, x: dict[str, torch.Tensor], reduction: str = "sequence") -> Any:
    common = {"token_type_ids": x["token_type_ids"]}
    if kind == "pretrain":
        return model(
            x["input_ids"],
            x["segment_ids"],
            labels=x["mlm"],
            next_sentence_label=x["nsp"],
            reduction=reduction,
            **common,
        )
    if kind == "classify":
        return model(x["input_ids"], x["segment_ids"], labels=x["cls"], **common)
    if kind == "multilabel":
        return model(x["input_ids"], x["segment_ids"], labels=x["multi"], **common)
    if kind == "qa":
        return model(x["input_ids"], x["segment_ids"], start_positions=x["start"], end_positions=x["end"], **common)
    return model(x["input_ids"], x["segment_ids"], labels=x["clm"], reduction=reduction)


def build(kind: str, backend: str, *, heads: int | None = None) -> torch.nn.Module:
    torch.manual_seed(0)
    h = heads or heads_for(backend)
    if kind == "pretrain":
        return BertForPreTraining(bert_cfg(backend, h))
    if kind == "classify":
        return BertForSequenceClassification(bert_cfg(backend, h, num_labels=3))
    if kind == "multilabel":
        return BertForSequenceClassification(bert_cfg(backend, h, num_labels=3, multilabel=True))
    if kind == "qa":
        return BertForQuestionAnswering(bert_cfg(backend, h))
    return GPT(GPTConfig(vocab_size=V, hidden=16, layers=2, heads=h, max_position=64, attention=backend))


def slot_outputs(kind: str, out: Any) -> list[torch.Tensor]:
    if kind in ("pretrain", "classify", "multilabel"):
        return [out.slot_logits]
    if kind == "qa":
        return [out.extra["start_logits"], out.extra["end_logits"]]
    return []


def expected_loss(kind: str, alones: list[Any]) -> torch.Tensor:
    """The unpacked loss: mean over sequences of each sequence's own loss."""

    def mean(xs: list[torch.Tensor]) -> torch.Tensor:
        return torch.stack(xs).mean() if xs else torch.zeros(())

    if kind == "pretrain":
        mlm = [a.per_sequence[0, 0] for a in alones if bool(a.present[0, 0])]
        return mean(mlm) + mean([a.extra["nsp_per_sequence"][0, 0] for a in alones])
    if kind == "gpt":
        return mean([a.per_sequence[0, 0] for a in alones if bool(a.present[0, 0])])
    return mean([a.loss for a in alones])


KINDS = ("pretrain", "classify", "multilabel", "qa", "gpt")


def on(x: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    return {k: v.to(device) for k, v in x.items()}


def check_packed_equals_unpacked(
    kind: str, backend: str, T: int, rows: list[list[int]], *, device: str = "cpu"
) -> None:
    """Every sequence's outputs, loss and the gradients of a packed batch equal the sequences run alone."""
    dev = torch.device(device)
    model = build(kind, backend).to(dev)
    batch = on(make_batch(T, rows, seed=T), dev)
    out = run(model, kind, batch)
    out.loss.backward()
    packed_grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    alones = []
    for b, k, at, n in spans(rows):
        a = run(model, kind, alone(batch, b, k, at, n))
        alones.append(a)
        assert (out.hidden[b, at : at + n] - a.hidden[0]).abs().max() <= TOL
        for got, want in zip(slot_outputs(kind, out), slot_outputs(kind, a)):
            if kind == "qa":  # (B, D, T): the slot's own tokens, -inf elsewhere
                assert (got[b, k, at : at + n] - want[0, 0]).abs().max() <= TOL
                assert torch.isinf(got[b, k, :at]).all() and torch.isinf(got[b, k, at + n :]).all()
            else:
                assert (got[b, k] - want[0, 0]).abs().max() <= TOL
        if out.per_sequence is not None and (out.present is None or bool(out.present[b, k])):
            assert abs(f(out.per_sequence[b, k]) - f(a.per_sequence[0, 0])) <= TOL * max(1.0, f(a.per_sequence[0, 0]))
    want = expected_loss(kind, alones)
    assert abs(f(out.loss) - f(want)) <= TOL * max(1.0, abs(f(want)))
    want.backward()
    for name, p in model.named_parameters():
        if name in packed_grads:
            ref = p.grad if p.grad is not None else torch.zeros_like(p)  # no target reached it
            assert (packed_grads[name] - ref).abs().max() <= 1e-5 + 1e-4 * ref.abs().max(), name


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=6, deadline=None)
@given(pack=packs(max_rows=2, max_len=20, max_depth=4, min_len=2))
def test_packed_equals_unpacked(kind: str, backend: str, pack) -> None:
    check_packed_equals_unpacked(kind, backend, *pack)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=5, deadline=None)
@given(pack=packs(max_rows=2, max_len=20, max_depth=4, min_len=2))
def test_no_cross_contamination(kind: str, backend: str, pack) -> None:
    T, rows = pack
    model = build(kind, backend).eval()
    batch = make_batch(T, rows, seed=1)
    before = run(model, kind, batch)
    b, k, at, n = spans(rows)[0]
    changed = dict(batch)
    changed["input_ids"] = batch["input_ids"].clone()
    changed["input_ids"][b, at : at + n] = (batch["input_ids"][b, at : at + n] + 7) % V
    after = run(model, kind, changed)
    for b2, k2, at2, n2 in spans(rows):
        if (b2, k2) != (b, k):
            assert (before.hidden[b2, at2 : at2 + n2] - after.hidden[b2, at2 : at2 + n2]).abs().max() <= 1e-6
            for x, y in zip(slot_outputs(kind, before), slot_outputs(kind, after)):
                assert torch.equal(torch.isinf(x[b2, k2]), torch.isinf(y[b2, k2]))
                assert (x[b2, k2].nan_to_num(0, 0, 0) - y[b2, k2].nan_to_num(0, 0, 0)).abs().max() <= 1e-6
            if before.per_sequence is not None:
                assert abs(f(before.per_sequence[b2, k2]) - f(after.per_sequence[b2, k2])) <= 1e-6


def test_mlm_token_reduction_is_the_hf_mean() -> None:
    model = build("pretrain", "sdpa")
    batch = make_batch(12, [[5, 7], [12]], seed=3)
    out = run(model, "pretrain", batch, reduction="token")
    rows, cols = (batch["mlm"] != -100).nonzero(as_tuple=True)
    full = model(batch["input_ids"], batch["segment_ids"], token_type_ids=batch["token_type_ids"])
    ce = torch.nn.functional.cross_entropy(full.logits[rows, cols], batch["mlm"][rows, cols])
    assert abs(f(out.extra["mlm_loss"]) - f(ce)) <= 1e-5
    gpt = build("gpt", "sdpa")
    tok = run(gpt, "gpt", batch, reduction="token").loss
    logits = gpt(batch["input_ids"], batch["segment_ids"]).logits
    hf = torch.nn.functional.cross_entropy(
        logits[:, :-1].reshape(-1, V), batch["clm"][:, 1:].reshape(-1), ignore_index=-100
    )
    assert abs(f(tok) - f(hf)) <= 1e-5


def test_model_bad_inputs() -> None:
    model = build("classify", "sdpa")
    batch = make_batch(10, [[3, 3, 2, 2]], seed=0)
    with pytest.raises(ValueError, match=r"token_type_ids has shape \(1, 9\) but input_ids is \(1, 10\)"):
        model(batch["input_ids"], batch["segment_ids"], token_type_ids=batch["token_type_ids"][:, :9])
    with pytest.raises(ValueError, match="max_depth=2 slots"):
        model(batch["input_ids"], batch["segment_ids"], labels=batch["cls"][:, :2])
    with pytest.raises(ValueError, match="not contiguous runs"):
        model(batch["input_ids"], torch.tensor([[1, 1, 0, 2, 2, 2, 3, 3, 4, 4]]))
    with pytest.raises(ValueError, match="max_position=64"):
        model(torch.zeros(1, 70, dtype=torch.long), torch.ones(1, 70, dtype=torch.long))
    with pytest.raises(ValueError, match="divisible by heads"):
        BertConfig(vocab_size=10, hidden=10, heads=3)
    with pytest.raises(ValueError, match="attention must be one of"):
        GPTConfig(vocab_size=10, attention="flash")
    with pytest.raises(ValueError, match="size must be one of"):
        BertConfig.of_size("huge", vocab_size=10)
    assert GPTConfig.of_size("tiny", vocab_size=10).hidden == 128
    with pytest.raises(ValueError, match="reduction must be one of"):
        run(build("gpt", "sdpa"), "gpt", batch, reduction="batch")
