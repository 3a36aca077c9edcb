"""seqpack's packs trained by TRL: one ``SFTTrainer`` step (padding-free, TRL's own collator) has the
loss of seqpack's trainer on the same rows with ``reduction="token"`` (TRL's convention)."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
import torch

from seqpack.data.trl import trl_examples
from seqpack.train import TrainConfig, train
from seqpack.train.data import TrainData
from seqpack.train.models import build_model
from tests.hf_tokenizers import chat_dataset, llama_config

trl = pytest.importorskip("trl")
tf = pytest.importorskip("transformers")
pytestmark = pytest.mark.filterwarnings("ignore")


@pytest.fixture(scope="module")
def chat(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("trl")
    sft, tok = chat_dataset(root)
    return {"sft": sft, "tok": tok, "llama": llama_config(root / "llama.json")}


def test_examples_hold_the_packs(chat: dict[str, Path]) -> None:
    from seqpack.data import PackedDataset

    ds, packed = trl_examples(chat["sft"], [0, 3]), PackedDataset(chat["sft"])
    assert len(ds) == 2
    for row, i in zip(ds, (0, 3)):
        p = packed[i]
        real = p["segment_ids"] > 0
        assert row["input_ids"] == p["input_ids"][real].tolist() and row["labels"] == p["labels"][real].tolist()
        assert row["seq_lengths"] == torch.bincount(p["segment_ids"][real])[1:].tolist()


def test_one_sft_trainer_step_has_seqpack_trainers_loss(chat: dict[str, Path], tmp_path: Path) -> None:
    cfg = TrainConfig(
        data=str(chat["sft"]),
        out=str(tmp_path / "seqpack"),
        hf_model=str(chat["llama"]),
        steps=1,
        batch_size=8,
        reduction="token",
        progress=False,
    )
    data = TrainData(chat["sft"])
    torch.manual_seed(cfg.seed)
    model, _ = build_model(data.manifest, cfg)  # the weights seqpack's run starts from (same seed)
    initial = copy.deepcopy(model)
    initial.config._attn_implementation = "sdpa"  # type: ignore[union-attr]  # TRL calls the model plainly (seqpack's run: seqpack_packed)
    steps: list[dict] = []
    train(cfg, on_step=lambda step, rec: steps.append(rec))
    packs = data.train_packs[data.units_at(cfg.seed, 0, 8)]  # the rows of seqpack's first step

    args = trl.SFTConfig(
        output_dir=str(tmp_path / "trl"),
        padding_free=True,
        per_device_train_batch_size=8,
        max_steps=1,
        logging_steps=1,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        max_length=None,
        dataset_kwargs={"skip_prepare_dataset": True},
        learning_rate=1e-3,
    )
    trainer = trl.SFTTrainer(
        model=initial,
        args=args,
        train_dataset=trl_examples(chat["sft"], packs),
        processing_class=tf.AutoTokenizer.from_pretrained(str(chat["tok"])),
    )
    trainer.train()
    trl_loss = next(r["loss"] for r in trainer.state.log_history if "loss" in r)
    ours = steps[0]["loss"]
    # the same token-level terms; TRL runs one flattened row (1, N), seqpack (8, L) rows: fp32 sums in
    # another order, ~1e-7 relative per operation over a few hundred terms -> 1e-5 relative
    assert abs(trl_loss - ours) <= 1e-5 * abs(ours), (trl_loss, ours)
    assert np.isfinite(ours) and ours > 1.0  # a real loss, not an empty mean
