"""``token-classification``: word tags on each word's first sub-token, hand-computed; every word
tagged exactly once (hypothesis); a pretrained tokenizer's rows are its own ``tokenizer(text)``;
overflow, bad records, shards and streams; the entity metrics of conlleval."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqpack.data import IGNORE_INDEX, load_packed
from seqpack.pipeline import PackConfig, build_packed_dataset, build_sequences
from seqpack.tasks.entities import entities, entity_counts, is_iob
from seqpack.tasks.token_classification import token_classification_sequences
from seqpack.tokenizer.tokenizer import Tokenizer

CLS, SEP = 257, 258  # appended after the 256 bytes and " w"


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    """Bytes, and one merge: ``" w"`` is token 256."""
    return Tokenizer({**{i: bytes([i]) for i in range(256)}, 256: b" w"}, [(b" ", b"w")])


TWO = [{"tokens": ["Al", "went"], "ner_tags": ["B-PER", "O"]}, {"tokens": ["w", "Al"], "ner_tags": ["O", "B-PER"]}]


def test_two_sentences_golden(tok):
    """Tags sorted: B-PER = 0, O = 1. "Al" = A l; " went" = " w" e n t (the merge); "w" alone is
    byte 119 and " Al" starts with the space byte 32, its first sub-token."""
    s = token_classification_sequences(TWO, tok, max_len=16)
    assert s.info["label_names"] == ["B-PER", "O"] and s.info["num_labels"] == 2
    got = [(s.sequence(i)["input_ids"].tolist(), s.sequence(i)["labels"].tolist()) for i in range(2)]
    assert got == [
        ([CLS, 65, 108, 256, 101, 110, 116, SEP], [-100, 0, -100, 1, -100, -100, -100, -100]),
        ([CLS, 119, 32, 65, 108, SEP], [-100, 1, 0, -100, -100, -100]),
    ]
    assert s.sequence(0)["token_type_ids"].tolist() == [0] * 8
    assert s.info["special_ids"] == {"[CLS]": CLS, "[SEP]": SEP, "[MASK]": 259} and s.info["vocab_size"] == 260


def test_label_all_subtokens_turns_b_into_i(tok):
    rows = [{"tokens": ["Al", "went"], "ner_tags": [0, 2]}]
    s = token_classification_sequences(
        rows, tok, max_len=16, tag_names=["B-PER", "I-PER", "O"], label_all_subtokens=True
    )
    assert s.sequence(0)["labels"].tolist() == [-100, 0, 1, 2, 2, 2, 2, -100]  # A: B-PER, l: I-PER, went: O x4
    s = token_classification_sequences(TWO, tok, max_len=16, label_all_subtokens=True)  # no I-PER: B stays
    assert s.sequence(0)["labels"].tolist() == [-100, 0, 0, 1, 1, 1, 1, -100]


def test_overflow(tok):
    """ "abc de" is 6 tokens (a b c, then " " d e), "Al" 2: at max_len 5, 3 tokens of words fit."""
    rows = [{"tokens": ["abc", "de"], "ner_tags": [1, 2]}, {"tokens": ["Al"], "ner_tags": [0]}]
    s = token_classification_sequences(rows, tok, max_len=5)
    assert s.sequence(0)["input_ids"].tolist() == [CLS, 97, 98, 99, SEP]  # "de" and its tag cut
    assert s.sequence(0)["labels"].tolist() == [-100, 1, -100, -100, -100] and s.info["truncated"] == 1
    assert s.sequence(1)["labels"].tolist() == [-100, 0, -100, -100]
    d = token_classification_sequences(rows, tok, max_len=5, overflow="drop")
    assert d.num_sequences == 1 and d.dropped == {"too_long": 1} and d.example_ids.tolist() == [1]
    with pytest.raises(ValueError, match=r"1 sequences exceed max_len=5; pass --overflow truncate\|drop"):
        token_classification_sequences(rows, tok, max_len=5, overflow="error")


@pytest.mark.parametrize(
    ("rows", "kw", "match"),
    [
        (
            [{"tokens": ["a"], "tags": [0]}],
            {},
            r"example 0: no field 'ner_tags' \(fields: tags, tokens\); pass --tags-field",
        ),
        ([{"tokens": "a b", "ner_tags": [0]}], {}, "field 'tokens' is str, expected list"),
        ([{"tokens": ["a", 3], "ner_tags": [0, 0]}], {}, "must be a list of strings"),
        ([{"tokens": ["a", "b"], "ner_tags": [0]}], {}, "example 0: 2 words in 'tokens' but 1 tags in 'ner_tags'"),
        ([{"tokens": ["a"], "ner_tags": [True]}], {}, "must be a list of ints or strings"),
        ([{"tokens": ["a"], "ner_tags": [0]}, {"tokens": ["b"], "ner_tags": ["O"]}], {}, "mix int and str"),
        ([{"tokens": ["a"], "ner_tags": [-1]}], {}, "example 0: tag -1 in field 'ner_tags'; integer tags must be >= 0"),
        ([{"tokens": ["a"], "ner_tags": [3]}], {"tag_names": ["O", "B-X"]}, "must be below the 2 --tag-names"),
        ([{"tokens": ["a"], "ner_tags": ["B-Y"]}], {"tag_names": ["O", "B-X"]}, "tag 'B-Y' is not one of --tag-names"),
        ([{"tokens": ["a", ""], "ner_tags": [0, 0]}], {}, "example 0: word 1 is blank; remove it and its tag"),
    ],
)
def test_bad_records_are_refused_in_one_line(tok, rows, kw, match):
    with pytest.raises(ValueError, match=match):
        token_classification_sequences(rows, tok, max_len=16, **kw)


def test_empty_examples_are_counted_and_int_tags_named(tok):
    rows = [{"tokens": [], "ner_tags": []}, {"tokens": ["a"], "ner_tags": [2]}]
    s = token_classification_sequences(rows, tok, max_len=8, tag_names=["O", "B-X", "I-X"])
    assert s.dropped == {"empty": 1} and s.info["label_names"] == ["O", "B-X", "I-X"] and s.info["num_labels"] == 3
    s = token_classification_sequences(rows, tok, max_len=8)
    assert s.info["label_names"] is None and s.info["num_labels"] == 3  # ints: one past the largest


WORDS = st.lists(
    st.text("abw ,.", min_size=1, max_size=5).filter(lambda w: w.strip() == w and w), min_size=1, max_size=12
)


@settings(max_examples=60, deadline=None)
@given(words=WORDS, data=st.data())
def test_every_word_is_tagged_exactly_once(tok, words, data):
    """On its first sub-token, in order; the words' tokens are the text's (the words joined by spaces)."""
    tags = data.draw(st.lists(st.integers(0, 4), min_size=len(words), max_size=len(words)))
    s = token_classification_sequences([{"tokens": words, "ner_tags": tags}], tok, max_len=512)
    q = s.sequence(0)
    ids, labels = q["input_ids"].tolist(), q["labels"].tolist()
    assert ids[0] == CLS and ids[-1] == SEP and ids[1:-1] == tok.encode(" ".join(words))
    assert [x for x in labels if x != IGNORE_INDEX] == tags
    firsts = np.cumsum([0] + [len(tok.encode(w if k == 0 else " " + w)) for k, w in enumerate(words)])[:-1] + 1
    assert np.flatnonzero(np.array(labels) != IGNORE_INDEX).tolist() == firsts.tolist()


@pytest.mark.parametrize("kind", ["bert", "roberta"])
def test_a_pretrained_tokenizer_s_rows_are_its_own_encoding_of_the_text(tmp_path, kind):
    """``[CLS] .. [SEP]`` / ``<s> .. </s>`` and the words' ids: ``tokenizer(" ".join(words))``."""
    transformers = pytest.importorskip("transformers")
    from seqpack.tokenizer import open_tokenizer
    from tests.hf_tokenizers import bert_tokenizer_dir, roberta_tokenizer_dir

    d = (bert_tokenizer_dir if kind == "bert" else roberta_tokenizer_dir)(tmp_path / "tok")
    theirs = transformers.AutoTokenizer.from_pretrained(d)
    rows = [
        {"tokens": ["Alice", "visited", "Paris", "yesterday"], "ner_tags": ["B-PER", "O", "B-LOC", "O"]},
        {"tokens": ["unbelievable", "reorganisation", "café"], "ner_tags": ["O", "O", "O"]},
    ]
    s = token_classification_sequences(rows, open_tokenizer(d), max_len=64)
    for i, r in enumerate(rows):
        want = theirs(" ".join(r["tokens"]))["input_ids"]
        assert s.sequence(i)["input_ids"].tolist() == want
        tagged = s.sequence(i)["labels"] != IGNORE_INDEX
        assert int(tagged.sum()) == len(r["tokens"]) and not tagged[0] and not tagged[-1]
    assert s.info["vocab_size"] == open_tokenizer(d).vocab_size  # no id added


def test_sharded_job_numbers_tags_as_one_and_streams_need_names(tok, tmp_path):
    rows = [{"tokens": ["a", "b"], "ner_tags": ["O", "B-X"] if i % 2 else ["I-X", "O"]} for i in range(40)]
    f = tmp_path / "ner.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = PackConfig.for_task("token-classification", max_len=16)
    whole = build_packed_dataset(rows, tok, tmp_path / "whole", cfg)  # in memory
    sharded = build_packed_dataset(f, tok, tmp_path / "sharded", cfg, shard_examples=7)  # 6 shards, one tag set
    assert whole["task_info"]["label_names"] == sharded["task_info"]["label_names"] == ["B-X", "I-X", "O"]

    def sequences(path):
        _, c = load_packed(path)
        seg, lab = c["segment_ids"], c["labels"]
        return sorted(
            tuple(lab[r][seg[r] == k].tolist()) for r in range(seg.shape[0]) for k in range(1, seg[r].max() + 1)
        )

    assert sequences(tmp_path / "whole") == sequences(tmp_path / "sharded")
    from seqpack.tasks import get_task

    packing = get_task("token-classification").packs()
    with pytest.raises(ValueError, match="needs tag_names"):
        packing.stream_context(cfg)
    named = PackConfig.for_task("token-classification", max_len=16, tag_names="B-X,I-X,O")
    assert packing.stream_context(named)["tag_names"] == ["B-X", "I-X", "O"]
    assert build_sequences(rows, tok, named).info["num_labels"] == 3


# ------------------------------------------------------------------ entities
@pytest.mark.parametrize(
    ("tags", "want"),
    [
        (["B-PER", "I-PER", "O", "B-LOC", "I-LOC", "O", "B-ORG"], {("PER", 0, 1), ("LOC", 3, 4), ("ORG", 6, 6)}),
        (["I-PER", "I-PER", "B-PER", "O"], {("PER", 0, 1), ("PER", 2, 2)}),  # IOB1: B only between two of a type
        (["B-PER", "I-LOC", "O"], {("PER", 0, 0), ("LOC", 1, 1)}),  # another type ends the entity
        (
            ["S-PER", "B-LOC", "E-LOC", "B-ORG", "I-ORG", "E-ORG"],
            {("PER", 0, 0), ("LOC", 1, 2), ("ORG", 3, 5)},
        ),  # IOBES
        (["O", "O"], set()),
    ],
)
def test_entities(tags, want):
    assert entities(tags) == want


def test_entity_counts_hand_computed():
    """Gold: PER 0-1, LOC 3-4, ORG 6. Predicted: PER 0-1 (right), LOC 3-3 (wrong end), MISC 6
    (wrong type): 1 right of 3 predicted and 3 gold: precision = recall = F1 = 1/3."""
    gold = ["B-PER", "I-PER", "O", "B-LOC", "I-LOC", "O", "B-ORG"]
    pred = ["B-PER", "I-PER", "O", "B-LOC", "O", "O", "B-MISC"]
    assert entity_counts(gold, pred) == (1, 3, 3)
    assert is_iob(["O", "B-PER", "I-PER"]) and not is_iob(["NOUN", "VERB"]) and not is_iob(None)


def test_a_hugging_face_dataset_names_its_integer_tags(tok):
    """``Sequence(ClassLabel)`` tags (CoNLL-2003 on the Hub): their names are the dataset's own."""
    datasets = pytest.importorskip("datasets")
    features = datasets.Features(
        {
            "tokens": datasets.Sequence(datasets.Value("string")),
            "ner_tags": datasets.Sequence(datasets.ClassLabel(names=["O", "B-PER", "I-PER"])),
        }
    )
    ds = datasets.Dataset.from_dict({"tokens": [["Al", "went"]], "ner_tags": [[1, 0]]}, features=features)
    s = token_classification_sequences(ds, tok, max_len=16)
    assert s.info["label_names"] == ["O", "B-PER", "I-PER"] and s.info["num_labels"] == 3
    assert s.sequence(0)["labels"].tolist() == [-100, 1, -100, 0, -100, -100, -100, -100]
