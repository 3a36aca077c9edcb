"""Chat sequences: labels exactly where ``train_on`` says, truncation at turn boundaries, drops counted."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqpack.data import IGNORE_INDEX
from seqpack.pipeline import PackConfig, build_packed_dataset, build_sequences
from seqpack.tasks.chat.sequences import chat_sequences
from seqpack.tasks.chat.template import CHATML, ChatTemplate
from seqpack.tokenizer import Tokenizer

S, E = 256, 257  # <|im_start|>, <|im_end|>


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    """Bytes only: every character is one token, so goldens can be written by hand."""
    return Tokenizer({i: bytes([i]) for i in range(256)}, [], ["<|im_start|>", "<|im_end|>"])


def b(s: str) -> list[int]:
    return list(s.encode())


def conv(*turns: str) -> dict[str, list[dict[str, str]]]:
    roles = ["user", "assistant"]
    return {"messages": [{"role": roles[i % 2], "content": t} for i, t in enumerate(turns)]}


def seqs(tok: Tokenizer, records: list[dict], **kw: object):
    kw.setdefault("max_len", 512)
    return chat_sequences(records, tok, template=ChatTemplate(CHATML, name="chatml"), **kw)  # type: ignore[arg-type]


def targets(s, i: int = 0) -> list[int]:
    lab = s.sequence(i)["labels"]
    return [int(x) for x in lab if x != IGNORE_INDEX]


def test_golden_one_exchange(tok: Tokenizer) -> None:
    s = seqs(tok, [conv("hi", "yo")])
    want_ids = [S, *b("user\nhi"), E, *b("\n"), S, *b("assistant\nyo"), E, *b("\n")]
    assert s.sequence(0)["input_ids"].tolist() == want_ids
    want_labels = [IGNORE_INDEX] * len(want_ids)
    at = want_ids.index(ord("y"))
    want_labels[at : at + 3] = [ord("y"), ord("o"), E]  # the content and its end token; not the "\n" after
    assert s.sequence(0)["labels"].tolist() == want_labels
    assert s.info["target_tokens"] == 3


@pytest.mark.parametrize(
    "train_on, want",
    [
        ("assistant", b("a1") + [E] + b("a2") + [E]),
        ("last", b("a2") + [E]),
    ],
)
def test_train_on(tok: Tokenizer, train_on: str, want: list[int]) -> None:
    assert targets(seqs(tok, [conv("q1", "a1", "q2", "a2")], train_on=train_on)) == want


def test_train_on_all(tok: Tokenizer) -> None:
    s = seqs(tok, [conv("q1", "a1")], train_on="all")
    ids, lab = s.sequence(0)["input_ids"], s.sequence(0)["labels"]
    assert lab[0] == IGNORE_INDEX and (lab[1:] == ids[1:]).all()  # every token but the first (nothing predicts it)


def test_truncate_at_a_turn_boundary(tok: Tokenizer) -> None:
    rec = conv("q1", "a1", "q2", "a" * 50)
    whole = seqs(tok, [rec]).sequence(0)["input_ids"].tolist()
    first_end = whole.index(E, whole.index(ord("1"), whole.index(ord("a")))) + 1  # through a1's <|im_end|>
    for train_on in ("assistant", "last", "all"):
        s = seqs(tok, [rec], max_len=first_end + 10, train_on=train_on)
        assert s.sequence(0)["input_ids"].tolist() == whole[:first_end]
        assert s.info["truncated"] == 1
        if train_on != "all":
            assert targets(s) == b("a1") + [E]  # under "last": the last turn that was kept
    s = seqs(tok, [rec], max_len=first_end - 1)  # not even the first answer fits: dropped, never kept without targets
    assert s.num_sequences == 0 and s.dropped == {"too_long": 1}
    assert seqs(tok, [rec], max_len=first_end + 10, overflow="drop").dropped == {"too_long": 1}
    with pytest.raises(
        ValueError, match=r"1 sequences exceed max_len=\d+; pass --overflow truncate\|truncate-tokens\|drop"
    ):
        seqs(tok, [rec], max_len=first_end + 10, overflow="error")


def test_truncate_tokens_keeps_the_first_max_len_tokens_as_trl_does(tok: Tokenizer) -> None:
    """TRL's rule: the first max_len tokens, the answer cut where max_len falls; its kept part is still learned."""
    rec = conv("q1", "a1", "q2", "a" * 50)
    whole = seqs(tok, [rec]).sequence(0)
    ids = whole["input_ids"].tolist()
    a2 = ids.index(E, ids.index(ord("2"))) + 3 + len(b("assistant\n"))  # past q2's <|im_end|>, "\n", <|im_start|>
    cut = a2 + 7  # 7 a's into the second answer
    s = seqs(tok, [rec], max_len=cut, overflow="truncate-tokens")
    assert s.sequence(0)["input_ids"].tolist() == whole["input_ids"].tolist()[:cut]
    assert s.sequence(0)["labels"].tolist() == whole["labels"].tolist()[:cut]  # a1 and the kept a's: targets
    assert s.info["truncated"] == 1 and s.dropped == {}
    assert targets(s) == b("a1") + [E] + b("a" * 7)
    short = seqs(tok, [rec], max_len=3, overflow="truncate-tokens")  # only the user's prompt: no target left
    assert short.num_sequences == 0 and short.dropped == {"no_target": 1}


def test_no_assistant_turn_is_dropped_with_one_warning(tok: Tokenizer, tmp_path) -> None:
    records = [conv("q"), conv("q", "a"), {"messages": [{"role": "system", "content": "s"}]}] * 3
    s = seqs(tok, records)
    assert s.num_sequences == 3 and s.dropped == {"no_assistant": 6} and s.example_ids.tolist() == [1, 4, 7]
    assert seqs(tok, records, train_on="all").num_sequences == 9  # "all" learns from them
    path = tmp_path / "c.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        m = build_packed_dataset(path, tok, tmp_path / "o", PackConfig.for_task("chat", max_len=64), shard_examples=2)
    # one warning with the job's total, not one per shard of 2 examples
    assert [str(w.message) for w in caught] == [
        "dropped 6 conversation(s) with no assistant turn (--train-on assistant has nothing to learn from them)"
    ]
    assert m["dropped"] == {"no_assistant": 6}


@pytest.mark.parametrize(
    "record, match",
    [
        ({"text": "x"}, "example 0: no field 'messages'.*--messages-field"),
        ({"messages": [{"role": "robot", "content": "x"}]}, "example 0: message 0 has role 'robot'"),
        ({"messages": [{"role": "user", "content": None}]}, r"example 0: message 0 \(user\) has no content"),
    ],
)
def test_bad_records(tok: Tokenizer, record: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        seqs(tok, [record])


def test_template_error_names_the_record(tok: Tokenizer) -> None:
    t = ChatTemplate(
        "{% if messages[0].role != 'system' %}{{ raise_exception('needs a system prompt') }}{% endif %}"
        "{% for m in messages %}{{ m.content }}{% endfor %}",
        name="strict.jinja",
    )
    ok = {"messages": [{"role": "system", "content": "s"}, {"role": "assistant", "content": "a"}]}
    with pytest.raises(
        ValueError, match=r"example 1: the chat template strict\.jinja failed to render: needs a system prompt"
    ):
        chat_sequences([ok, conv("q", "a")], tok, template=t, max_len=64)


def test_task_resolves_and_checks_the_template(tok: Tokenizer, tmp_path) -> None:
    plain = Tokenizer({i: bytes([i]) for i in range(256)}, [])
    with pytest.raises(ValueError, match=r"lacks as special tokens.*--special-token"):
        build_sequences([conv("q", "a")], plain, PackConfig.for_task("chat", max_len=64))
    s = build_sequences([conv("q", "a")], tok, PackConfig.for_task("chat", max_len=64))
    assert s.info["chat_template"] == "chatml"
    with pytest.raises(ValueError, match=r"train_on must be one of assistant\|last\|all"):
        PackConfig.for_task("chat", max_len=64, train_on="user")
    with pytest.raises(ValueError, match=r"overflow must be one of truncate\|truncate-tokens\|drop\|error"):
        PackConfig.for_task("chat", max_len=64, overflow="split")


words = st.text(alphabet=st.sampled_from(list("ab é")), min_size=1, max_size=6)


@settings(max_examples=40, deadline=None)
@given(turns=st.lists(words, min_size=1, max_size=7), max_len=st.integers(8, 120))
def test_targets_are_the_kept_assistant_turns(tok: Tokenizer, turns: list[str], max_len: int) -> None:
    """Whatever the cut: targets spell exactly the kept assistant turns, each with its end token;
    a kept conversation always has a target; the ids are a prefix of the whole conversation's."""
    rec = conv(*turns)
    whole = seqs(tok, [rec]).sequence(0)["input_ids"].tolist() if len(turns) > 1 else None
    if len(turns) == 1:
        s = seqs(tok, [rec], max_len=max_len)
        assert s.num_sequences == 0 and s.dropped == {"no_assistant": 1}
        return
    s = seqs(tok, [rec], max_len=max_len)
    if s.num_sequences == 0:
        assert s.dropped == {"too_long": 1}
        return
    ids = s.sequence(0)["input_ids"].tolist()
    assert whole is not None and len(ids) <= max_len and whole[: len(ids)] == ids
    answers = turns[1::2]
    kept = bytes(tok.decode(ids).encode()).count(b"<|im_start|>assistant")
    want = [t for a in answers[:kept] for t in [*b(a), E]]
    assert kept >= 1 and targets(s) == want


def test_parquet_and_hf_dataset_give_the_same_sequences(tok: Tokenizer, tmp_path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    records = [conv("q1", "a1", "q2", "a2"), conv("hello", "world")]
    want = seqs(tok, records)
    pq.write_table(pa.Table.from_pylist(records), tmp_path / "c.parquet")
    got = chat_sequences(tmp_path / "c.parquet", tok, template=ChatTemplate(CHATML), max_len=512)
    assert np.array_equal(got.token_fields["input_ids"], want.token_fields["input_ids"])
    assert np.array_equal(got.token_fields["labels"], want.token_fields["labels"])
    datasets = pytest.importorskip("datasets")
    got = chat_sequences(datasets.Dataset.from_list(records), tok, template=ChatTemplate(CHATML), max_len=512)
    assert np.array_equal(got.token_fields["labels"], want.token_fields["labels"])
