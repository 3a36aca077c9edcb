"""``PackedCollator``: transformers models fed seqpack packs through a Trainer compute seqpack's
per-token loss, whichever layout (flattened or rows) and attention implementation."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from seqpack.data import PackedDataset, collate_packed
from seqpack.nn import packed_forward
from seqpack.nn.hf_collator import PackedCollator
from seqpack.nn.hf_padding_free import VARLEN_IMPL, register_varlen_attention
from tests.hf_tokenizers import LLAMA, chat_dataset

tf = pytest.importorskip("transformers")
pytestmark = pytest.mark.filterwarnings("ignore")


@pytest.fixture(scope="module")
def sft(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return chat_dataset(tmp_path_factory.mktemp("collator"), n=60)[0]


def llama(impl: str, vocab: int) -> torch.nn.Module:
    torch.manual_seed(0)
    cfg = tf.LlamaConfig(
        **{k: v for k, v in LLAMA.items() if k != "model_type"}, vocab_size=vocab, attn_implementation=impl
    )
    return tf.LlamaForCausalLM(cfg)


@pytest.mark.parametrize("impl", ["sdpa", "eager", VARLEN_IMPL])
@pytest.mark.parametrize("flatten", [True, False])
def test_model_loss_on_collated_batch_is_seqpacks_token_loss(sft: Path, impl: str, flatten: bool) -> None:
    if impl == VARLEN_IMPL:
        if not flatten:
            pytest.skip("the varlen kernel reads cu_seq_lens: flattened batches only")
        register_varlen_attention()
    ds = PackedDataset(sft)
    rows = [ds[i] for i in range(4)]
    model = llama(impl, int(ds.manifest["vocab_size"]))
    theirs = model(**PackedCollator(flatten=flatten)(rows)).loss  # transformers' own loss: mean over target tokens
    batch = {k: v for k, v in collate_packed(rows).items() if k not in ("example_ids", "num_sequences")}
    ours = packed_forward(model, batch, reduction="token").loss
    # the same terms summed in another order (fp32): 1e-5 relative
    assert abs(float(theirs) - float(ours)) <= 1e-5 * abs(float(ours))  # type: ignore[arg-type]  # PackedOutput.loss: set when the batch has targets


def test_trainer_step_with_the_collator(sft: Path, tmp_path: Path) -> None:
    """One ``transformers.Trainer`` step over seqpack's PackedDataset: the logged loss is seqpack's."""
    ds = PackedDataset(sft)
    rows = torch.utils.data.Subset(ds, range(8))
    model = llama("sdpa", int(ds.manifest["vocab_size"]))
    batch = {
        k: v for k, v in collate_packed([ds[i] for i in range(8)]).items() if k not in ("example_ids", "num_sequences")
    }
    with torch.no_grad():
        want = float(packed_forward(model, batch, reduction="token").loss)  # type: ignore[arg-type]  # PackedOutput.loss: set when the batch has targets
    args = tf.TrainingArguments(
        output_dir=str(tmp_path),
        per_device_train_batch_size=8,
        max_steps=1,
        logging_steps=1,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        remove_unused_columns=False,
    )
    trainer = tf.Trainer(model=model, args=args, train_dataset=rows, data_collator=PackedCollator())
    trainer.train()
    got = next(r["loss"] for r in trainer.state.log_history if "loss" in r)
    assert abs(got - want) <= 1e-5 * abs(want)  # one flattened row vs 8 rows: fp32 order only


def test_collator_refuses_what_is_not_a_pack() -> None:
    with pytest.raises(ValueError, match="PackedDataset"):
        PackedCollator()([{"input_ids": torch.tensor([1, 2])}])
    with pytest.raises(ValueError, match="empty batch"):
        PackedCollator()([])


def test_sft_trainer_with_the_collator(sft: Path, tmp_path: Path) -> None:
    """TRL's SFTTrainer (its own padding-free mode off: the collator is padding-free) over the packs'
    Parquet shards loaded as a ``datasets.Dataset``: one step's loss is seqpack's token loss."""
    trl = pytest.importorskip("trl")
    datasets = pytest.importorskip("datasets")
    ds = PackedDataset(sft)
    model = llama("sdpa", int(ds.manifest["vocab_size"]))
    batch = {
        k: v for k, v in collate_packed([ds[i] for i in range(8)]).items() if k not in ("example_ids", "num_sequences")
    }
    with torch.no_grad():
        want = float(packed_forward(model, batch, reduction="token").loss)  # type: ignore[arg-type]  # PackedOutput.loss: set when the batch has targets
    rows = datasets.Dataset.from_parquet(sorted(str(p) for p in (sft / "data").glob("*.parquet"))).select(range(8))
    args = trl.SFTConfig(
        output_dir=str(tmp_path),
        per_device_train_batch_size=8,
        max_steps=1,
        logging_steps=1,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        max_length=None,
        remove_unused_columns=False,
        dataset_kwargs={"skip_prepare_dataset": True},
    )
    tok = tf.AutoTokenizer.from_pretrained(str(sft.parent / "tok"))
    trainer = trl.SFTTrainer(
        model=model, args=args, train_dataset=rows, data_collator=PackedCollator(), processing_class=tok
    )
    trainer.train()
    got = next(r["loss"] for r in trainer.state.log_history if "loss" in r)
    assert abs(got - want) <= 1e-5 * abs(want)  # one flattened row vs 8 rows: fp32 order only


@pytest.mark.parametrize("offset", [0, 2])
def test_parquet_rows_collate_like_packed_dataset_items(tmp_path: Path, offset: int) -> None:
    """Rows read straight from a clm dataset's Parquet parts lack its derived columns (labels,
    segment_ids): the collator makes them, so the batch is the one PackedDataset's items give."""
    datasets = pytest.importorskip("datasets")
    from seqpack.pipeline import PackConfig, build_packed_dataset
    from seqpack.store import build_store
    from tests.golden.make_packed import text_docs, tokenizer

    tok = tokenizer()
    store = build_store(text_docs(), tok, tmp_path / "store")
    build_packed_dataset(
        store.path, tok, tmp_path / "p", PackConfig.for_task("clm", max_len=48, position_offset=offset)
    )
    ds = PackedDataset(tmp_path / "p")
    hf = datasets.load_dataset("parquet", data_files=str(tmp_path / "p" / "data" / "*.parquet"), split="train")
    assert "labels" not in hf.column_names and "segment_ids" not in hf.column_names
    for flatten in (True, False):
        collate = PackedCollator(flatten=flatten, position_offset=offset)
        want, got = collate([ds[i] for i in range(len(ds))]), collate([hf[i] for i in range(len(hf))])
        assert want.keys() == got.keys()
        assert all(torch.equal(torch.as_tensor(want[k]), torch.as_tensor(got[k])) for k in want), flatten
