"""``seqpack.hf.pack_dataset`` is a drop-in for ``trl.pack_dataset``: the same columns, the same
sequences (TRL's truncation or splitting), never more rows than TRL's ``bfd``, and SFTTrainer's
first padding-free step on it has the loss of the same step on TRL's packing."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

import numpy as np
import pytest

if TYPE_CHECKING:
    from datasets import Dataset

datasets = pytest.importorskip("datasets")
trl = pytest.importorskip("trl")

from seqpack.hf import pack_dataset  # noqa: E402


def random_dataset(n: int, *, seed: int = 0, longest: int = 300) -> Dataset:
    rng = np.random.default_rng(seed)
    lengths = np.minimum(rng.lognormal(4.0, 0.9, n).astype(int) + 1, longest)
    ids = [rng.integers(3, 390, k).tolist() for k in lengths]
    labels = [[-100, *x[1:]] for x in ids]
    return datasets.Dataset.from_dict({"input_ids": ids, "labels": labels})


def sequences(packed: Dataset) -> Counter[tuple[tuple[int, ...], tuple[int, ...]]]:
    """The multiset of (input_ids, labels) sequences a packed dataset holds, cut at ``seq_lengths``."""
    out: Counter[tuple[tuple[int, ...], tuple[int, ...]]] = Counter()
    for row in packed:
        at = 0
        for n in row["seq_lengths"]:
            out[tuple(row["input_ids"][at : at + n]), tuple(row["labels"][at : at + n])] += 1
            at += n
        assert at == len(row["input_ids"]) == len(row["labels"])
    return out


@pytest.mark.parametrize(
    "strategy, trl_strategy", [("best", "bfd"), ("bfd", "bfd"), ("best_split", "bfd_split"), ("bfd_split", "bfd_split")]
)
def test_same_sequences_as_trl_in_no_more_rows(strategy: str, trl_strategy: str) -> None:
    ds = random_dataset(3000)
    seq_length = 256
    ours = pack_dataset(ds, seq_length, strategy=strategy)
    theirs = trl.pack_dataset(ds, seq_length, strategy=trl_strategy)
    assert ours.column_names == theirs.column_names == ["input_ids", "labels", "seq_lengths"]
    assert sequences(ours) == sequences(theirs)  # same truncation / splitting, every sequence once
    assert max(len(r) for r in ours["input_ids"]) <= seq_length
    assert len(ours) <= len(theirs), (len(ours), len(theirs))
    if strategy.startswith("best"):
        assert len(ours) < len(theirs)  # the global plan beats per-1000-row packing here


def test_iterable_dataset_and_formats_and_dict() -> None:
    ds = random_dataset(500, seed=1)
    stream = pack_dataset(ds.to_iterable_dataset(), 256, map_kwargs={"batch_size": 200})
    rows = list(stream)
    assert sequences(datasets.Dataset.from_list(rows)) == sequences(pack_dataset(ds, 256))
    assert all(len(r["input_ids"]) <= 256 for r in rows)
    torch_fmt = pack_dataset(ds.with_format("torch"), 256)
    assert torch_fmt.format["type"] == "torch" and hasattr(torch_fmt[0]["input_ids"], "shape")
    split = pack_dataset(datasets.DatasetDict({"train": ds, "test": ds.select(range(50))}), 256)
    assert set(split) == {"train", "test"} and len(split["test"]) < 50


def test_bad_input_says_how_to_fix_it() -> None:
    ds = datasets.Dataset.from_dict({"input_ids": [[1, 2]], "source": ["a"]})
    with pytest.raises(ValueError, match=r"column 'source' is not a list column.*remove_columns"):
        pack_dataset(ds, 8)
    with pytest.raises(ValueError, match="unknown packing strategy 'wrapped'"):
        pack_dataset(ds.remove_columns("source"), 8, strategy="wrapped")
    with pytest.raises(ValueError, match="other lengths"):
        pack_dataset(datasets.Dataset.from_dict({"input_ids": [[1, 2]], "labels": [[1]]}), 8)


def test_sft_trainer_first_step_loss_equals_trl_packing(tmp_path) -> None:
    """Both packings hold the same sequences; one step over all rows (padding-free: one flattened row,
    position ids from seq_lengths) averages the same label tokens. fp32 sums in another order: ~1e-7
    relative per operation over a few hundred terms -> 1e-5 relative."""
    import torch
    import transformers as tf

    from tests.hf_tokenizers import LLAMA, bpe_tokenizer_dir

    tok = tf.AutoTokenizer.from_pretrained(str(bpe_tokenizer_dir(tmp_path / "tok")))  # ids below: under its 400
    ds = random_dataset(40, seed=2, longest=120)
    losses = {}
    for name, packed in (("seqpack", pack_dataset(ds, 128)), ("trl", trl.pack_dataset(ds, 128, strategy="bfd"))):
        torch.manual_seed(0)
        cfg = {k: v for k, v in LLAMA.items() if k != "model_type"}
        model = tf.LlamaForCausalLM(tf.LlamaConfig(**{**cfg, "vocab_size": 512}))
        args = trl.SFTConfig(
            output_dir=str(tmp_path / name),
            padding_free=True,
            max_length=None,
            max_steps=1,
            per_device_train_batch_size=64,
            logging_steps=1,
            report_to=[],
            save_strategy="no",
            use_cpu=True,
            learning_rate=1e-3,
            dataset_kwargs={"skip_prepare_dataset": True},
        )
        trainer = trl.SFTTrainer(model=model, args=args, train_dataset=packed, processing_class=tok)
        trainer.train()
        losses[name] = next(r["loss"] for r in trainer.state.log_history if "loss" in r)
    assert len(pack_dataset(ds, 128)) < 64  # every row in the one step
    assert abs(losses["seqpack"] - losses["trl"]) <= 1e-5 * abs(losses["trl"]), losses
