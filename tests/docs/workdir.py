"""The data the documentation's examples run on: a folder of the user's own text, chat, preference,
classification and QA records, all made locally (no download) in a fresh directory per page."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from tests.hf_tokenizers import conversations, preference_records, texts


def _jsonl(path: Path, records: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")


def classification_records(n: int, seed: int = 0) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    words = "good great fine bad awful poor the film was plot acting music".split()
    return [
        {"text": " ".join(rng.choices(words, k=rng.randint(3, 30))), "label": rng.choice(["neg", "pos"])}
        for _ in range(n)
    ]


def qa_records(n: int, seed: int = 0) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        context = " ".join(texts(rng.randint(2, 6), seed=seed * 1000 + i))
        start = rng.randrange(0, max(1, len(context) - 10))
        start = context.rfind(" ", 0, start) + 1
        end = context.find(" ", start)
        answer = context[start : end if end > 0 else None]
        out.append(
            {"question": "what is it?", "context": context, "answers": {"text": [answer], "answer_start": [start]}}
        )
    return out


def ner_records(n: int, seed: int = 0) -> list[dict[str, Any]]:
    """Sentences as words with a tag each (IOB2, CoNLL style): people and places among other words."""
    rng = random.Random(seed)
    people, places = ["Alice", "Bob", "Ada", "Lovelace"], ["Paris", "London", "New", "York"]
    other = "the a went to visited lives in on with yesterday and".split()
    out = []
    for _ in range(n):
        words, tags = [], []
        for _ in range(rng.randint(3, 12)):
            kind = rng.choice(["O", "O", "O", "PER", "LOC"])
            pool = {"O": other, "PER": people, "LOC": places}[kind]
            run = [rng.choice(pool) for _ in range(1 if kind == "O" else rng.randint(1, 2))]
            words += run
            tags += ["O"] * len(run) if kind == "O" else [f"B-{kind}"] + [f"I-{kind}"] * (len(run) - 1)
        out.append({"tokens": words, "ner_tags": tags})
    return out


def make_workdir(root: Path) -> Path:
    """``my_corpus/`` (20 ``.txt`` files and one ``.jsonl``: the Python docs that ship with the
    interpreter), ``corpus.txt``, ``chat.jsonl``, ``prefs.jsonl``, ``train.jsonl`` (labelled texts),
    ``squad.jsonl`` (SQuAD-style questions) and ``ner.jsonl`` (words with a tag each, IOB2)."""
    from seqpack.corpus import python_docs

    docs = [d for d in python_docs() if 200 <= len(d) <= 20_000][:140]
    corpus = root / "my_corpus"
    corpus.mkdir(parents=True)
    for i, d in enumerate(docs[:20]):
        (corpus / f"doc_{i:03d}.txt").write_text(d, encoding="utf-8")
    _jsonl(corpus / "more.jsonl", [{"text": d} for d in docs[20:]])
    (root / "corpus.txt").write_text("\n".join(texts(300)), encoding="utf-8")
    _jsonl(root / "chat.jsonl", conversations(60, seed=4))
    _jsonl(root / "prefs.jsonl", preference_records(40, seed=5))
    _jsonl(root / "train.jsonl", classification_records(80, seed=6))
    _jsonl(root / "squad.jsonl", qa_records(30, seed=7))
    _jsonl(root / "ner.jsonl", ner_records(60, seed=8))
    return root
