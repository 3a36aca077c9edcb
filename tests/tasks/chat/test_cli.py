"""``seqpack pack --task chat`` with a Hugging Face tokenizer directory, then ``seqpack train`` with a
transformers Llama built from a config; bad input gets one line and exit 2."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.cli.test_cli import run
from tests.hf_tokenizers import (
    bpe_tokenizer_dir,
    conversations,
    llama_config,
    write_jsonl,
)

pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def hf_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("hfcli")
    return {"tok": bpe_tokenizer_dir(root / "tok"), "bare": bpe_tokenizer_dir(root / "bare", chat_template=None)}


def test_pack_chat_then_train_a_llama(capsys, tmp_path, hf_dirs):
    data = write_jsonl(tmp_path / "chat.jsonl", conversations(80, seed=2))
    code, out, err = run(
        capsys,
        "pack",
        str(data),
        "--task",
        "chat",
        "--tokenizer",
        str(hf_dirs["tok"]),
        "--max-len",
        "1024",
        "--out",
        str(tmp_path / "sft"),
    )
    assert code == 0, err
    assert "chat: 80 sequences from 80 examples" in out
    assert "conversations: 80 whole, 0 cut (--overflow truncate), 0 dropped as too long" in out
    code, out, err = run(
        capsys,
        "pack",
        str(data),
        "--task",
        "chat",
        "--tokenizer",
        str(hf_dirs["tok"]),
        "--max-len",
        "48",
        "--overflow",
        "truncate-tokens",
        "--out",
        str(tmp_path / "cut"),
    )
    assert code == 0, err
    whole, cut = (int(x) for x in __import__("re").search(r"conversations: (\d+) whole, (\d+) cut", out).groups())
    assert cut > 0 and whole + cut == json.loads((tmp_path / "cut" / "manifest.json").read_text())["num_sequences"]
    m = json.loads((tmp_path / "sft" / "manifest.json").read_text())
    assert m["task_info"]["chat_template"] == "the tokenizer's chat_template" and m["task_info"]["target_tokens"] > 0
    code, out, err = run(
        capsys,
        "train",
        "--data",
        str(tmp_path / "sft"),
        "--hf-model",
        str(llama_config(tmp_path / "llama.json")),
        "--steps",
        "20",
        "--batch-size",
        "2",
        "--out",
        str(tmp_path / "run"),
        "--quiet",
    )
    assert code == 0, err
    assert "packed LlamaForCausalLM: 20 steps" in out
    metrics = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in metrics if "loss" in r and "step" in r and "eval" not in r]
    assert len(losses) == 20 and losses[-1] < losses[0]  # it learns


def test_pack_chat_with_seqpacks_own_gpt(capsys, tmp_path, hf_dirs):
    data = write_jsonl(tmp_path / "chat.jsonl", conversations(40, seed=3))
    assert (
        run(
            capsys,
            "pack",
            str(data),
            "--task",
            "chat",
            "--tokenizer",
            str(hf_dirs["tok"]),
            "--max-len",
            "512",
            "--train-on",
            "last",
            "--out",
            str(tmp_path / "sft"),
        )[0]
        == 0
    )
    code, out, err = run(
        capsys,
        "train",
        "--data",
        str(tmp_path / "sft"),
        "--steps",
        "3",
        "--batch-size",
        "2",
        "--reduction",
        "token",
        "--out",
        str(tmp_path / "run"),
        "--quiet",
    )
    assert code == 0, err and "packed GPT" in out


BAD: list[tuple[dict[str, Any], list[str], str]] = [
    ({"text": "hi"}, [], "example 0: no field 'messages'"),
    ({"messages": [{"role": "bot", "content": "x"}]}, [], "example 0: message 0 has role 'bot'"),
    ({"messages": [{"role": "user"}]}, [], r"example 0: message 0 \(user\) has no content"),
]


@pytest.mark.parametrize("record, extra, match", BAD)
def test_bad_records_get_one_line(capsys, tmp_path, hf_dirs, record, extra, match):
    data = write_jsonl(tmp_path / "chat.jsonl", [record])
    code, _, err = run(
        capsys,
        "pack",
        str(data),
        "--task",
        "chat",
        "--tokenizer",
        str(hf_dirs["tok"]),
        "--max-len",
        "64",
        "--out",
        str(tmp_path / "o"),
        *extra,
    )
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert pytest.importorskip("re").search(match, err), err


def test_template_errors_and_missing_template(capsys, tmp_path, hf_dirs):
    data = write_jsonl(tmp_path / "chat.jsonl", conversations(3, seed=1))
    code, _, err = run(
        capsys,
        "pack",
        str(data),
        "--task",
        "chat",
        "--tokenizer",
        str(hf_dirs["bare"]),
        "--max-len",
        "64",
        "--out",
        str(tmp_path / "o"),
    )
    assert code == 2 and "has no chat_template; pass --chat-template FILE" in err and len(err.strip().splitlines()) == 1
    strict = tmp_path / "strict.jinja"
    strict.write_text(
        "{% for m in messages %}{% if m.role == 'system' %}{{ raise_exception('no system prompts') }}"
        "{% endif %}{{ m.content }}{% endfor %}"
    )
    records = [{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}] * 2
    records.append({"messages": [{"role": "system", "content": "s"}, {"role": "assistant", "content": "a"}]})
    write_jsonl(data, records)
    code, _, err = run(
        capsys,
        "pack",
        str(data),
        "--task",
        "chat",
        "--tokenizer",
        str(hf_dirs["bare"]),
        "--max-len",
        "64",
        "--chat-template",
        str(strict),
        "--out",
        str(tmp_path / "o"),
    )
    assert code == 2 and "example 2: the chat template" in err and "no system prompts" in err


def test_no_assistant_turn_is_counted_and_warned(capsys, tmp_path, hf_dirs):
    records = conversations(5, seed=4) + [{"messages": [{"role": "user", "content": "anyone?"}]}] * 2
    data = write_jsonl(tmp_path / "chat.jsonl", records)
    code, out, err = run(
        capsys,
        "pack",
        str(data),
        "--task",
        "chat",
        "--tokenizer",
        str(hf_dirs["tok"]),
        "--max-len",
        "512",
        "--out",
        str(tmp_path / "o"),
    )
    assert code == 0
    assert "seqpack: warning: dropped 2 conversation(s) with no assistant turn" in err
    assert "dropped: 2 no_assistant" in out
