"""A task defined here, outside seqpack's source, registers, packs (in memory and shard by shard)
and trains: what docs/contributing.md's "adding a task" promises, with no other source file touched.

The toy task, ``copy``: each record's text, a separator, and the text again; the model (seqpack's
GPT) learns only the copy (labels on the second half, HF's shifted causal-LM convention).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from seqpack.data import IGNORE_INDEX, Sequences, load_packed
from seqpack.data.sequences import offsets_of
from seqpack.pipeline import PackConfig, build_packed_dataset
from seqpack.tasks import REGISTRY, OwnModels, Packing, PackSettings, Rows, Task, Training, get_task, register_task
from seqpack.tokenizer import Tokenizer

SEP = "<|sep|>"


@dataclass(frozen=True, kw_only=True)
class CopyOptions:
    text_field: str = field(default="text", metadata={"help": "the text column"})


def copy_sequences(source: Any, tokenizer: Any, config: PackSettings) -> Sequences:
    """Each record's text, the separator, and the text again; labels on the copy only."""
    from seqpack.corpus.records import iter_records

    sep = tokenizer.token_to_id(SEP)
    ids, labels, examples = [], [], []
    for i, row in enumerate(iter_records(source)):
        t = tokenizer.encode(row[config.options.text_field])
        if not t or 2 * len(t) + 1 > config.max_len:
            continue
        ids.append(np.array([*t, sep, *t], dtype=np.int64))
        labels.append(np.array([IGNORE_INDEX] * (len(t) + 1) + t, dtype=np.int64))
        examples.append(i)
    lengths = np.array([len(x) for x in ids], dtype=np.int64)
    return Sequences(
        task=config.task,
        offsets=offsets_of(lengths),
        example_ids=np.array(examples, dtype=np.int64),
        token_fields={
            "input_ids": np.concatenate(ids).astype(np.uint16),
            "labels": np.concatenate(labels).astype(np.int16),
        },
        num_examples=i + 1,
        info={"vocab_size": tokenizer.vocab_size},
    )


def gpt(kind: str, size: str, vocab: int, manifest: Mapping[str, Any], extra: dict[str, Any]) -> tuple[Any, Any]:
    from seqpack.nn.models import GPT, GPTConfig

    mc = GPTConfig.of_size(size, vocab_size=vocab, **extra)
    return GPT(mc), mc


def forward(model: Any, batch: Mapping[str, Any], *, reduction: str, objective: Any = None) -> Any:
    return model(
        batch["input_ids"],
        batch["segment_ids"],
        reduction=reduction,
        position_ids=batch["position_ids"],
        labels=batch.get("labels"),
    )


def loss_units(batch: Mapping[str, Any], reduction: str) -> Any:
    import torch

    n = float((batch["labels"] != IGNORE_INDEX).sum()) if "labels" in batch else 0.0
    if reduction != "token":  # sequences with a target
        seg = batch["segment_ids"].long()
        n = float(
            torch.unique((seg * 10_000 + torch.arange(seg.shape[0])[:, None])[batch["labels"] != IGNORE_INDEX]).numel()
        )
    return torch.tensor([n, 0.0, 0.0], dtype=torch.float64)


def update_eval(totals: Any, out: Any, batch: Mapping[str, Any]) -> None:
    totals.add("lm_loss", float(out.per_sequence[out.present].sum()), float(out.present.sum()))


TOY = Task(
    name="copy",
    summary="copy the text after a separator",
    options_type=CopyOptions,
    rows=Rows(token_labels=True, causal_lm=True),
    packing=Packing(reads="examples", build=copy_sequences),
    training=Training(
        loss_units=loss_units, component_means=lambda out: [out.loss, None, None], update_eval=update_eval
    ),
    models=OwnModels(kinds=("gpt",), build=gpt, forward=forward),
)


@pytest.fixture
def toy() -> Any:
    register_task(TOY)
    yield TOY
    REGISTRY.pop("copy", None)


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    return Tokenizer({i: bytes([i]) for i in range(256)}, [], special_tokens=[SEP])


def records(n: int = 120) -> list[dict[str, str]]:
    rng = np.random.default_rng(0)
    return [{"text": "".join(rng.choice(list("abcdef"), int(rng.integers(1, 12))))} for _ in range(n)]


def test_registers_and_is_found_like_any_task(toy: Task) -> None:
    assert get_task("copy") is toy and "copy" in REGISTRY
    with pytest.raises(ValueError, match="already registered"):
        register_task(TOY)
    with pytest.raises(ValueError, match=r"unknown task 'nope'; known: .*\bcopy\b"):
        get_task("nope")
    assert PackConfig.for_task("copy", max_len=32, text_field="t").options == CopyOptions(text_field="t")


def test_packs_in_memory_and_from_a_file_alike_and_trains(toy: Task, tok: Tokenizer, tmp_path: Path) -> None:
    rows = records()
    (tmp_path / "toy.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    cfg = PackConfig.for_task("copy", max_len=32)
    a = build_packed_dataset(rows, tok, tmp_path / "a", cfg)
    b = build_packed_dataset(tmp_path / "toy.jsonl", tok, tmp_path / "b", cfg, shard_examples=25)
    assert a["num_sequences"] == b["num_sequences"] == len(rows) and a["num_packs"] == b["num_packs"] < len(rows)
    assert a["token_labels"] and a["causal_lm"] and not a["float_labels"]  # the task's facts, in the manifest
    _, ca = load_packed(tmp_path / "a")
    _, cb = load_packed(tmp_path / "b")
    assert all(np.array_equal(ca[k], cb[k]) for k in ca)
    seg, lab, ids = ca["segment_ids"], ca["labels"], ca["input_ids"]
    for p, s in ((0, 1), (3, 1)):  # each sequence: text SEP text, labels on the copy only
        x, y = ids[p][seg[p] == s].tolist(), lab[p][seg[p] == s].tolist()
        k = x.index(tok.token_to_id(SEP))
        assert x[:k] == x[k + 1 :] and y == [IGNORE_INDEX] * (k + 1) + x[:k]

    from seqpack.train import TrainConfig, train
    from seqpack.train.checkpoint import read_metrics

    summary = train(
        TrainConfig(
            data=str(tmp_path / "a"),
            out=str(tmp_path / "run"),
            size="tiny",
            steps=6,
            batch_size=4,
            lr=3e-3,
            eval_fraction=0.1,
            progress=False,
            eval_at_start=True,
        )
    )
    recs = read_metrics(tmp_path / "run")
    assert summary["model"] == "GPT" and summary["task"] == "copy" and summary["steps"] == 6
    assert [r["step"] for r in recs if "eval" not in r] == [1, 2, 3, 4, 5, 6]
    assert np.isfinite(summary["eval"]["lm_loss"]) and summary["eval"]["loss"] < recs[0]["eval"]["loss"]
