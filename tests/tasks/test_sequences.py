from __future__ import annotations

import json

import numpy as np
import pytest

from seqpack.data import IGNORE_INDEX, load_packed
from seqpack.pipeline import PackConfig, build_packed_dataset, build_sequences
from seqpack.store import build_store
from seqpack.tasks.classification import classification_sequences
from seqpack.tasks.mlm import MLMConfig, mlm_sequences, sentence_ends, sentence_tables
from seqpack.tasks.qa import qa_sequences
from seqpack.tokenizer.tokenizer import Tokenizer

EOT = "<|endoftext|>"


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    return Tokenizer({i: bytes([i]) for i in range(256)}, [], special_tokens=[EOT])


SPECIAL = {"[CLS]": 257, "[SEP]": 258, "[MASK]": 259}  # appended after the vocab (256 bytes + EOT)


def text_docs(n=30, seed=0):
    rng = np.random.default_rng(seed)
    words = ["alpha", "beta", "gamma", "delta", "eps"]
    docs = []
    for _ in range(n):
        sents = [
            " ".join(rng.choice(words, rng.integers(1, 12))).capitalize() + rng.choice([".", "!", "?"])
            for _ in range(rng.integers(1, 15))
        ]
        docs.append(" ".join(sents))
    return docs


@pytest.fixture(scope="module")
def store(tok, tmp_path_factory):
    return build_store(text_docs(), tok, tmp_path_factory.mktemp("s") / "store")


# ------------------------------------------------------------------ mlm
def test_sentence_ends(tok):
    ids = np.array(tok.encode("Ab. Cd! e\nf. g.h"))
    ends = sentence_ends(ids, np.array([0, ids.size]), sentence_tables(tok))
    assert [tok.decode(ids[a:b].tolist()) for a, b in zip([0, *ends[:-1]], ends)] == [
        "Ab.",
        " Cd!",
        " e\n",
        "f.",
        " g.h",
    ]


def test_mlm_structure_and_masking(tok, store):
    cfg = MLMConfig(max_len=64, seed=1)
    s = mlm_sequences(store, tok, cfg)
    assert s.num_sequences > 50 and s.lengths.max() <= 64
    cls, sep, mask = SPECIAL["[CLS]"], SPECIAL["[SEP]"], SPECIAL["[MASK]"]
    n_masked = n_cand = n_mask_tok = n_kept = 0
    for i in range(s.num_sequences):
        q = s.sequence(i)
        ids, tt, lab = q["input_ids"].astype(int), q["token_type_ids"], q["labels"].astype(int)
        seps = np.flatnonzero(ids == sep)
        assert ids[0] == cls and ids[-1] == sep and seps.size == 2 and tt[0] == 0 and tt[-1] == 1
        assert np.all(tt[: seps[0] + 1] == 0) and np.all(tt[seps[0] + 1 :] == 1)
        assert np.all(lab[[0, seps[0], ids.size - 1]] == IGNORE_INDEX)
        picked = lab != IGNORE_INDEX
        assert 1 <= picked.sum() <= cfg.predictions
        n_masked += picked.sum()
        n_cand += ids.size - 3
        n_mask_tok += (ids[picked] == mask).sum()
        n_kept += (ids[picked] == lab[picked]).sum()
        orig = np.where(picked, lab, ids)
        doc = np.asarray(store[int(s.example_ids[i])]).astype(np.uint16).tobytes()
        a = orig[1 : seps[0]].astype(np.uint16).tobytes()
        assert doc.find(a) % 2 == 0, "segment A is a contiguous span of its own document"
        if s.seq_fields["next_sentence_label"][i] == 0:
            assert doc.find(orig[seps[0] + 1 : -1].astype(np.uint16).tobytes()) % 2 == 0
    assert 0.12 < n_masked / n_cand < 0.18
    assert 0.72 < n_mask_tok / n_masked < 0.88 and 0.05 < n_kept / n_masked < 0.16
    nsp = s.seq_fields["next_sentence_label"]
    assert 0.3 < nsp.mean() < 0.7
    assert (s.lengths < 32).sum() > 0  # short-sequence probability gives a skewed histogram


def test_mlm_deterministic_per_seed(tok, store):
    a = mlm_sequences(store, tok, MLMConfig(max_len=48, seed=5))
    b = mlm_sequences(store, tok, MLMConfig(max_len=48, seed=5))
    c = mlm_sequences(store, tok, MLMConfig(max_len=48, seed=6))
    assert np.array_equal(a.token_fields["input_ids"], b.token_fields["input_ids"])
    assert np.array_equal(a.token_fields["labels"], b.token_fields["labels"])
    assert (
        not np.array_equal(a.token_fields["input_ids"], c.token_fields["input_ids"])
        or a.num_sequences != c.num_sequences
    )


@pytest.mark.parametrize(
    "bad",
    [
        dict(max_len=4),
        dict(max_len=64, mask_prob=1.5),
        dict(max_len=64, dupe_factor=0),
        dict(max_len=64, max_predictions=0),
    ],
)
def test_mlm_config_validation(bad):
    with pytest.raises(ValueError):
        MLMConfig(**bad)


# ------------------------------------------------------- classification
def test_classification_labels_pairs_and_overflow(tok):
    rows = [
        {"a": "hello", "b": "yo", "y": "pos"},
        {"a": "", "b": "", "y": "neg"},
        {"a": "x" * 50, "b": "y" * 10, "y": "neg"},
    ]
    s = classification_sequences(rows, tok, max_len=20, text_field="a", text_pair_field="b", label_field="y")
    assert s.info["label_names"] == ["neg", "pos"] and s.seq_fields["labels"].tolist() == [1, 0]
    assert s.dropped == {"empty": 1} and s.info["truncated"] == 1 and s.example_ids.tolist() == [0, 2]
    q = s.sequence(0)
    assert q["input_ids"].tolist() == [257, *tok.encode("hello"), 258, *tok.encode("yo"), 258]
    assert q["token_type_ids"].tolist() == [0] * 7 + [1] * 3
    long = s.sequence(1)["input_ids"].tolist()
    assert len(long) == 20 and long.count(ord("x")) == 8 and long.count(ord("y")) == 9  # longest first
    d = classification_sequences(
        rows, tok, max_len=20, text_field="a", text_pair_field="b", label_field="y", overflow="drop"
    )
    assert d.dropped == {"empty": 1, "too_long": 1}
    with pytest.raises(ValueError, match=r"1 sequences exceed max_len=20; pass --overflow truncate\|drop"):
        classification_sequences(
            rows, tok, max_len=20, text_field="a", text_pair_field="b", label_field="y", overflow="error"
        )


@pytest.mark.parametrize(
    ("rows", "kw", "match"),
    [
        ([{"text": "a"}], {}, r"example 0: no field 'label' \(fields: text\); pass --label-field NAME"),
        ([{"text": "a", "label": 1.5}], {}, "example 0: field 'label' is float, expected int or str"),
        ([{"text": "a", "label": True}], {}, "example 0: field 'label' is bool"),
        ([{"text": "a", "label": 1}, {"text": "b", "label": "x"}], {}, "mix int and str"),
        ([{"text": "a", "label": -1}], {}, "example 0: label in field 'label' is negative"),
        ([{"text": "a", "label": 3}], {"num_labels": 2}, "num_labels=2"),
        ([{"text": 5, "label": 1}], {}, "example 0: field 'text' is int, expected str"),
        ([{"text": "a", "label": 1}], {"multilabel": True}, "field 'label' is int, expected list"),
        ([{"text": "a", "label": [1.0]}], {"multilabel": True}, "must be a list of ints or strings"),
    ],
)
def test_classification_bad_labels(tok, rows, kw, match):
    with pytest.raises(ValueError, match=match):
        classification_sequences(rows, tok, max_len=16, **kw)


def test_multilabel_multi_hot(tok):
    rows = [{"text": "a", "label": ["x", "z"]}, {"text": "b", "label": []}, {"text": "c", "label": ["y"]}]
    s = classification_sequences(rows, tok, max_len=8, multilabel=True)
    assert s.info["label_names"] == ["x", "y", "z"] and s.info["num_labels"] == 3
    assert s.seq_fields["labels"].tolist() == [[1, 0, 1], [0, 0, 0], [0, 1, 0]]
    s = classification_sequences([{"text": "a", "label": [0, 2]}], tok, max_len=8, multilabel=True, num_labels=5)
    assert s.seq_fields["labels"].tolist() == [[1, 0, 1, 0, 0]]


# ------------------------------------------------------------------ qa
def qa_rows():
    rows = []
    for i in range(12):
        ctx = " ".join(f"w{j}" for j in range(3 * i + 5)) + f" answer{i} ünï end."
        rows.append(
            {
                "question": f"where is {i}?",
                "context": ctx,
                "answers": {"text": [f"answer{i} ünï"], "answer_start": [ctx.index("answer")]},
            }
        )
    return rows


def test_qa_windows_cover_the_answer(tok):
    s = qa_sequences(qa_rows(), tok, max_len=48, doc_stride=16)
    assert s.lengths.max() <= 48 and s.num_sequences > 12
    found = set()
    for i in range(s.num_sequences):
        q = s.sequence(i)
        ids = q["input_ids"].tolist()
        st, en = int(q["start_positions"]), int(q["end_positions"])
        if st == 0:
            assert en == 0
            continue
        ex = int(s.example_ids[i])
        assert tok.decode(ids[st : en + 1]) == f"answer{ex} ünï"
        assert st >= int(q["context_start"])
        found.add(ex)
    assert found == set(range(12))  # every answer is inside at least one window


def test_qa_packed_positions_index_the_row(tok, tmp_path):
    p = tmp_path / "qa.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in qa_rows()), encoding="utf-8")
    m = build_packed_dataset(p, tok, tmp_path / "out", PackConfig.for_task("qa", max_len=96, doc_stride=16))
    _, c = load_packed(tmp_path / "out")
    hits = 0
    for r in range(m["num_packs"]):
        for k in range(int(c["num_sequences"][r])):
            st, en, ex = int(c["start_positions"][r, k]), int(c["end_positions"][r, k]), int(c["example_ids"][r, k])
            assert c["segment_ids"][r, st] == k + 1 and c["segment_ids"][r, en] == k + 1
            if c["input_ids"][r, st] != SPECIAL["[CLS]"]:
                assert tok.decode(c["input_ids"][r, st : en + 1].tolist()) == f"answer{ex} ünï"
                assert st >= int(c["context_start"][r, k])
                hits += 1
            else:
                assert st == en and (st == 0 or c["segment_ids"][r, st - 1] == k)  # this sequence's [CLS]
    assert hits >= 12


@pytest.mark.parametrize(
    ("answers", "match"),
    [
        ({"text": ["zzz"], "answer_start": [0]}, "example 0: answer 'zzz' is not at character 0"),
        ({"text": ["abc"], "answer_start": [99]}, "example 0: answer at characters 99..102 is outside the context"),
        ({"text": ["abc"]}, "needs lists 'text' and 'answer_start'"),
        ("abc", "field 'answers' is str, expected dict or list"),
    ],
)
def test_qa_bad_answers(tok, answers, match):
    with pytest.raises(ValueError, match=match):
        qa_sequences([{"question": "q", "context": "abc def", "answers": answers}], tok, max_len=64, doc_stride=4)


def test_qa_unanswerable_and_room(tok):
    s = qa_sequences(
        [{"question": "q", "context": "abc", "answers": {"text": [], "answer_start": []}}],
        tok,
        max_len=16,
        doc_stride=2,
    )
    assert s.seq_fields["start_positions"].tolist() == [0]
    with pytest.raises(ValueError, match="raise --max-len or lower --doc-stride"):
        qa_sequences([{"question": "q", "context": "abc", "answers": []}], tok, max_len=8, doc_stride=4)


# --------------------------------------------------------------- build
def test_build_checks_source_and_tokenizer(tok, store, tmp_path):
    other = Tokenizer({i: bytes([i]) for i in range(256)}, [])
    with pytest.raises(ValueError, match="hash mismatch"):
        build_sequences(store.path, other, PackConfig(task="clm", max_len=64))
    with pytest.raises(ValueError, match="reads a token store directory"):
        build_sequences(tmp_path / "x.jsonl", tok, PackConfig(task="clm", max_len=64))
    with pytest.raises(ValueError, match="reads labelled examples"):
        build_sequences(store.path, tok, PackConfig(task="classification", max_len=64))
    with pytest.raises(ValueError, match="has no token '<none>'"):
        build_sequences(store, tok, PackConfig.for_task("clm", max_len=64, eos_token="<none>"))
    s = build_sequences(store, tok, PackConfig.for_task("clm", max_len=64, eos_token=""))
    assert s.num_tokens == store.num_tokens


@pytest.mark.parametrize(
    "bad",
    [
        dict(task="nope"),
        dict(task="clm", max_len=0),
        dict(task="qa", overflow="split"),
        dict(task="classification", overflow="split"),
        dict(task="clm", algorithm="x"),
        dict(task="clm", max_depth=0),
        dict(task="clm", position_offset=-1),
    ],
)
def test_pack_config_validation(bad):
    with pytest.raises(ValueError):
        PackConfig.for_task(**{"max_len": 64, **bad})


@pytest.mark.parametrize("task", ["clm", "mlm"])
def test_build_store_tasks_end_to_end(tok, store, tmp_path, task):
    m = build_packed_dataset(store.path, tok, tmp_path / task, PackConfig(task=task, max_len=64, position_offset=2))
    _, c = load_packed(tmp_path / task)
    seg, pos = c["segment_ids"], c["position_ids"]
    assert np.all(pos[seg > 0] >= 2) and m["efficiency"] > 0.9 and m["tokenizer_hash"] == tok.fingerprint()
    assert c["input_ids"].shape == (m["num_packs"], 64)
    if task == "mlm":
        assert c["next_sentence_label"].shape == (m["num_packs"], m["max_depth"]) and "token_type_ids" in c


def test_hf_dataset_and_parquet_examples(tok, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [{"text": f"t{i}", "label": i % 2} for i in range(10)]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "ex.parquet")
    want = classification_sequences(rows, tok, max_len=16)
    for source in (tmp_path / "ex.parquet", pytest.importorskip("datasets").Dataset.from_list(rows)):
        got = classification_sequences(source, tok, max_len=16)
        assert np.array_equal(got.token_fields["input_ids"], want.token_fields["input_ids"])
        assert got.seq_fields["labels"].tolist() == want.seq_fields["labels"].tolist()
    with pytest.raises(ValueError, match=r"must be \.jsonl or \.parquet"):
        classification_sequences(_touch(tmp_path / "ex.csv"), tok, max_len=16)


def _touch(p):
    p.write_text("text,label\n")
    return p


@pytest.mark.parametrize("overflow", ["split", "truncate", "drop"])
@pytest.mark.parametrize("eos", [None, 0])
def test_clm_store_lengths_are_the_lengths_clm_inputs_makes(overflow, eos):
    """What ``seqpack plan``/``stats`` plan for a store is what ``pack --task clm`` packs."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from seqpack.tasks import get_task
    from seqpack.tasks.clm import CLMOptions, clm_inputs

    store_lengths = get_task("clm").packs().store_lengths
    assert store_lengths is not None

    @settings(max_examples=40, deadline=None)
    @given(st.lists(st.integers(0, 30), max_size=12), st.integers(2, 12))
    def check(lengths, max_len):
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        tokens = np.ones(int(offsets[-1]), np.int64)
        seqs, _ = clm_inputs(tokens, offsets, max_len=max_len, eos_id=eos, overflow=overflow)
        opts = CLMOptions(overflow=overflow, eos_token="" if eos is None else "<|endoftext|>")
        assert store_lengths(np.asarray(lengths), max_len, opts).tolist() == np.diff(seqs.offsets).tolist()

    check()
