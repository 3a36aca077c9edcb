"""Small real packed datasets (BPE -> store -> pack), built once per session."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

WORDS = ("the a of to and in is was he she it that for on with as his her at by this had from not but be are "
         "king queen lord lady night day love death sword crown heart blood fair good noble").split()


def synthetic_documents(n: int, seed: int = 0) -> list[str]:
    """Documents of 1..6 lines of random words: many short sequences, as in real corpora."""
    rng = np.random.default_rng(seed)
    docs = []
    for _ in range(n):
        lines = [" ".join(rng.choice(WORDS, size=rng.integers(3, 14))).capitalize() + "." for _ in range(rng.integers(1, 7))]
        docs.append("\n".join(lines))
    return docs


def build_datasets(root: Path, n_docs: int = 240) -> dict[str, Path]:
    from seqpack.data import PackConfig, build_packed_dataset
    from seqpack.store import build_store
    from seqpack.tokenizer import BPEConfig, Tokenizer
    from seqpack.tokenizer.train import train_bpe_corpus

    docs = synthetic_documents(n_docs)
    res = train_bpe_corpus(documents=docs, config=BPEConfig(vocab_size=320, special_tokens=("<|endoftext|>",), workers=1))
    tok = Tokenizer(res.vocab, res.merges, list(res.special_tokens))
    tok.save(root / "tokenizer")
    store = build_store(docs, tok, root / "store", workers=1)
    out = {"tokenizer": root / "tokenizer"}
    for task, max_len in (("mlm", 64), ("clm", 64)):
        build_packed_dataset(store, tok, root / task, PackConfig(task=task, max_len=max_len))
        out[task] = root / task
    return out


@pytest.fixture(scope="session")
def datasets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return build_datasets(tmp_path_factory.mktemp("train-data"))
