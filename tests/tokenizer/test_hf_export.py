"""``seqpack train-tokenizer --hf`` writes a complete Hugging Face tokenizer directory: ``AutoTokenizer``
loads it with eos/pad and a chat template, gives seqpack's ids, masks the assistant's tokens the way
seqpack's chat task labels them, and TRL's ``SFTTrainer(assistant_only_loss=True)`` trains on it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from seqpack.cli.main import main
from seqpack.tokenizer import open_tokenizer
from tests.hf_tokenizers import LLAMA, conversations, texts


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("hf")
    corpus = d / "corpus.txt"
    corpus.write_text("\n".join(texts(300)), encoding="utf-8")
    assert main(["train-tokenizer", str(corpus), "--vocab-size", "400", "--out", str(d / "tok"), "--hf", "--json"]) == 0
    return d / "tok"


def test_auto_tokenizer_loads_it_complete_with_seqpacks_ids(exported: Path) -> None:
    tf = pytest.importorskip("transformers")
    hf = tf.AutoTokenizer.from_pretrained(str(exported))
    ours = open_tokenizer(exported)
    assert (hf.eos_token, hf.pad_token, hf.bos_token) == ("<|im_end|>", "<|endoftext|>", "<|endoftext|>")
    assert hf.eos_token_id == ours.token_to_id("<|im_end|>") and hf.chat_template == ours.chat_template
    for text in texts(20, seed=3) + ["a<|endoftext|>b <|im_start|>user\nhi<|im_end|>"]:
        assert hf(text, add_special_tokens=False)["input_ids"] == ours.encode(text)
    meta = json.loads((exported / "special_tokens_map.json").read_text())
    assert meta == {"bos_token": "<|endoftext|>", "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}


def test_its_assistant_mask_is_seqpacks_chat_labels(exported: Path) -> None:
    tf = pytest.importorskip("transformers")
    from seqpack.data import IGNORE_INDEX
    from seqpack.pipeline import PackConfig, build_sequences

    hf = tf.AutoTokenizer.from_pretrained(str(exported))
    records = conversations(12, seed=5)
    seqs = build_sequences(records, open_tokenizer(exported), PackConfig.for_task("chat", max_len=4096))
    for i, rec in enumerate(records):
        out = hf.apply_chat_template(
            rec["messages"], tokenize=True, return_dict=True, return_assistant_tokens_mask=True
        )
        s = seqs.sequence(i)
        assert out["input_ids"] == s["input_ids"].tolist()
        assert [int(m) for m in out["assistant_masks"]] == [int(x != IGNORE_INDEX) for x in s["labels"]]


def test_sft_trainer_trains_on_it_with_assistant_only_loss(exported: Path, tmp_path: Path) -> None:
    tf = pytest.importorskip("transformers")
    trl = pytest.importorskip("trl")
    datasets = pytest.importorskip("datasets")
    import torch

    hf = tf.AutoTokenizer.from_pretrained(str(exported))
    torch.manual_seed(0)
    cfg = {k: v for k, v in LLAMA.items() if k != "model_type"}
    model = tf.LlamaForCausalLM(tf.LlamaConfig(**{**cfg, "vocab_size": len(hf)}))
    args = trl.SFTConfig(
        output_dir=str(tmp_path / "trl"),
        assistant_only_loss=True,
        max_steps=1,
        logging_steps=1,
        per_device_train_batch_size=4,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        max_length=256,
    )
    data = datasets.Dataset.from_list(conversations(16, seed=7))
    trainer = trl.SFTTrainer(model=model, args=args, train_dataset=data, processing_class=hf)
    trainer.train()
    loss = next(r["loss"] for r in trainer.state.log_history if "loss" in r)
    assert loss > 1.0 and loss == loss  # a real loss over the assistant tokens


def test_chat_template_needs_hf_and_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    corpus = tmp_path / "c.txt"
    corpus.write_text("hello world " * 50, encoding="utf-8")
    assert (
        main(
            [
                "train-tokenizer",
                str(corpus),
                "--vocab-size",
                "300",
                "--out",
                str(tmp_path / "t"),
                "--chat-template",
                "x.jinja",
            ]
        )
        == 2
    )
    assert "--chat-template is written by --hf" in capsys.readouterr().err
    assert (
        main(
            [
                "train-tokenizer",
                str(corpus),
                "--vocab-size",
                "300",
                "--out",
                str(tmp_path / "t"),
                "--hf",
                "--chat-template",
                str(tmp_path / "none.jinja"),
            ]
        )
        == 2
    )
    assert "no such file" in capsys.readouterr().err
