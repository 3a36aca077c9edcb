"""Small real packed datasets (BPE -> store -> pack), built once per session."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

WORDS = (
    "the a of to and in is was he she it that for on with as his her at by this had from not but be are "
    "king queen lord lady night day love death sword crown heart blood fair good noble"
).split()


def synthetic_documents(n: int, seed: int = 0) -> list[str]:
    """Documents of 1..6 lines of random words: many short sequences, as in real corpora."""
    rng = np.random.default_rng(seed)
    docs = []
    for _ in range(n):
        lines = [
            " ".join(rng.choice(WORDS, size=rng.integers(3, 14))).capitalize() + "." for _ in range(rng.integers(1, 7))
        ]
        docs.append("\n".join(lines))
    return docs


def build_datasets(root: Path, n_docs: int = 240) -> dict[str, Path]:
    from seqpack.pipeline import PackConfig, build_packed_dataset
    from seqpack.store import build_store
    from seqpack.tokenizer import BPEConfig, Tokenizer
    from seqpack.tokenizer.train import train_bpe_corpus

    docs = synthetic_documents(n_docs)
    res = train_bpe_corpus(
        documents=docs, config=BPEConfig(vocab_size=320, special_tokens=("<|endoftext|>",), workers=1)
    )
    tok = Tokenizer(res.vocab, res.merges, list(res.special_tokens))
    tok.save(root / "tokenizer")
    store = build_store(docs, tok, root / "store", workers=1)
    out = {"tokenizer": root / "tokenizer"}
    for task, max_len in (("mlm", 64), ("clm", 64)):
        build_packed_dataset(store, tok, root / task, PackConfig(task=task, max_len=max_len))
        out[task] = root / task
    build_packed_dataset(
        qa_examples(docs[:120]), tok, root / "qa", PackConfig.for_task("qa", max_len=64, doc_stride=16)
    )
    out["qa"] = root / "qa"
    return out


def qa_examples(docs: list[str], seed: int = 1) -> list[dict]:
    """SQuAD-style rows over the documents: the answer is a few words of the context."""
    rng = np.random.default_rng(seed)
    rows = []
    for doc in docs:
        words = doc.split()
        a = int(rng.integers(0, len(words)))
        answer = " ".join(words[a : a + int(rng.integers(1, 4))])
        start = len(" ".join(words[:a])) + (1 if a else 0)
        assert doc.replace("\n", " ")[start : start + len(answer)] == answer
        rows.append(
            {
                "question": " ".join(rng.choice(WORDS, size=5)),
                "context": doc.replace("\n", " "),
                "answers": {"text": [answer], "answer_start": [start]},
            }
        )
    return rows


@pytest.fixture(scope="session")
def datasets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return build_datasets(tmp_path_factory.mktemp("train-data"))


def torchrun_train(data: Path, out: Path, *opts: str, ranks: int = 2) -> None:
    """``seqpack train`` under ``torchrun --standalone`` with ``ranks`` gloo processes; fails with its stderr."""
    import subprocess
    import sys

    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        str(ranks),
        "-m",
        "seqpack.cli.main",
        "train",
        "--data",
        str(data),
        "--out",
        str(out),
        *opts,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]


def assert_adam_weights_close(got: dict, want: dict, *, lr: float, steps: int) -> None:
    """Weights after ``steps`` AdamW steps from the same start, on gradients that agree to float
    summation order (another rank layout, another reduction order).

    AdamW divides each coordinate's step by its own gradient's running scale, so a coordinate whose
    gradient is rounding-sized (its exact value ~0) moves by up to ``lr`` a step in a direction the
    rounding picks: it may differ by up to ``2 * lr * steps`` (found: 1 of 65,536 weights 1.4e-5
    apart). Every other coordinate agrees to rtol 1e-4 / atol 1e-5. Such coordinates are rare; a
    logic error (a wrong row, rank or order) moves most of them, so at most 0.1% of a tensor's
    coordinates (and at least one) may take the wider bound.
    """
    import torch

    for k, b in want.items():
        a = got[k]
        far = ~torch.isclose(a, b, rtol=1e-4, atol=1e-5)
        assert int(far.sum()) <= max(1, a.numel() // 1000), f"{k}: {int(far.sum())} of {a.numel()} weights differ"
        assert float((a - b).abs().max()) <= 2 * lr * steps, f"{k}: {float((a - b).abs().max())} > 2 * lr * steps"
