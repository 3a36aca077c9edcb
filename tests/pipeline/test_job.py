"""Sharded stores pack with one global plan, exactly like one store, on either engine."""

from __future__ import annotations

import filecmp
from pathlib import Path

import numpy as np
import pytest

from seqpack.data import load_packed
from seqpack.pipeline import OutputOptions, PackConfig, build_packed_dataset, build_sharded_store
from seqpack.pipeline import job as job_mod
from seqpack.pipeline.engine import get_engine
from seqpack.store import build_store
from seqpack.tokenizer.tokenizer import Tokenizer
from tests.tasks.test_sequences import EOT, text_docs


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    return Tokenizer({i: bytes([i]) for i in range(256)}, [], special_tokens=[EOT])


@pytest.fixture(scope="module")
def stores(tok, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("stores")
    docs = text_docs(60)
    out = {"single": build_store(docs, tok, root / "single").path}
    for name, chars in (("one", 10**9), ("few", 2_000), ("many", 300)):
        out[name] = build_sharded_store(docs, tok, root / name, shard_chars=chars).path
    return out


def _same_dataset(a: Path, b: Path) -> bool:
    files = sorted(p.relative_to(a).as_posix() for p in a.rglob("*") if p.is_file())
    other = sorted(p.relative_to(b).as_posix() for p in b.rglob("*") if p.is_file())
    return files == other and all(filecmp.cmp(a / f, b / f, shallow=False) for f in files)


def _row_group_sizes(path: Path) -> list[int]:
    import pyarrow.parquet as pq

    metas = [pq.ParquetFile(f).metadata for f in sorted((path / "data").glob("*.parquet"))]
    return [m.row_group(g).num_rows for m in metas for g in range(m.num_row_groups)]


@pytest.mark.parametrize("algorithm", ["best", "lpfhp"])
@pytest.mark.parametrize(("shards", "row_group_packs"), [("one", None), ("few", None), ("many", None), ("many", 3)])
def test_clm_from_shards_is_byte_identical_to_one_store(tok, stores, tmp_path, shards, row_group_packs, algorithm):
    cfg = PackConfig.for_task("clm", max_len=64, algorithm=algorithm)
    build_packed_dataset(
        stores["single"], tok, tmp_path / "a", cfg, output=OutputOptions(shard_packs=7, row_group_packs=row_group_packs)
    )
    m = build_packed_dataset(
        stores[shards], tok, tmp_path / "b", cfg, output=OutputOptions(shard_packs=7, row_group_packs=row_group_packs)
    )
    assert _same_dataset(tmp_path / "a", tmp_path / "b")  # same plan, packs, bytes, manifest
    assert m["reused"] == [] and len(m["shards"]) > 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b"]  # no work dir or lock left
    # parts of 7 packs, in row groups of 3 (several a part: each laid out and written in turn), or of
    # 2**20 // 64 (the default: one a part here)
    sizes = _row_group_sizes(tmp_path / "b")
    assert sum(sizes) == m["num_packs"]
    assert sizes[:3] == ([3, 3, 1] if row_group_packs else [7, 7, 7])


def test_mlm_from_one_shard_equals_one_store_and_every_sequence_packs_once(tok, stores, tmp_path):
    cfg = PackConfig.for_task("mlm", max_len=64, seed=3)
    build_packed_dataset(stores["single"], tok, tmp_path / "a", cfg)
    build_packed_dataset(stores["one"], tok, tmp_path / "b", cfg)
    assert _same_dataset(tmp_path / "a", tmp_path / "b")
    m = build_packed_dataset(stores["many"], tok, tmp_path / "c", cfg, output=OutputOptions(shard_packs=5))
    _, cols = load_packed(tmp_path / "c")
    slots = cols["example_ids"][cols["example_ids"] >= 0]
    assert slots.size == m["num_sequences"] == int(cols["num_sequences"].sum())
    assert set(slots.tolist()) <= set(range(60))  # documents numbered across shards
    build_packed_dataset(stores["many"], tok, tmp_path / "d", cfg, output=OutputOptions(shard_packs=5))
    assert _same_dataset(tmp_path / "c", tmp_path / "d")  # deterministic per seed


def test_bin_columns_equal_the_parquet_ones(tok, stores, tmp_path):
    cfg = PackConfig.for_task("clm", max_len=64)
    build_packed_dataset(
        stores["single"], tok, tmp_path / "a", cfg, output=OutputOptions(shard_packs=7, export_bin=True)
    )
    build_packed_dataset(stores["many"], tok, tmp_path / "b", cfg, output=OutputOptions(shard_packs=7, export_bin=True))
    assert _same_dataset(tmp_path / "a", tmp_path / "b")
    _, mm = load_packed(tmp_path / "b")
    _, pq = load_packed(tmp_path / "b", mmap=False)
    assert all(np.array_equal(mm[k], pq[k]) for k in pq)


def test_a_failed_job_leaves_no_dataset_and_the_rerun_reuses_its_work(tok, stores, tmp_path, monkeypatch):
    cfg = PackConfig.for_task("clm", max_len=64)
    real = job_mod.packs_stage

    def failing(path, *args):
        if path.endswith("part-00002.parquet"):
            raise OSError("disk full")
        return real(path, *args)

    monkeypatch.setattr(job_mod, "packs_stage", failing)
    with pytest.raises(OSError, match="disk full"):
        build_packed_dataset(stores["many"], tok, tmp_path / "b", cfg, output=OutputOptions(shard_packs=7))
    assert not (tmp_path / "b").exists()
    monkeypatch.setattr(job_mod, "packs_stage", real)
    m = build_packed_dataset(stores["many"], tok, tmp_path / "b", cfg, output=OutputOptions(shard_packs=7))
    assert "data/part-00000.parquet" in m["reused"] and "data/part-00002.parquet" not in m["reused"]
    assert any(r.startswith("sequences-") for r in m["reused"])
    build_packed_dataset(stores["single"], tok, tmp_path / "a", cfg, output=OutputOptions(shard_packs=7))
    assert _same_dataset(tmp_path / "a", tmp_path / "b")


def test_shards_at_once_on_threads_write_the_same_bytes(tok, stores, tmp_path):
    cfg = PackConfig.for_task("mlm", max_len=64)
    build_packed_dataset(
        stores["many"],
        tok,
        tmp_path / "a",
        cfg,
        engine=get_engine("local", shards_at_once=1),
        output=OutputOptions(shard_packs=5),
    )
    build_packed_dataset(
        stores["many"],
        tok,
        tmp_path / "b",
        cfg,
        engine=get_engine("local", shards_at_once=2),
        output=OutputOptions(shard_packs=5),
    )
    assert _same_dataset(tmp_path / "a", tmp_path / "b")


def test_ray_engine_writes_the_same_bytes(tok, stores, tmp_path):
    pytest.importorskip("ray")
    engine = get_engine("ray", num_cpus=2)
    try:
        cfg = PackConfig.for_task("clm", max_len=64)
        build_packed_dataset(stores["few"], tok, tmp_path / "a", cfg, output=OutputOptions(shard_packs=7))
        build_packed_dataset(
            stores["few"], tok, tmp_path / "b", cfg, engine=engine, output=OutputOptions(shard_packs=7)
        )
        assert _same_dataset(tmp_path / "a", tmp_path / "b")
        docs = text_docs(60)
        a = build_sharded_store(docs, tok, tmp_path / "s1", shard_chars=700)
        b = build_sharded_store(docs, tok, tmp_path / "s2", shard_chars=700, engine=engine)
        assert a.meta["shards"] == b.meta["shards"] and len(a.shards) > 2
        for x, y in zip(a.shards, b.shards):  # the token files (meta.json also holds timings)
            for f in ("tokens.bin", "offsets.idx"):
                assert filecmp.cmp(x.path / f, y.path / f, shallow=False)
    finally:
        engine.close()


def test_a_pack_killed_mid_stage_is_finished_by_the_next_run_and_a_second_job_refuses(tok, stores, tmp_path):
    import subprocess
    import sys

    from seqpack._atomic import output_lock

    root = str(Path(__file__).resolve().parents[2])
    code = (
        "import os\n"
        "import seqpack.pipeline.job as m\n"
        "from seqpack.pipeline import OutputOptions, PackConfig, build_packed_dataset\n"
        "from seqpack.pipeline.engine import LocalEngine\n"
        "from seqpack.tokenizer.tokenizer import Tokenizer\n"
        "real = m.packs_stage\n"
        "def killer(path, *a):\n"
        "    if path.endswith('part-00002.parquet'):\n"
        "        os._exit(9)\n"
        "    return real(path, *a)\n"
        "m.packs_stage = killer\n"
        "tok = Tokenizer({i: bytes([i]) for i in range(256)}, [], special_tokens=['<|endoftext|>'])\n"
        f"build_packed_dataset({str(stores['many'])!r}, tok, {str(tmp_path / 'b')!r}, PackConfig.for_task('clm', max_len=64), "
        "output=OutputOptions(shard_packs=7), "
        "engine=LocalEngine(1))\n"  # one part at a time: parts 0 and 1 are finished when part 2 starts
    )
    assert subprocess.run([sys.executable, "-c", code], cwd=root, check=False).returncode == 9
    assert not (tmp_path / "b").exists()
    cfg = PackConfig.for_task("clm", max_len=64)
    m = build_packed_dataset(stores["many"], tok, tmp_path / "b", cfg, output=OutputOptions(shard_packs=7))
    assert m["reused"][-2:] == ["data/part-00000.parquet", "data/part-00001.parquet"]
    build_packed_dataset(stores["single"], tok, tmp_path / "a", cfg, output=OutputOptions(shard_packs=7))
    assert _same_dataset(tmp_path / "a", tmp_path / "b")
    # a second job on an output another job is writing refuses, in one line, exit 2
    tok.save(tmp_path / "tok")
    with output_lock(tmp_path / "c"):
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "seqpack.cli.main",
                "pack",
                str(stores["many"]),
                "--task",
                "clm",
                "--max-len",
                "64",
                "--tokenizer",
                str(tmp_path / "tok"),
                "--out",
                str(tmp_path / "c"),
            ],
            cwd=root,
            capture_output=True,
            text=True,
            check=False,
        )
    assert r.returncode == 2 and "another seqpack job is writing it" in r.stderr and r.stderr.count("\n") == 1


def _write_jsonl(path: Path, rows: list[dict]) -> Path:
    import json

    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.mark.parametrize("task", ["classification", "multilabel", "qa", "chat"])
def test_examples_in_shards_equal_examples_in_memory(tok, tmp_path, task):
    from tests.hf_tokenizers import conversations
    from tests.tasks.test_sequences import qa_rows

    rng = np.random.default_rng(0)
    words = ["alpha", "beta", "gamma", "delta"]
    if task == "chat":  # counts in task_info (target tokens, truncations) are summed over shards
        rows = conversations(60, seed=5)
        template = tmp_path / "plain.jinja"
        template.write_text(
            "{% for m in messages %}{{ m.role }}: {% if m.role == 'assistant' %}{% generation %}"
            "{{ m.content }}.{% endgeneration %}{% else %}{{ m.content }}{% endif %}\n{% endfor %}"
        )
        kw = {"max_len": 128, "chat_template": str(template)}
    elif task == "qa":
        rows = qa_rows() * 7
        kw = {"max_len": 48, "doc_stride": 16}
    else:
        names = ["zeta", "eta", "theta", "iota", "kappa"]
        rows = []
        for i in range(90):
            text = " ".join(rng.choice(words, rng.integers(1, 30)))
            # the rare label appears only in the last shard: every shard must map labels the same way
            label = names[int(rng.integers(0, 4))] if i < 85 else "kappa"
            rows.append({"text": text, "label": [label, names[i % 3]] if task == "multilabel" else label})
        kw = {"max_len": 48}
    src = _write_jsonl(tmp_path / "ex.jsonl", rows)
    cfg = PackConfig.for_task(task, **kw)
    # a list: packed in memory; in row groups of 4 packs (2 a part: each gathers its sequences' fields)
    build_packed_dataset(rows, tok, tmp_path / "a", cfg, output=OutputOptions(shard_packs=6, row_group_packs=4))
    m = build_packed_dataset(
        src, tok, tmp_path / "b", cfg, shard_examples=8, output=OutputOptions(shard_packs=6, row_group_packs=4)
    )
    assert _same_dataset(tmp_path / "a", tmp_path / "b")
    assert _row_group_sizes(tmp_path / "b")[:2] == [4, 2]
    assert m["num_examples"] == len(rows) and len(m["shards"]) > 1


def test_a_bad_example_names_its_shard(tok, tmp_path):
    rows = [{"text": "alpha beta", "label": "x"} for _ in range(20)]
    cfg = PackConfig.for_task("classification", max_len=32)
    rows[13] = {"text": "alpha"}  # no label: found by the first pass, with the file's index
    with pytest.raises(ValueError, match=r"example 13: .*label"):
        build_packed_dataset(_write_jsonl(tmp_path / "ex.jsonl", rows), tok, tmp_path / "o", cfg, shard_examples=5)
    rows[13] = {"label": "x"}  # no text: found in its shard, which names its records
    with pytest.raises(ValueError, match=r"examples 10\.\.14 of the file: example 3: .*text"):
        build_packed_dataset(_write_jsonl(tmp_path / "ex.jsonl", rows), tok, tmp_path / "o", cfg, shard_examples=5)
    assert not (tmp_path / "o").exists() and not (tmp_path / ".o.partial").exists()  # rejected: no work left


def test_clm_saves_no_tokens_between_stages_and_a_store_changed_mid_job_is_refused(tok, stores, tmp_path, monkeypatch):
    # clm's route stage makes the tokens again from the store shard (Task.tokens_from_store): the sequences
    # stage saves only its small per-sequence files; mlm (its masks drawn per shard) saves its tokens
    from seqpack._stages import partial_dir
    from seqpack.pipeline.stages import route_stage

    real = job_mod.packs_stage

    def failing(*args):
        raise OSError("stop")

    monkeypatch.setattr(job_mod, "packs_stage", failing)
    for task in ("clm", "mlm"):
        with pytest.raises(OSError, match="stop"):
            build_packed_dataset(stores["few"], tok, tmp_path / task, PackConfig.for_task(task, max_len=64))
        saved = sorted(p.name for p in (partial_dir(tmp_path / task) / "sequences-00000").iterdir())
        assert any(n.startswith("token.") for n in saved) == (task == "mlm"), saved
    monkeypatch.setattr(job_mod, "packs_stage", real)
    work = partial_dir(tmp_path / "clm")
    other = sorted(p for p in Path(stores["many"]).iterdir() if p.is_dir())[0]  # a shard of other documents
    cfg = PackConfig.for_task("clm", max_len=64)
    with pytest.raises(OSError, match="changed while it was being packed"):
        route_stage(
            str(work / "sequences-00000"),
            str(tmp_path / "r"),
            np.arange(3),
            np.array([0, 3]),
            ["input_ids"],
            "k",
            rebuild=(str(other), tok, cfg),
        )
