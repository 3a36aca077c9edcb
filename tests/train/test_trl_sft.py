"""``PackedSFTTrainer`` trains as TRL's ``SFTTrainer`` does (CPU, float32): the same losses step by
step, the same token counts, a token accuracy."""

from __future__ import annotations

import pytest

trl = pytest.importorskip("trl")
datasets = pytest.importorskip("datasets")
tf = pytest.importorskip("transformers")

import torch  # noqa: E402

from seqpack.hf import pack_dataset  # noqa: E402
from seqpack.nn.hf_padding_free import register_varlen_attention  # noqa: E402
from seqpack.train.trl_sft import PackedSFTTrainer  # noqa: E402


def _tokenizer(tmp_path):
    from tokenizers import Tokenizer, models

    vocab = {f"t{i}": i for i in range(61)}
    tok = tf.PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="t0")), pad_token="t0", eos_token="t1"
    )
    return tok


def _packed() -> object:
    g = torch.Generator().manual_seed(0)
    ids, labels = [], []
    for n in torch.randint(3, 20, (24,), generator=g).tolist():
        x = torch.randint(2, 61, (n,), generator=g).tolist()
        cut = n // 3  # a prompt: no loss there
        ids.append(x)
        labels.append([-100] * cut + x[cut:])
    return pack_dataset(datasets.Dataset.from_dict({"input_ids": ids, "labels": labels}), seq_length=32)


def _run(cls, tmp_path, ds, **kw):
    torch.manual_seed(0)
    cfg = tf.LlamaConfig(
        vocab_size=61,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        attn_implementation=register_varlen_attention(),
    )
    model = tf.LlamaForCausalLM(cfg)
    args = trl.SFTConfig(
        output_dir=str(tmp_path / cls.__name__),
        padding_free=True,
        max_length=None,
        use_cpu=True,
        per_device_train_batch_size=4,
        max_steps=3,
        learning_rate=1e-3,
        report_to=[],
        save_strategy="no",
        logging_steps=1,
        disable_tqdm=True,
        seed=0,
        dataset_kwargs={"skip_prepare_dataset": True},
    )
    trainer = cls(model=model, args=args, train_dataset=ds, processing_class=_tokenizer(tmp_path), **kw)
    trainer.train()
    return [h for h in trainer.state.log_history if "loss" in h]


def test_packed_sft_trainer_trains_as_trl_does(tmp_path) -> None:
    ds = _packed()
    want = _run(trl.SFTTrainer, tmp_path, ds)
    got = _run(PackedSFTTrainer, tmp_path, ds, compile_blocks=False)
    assert len(got) == len(want) == 3
    # float32 both ways, TRL's chunked head summing in another order: the first step (same weights)
    # within float32 rounding of the sums (~1e-7 measured); Adam then divides by sqrt(v), so tiny
    # gradients' rounding differences move weights by up to lr: later steps within 1e-4 (4e-5 measured)
    assert got[0]["loss"] == pytest.approx(want[0]["loss"], rel=2e-6)
    for g, w in zip(got, want):
        assert g["loss"] == pytest.approx(w["loss"], rel=1e-4)
        assert g["num_tokens"] == w["num_tokens"]
        assert 0.0 <= g["mean_token_accuracy"] <= 1.0
        assert g["mean_token_accuracy"] == pytest.approx(w["mean_token_accuracy"], abs=1e-6)


def test_a_packed_directory_is_taken_as_the_dpo_trainer_takes_one(tmp_path) -> None:
    """``packed=DIR``: the directory's rows as TRL's padding-free examples and the config set to read
    them as they are; the same steps as passing them by hand."""
    from seqpack.data import trl_examples
    from tests.golden.make_packed import build

    m = build("chat-records", tmp_path / "sft", tmp_path / "w")

    def run(**how):
        torch.manual_seed(0)
        cfg = tf.LlamaConfig(
            vocab_size=int(m["vocab_size"]),
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=256,
            attn_implementation=register_varlen_attention(),
        )
        base = dict(
            output_dir=str(tmp_path / "out"),
            use_cpu=True,
            per_device_train_batch_size=2,
            max_steps=2,
            learning_rate=1e-3,
            report_to=[],
            save_strategy="no",
            logging_steps=1,
            disable_tqdm=True,
            seed=0,
        )
        if "train_dataset" in how:
            base.update(padding_free=True, max_length=None, dataset_kwargs={"skip_prepare_dataset": True})
        args = trl.SFTConfig(**base)
        trainer = PackedSFTTrainer(
            model=tf.LlamaForCausalLM(cfg),
            args=args,
            processing_class=_tokenizer(tmp_path),
            compile_blocks=False,
            **how,
        )
        assert args.dataset_kwargs in (None, {}) or "train_dataset" in how  # the caller's config is left as it was
        trainer.train()
        return [h["loss"] for h in trainer.state.log_history if "loss" in h]

    by_dir = run(packed=tmp_path / "sft")
    assert by_dir == run(train_dataset=trl_examples(tmp_path / "sft")) and len(by_dir) == 2
    with pytest.raises(ValueError, match="not both"):
        PackedSFTTrainer(
            model=None,
            packed=tmp_path / "sft",
            train_dataset=[],
            args=trl.SFTConfig(output_dir=str(tmp_path / "x"), use_cpu=True),
        )
