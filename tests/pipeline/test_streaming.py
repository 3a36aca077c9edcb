"""Streaming packing: rows equal the offline builder's, every example exactly once across ranks and
workers, a resume at any row yields exactly the rows that followed, mixtures, bounded memory."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqpack.data.columns import materialize, pack_depth
from seqpack.data.sequences import offsets_of
from seqpack.packing import Packing
from seqpack.pipeline import Mixture, PackConfig, PackedStream, StreamConfig
from seqpack.tasks import get_task
from seqpack.tokenizer.tokenizer import Tokenizer

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
WORDS = "the a cat dog sat on mat why how what is are you we can help with code".split()


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    return Tokenizer({i: bytes([i]) for i in range(256)}, [], special_tokens=SPECIALS)


def docs(n: int, seed: int = 0, top: int = 300) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(1, 200, size=int(rng.integers(1, top))).tolist() for _ in range(n)]


def text(rng: random.Random, lo: int, hi: int) -> str:
    return " ".join(rng.choices(WORDS, k=rng.randint(lo, hi)))


def records(task: str, n: int, seed: int = 0) -> list:
    rng = random.Random(seed)
    if task == "clm":
        return [text(rng, 1, 80) for _ in range(n)]
    if task == "chat":
        return [
            {
                "messages": [
                    {"role": "user", "content": text(rng, 1, 20)},
                    {"role": "assistant", "content": text(rng, 1, 40)},
                ]
            }
            for _ in range(n)
        ]
    if task == "preference":
        return [
            {"prompt": text(rng, 1, 20), "chosen": " " + text(rng, 1, 30), "rejected": " " + text(rng, 1, 30)}
            for _ in range(n)
        ]
    if task in ("classification", "multilabel"):
        return [
            {"text": text(rng, 1, 40), "label": rng.randrange(3) if task == "classification" else [rng.randrange(3)]}
            for _ in range(n)
        ]
    if task == "qa":
        out = []
        for i in range(n):
            ctx = text(rng, 5, 60) + f" answer{i} end."
            out.append(
                {
                    "question": f"where is {i}?",
                    "context": ctx,
                    "answers": {"text": [f"answer{i}"], "answer_start": [ctx.index(f"answer{i}")]},
                }
            )
        return out
    raise AssertionError(task)


OPTIONS = {
    "clm": {},
    "chat": {},
    "preference": {},
    "classification": {"num_labels": 3},
    "multilabel": {"num_labels": 3},
    "qa": {"doc_stride": 32},
}


def expected_rows(stream_rows: list[dict], offline, max_len: int, position_offset: int = 0) -> list[dict]:
    """The offline builder's sequences laid out as the stream's rows: each row's sequences found by
    example and tokens (a split example's pieces by their tokens), then the same layout code."""
    where: dict[int, list[int]] = {}
    for j, e in enumerate(offline.example_ids.tolist()):
        where.setdefault(e, []).append(j)
    packs = []
    for row in stream_rows:
        seg, ids = row["segment_ids"], row["input_ids"]
        members = []
        for k, e in enumerate(row["example_ids"].tolist()):
            tokens = ids[seg == k + 1]
            match = [j for j in where[e] if np.array_equal(offline.sequence(j)["input_ids"], tokens)]
            assert match, f"example {e}: a sequence the offline builder does not make"
            where[e].remove(match[0])
            members.append(match[0])
        packs.append(members)
    assert all(not v for v in where.values()), "the offline builder made sequences the stream never yielded"
    packing = Packing(
        offsets_of(np.array([len(p) for p in packs])),
        np.array([j for p in packs for j in p], dtype=np.int64),
        offline.lengths,
        None,  # type: ignore[arg-type]
    )
    cols = materialize(
        offline, packing, max_len=max_len, max_depth=pack_depth(packing, None), position_offset=position_offset
    )
    counts = [len(p) for p in packs]
    per_token = set(offline.token_fields) | {"segment_ids", "position_ids"}
    return [
        {k: (v[r] if k in per_token or v.ndim == 1 else v[r][: counts[r]]) for k, v in cols.items()}
        for r in range(len(packs))
    ]


def assert_rows_equal(got: list[dict], want: list[dict]) -> None:
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert a.keys() == b.keys()
        for k in a:
            assert np.array_equal(a[k], b[k]), k


@pytest.mark.parametrize("task", list(OPTIONS))
def test_every_tasks_rows_equal_the_offline_builders(tok, task):
    recs = records(task, 120, seed=1)
    cfg = StreamConfig(max_len=128, buffer_size=32, chunk=8, task=task, options=OPTIONS[task])
    rows = list(PackedStream(recs, config=cfg, tokenizer=tok))
    t = get_task(task).packs()
    offline = t.stream_sequences(recs, tok, cfg.pack_config(), t.stream_context(cfg.pack_config()))
    if task != "clm":  # the offline pack job's own builder for the examples tasks
        ref = t.build_shard(recs, tok, cfg.pack_config(), t.stream_context(cfg.pack_config()))
        assert np.array_equal(ref.lengths, offline.lengths)
    assert_rows_equal(rows, expected_rows(rows, offline, 128))
    assert all(r["input_ids"].shape == (128,) and "position_ids" in r for r in rows)


def test_token_lists_are_documents_as_they_are_and_positions_restart():
    d = [[5, 6, 7], [8], [9, 10, 11, 12, 13]]
    rows = list(PackedStream(d, config=StreamConfig(max_len=4, buffer_size=8)))
    seen = sorted(
        tuple(r["input_ids"][r["segment_ids"] == k + 1].tolist()) for r in rows for k in range(int(r["num_sequences"]))
    )
    assert seen == [(5, 6, 7), (8,), (9, 10, 11, 12), (13,)]  # a long document split (overflow "split")
    for r in rows:
        for k in range(int(r["num_sequences"])):
            assert r["position_ids"][r["segment_ids"] == k + 1].tolist() == list(
                range(int((r["segment_ids"] == k + 1).sum()))
            )


def test_clm_texts_with_a_tokenizer_equal_the_offline_clm_of_the_same_texts(tok):
    from seqpack.tasks.clm import clm_sequences

    texts = records("clm", 80, seed=3)
    cfg = StreamConfig(max_len=64, buffer_size=16, chunk=8)
    rows = list(PackedStream(texts, config=cfg, tokenizer=tok))
    ids = [np.asarray(tok.encode(t)) for t in texts]
    offline = clm_sequences(
        np.concatenate(ids),
        offsets_of(np.array([x.size for x in ids])),
        max_len=64,
        eos_id=tok.token_to_id("<|endoftext|>"),
        vocab_size=tok.vocab_size,
    )
    assert_rows_equal(rows, expected_rows(rows, offline, 64))


def run_all(examples, cfg: StreamConfig, shards: int) -> list[list[dict]]:
    return [list(PackedStream(examples, config=cfg, shard=k, shards=shards)) for k in range(shards)]


def test_every_example_once_across_ranks_and_workers_and_the_same_seed_the_same_rows():
    d = docs(400, seed=2)
    cfg = StreamConfig(max_len=256, buffer_size=24, chunk=4, seed=7)
    per_shard = run_all(d, cfg, shards=4)  # 2 ranks x 2 workers
    tokens = sorted(
        (int(e), int(n))
        for rows in per_shard
        for r in rows
        for e, n in zip(
            r["example_ids"].tolist(), np.bincount(r["segment_ids"], minlength=int(r["num_sequences"]) + 1)[1:].tolist()
        )
    )
    per_doc: dict[int, int] = {}
    for e, n in tokens:
        per_doc[e] = per_doc.get(e, 0) + n
    assert per_doc == {i: len(x) for i, x in enumerate(d)}  # every token of every example, once
    for k, rows in enumerate(per_shard):
        assert all(e % 4 == k for r in rows for e in r["example_ids"].tolist())
    again = run_all(d, cfg, shards=4)
    for a, b in zip(per_shard, again):
        assert_rows_equal(a, b)


@settings(max_examples=25, deadline=None)
@given(
    stop=st.integers(0, 10_000),
    shard=st.integers(0, 3),
    buffer=st.sampled_from([8, 24, 64]),
    chunk=st.sampled_from([1, 4, 16]),
)
def test_a_resume_at_any_row_yields_exactly_the_rows_that_followed(stop, shard, buffer, chunk):
    d = docs(160, seed=4)
    cfg = StreamConfig(max_len=200, buffer_size=buffer, chunk=chunk, seed=1)
    first = PackedStream(d, config=cfg, shard=shard, shards=4)
    rows, states = [], []
    for r in first:
        rows.append(r)
        states.append(json.loads(json.dumps(first.state_dict())))  # JSON round trip: what a checkpoint holds
    k = stop % len(rows)
    resumed = PackedStream(d, config=cfg, shard=shard, shards=4)
    resumed.load_state_dict(states[k])
    rest = []
    for r in resumed:
        rest.append(r)
    assert_rows_equal(rest, rows[k + 1 :] if k + 1 < len(rows) else [])  # after the last row: the epoch is over
    assert resumed.state_dict()["rows"] == len(rows)


def test_a_state_is_small_and_holds_no_tokens():
    d = docs(3000, seed=5)
    cfg = StreamConfig(max_len=512, buffer_size=256)
    s = PackedStream(d, config=cfg)
    for i, _ in enumerate(s):
        if i == 100:
            break
    state = s.state_dict()
    assert len(json.dumps(state)) < 40 * cfg.buffer_size  # keys and lengths of at most the buffer's carried part
    assert set(state) == {
        "kind",
        "format_version",
        "config",
        "shard",
        "shards",
        "epoch",
        "new_from",
        "carried",
        "carried_lengths",
        "drain",
        "yielded",
        "rows",
    }


def test_a_state_from_another_configuration_shard_or_input_is_refused_in_one_line():
    d = docs(300, seed=6)
    cfg = StreamConfig(max_len=256, buffer_size=32, chunk=4)
    s = PackedStream(d, config=cfg)
    it = iter(s)
    for _ in range(30):
        next(it)
    state = s.state_dict()
    cases = [
        (PackedStream(d, config=StreamConfig(max_len=256, buffer_size=64, chunk=4)), "saved with buffer_size=32"),
        (PackedStream(d, config=cfg, shard=1, shards=2), "the state is shard 0 of 1"),
        (PackedStream(docs(300, seed=7), config=cfg), "not those the state was saved from"),
    ]
    for other, message in cases:
        with pytest.raises(ValueError, match=message) as e:
            other.load_state_dict(state)
            next(iter(other))
        assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="not a seqpack stream state"):
        s.load_state_dict({"rows": 3})


def test_a_mixture_is_deterministic_every_example_once_and_its_mix_reported():
    web, code = docs(300, seed=8), docs(100, seed=9, top=50)
    make = lambda: Mixture({"web": web, "code": code}, weights={"web": 3, "code": 1}, seed=0)  # noqa: E731
    cfg = StreamConfig(max_len=256, buffer_size=32, chunk=8)
    streams = [PackedStream(make(), config=cfg, shard=k, shards=2) for k in range(2)]
    rows = [list(s) for s in streams]
    assert sum(sum(s.mix.values()) for s in streams) == 400
    assert {k: sum(s.mix[k] for s in streams) for k in ("web", "code")} == {"web": 300, "code": 100}
    order = [(src, tuple(x)) for src, x in make()]
    assert len(order) == 400 and order == [(src, tuple(x)) for src, x in make()]
    early = order[:100]  # while both sources last, about 3 of 4 come from the web
    assert 60 <= sum(src == 0 for src, _ in early) <= 90
    again = [list(PackedStream(make(), config=cfg, shard=k, shards=2)) for k in range(2)]
    for a, b in zip(rows, again):
        assert_rows_equal(a, b)
    with pytest.raises(ValueError, match="weights and sources must name the same sources"):
        Mixture({"a": [1]}, weights={"b": 1})


def test_memory_stays_bounded_on_a_long_stream():
    """Peak traced memory of a stream 4x as long stays that of the short one: the buffer bounds it."""
    import tracemalloc

    def peak(n: int) -> int:
        rng = np.random.default_rng(0)
        gen = (rng.integers(1, 200, size=int(rng.integers(1, 400))) for _ in range(n))
        tracemalloc.start()
        for _ in PackedStream(gen, config=StreamConfig(max_len=512, buffer_size=256, chunk=32)):
            pass
        top = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        return top

    short, long = peak(5_000), peak(20_000)
    assert long < 1.25 * short, (short, long)


def test_tasks_that_cannot_stream_say_why():
    with pytest.raises(ValueError, match="task mlm is not streamed"):
        list(PackedStream([[1, 2]], config=StreamConfig(max_len=8, task="mlm")))
    with pytest.raises(ValueError, match="needs num_labels"):
        StreamConfig(max_len=8, task="classification") and PackedStream(
            [], config=StreamConfig(max_len=8, task="classification")
        )
    with pytest.raises(ValueError, match="chat tokenizes its examples: pass tokenizer"):
        list(PackedStream([{"messages": []}], config=StreamConfig(max_len=8, task="chat")))
    with pytest.raises(ValueError, match="rank must be"):
        StreamConfig(max_len=8, rank=2, world_size=2)
    assert PackConfig.for_task("clm", max_len=8).task == "clm"


def test_each_iteration_is_an_epoch_of_every_example():
    d = docs(120, seed=11)
    s = PackedStream(d, config=StreamConfig(max_len=256, buffer_size=16, chunk=4))
    for epoch in range(2):
        rows = list(s)
        assert sorted({e for r in rows for e in r["example_ids"].tolist()}) == list(range(120))
        assert s.state_dict()["epoch"] == epoch
