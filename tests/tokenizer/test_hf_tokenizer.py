"""Hugging Face tokenizer directories: the same ids as transformers, character spans, special
tokens, chat template, and ``open_tokenizer`` choosing between the two kinds."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqpack.tokenizer import HFTokenizer, Tokenizer, open_tokenizer
from tests.hf_tokenizers import (
    PLAIN_CHATML,
    bpe_tokenizer_dir,
    texts,
    wordpiece_tokenizer_dir,
)

tf = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def bpe_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return bpe_tokenizer_dir(tmp_path_factory.mktemp("bpe") / "tok")


@pytest.fixture(scope="module")
def wp_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return wordpiece_tokenizer_dir(tmp_path_factory.mktemp("wp") / "tok")


def test_same_ids_as_transformers(bpe_dir: Path, wp_dir: Path) -> None:
    for d in (bpe_dir, wp_dir):
        ours, theirs = open_tokenizer(d), tf.AutoTokenizer.from_pretrained(str(d))
        assert isinstance(ours, HFTokenizer)
        sample = texts(20, seed=3) + ["<|im_start|>user\nhi<|im_end|>", ""]
        want = [theirs(t, add_special_tokens=False)["input_ids"] for t in sample]
        assert ours.encode_batch(sample) == want
        assert [ours.encode(t) for t in sample] == want
        ids, offsets = ours.encode_batch_flat(sample)
        assert [ids[offsets[i] : offsets[i + 1]].tolist() for i in range(len(sample))] == want
        assert ours.vocab_size == len(theirs)


def test_special_tokens_and_template(bpe_dir: Path, wp_dir: Path) -> None:
    bpe = open_tokenizer(bpe_dir)
    assert bpe.chat_template == PLAIN_CHATML
    assert bpe.special_map["eos_token"] == "<|im_end|>"  # type: ignore[union-attr]  # an HFTokenizer here
    assert {"<|im_start|>", "<|im_end|>", "<|endoftext|>"} <= set(bpe.special_tokens)
    assert bpe.encode("<|im_start|>") == [bpe.token_to_id("<|im_start|>")]  # matched as one special token
    wp = open_tokenizer(wp_dir)
    assert wp.chat_template is None and wp.token_to_id("[MASK]") is not None


def test_offsets_cover_the_text(bpe_dir: Path, wp_dir: Path) -> None:
    """Each token's span holds what the token spells: byte-level BPE decodes to its span's text;
    WordPiece (lower-cased, accents stripped) spans the original word it came from."""
    bpe = open_tokenizer(bpe_dir)
    text = "why café<|im_end|> über straße"
    ((ids, spans),) = bpe.encode_with_offsets([text])
    assert ids.tolist() == bpe.encode(text)
    assert "".join(bpe.decode([i]) for i in ids) == text
    for i, (a, b) in zip(ids.tolist(), spans.tolist()):
        piece = bpe.decode([i])
        assert "\ufffd" in piece or text[a:b] == piece
    wp = open_tokenizer(wp_dir)
    ((ids, spans),) = wp.encode_with_offsets(["WHY Café"])
    a, b = spans[0].tolist()
    assert "WHY Café"[a:b] == "WHY"


@settings(max_examples=40, deadline=None)
@given(text=st.text(alphabet=st.sampled_from(list("ab é\n<|>")), max_size=30))
def test_seqpack_tokenizer_offsets(text: str) -> None:
    """seqpack's own tokenizer: spans tile the text in order; a token inside a multi-byte
    character spans that character."""
    tok = Tokenizer({i: bytes([i]) for i in range(256)} | {256: b"ab", 257: b" \xc3"}, [(b"a", b"b"), (b" ", b"\xc3")])
    ((ids, spans),) = tok.encode_with_offsets([text])
    assert ids.tolist() == tok.encode(text)
    if ids.size:
        assert spans[0, 0] == 0 and spans[-1, 1] == len(text)
        assert (spans[1:, 0] >= spans[:-1, 0]).all() and (spans[:, 1] > spans[:, 0]).all()
        assert (spans[1:, 0] <= spans[:-1, 1]).all()  # no gap


def test_vocab_bytes_follow_the_decoder(bpe_dir: Path, wp_dir: Path) -> None:
    bpe = open_tokenizer(bpe_dir)
    i = bpe.encode(" cat")
    assert b"".join(bpe.vocab[t] for t in i) == b" cat"
    wp = open_tokenizer(wp_dir)
    assert all(not v.startswith(b"##") for v in wp.vocab.values())


def test_fingerprint_names_the_tokenizer(bpe_dir: Path, wp_dir: Path, tmp_path: Path) -> None:
    a, b = open_tokenizer(bpe_dir), open_tokenizer(wp_dir)
    assert a.fingerprint() == open_tokenizer(bpe_dir).fingerprint() != b.fingerprint()
    assert len(a.fingerprint()) == 64


def test_open_tokenizer_picks_the_kind(bpe_dir: Path, tmp_path: Path) -> None:
    tok = Tokenizer({i: bytes([i]) for i in range(256)}, [], ["<|endoftext|>"])
    tok.save(tmp_path / "ours")  # also writes a tokenizer.json: meta.json decides
    assert isinstance(open_tokenizer(tmp_path / "ours"), Tokenizer)
    assert isinstance(open_tokenizer(bpe_dir), HFTokenizer)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="neither a seqpack tokenizer"):
        open_tokenizer(tmp_path / "empty")
    with pytest.raises(FileNotFoundError):
        open_tokenizer(tmp_path / "missing")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "tokenizer.json").write_text("{nope")
    with pytest.raises(ValueError, match="not a tokenizers file"):
        open_tokenizer(tmp_path / "bad")


def test_store_with_a_pretrained_tokenizer(bpe_dir: Path, tmp_path: Path) -> None:
    """A token store built with an HF tokenizer holds its ids (the corpus path, not only examples)."""
    from seqpack.store import build_store

    tok = open_tokenizer(bpe_dir)
    docs = texts(30, seed=5)
    store = build_store(docs, tok, tmp_path / "store", workers=1)
    got = [np.asarray(store.tokens[store.offsets[i] : store.offsets[i + 1]]).tolist() for i in range(len(docs))]
    assert got == tok.encode_batch(docs)


@pytest.mark.parametrize("task", ["clm", "mlm", "classification", "qa"])
def test_every_task_packs_with_a_pretrained_tokenizer(bpe_dir: Path, wp_dir: Path, tmp_path: Path, task: str) -> None:
    """Not only chat: each task builds its sequences from an HF tokenizer's ids; its special tokens
    ([CLS]/[SEP]/[MASK]) are the tokenizer's own where it has them."""
    from seqpack.pipeline import PackConfig, build_sequences
    from seqpack.store import build_store

    tok = open_tokenizer(wp_dir if task != "clm" else bpe_dir)
    docs = [t.capitalize() + ". " + t + "." for t in texts(40, seed=7)]
    if task in ("clm", "mlm"):
        source: object = build_store(docs, tok, tmp_path / "store", workers=1)
    elif task == "classification":
        source = [{"text": d, "label": i % 3} for i, d in enumerate(docs)]
    else:
        source = [
            {"question": "what", "context": "WHY Café " + d, "answers": {"text": ["Café"], "answer_start": [4]}}
            for d in docs
        ]
    opts = {"eos_token": "<|endoftext|>"} if task == "clm" else {"doc_stride": 16} if task == "qa" else {}
    seqs = build_sequences(source, tok, PackConfig.for_task(task, max_len=64, **opts))
    assert seqs.num_sequences > 0 and int(seqs.token_fields["input_ids"].max()) < tok.vocab_size
    if task in ("mlm", "classification", "qa"):
        assert seqs.info["special_ids"]["[CLS]"] == tok.token_to_id("[CLS]")
    if task == "qa":  # the answer found through the spans of a lower-casing, accent-stripping tokenizer
        s = seqs.sequence(0)
        a, b = int(s["start_positions"]), int(s["end_positions"])
        assert tok.decode(s["input_ids"][a : b + 1].tolist()) == "cafe"
