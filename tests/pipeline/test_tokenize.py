from __future__ import annotations

import random

import numpy as np
import pytest

from seqpack.pipeline import tokenize as sharded_mod
from seqpack.pipeline.engine import LocalEngine
from seqpack.pipeline.tokenize import build_sharded_store
from seqpack.store import ShardedTokenStore, TokenStore, build_store, open_store
from tests.store.test_store import byte_tokenizer


def _docs(n: int = 40, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice("ab c\né") for _ in range(rng.randint(0, 30))) for _ in range(n)]


@pytest.mark.parametrize("shard_chars", [1, 17, 200, 10**9])
def test_sharded_store_holds_the_same_documents(tmp_path, shard_chars):
    docs, tok = _docs(), byte_tokenizer()
    one = build_store(docs, tok, tmp_path / "one")
    s = build_sharded_store(iter(docs), tok, tmp_path / "s", shard_chars=shard_chars)
    assert isinstance(open_store(tmp_path / "s"), ShardedTokenStore) and isinstance(
        open_store(tmp_path / "one"), TokenStore
    )
    assert len(s) == len(one) and s.num_tokens == one.num_tokens
    assert np.array_equal(s.lengths(), one.lengths())
    assert all(np.array_equal(s[i], one[i]) for i in range(len(one)))
    assert s.meta["input_documents"] == len(docs) and s.meta["empty_documents"] == one.meta["empty_documents"]
    if shard_chars == 1:  # a shard ends after every non-empty document
        assert len(s.shards) == sum(1 for d in docs if d) + (docs[-1] == "")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["one", "s"]  # no work dir or lock left


def test_a_failed_job_leaves_no_store_and_the_rerun_reuses_finished_shards(tmp_path, monkeypatch):
    docs, tok = _docs(60), byte_tokenizer()
    real = sharded_mod.encode_shard
    calls = []

    def failing(path, documents, tokenizer, first, workers, key):
        calls.append(path)
        if path.endswith("shard-00003"):
            raise OSError("shard 3 broke")  # a failure a re-run gets past (a rejected input discards the work)
        return real(path, documents, tokenizer, first, workers, key)

    monkeypatch.setattr(sharded_mod, "encode_shard", failing)
    with pytest.raises(OSError, match="shard 3 broke"):
        build_sharded_store(docs, tok, tmp_path / "s", shard_chars=100, engine=LocalEngine(1))  # one shard at a time
    assert not (tmp_path / "s").exists()
    monkeypatch.setattr(sharded_mod, "encode_shard", real)
    s = build_sharded_store(docs, tok, tmp_path / "s", shard_chars=100)
    assert s.reused == ["shard-00000", "shard-00001", "shard-00002"]
    fresh = build_sharded_store(docs, tok, tmp_path / "t", shard_chars=100)
    assert fresh.reused == [] and len(fresh.shards) == len(s.shards)
    assert all(np.array_equal(s[i], fresh[i]) for i in range(len(s)))
    # another job on the same output (other budget) does not reuse the first one's shards
    with pytest.raises(OSError):
        monkeypatch.setattr(sharded_mod, "encode_shard", failing)
        build_sharded_store(docs, tok, tmp_path / "u", shard_chars=100)
    monkeypatch.setattr(sharded_mod, "encode_shard", real)
    assert build_sharded_store(docs, tok, tmp_path / "u", shard_chars=50).reused == []


def test_a_corrupt_shard_names_itself(tmp_path):
    build_sharded_store(_docs(), byte_tokenizer(), tmp_path / "s", shard_chars=100)
    (tmp_path / "s" / "shard-00001" / "offsets.idx").write_bytes(b"\x00" * 8)
    with pytest.raises(ValueError, match=r"shard-00001/offsets\.idx"):
        ShardedTokenStore(tmp_path / "s")


def test_empty_input_is_refused_before_any_output(tmp_path, capsys):
    """No documents at all: refused in one line, as train-tokenizer and pack refuse theirs."""
    import pytest

    from seqpack.cli.main import main

    with pytest.raises(ValueError, match="no documents to tokenize"):
        build_sharded_store([], byte_tokenizer(), tmp_path / "s")
    assert not (tmp_path / "s").exists()
    (tmp_path / "empty.txt").write_text("")
    byte_tokenizer().save(tmp_path / "tok")
    assert (
        main(
            [
                "tokenize",
                str(tmp_path / "empty.txt"),
                "--tokenizer",
                str(tmp_path / "tok"),
                "--out",
                str(tmp_path / "s"),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "empty.txt: no documents to tokenize" in err and err.count("\n") == 1 and not (tmp_path / "s").exists()


def test_a_killed_job_is_finished_by_the_next_run(tmp_path):
    import json
    import subprocess
    import sys

    docs = _docs(60)
    (tmp_path / "docs.json").write_text(json.dumps(docs))
    code = (
        "import json, os, sys\n"
        "import seqpack.pipeline.tokenize as m\n"
        "from tests.store.test_store import byte_tokenizer\n"
        "real = m.encode_shard\n"
        "def killer(path, *a):\n"
        "    if path.endswith('shard-00002'):\n"
        "        os._exit(9)\n"
        "    return real(path, *a)\n"
        "m.encode_shard = killer\n"
        f"docs = json.load(open({str(tmp_path / 'docs.json')!r}))\n"
        "from seqpack.pipeline.engine import LocalEngine\n"  # one shard at a time: 0 and 1 are done when 2 starts
        f"m.build_sharded_store(docs, byte_tokenizer(), {str(tmp_path / 's')!r}, shard_chars=100, engine=LocalEngine(1))\n"
    )
    root = str(__import__("pathlib").Path(__file__).resolve().parents[2])
    assert subprocess.run([sys.executable, "-c", code], cwd=root, check=False).returncode == 9
    assert not (tmp_path / "s").exists()  # nothing that looks complete
    s = build_sharded_store(docs, byte_tokenizer(), tmp_path / "s", shard_chars=100)
    assert s.reused == ["shard-00000", "shard-00001"]
    one = build_store(docs, byte_tokenizer(), tmp_path / "one")
    assert all(np.array_equal(s[i], one[i]) for i in range(len(one)))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["docs.json", "one", "s"]
