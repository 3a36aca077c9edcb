"""``--hf-model DIR`` with weights for the tasks beyond plain text: chat (the tokenizer's own template
and tokens), preference (DPO from the released model as policy and reference) and image-text (a
vision-language checkpoint and its processor). Each run starts from the checkpoint's weights, and
``RUN/model/`` is what transformers loads back, tokenizer or processor included.

Tolerances: a vanishing learning rate (1e-12) moves an AdamW weight by at most ~lr a step (its update
is normalised), below float32's spacing near any weight of size > 1e-5, so every weight stays within
steps x lr (x1.01) of the checkpoint's, relative spacing 2^-23 aside (as in test_hf_pretrained.py).
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
import torch

from seqpack.train import TrainConfig, train
from tests.hf_tokenizers import bpe_tokenizer_dir, conversations, preference_records

transformers = pytest.importorskip("transformers")

LLAMA = {
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "intermediate_size": 64,
    "max_position_embeddings": 256,
}


def _weights(directory: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(directory / "model.safetensors"))


def _still(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor], steps: int) -> None:
    assert set(got) == set(want)
    for k in want:
        torch.testing.assert_close(got[k], want[k], rtol=2**-23, atol=steps * 1e-12 * 1.01, msg=k)


@pytest.fixture(scope="module")
def chat_model(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A chat tokenizer (ChatML), conversations and preference pairs packed with it, and a tiny Llama
    saved with that tokenizer beside its weights, as a released chat model is."""
    from seqpack.pipeline import PackConfig, build_packed_dataset
    from seqpack.tokenizer import open_tokenizer

    root = tmp_path_factory.mktemp("released_chat")
    tok_dir = bpe_tokenizer_dir(root / "tok")
    tok = open_tokenizer(tok_dir)
    build_packed_dataset(conversations(60), tok, root / "sft", PackConfig.for_task("chat", max_len=256))
    build_packed_dataset(
        preference_records(80, seed=1),
        tok,
        root / "pref",
        PackConfig.for_task("preference", max_len=128, layout="shared-prefix"),
    )
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(vocab_size=tok.vocab_size, **LLAMA))
    model.save_pretrained(root / "llama")
    for f in tok_dir.iterdir():
        shutil.copy(f, root / "llama" / f.name)
    return {"root": root, "tok": tok_dir, "sft": root / "sft", "pref": root / "pref", "llama": root / "llama"}


def _run(data: Path, model: Path, out: Path, **kw: object) -> dict:
    opts = {"steps": 1, "batch_size": 4, "progress": False, "eval_fraction": 0.1, "lr": 1e-12, **kw}
    return train(TrainConfig(data=str(data), out=str(out), hf_model=str(model), **opts))  # type: ignore[arg-type]


def test_chat_starts_from_the_checkpoint_and_its_first_loss_is_transformers_own(chat_model, tmp_path):
    """The first step's loss (reduction token) is transformers' own loss of the checkpoint on each
    conversation of that step's rows alone, its labels the assistant turns: both sum ~10^3 float32
    cross-entropies of size ~6 in different orders (relative error ~ sqrt(n) * 2^-24 each), so 1e-5
    relative holds while one token attending across conversations moves the loss by far more. The
    run's model directory holds the weights and the tokenizer with its chat template."""
    from seqpack.data import IGNORE_INDEX
    from seqpack.train.data import TrainData

    _run(chat_model["sft"], chat_model["llama"], tmp_path / "run", reduction="token")
    _still(_weights(tmp_path / "run" / "model"), _weights(chat_model["llama"]), steps=1)
    first = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[0])
    data = TrainData(str(chat_model["sft"]), eval_fraction=0.1, eval_tokens=0)
    b = data.batch(data.units_at(0, 0, 4))
    model = transformers.LlamaForCausalLM.from_pretrained(
        chat_model["llama"], local_files_only=True, attn_implementation="eager"
    ).eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for r in range(b["input_ids"].shape[0]):
            seg = b["segment_ids"][r]
            for k in seg.unique().tolist():
                if k == 0:
                    continue
                ids, labels = b["input_ids"][r][seg == k][None].long(), b["labels"][r][seg == k][None].long()
                n = int((labels[:, 1:] != IGNORE_INDEX).sum())
                if n:
                    total += float(model(ids, labels=labels).loss) * n
                    count += n
    assert count > 0 and math.isclose(first["loss"], total / count, rel_tol=1e-5), (first["loss"], total / count)
    tok = transformers.AutoTokenizer.from_pretrained(tmp_path / "run" / "model")
    assert tok.chat_template and "<|im_start|>" in tok.chat_template


def test_chat_packed_with_another_tokenizer_is_refused_before_any_step(chat_model, tmp_path):
    """Conversations packed with another chat tokenizer (its own ids for the template's tokens) are
    refused in one line naming the fix; nothing is trained or written."""
    from seqpack.pipeline import PackConfig, build_packed_dataset
    from seqpack.tokenizer import open_tokenizer

    other = bpe_tokenizer_dir(tmp_path / "other", vocab_size=300)
    build_packed_dataset(
        conversations(20), open_tokenizer(other), tmp_path / "sft", PackConfig.for_task("chat", max_len=256)
    )
    with pytest.raises(ValueError, match=r"packed with another tokenizer than the model's; re-pack .* --tokenizer"):
        _run(tmp_path / "sft", chat_model["llama"], tmp_path / "run")
    assert not (tmp_path / "run" / "checkpoint.pt").exists()


def test_dpo_starts_from_the_checkpoint_as_policy_and_reference(chat_model, tmp_path):
    """DPO from a released model: its first loss is log 2 (the policy is the reference, both the
    checkpoint's weights: every log-ratio is 0 up to rounding of two identical computations), and
    RUN/model/ loads back with those weights."""
    from seqpack.train.reference import REFERENCE

    _run(chat_model["pref"], chat_model["llama"], tmp_path / "run", steps=2, batch_size=8)
    first = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[0])
    assert abs(first["loss"] - math.log(2)) < 1e-6
    assert (tmp_path / "run" / REFERENCE).is_file()
    _still(_weights(tmp_path / "run" / "model"), _weights(chat_model["llama"]), steps=2)
    transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "run" / "model", local_files_only=True)


def test_an_image_text_checkpoint_and_its_processor(tmp_path):
    """A vision-language checkpoint saved with its processor: the run starts from its weights, and
    RUN/model/ holds the weights and the processor, which loads back."""
    pytest.importorskip("PIL")
    from seqpack.cli.main import main
    from seqpack.experiments.tiny_vlm import tiny_vlm
    from tests.tasks.vision.test_vision_cli import write_records

    processor, model = tiny_vlm("qwen2_vl")
    model.save_pretrained(tmp_path / "vlm")
    processor.save_pretrained(tmp_path / "vlm")
    jsonl, _ = write_records(tmp_path / "records", n=12)
    assert (
        main(
            [
                "pack",
                str(jsonl),
                "--task",
                "vision",
                "--max-len",
                "512",
                "--tokenizer",
                str(tmp_path / "vlm"),
                "--out",
                str(tmp_path / "packs"),
                "--json",
            ]
        )
        == 0
    )
    _run(tmp_path / "packs", tmp_path / "vlm", tmp_path / "run", batch_size=2, eval_fraction=0.2)
    _still(_weights(tmp_path / "run" / "model"), _weights(tmp_path / "vlm"), steps=1)
    from seqpack.tasks.vision.processor import load_processor

    back = load_processor(tmp_path / "run" / "model")  # transformers' AutoProcessor, a missing video processor allowed
    assert type(back).__name__ == type(processor).__name__
