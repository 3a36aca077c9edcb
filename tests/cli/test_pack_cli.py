from __future__ import annotations

import json
from pathlib import Path

import pytest

from seqpack.tokenizer.tokenizer import Tokenizer
from tests.cli.test_cli import EOT, run


@pytest.fixture
def tokdir(tmp_path: Path) -> Path:
    Tokenizer({i: bytes([i]) for i in range(256)}, [], special_tokens=[EOT]).save(tmp_path / "tok")
    return tmp_path / "tok"


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    p = tmp_path / "c.txt"
    p.write_text(
        EOT.join(f"Doc {i}. " + "Some words here. " * (i % 9) for i in range(40)) + EOT + EOT, encoding="utf-8"
    )
    return p


def test_tokenize_then_pack_every_store_task(capsys, tmp_path, tokdir, corpus):
    code, out, _ = run(
        capsys,
        "tokenize",
        str(corpus),
        "--tokenizer",
        str(tokdir),
        "--out",
        str(tmp_path / "s"),
        "--json",
        "--workers",
        "1",
    )
    meta = json.loads(out)
    assert code == 0 and meta["num_documents"] == 40 and meta["dtype"] == "uint16"
    for task in ("clm", "mlm"):
        code, out, err = run(
            capsys,
            "pack",
            str(tmp_path / "s"),
            "--task",
            task,
            "--max-len",
            "64",
            "--tokenizer",
            str(tokdir),
            "--out",
            str(tmp_path / task),
            "--json",
            "--algorithm",
            "lpfhp",
        )
        assert code == 0, err
        s = json.loads(out)
        assert s["task"] == task and s["num_packs"] >= 1 and 0 < s["efficiency"] <= 1
        m = json.loads((tmp_path / task / "manifest.json").read_text())
        assert m["dropped"] == {"empty": 1}  # the empty document between the two final separators
        run(
            capsys,
            "pack",
            str(tmp_path / "s"),
            "--task",
            task,
            "--max-len",
            "64",
            "--tokenizer",
            str(tokdir),
            "--out",
            str(tmp_path / f"{task}2"),
            "--algorithm",
            "lpfhp",
        )
        for f in sorted((tmp_path / task).rglob("*.*")):  # same inputs and seed: byte-identical files
            assert f.read_bytes() == (tmp_path / f"{task}2" / f.relative_to(tmp_path / task)).read_bytes(), f


def test_pack_examples_tasks(capsys, tmp_path, tokdir):
    ex = tmp_path / "ex.jsonl"
    rows = [
        {
            "text": f"text number {i}",
            "label": i % 3,
            "tags": [i % 2],
            "question": "n?",
            "context": f"the number is {i}.",
            "answers": {"text": [str(i)], "answer_start": [14]},
        }
        for i in range(30)
    ]
    ex.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    for task, extra in (
        ("classification", []),
        ("multilabel", ["--label-field", "tags"]),
        ("qa", ["--doc-stride", "4"]),
    ):
        code, out, err = run(
            capsys,
            "pack",
            str(ex),
            "--task",
            task,
            "--max-len",
            "48",
            "--tokenizer",
            str(tokdir),
            "--out",
            str(tmp_path / task),
            "--export-bin",
            *extra,
        )
        assert code == 0, err
        assert out.startswith(f"{task}: 30 sequences from 30 examples")


@pytest.fixture
def store(capsys, tmp_path, tokdir, corpus) -> Path:
    run(capsys, "tokenize", str(corpus), "--tokenizer", str(tokdir), "--out", str(tmp_path / "s"))
    return tmp_path / "s"


def test_pack_errors_are_one_line(capsys, tmp_path, tokdir, store):
    base = ["--tokenizer", str(tokdir), "--out", str(tmp_path / "o")]

    def err(*argv: str) -> str:
        code, _, e = run(capsys, "pack", *argv)
        assert code == 2 and e.count("\n") == 1 and "Traceback" not in e
        return e

    assert "sequences exceed max_len=8; pass --overflow split|truncate|drop" in err(
        str(store), "--task", "clm", "--max-len", "8", "--overflow", "error", *base
    )
    assert "--overflow does not apply to task qa" in err(
        str(store), "--task", "qa", "--max-len", "8", "--overflow", "drop", *base
    )
    assert "reads labelled examples" in err(str(store), "--task", "classification", "--max-len", "8", *base)
    assert "no such file" in err(str(tmp_path / "none.jsonl"), "--task", "classification", "--max-len", "8", *base)
    other = tmp_path / "tok2"
    Tokenizer({i: bytes([i]) for i in range(256)}, []).save(other)
    assert "hash mismatch" in err(
        str(store), "--task", "clm", "--max-len", "64", "--tokenizer", str(other), "--out", str(tmp_path / "o")
    )
    (tmp_path / "o").mkdir()
    (tmp_path / "o" / "f").write_text("x")
    assert "did not make (f)" in err(str(store), "--task", "clm", "--max-len", "64", *base, "--overwrite")
    (tmp_path / "o" / "f").unlink()
    (store / "shard-00000" / "tokens.bin").write_bytes(b"\x00")  # a corrupt shard names itself
    assert "tokens.bin" in err(str(store), "--task", "clm", "--max-len", "64", *base, "--overwrite")


def test_pack_bad_options_exit_2(capsys, tmp_path, tokdir, store):
    for argv in (
        ["--task", "nope"],
        ["--task", "clm", "--max-len", "0"],
        ["--task", "clm", "--max-len", "8", "--seed", "-1"],
    ):
        with pytest.raises(SystemExit) as e:
            run(capsys, "pack", str(store), "--tokenizer", str(tokdir), "--out", str(tmp_path / "o"), *argv)
        assert e.value.code == 2


def test_tokenize_errors(capsys, tmp_path, tokdir, corpus):
    code, _, e = run(
        capsys, "tokenize", str(tmp_path / "missing.txt"), "--tokenizer", str(tokdir), "--out", str(tmp_path / "s")
    )
    assert code == 2 and "no such file" in e
    assert not (tmp_path / "s").exists()
    with pytest.raises(SystemExit) as exit_:  # argparse refuses the option itself
        run(capsys, "tokenize", str(corpus), "--tokenizer", str(tokdir), "--out", str(tmp_path / "s"), "--workers", "0")
    assert exit_.value.code == 2 and "--workers must be >= 1" in capsys.readouterr().err
    # one missing input among many: named, nothing written
    code, _, e = run(
        capsys,
        "tokenize",
        str(corpus),
        str(tmp_path / "gone.txt"),
        str(corpus),
        "--tokenizer",
        str(tokdir),
        "--out",
        str(tmp_path / "s"),
    )
    assert code == 2 and "gone.txt" in e and e.count("\n") == 1
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith((".s", "s"))) == []
    code, _, e = run(
        capsys,
        "tokenize",
        str(corpus),
        "--tokenizer",
        str(tokdir),
        "--out",
        str(tmp_path / "s"),
        "--engine",
        "local",
        "--ray-address",
        "auto",
    )
    assert code == 2 and "--ray-address needs --engine ray" in e


def test_tokenize_and_pack_in_shards(capsys, tmp_path, tokdir, corpus):
    import json

    code, out, _ = run(
        capsys,
        "tokenize",
        str(corpus),
        str(corpus),
        "--tokenizer",
        str(tokdir),
        "--out",
        str(tmp_path / "s"),
        "--shard-mb",
        "0.001",
        "--json",
    )
    meta = json.loads(out)
    assert code == 0 and len(meta["shards"]) > 2 and meta["reused"] == []
    code, out, _ = run(
        capsys,
        "pack",
        str(tmp_path / "s"),
        "--task",
        "clm",
        "--max-len",
        "64",
        "--tokenizer",
        str(tokdir),
        "--out",
        str(tmp_path / "p"),
        "--shard-packs",
        "10",
        "--row-group-packs",
        "4",
    )
    assert code == 0 and "packs of 64" in out
    import pyarrow.parquet as pq

    first = pq.ParquetFile(tmp_path / "p" / "data" / "part-00000.parquet").metadata
    assert [first.row_group(g).num_rows for g in range(first.num_row_groups)] == [4, 4, 2]  # 10 packs, 4 a group
    with pytest.raises(SystemExit) as e:
        run(
            capsys,
            "pack",
            str(tmp_path / "s"),
            "--task",
            "clm",
            "--max-len",
            "64",
            "--tokenizer",
            str(tokdir),
            "--out",
            str(tmp_path / "q"),
            "--row-group-packs",
            "0",
        )
    assert e.value.code == 2


def _records(path: Path, ids: range) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "".join(json.dumps({"text": f"record {i} " + "w " * (i % 5), "label": i % 3}) + "\n" for i in ids),
        encoding="utf-8",
    )


def test_pack_reads_a_folder_of_record_files(capsys, tmp_path, tokdir):
    """A folder packs exactly as its record files concatenated in sorted path order (a Parquet shard
    included), says how many files it read, and --glob picks among them."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = tmp_path / "examples"
    _records(folder / "b.jsonl", range(10, 25))
    _records(folder / "a" / "part.jsonl", range(0, 10))
    rows = [{"text": f"record {i} " + "w " * (i % 5), "label": i % 3} for i in range(25, 40)]
    pq.write_table(pa.Table.from_pylist(rows), folder / "c.parquet")
    (folder / "notes.txt").write_text("not a record file")
    (folder / ".hidden.jsonl").write_text("{not json")
    whole = tmp_path / "all.jsonl"
    _records(whole, range(40))  # a/part.jsonl, b.jsonl, c.parquet: sorted path order
    base = ["--task", "classification", "--max-len", "32", "--tokenizer", str(tokdir)]
    code, out, err = run(capsys, "pack", str(folder), *base, "--out", str(tmp_path / "f"), "--shard-examples", "7")
    assert code == 0, err
    assert out.startswith("classification: 40 sequences from 40 examples (3 files) -> ")
    code, _, err = run(capsys, "pack", str(whole), *base, "--out", str(tmp_path / "w"), "--shard-examples", "7")
    assert code == 0, err
    for f in sorted((tmp_path / "w").rglob("*.parquet")):  # same records, same order, same seed: the same bytes
        assert f.read_bytes() == (tmp_path / "f" / f.relative_to(tmp_path / "w")).read_bytes(), f
    code, out, err = run(capsys, "pack", str(folder), *base, "--out", str(tmp_path / "g"), "--glob", "*.jsonl")
    assert code == 0, err
    assert out.startswith("classification: 25 sequences from 25 examples (2 files) -> ")


def test_pack_folder_errors(capsys, tmp_path, tokdir, store):
    folder = tmp_path / "examples"
    _records(folder / "a.jsonl", range(5))
    base = ["--max-len", "32", "--tokenizer", str(tokdir), "--out", str(tmp_path / "o")]

    def err(*argv: str) -> str:
        code, _, e = run(capsys, "pack", *argv)
        assert code == 2 and e.count("\n") == 1 and "Traceback" not in e
        return e

    assert "matching --glob '*.csv'" in err(str(folder), "--task", "classification", "--glob", "*.csv", *base)
    assert "task clm reads a token store (drop --glob)" in err(str(store), "--task", "clm", "--glob", "*.jsonl", *base)
    assert "is a token store; task classification reads labelled examples" in err(
        str(store), "--task", "classification", *base
    )
    assert not (tmp_path / "o").exists()


def test_pack_folder_job_key_covers_every_file(tmp_path, tokdir, monkeypatch):
    """A resume reuses only work made from the same inputs: the job's key names every file of the
    folder with its size and mtime, so a file edited after a killed run changes it."""
    import os

    from seqpack.pipeline import PackConfig, job
    from seqpack.tokenizer import open_tokenizer

    folder = tmp_path / "examples"
    _records(folder / "a.jsonl", range(10))
    _records(folder / "b.jsonl", range(10, 20))
    keys = []
    monkeypatch.setattr(job, "run_job", lambda key, inputs, *a, **k: keys.append((key, len(list(inputs)))) or {})
    tok, cfg = open_tokenizer(tokdir), PackConfig.for_task("classification", max_len=32)
    assert job.pack_example_shards(folder, tok, tmp_path / "o", cfg, shard_examples=5) == {"input_files": 2}
    st = (folder / "b.jsonl").stat()
    _records(folder / "b.jsonl", range(10, 20))
    os.utime(folder / "b.jsonl", ns=(st.st_atime_ns, st.st_mtime_ns + 1))
    job.pack_example_shards(folder, tok, tmp_path / "o", cfg, shard_examples=5)
    (k1, n1), (k2, n2) = keys
    assert n1 == n2 == 4 and [f[0] for f in k1["examples"]] == [
        str((folder / n).resolve()) for n in ("a.jsonl", "b.jsonl")
    ]
    assert k1 != k2 and k1["examples"][0] == k2["examples"][0]
