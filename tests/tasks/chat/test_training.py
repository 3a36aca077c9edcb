"""The chat task trained packed is exact: each conversation's loss, logits and gradients are what it
gives run alone and unpadded, for seqpack's GPT and transformers' Llama / GPT-2 (sdpa and eager)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from seqpack.data import IGNORE_INDEX, PackedDataset, collate_packed
from seqpack.train import TrainConfig
from seqpack.train.data import TrainData
from seqpack.train.models import build_model, forward
from tests.hf_tokenizers import chat_dataset, llama_config

tf = pytest.importorskip("transformers")
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

GPT2 = {
    "model_type": "gpt2",
    "n_embd": 32,
    "n_layer": 2,
    "n_head": 4,
    "n_positions": 1024,
    "resid_pdrop": 0.0,
    "embd_pdrop": 0.0,
    "attn_pdrop": 0.0,
}


@pytest.fixture(scope="module")
def chat(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("chat")
    sft, tok = chat_dataset(root)
    import json

    (root / "gpt2.json").write_text(json.dumps(GPT2))
    return {"sft": sft, "tok": tok, "llama": llama_config(root / "llama.json"), "gpt2": root / "gpt2.json"}


def model_for(chat: dict[str, Path], which: str, impl: str) -> tuple[Any, dict]:
    manifest = PackedDataset(chat["sft"]).manifest
    hf = None if which == "gpt" else str(chat[which])
    torch.manual_seed(0)
    model, _ = build_model(
        manifest, TrainConfig(data=str(chat["sft"]), out="x", hf_model=hf, dropout=0.0 if hf is None else None)
    )
    if hf is not None:
        model.config._attn_implementation = impl  # type: ignore[union-attr]  # a transformers model's config
    return model, manifest


def alone(batch: dict[str, torch.Tensor], b: int, k: int) -> dict[str, torch.Tensor]:
    """Sequence ``k`` of row ``b`` as a batch of its own, unpadded."""
    sel = batch["segment_ids"][b] == k
    n = int(sel.sum())
    return {
        "input_ids": batch["input_ids"][b][sel][None],
        "labels": batch["labels"][b][sel][None],
        "segment_ids": torch.ones(1, n, dtype=torch.long),
        "position_ids": torch.arange(n)[None],
    }


def logits_of(out: Any, batch: dict[str, torch.Tensor], b: int, k: int) -> torch.Tensor:
    """Sequence ``k`` of row ``b``'s logits at the positions that predict a target (seqpack's GPT
    computes only those, ``(N, V)``; transformers models return ``(B, T, V)``)."""
    predicts = batch["labels"][:, 1:] != IGNORE_INDEX  # position t predicts label t + 1
    mine = torch.zeros_like(predicts)
    mine[b] = batch["segment_ids"][b, :-1] == k
    if out.logits.ndim == 3:
        return out.logits[:, :-1][predicts & mine]
    return out.logits[(predicts & mine)[predicts]]


CASES = [("gpt", "-"), ("llama", "sdpa"), ("llama", "eager"), ("gpt2", "sdpa"), ("gpt2", "eager")]


@pytest.mark.parametrize("which, impl", CASES)
def test_packed_chat_equals_each_conversation_alone(chat: dict[str, Path], which: str, impl: str) -> None:
    model, _ = model_for(chat, which, impl)
    model.train()
    batch = collate_packed([PackedDataset(chat["sft"])[i] for i in range(3)])
    batch = {k: v for k, v in batch.items() if k not in ("example_ids", "num_sequences")}
    out = forward(model, batch, task="chat", reduction="sequence")
    out.loss.backward()  # type: ignore[union-attr]  # PackedOutput.loss: set when the batch has targets
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    losses = []
    for b in range(batch["input_ids"].shape[0]):
        for k in range(1, int(batch["segment_ids"][b].max()) + 1):
            one = alone(batch, b, k)
            ref = forward(model, one, task="chat", reduction="sequence")
            # logits: the same arithmetic on fewer rows; fp32 rounding of attention sums (~1e-7 relative)
            assert (logits_of(out, batch, b, k) - logits_of(ref, one, 0, 1)).abs().max() <= 1e-5
            assert (one["labels"] != IGNORE_INDEX).any(), "a packed conversation without targets"
            losses.append(ref.loss)
    want = torch.stack(losses).mean()  # type: ignore[arg-type]  # the mean of each conversation's own mean over its target tokens
    assert abs(float(out.loss) - float(want)) <= 1e-5 * max(1.0, abs(float(want)))  # type: ignore[arg-type]  # PackedOutput.loss: set when the batch has targets
    want.backward()
    for name, p in model.named_parameters():
        if name in grads:
            # each element sums per-token terms in another order: ~1e-6 of the tensor's scale (fp32)
            scale = float(p.grad.abs().max())
            assert (grads[name] - p.grad).abs().max() <= 1e-6 + 1e-5 * scale, name


@pytest.mark.parametrize("which, impl", CASES[:2])
def test_perturbing_one_conversation_changes_no_other(chat: dict[str, Path], which: str, impl: str) -> None:
    model, _ = model_for(chat, which, impl)
    model.eval()
    batch = collate_packed([PackedDataset(chat["sft"])[i] for i in range(2)])
    batch = {k: v for k, v in batch.items() if k not in ("example_ids", "num_sequences")}
    with torch.no_grad():
        before = forward(model, batch, task="chat", reduction="sequence")
        changed = {**batch, "input_ids": batch["input_ids"].clone()}
        hit = batch["segment_ids"][0] == 1
        changed["input_ids"][0][hit] = (changed["input_ids"][0][hit] + 7) % 300
        after = forward(model, changed, task="chat", reduction="sequence")
    for b in range(2):
        for k in range(1, int(batch["segment_ids"][b].max()) + 1):
            diff = (logits_of(before, batch, b, k) - logits_of(after, batch, b, k)).abs().max()
            if (b, k) == (0, 1):
                assert diff > 1e-2  # the perturbed one did change
            else:  # the others see only their own tokens: equal up to fp32 reordering; a leak moves them O(0.1)
                assert diff <= 1e-5, (b, k)
    assert torch.allclose(before.per_sequence[1:], after.per_sequence[1:], atol=1e-5)  # type: ignore[index]  # per_sequence: asked for


@pytest.mark.parametrize("which", ["gpt", "llama"])
def test_accumulation_2x4_equals_1x8(chat: dict[str, Path], which: str) -> None:
    from tests.train.test_loop import accumulated_grads

    hf = None if which == "gpt" else str(chat[which])
    data = TrainData(chat["sft"])
    cfg = TrainConfig(data=str(chat["sft"]), out="x", hf_model=hf, dropout=0.0 if hf is None else None)
    units = np.arange(8)
    one = accumulated_grads(data, cfg, [units], task="chat")
    two = accumulated_grads(data, cfg, [units[:4], units[4:]], task="chat")
    for k in one:
        # two partial sums instead of one: fp32 reordering (eps 1.2e-7) over hundreds of terms -> ~1e-6 of
        # the scale; a per-micro-batch normalisation would be off by ~2x
        scale = float(one[k].abs().max())
        torch.testing.assert_close(two[k], one[k], rtol=1e-5, atol=1e-6 * scale + 1e-12)
