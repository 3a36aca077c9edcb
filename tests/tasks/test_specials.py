"""A model's own tokenizer drives the encoder tasks' special tokens: a BERT-style and a RoBERTa-style
tokenizer (built here) give exactly their own ``tokenizer(text)`` / ``tokenizer(a, b)`` ids, no id
is ever added to a pretrained tokenizer, and a special a task needs that it lacks is refused in one
line; seqpack's own tokenizers keep their specials (new ids after the vocabulary when untrained)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from seqpack.data import IGNORE_INDEX
from seqpack.pipeline import PackConfig, build_sequences
from seqpack.tasks.classification import classification_sequences
from seqpack.tasks.qa import qa_sequences
from seqpack.tasks.specials import task_specials
from seqpack.tokenizer import open_tokenizer
from tests.hf_tokenizers import bert_tokenizer_dir, bpe_tokenizer_dir, roberta_tokenizer_dir

transformers = pytest.importorskip("transformers")

A, B = "Alice visited Paris yesterday", "Bob lives in London"


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("toks")
    return {
        "bert": bert_tokenizer_dir(root / "bert"),
        "roberta": roberta_tokenizer_dir(root / "roberta"),
        "roberta-no-mask": roberta_tokenizer_dir(root / "nomask", mask=False),
        "chat": bpe_tokenizer_dir(root / "chat"),
    }


@pytest.mark.parametrize("kind", ["bert", "roberta"])
def test_classification_is_the_tokenizer_s_own_encoding(dirs, kind):
    """One text: ``tokenizer(text)``; a pair: ``tokenizer(a, b)`` with its token types (BERT: B is
    type 1; RoBERTa: ``<s> A </s></s> B </s>``, all type 0), from the ``tokenizers`` pipeline itself."""
    from tokenizers import Tokenizer as Rust

    theirs = transformers.AutoTokenizer.from_pretrained(dirs[kind])
    rust = Rust.from_file(str(dirs[kind] / "tokenizer.json"))
    tok = open_tokenizer(dirs[kind])
    single = classification_sequences([{"text": A, "label": 0}], tok, max_len=64)
    assert single.sequence(0)["input_ids"].tolist() == theirs(A)["input_ids"]
    pair = classification_sequences([{"text": A, "b": B, "label": 0}], tok, max_len=64, text_pair_field="b")
    want = rust.encode(A, B)
    assert pair.sequence(0)["input_ids"].tolist() == want.ids == theirs(A, B)["input_ids"]
    assert pair.sequence(0)["token_type_ids"].tolist() == want.type_ids
    assert single.info["vocab_size"] == tok.vocab_size  # no id added


def test_roberta_pairs_and_masks(dirs):
    """RoBERTa: ``<s>`` 0, ``<pad>`` 1, ``</s>`` 2, ``<mask>`` 4. QA windows are ``tokenizer(question,
    window)``; mlm masks with ``<mask>`` and never at a special; nothing past the vocabulary."""
    from seqpack.store import build_store

    tok = open_tokenizer(dirs["roberta"])
    theirs = transformers.AutoTokenizer.from_pretrained(dirs["roberta"])
    ctx = "Alice went to Paris yesterday"
    q = qa_sequences(
        [{"question": "who went", "context": ctx, "answers": {"text": ["Alice"], "answer_start": [0]}}],
        tok,
        max_len=64,
        doc_stride=8,
    )
    s = q.sequence(0)
    assert s["input_ids"].tolist() == theirs("who went", ctx)["input_ids"]
    assert tok.decode(s["input_ids"][int(s["start_positions"]) : int(s["end_positions"]) + 1].tolist()) == "Alice"
    assert q.info["special_ids"] == {"<s>": 0, "</s>": 2, "<mask>": 4, "<pad>": 1} and q.info["pad_token_id"] == 1
    import tempfile
    from pathlib import Path

    docs = [f"{A}. {B}. The cat sat on the mat. {A}." for _ in range(20)]
    store = build_store(docs, tok, Path(tempfile.mkdtemp()) / "store", workers=1)
    m = build_sequences(store, tok, PackConfig(task="mlm", max_len=48))
    assert m.info["vocab_size"] == tok.vocab_size and int(m.token_fields["input_ids"].max()) < tok.vocab_size
    for i in range(m.num_sequences):
        ids, lab = m.sequence(i)["input_ids"], m.sequence(i)["labels"]
        sep = np.flatnonzero(ids == 2)
        assert (
            ids[0] == 0 and sep.size == 3 and sep[1] == sep[0] + 1 and sep[2] == ids.size - 1
        )  # <s> A </s></s> B </s>
        assert np.all(lab[[0, *sep]] == IGNORE_INDEX) and not np.any(m.sequence(i)["token_type_ids"])
    masked = m.token_fields["labels"] != IGNORE_INDEX
    assert np.any(m.token_fields["input_ids"][masked] == 4)


@pytest.mark.parametrize(
    ("kind", "task", "match"),
    [
        (
            "roberta-no-mask",
            "mlm",
            r"task mlm: the tokenizer declares no mask_token, .*add \"mask_token\": \"\[MASK\]\"",
        ),
        (
            "chat",
            "classification",
            r"declares no cls_token \(nor a bos_token\).*tokenizer_config.json \(a pretrained tokenizer is never given new ids\)",
        ),
    ],
)
def test_a_missing_special_is_refused_in_one_line(dirs, kind, task, match):
    with pytest.raises(ValueError, match=match) as e:
        task_specials(open_tokenizer(dirs[kind]), task, mask=task == "mlm")
    assert "\n" not in str(e.value)
    task_specials(open_tokenizer(dirs["roberta-no-mask"]), "classification")  # needs no mask token


def test_a_declared_special_outside_the_vocabulary_is_refused(dirs, tmp_path):
    import shutil

    d = shutil.copytree(dirs["bert"], tmp_path / "bert")
    cfg = json.loads((d / "tokenizer_config.json").read_text())
    (d / "tokenizer_config.json").write_text(json.dumps({**cfg, "mask_token": "[NOPE]"}))
    with pytest.raises(ValueError, match=r"mask_token '\[NOPE\]' is not in its vocabulary; name a token it holds"):
        task_specials(open_tokenizer(d), "mlm", mask=True)


def test_seqpack_s_own_tokenizer_and_its_export_write_the_same_rows(tmp_path):
    """A seqpack tokenizer trained with [CLS]/[SEP]/[MASK], and the same exported as a Hugging Face
    directory (which declares them cls/sep/mask), give the same classification and QA rows; without
    them, seqpack's own tokenizer appends them after its vocabulary, as before."""
    from seqpack.tokenizer import Tokenizer
    from seqpack.train.pretrained import tokenizer_files

    bert = ["[CLS]", "[SEP]", "[MASK]"]
    own = Tokenizer(
        {**{i: bytes([i]) for i in range(256)}, 256: b" w"}, [(b" ", b"w")], special_tokens=["<|endoftext|>", *bert]
    )
    own.save(tmp_path / "own")
    (tmp_path / "hf").mkdir()
    for name, data in tokenizer_files(tmp_path / "own").items():
        (tmp_path / "hf" / name).write_bytes(data)
    hf = open_tokenizer(tmp_path / "hf")
    assert type(hf).__name__ == "HFTokenizer"
    rows = [{"text": "we went", "b": "why", "label": 1}]
    a, b = (classification_sequences(rows, t, max_len=16, text_pair_field="b") for t in (own, hf))
    assert (
        a.sequence(0)["input_ids"].tolist()
        == b.sequence(0)["input_ids"].tolist()
        == [258, 119, 101, 256, 101, 110, 116, 259, 119, 104, 121, 259]
    )
    assert a.info["special_ids"] == {"[CLS]": 258, "[SEP]": 259, "[MASK]": 260}
    assert b.info["special_ids"] == {**a.info["special_ids"], "<|endoftext|>": 257}  # its pad_token too
    bare = task_specials(Tokenizer({i: bytes([i]) for i in range(256)}, []), "mlm", mask=True)
    assert (bare.cls, bare.sep, bare.mask, bare.vocab_size) == (256, 257, 258, 259)
