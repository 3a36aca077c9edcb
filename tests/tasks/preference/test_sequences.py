"""The preference task's data: records in TRL's formats, the two layouts, positions, overflow, and
bad input (one line, exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqpack.data.columns import pack_sequences
from seqpack.data.format import load_packed
from seqpack.pipeline import PackConfig, build_packed_dataset
from seqpack.tasks.preference.records import Pairs, read_pairs
from seqpack.tasks.preference.sequences import fit_responses, preference_sequences
from seqpack.tokenizer import open_tokenizer
from tests.cli.test_cli import run
from tests.hf_tokenizers import bpe_tokenizer_dir, preference_records, write_jsonl

pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def tok(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return bpe_tokenizer_dir(tmp_path_factory.mktemp("preftok") / "tok")


def test_string_pairs_follow_trl(tok: Path) -> None:
    """prompt / prompt+chosen / prompt+rejected tokenized whole, the prompt ending where they part,
    EOS appended to each response (TRL's DPOTrainer)."""
    t = open_tokenizer(tok)
    rec = {"prompt": "Q: the cat", "chosen": " sat on the mat", "rejected": " is a dog"}
    p = read_pairs([rec], t, eos="<|im_end|>")
    eos = t.token_to_id("<|im_end|>")
    assert p.prompt[0].tolist() == t.encode_batch(["Q: the cat"])[0]
    assert p.chosen[0].tolist() == t.encode_batch(["Q: the cat sat on the mat"])[0][len(p.prompt[0]) :] + [eos]
    assert p.rejected[0][-1] == eos and p.margin is None


def test_conversational_and_implicit_prompts(tok: Path) -> None:
    from seqpack.tasks.chat.template import ChatTemplate
    from tests.hf_tokenizers import PLAIN_CHATML

    t = open_tokenizer(tok)
    tpl = ChatTemplate(PLAIN_CHATML, name="test")
    user = [{"role": "user", "content": "why the cat"}]
    explicit = {
        "prompt": user,
        "chosen": [{"role": "assistant", "content": "it sat"}],
        "rejected": [{"role": "assistant", "content": "a dog"}],
    }
    implicit = {"chosen": user + explicit["chosen"], "rejected": user + explicit["rejected"]}
    a, b = read_pairs([explicit], t, template=tpl), read_pairs([implicit], t, template=tpl)
    for x, y in ((a.prompt, b.prompt), (a.chosen, b.chosen), (a.rejected, b.rejected)):
        assert x[0].tolist() == y[0].tolist()
    assert t.decode(a.prompt[0].tolist()).endswith("<|im_start|>assistant\n")
    assert t.decode(a.chosen[0].tolist()) == "it sat<|im_end|>\n"
    s = read_pairs([{"chosen": "Q: sky? A: blue", "rejected": "Q: sky? A: green", "margin": 2}], t)  # implicit strings
    assert t.decode(s.prompt[0].tolist()) == "Q: sky? A:" and s.margin is not None and s.margin.tolist() == [2.0]


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ({"prompt": "Q", "chosen": " a"}, "no field 'rejected'"),
        ({"prompt": "Q: the", "chosen": " cat", "rejected": " cat"}, "identical"),
        ({"prompt": "", "chosen": " cat", "rejected": " dog"}, "empty prompt"),
        ({"chosen": "cat", "rejected": "dog"}, "empty prompt"),
        ({"prompt": "Q", "chosen": " a", "rejected": [{"role": "assistant", "content": "b"}]}, "both be strings"),
    ],
)
def test_bad_records_are_named(tok: Path, record: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        read_pairs([{"prompt": "Q: fine", "chosen": " a", "rejected": " b"}, record], open_tokenizer(tok))


def test_bad_input_is_one_line_exit_2(capsys, tmp_path, tok):
    data = write_jsonl(tmp_path / "bad.jsonl", [{"prompt": "Q: x", "chosen": " same", "rejected": " same"}])
    code, _, err = run(
        capsys,
        "pack",
        str(data),
        "--task",
        "preference",
        "--tokenizer",
        str(tok),
        "--max-len",
        "64",
        "--out",
        str(tmp_path / "o"),
    )
    assert code == 2 and "example 0: chosen and rejected are identical" in err and len(err.strip().splitlines()) == 1
    data = write_jsonl(tmp_path / "long.jsonl", preference_records(20, prompt_words=(30, 40), response_words=(30, 40)))
    code, _out, err = run(
        capsys,
        "pack",
        str(data),
        "--task",
        "preference",
        "--tokenizer",
        str(tok),
        "--max-len",
        "96",
        "--overflow",
        "error",
        "--out",
        str(tmp_path / "o"),
    )
    assert code == 2 and "exceed max_len=96" in err and len(err.strip().splitlines()) == 1


def _pairs(lengths: list[tuple[int, int, int]]) -> Pairs:
    mk = lambda n, base: np.arange(base, base + n) % 90 + 5  # noqa: E731
    return Pairs(
        [mk(p, 1) for p, _, _ in lengths],
        [mk(c, 2) for _, c, _ in lengths],
        [mk(r, 3) for _, _, r in lengths],
        np.arange(len(lengths)),
        None,
        len(lengths),
    )


@pytest.mark.parametrize("layout", ["shared-prefix", "pairs"])
def test_overflow_keeps_the_prompt_and_counts(layout: str) -> None:
    p = _pairs([(4, 3, 2), (6, 20, 5), (30, 5, 5)])
    s = preference_sequences(p, layout=layout, max_len=24, overflow="truncate")
    copies = 1 if layout == "shared-prefix" else 2
    assert s.example_ids.tolist() == ([0, 1] if copies == 2 else [0, 1, 2])[: s.num_sequences]
    seq = s.sequence(1)
    assert seq["input_ids"].size <= 24 and (seq["branch_ids"] == 2).sum() >= 1
    assert np.array_equal(seq["input_ids"][:6], p.prompt[1])  # the prompt is whole
    d = preference_sequences(p, layout=layout, max_len=24, overflow="drop")
    assert d.example_ids.tolist() == [0] and d.dropped == {"too_long": 2}
    assert s.info["truncated"] + s.dropped.get("too_long", 0) == 2


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 12), st.integers(1, 12), st.integers(1, 12)), min_size=1, max_size=40),
    st.sampled_from(["shared-prefix", "pairs"]),
    st.sampled_from(["best", "lpfhp", "spfhp"]),
)
def test_every_pair_lands_whole_in_one_row_once(lengths, layout, algorithm) -> None:
    """Each pair packed exactly once, its tokens contiguous in one row, positions as it has alone."""
    p = _pairs(lengths)
    s = preference_sequences(p, layout=layout, max_len=64)
    cols = pack_sequences(s, 64, algorithm=algorithm).columns
    ex = cols["example_ids"][cols["example_ids"] >= 0]
    assert sorted(ex.tolist()) == list(range(len(lengths)))
    for r in range(cols["input_ids"].shape[0]):
        for k in range(int(cols["num_sequences"][r])):
            at = cols["segment_ids"][r] == k + 1
            e = int(cols["example_ids"][r, k])
            P, C, R = (x[e].size for x in (p.prompt, p.chosen, p.rejected))
            br, pos, ids = cols["branch_ids"][r][at], cols["position_ids"][r][at], cols["input_ids"][r][at]
            assert np.array_equal(ids[br == 2][-R:], p.rejected[e])
            # the rejected response's positions are those it has alone after its prompt
            assert pos[br == 2][-R:].tolist() == list(range(P, P + R))
            assert pos[br == 1][-C:].tolist() == list(range(P, P + C))


def test_fit_responses_property() -> None:
    for c in range(1, 12):
        for r in range(1, 12):
            for budget in range(2, 26):
                a, b = fit_responses(c, r, budget)
                assert 1 <= a <= c and 1 <= b <= r and a + b <= budget
                assert a + b == min(c + r, budget)


def test_sharded_pack_equals_in_memory(tmp_path: Path, tok: Path) -> None:
    data = write_jsonl(tmp_path / "p.jsonl", preference_records(60, seed=3))
    t = open_tokenizer(tok)
    cfg = PackConfig.for_task("preference", max_len=128)
    build_packed_dataset(preference_records(60, seed=3), t, tmp_path / "mem", cfg)
    from seqpack.cli.main import main

    assert (
        main(
            [
                "pack",
                str(data),
                "--task",
                "preference",
                "--tokenizer",
                str(tok),
                "--max-len",
                "128",
                "--shard-examples",
                "17",
                "--out",
                str(tmp_path / "sharded"),
            ]
        )
        == 0
    )
    a, b = load_packed(tmp_path / "mem")[1], load_packed(tmp_path / "sharded")[1]
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
    m = json.loads((tmp_path / "sharded" / "manifest.json").read_text())
    assert m["task"] == "preference" and "branch_ids" in m["columns"]


def test_jsonl_parquet_and_hf_datasets_pack_alike(tmp_path: Path, tok: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    datasets = pytest.importorskip("datasets")
    recs = preference_records(30, seed=7)
    for r in recs[::3]:
        r["margin"] = 1.5
    for r in recs:
        r.setdefault("margin", 0.0)
    pq.write_table(pa.Table.from_pylist(recs), tmp_path / "p.parquet")
    t = open_tokenizer(tok)
    cfg = PackConfig.for_task("preference", max_len=96, layout="pairs")
    sources = {
        "jsonl": write_jsonl(tmp_path / "p.jsonl", recs),
        "parquet": tmp_path / "p.parquet",
        "hf": datasets.Dataset.from_list(recs),
    }
    cols = {}
    for name, src in sources.items():
        build_packed_dataset(src, t, tmp_path / name, cfg)
        cols[name] = load_packed(tmp_path / name)[1]
    for name in ("parquet", "hf"):
        assert all(np.array_equal(cols[name][k], cols["jsonl"][k]) for k in cols["jsonl"])
    margin = cols["jsonl"]["margin"]
    assert sorted(margin[margin > -100].tolist()) == sorted(r["margin"] for r in recs)


def test_every_column_is_stored_since_the_task_gives_its_own_positions(tmp_path: Path, tok: Path) -> None:
    """The preference task lays out its own ``position_ids`` (the rejected response continues its
    prompt's), so no column is derived from them (:mod:`seqpack.data.derived`): it stores every column."""
    build_packed_dataset(
        preference_records(40, seed=2),
        open_tokenizer(tok),
        tmp_path / "p",
        PackConfig.for_task("preference", max_len=128),
    )
    m = json.loads((tmp_path / "p" / "manifest.json").read_text())
    assert m["format_version"] == 1 and "derived_columns" not in m
    assert sorted(pq_columns(tmp_path / "p")) == sorted(m["columns"])


def pq_columns(d: Path) -> list[str]:
    import pyarrow.parquet as pq

    return pq.read_schema(next((d / "data").glob("*.parquet"))).names
