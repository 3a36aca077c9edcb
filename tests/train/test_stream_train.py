"""``seqpack train --stream``: rows packed as the examples are read, the stream's position saved in
every checkpoint, and a resumed run (one process or two gloo ranks) that trains on exactly the rows
and reaches exactly the weights of the uninterrupted one (the same operations on the same rows in
the same order: equal bits, so the comparisons are exact)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from seqpack.cli.main import main
from seqpack.pipeline.streaming import PackedStream, StreamConfig
from seqpack.train import TrainConfig, train
from seqpack.train.checkpoint import read_metrics
from seqpack.train.stream_data import StreamTrainData, _Records
from tests.train.conftest import synthetic_documents

TIMING = ("step_seconds", "compute_seconds", "data_seconds", "train_seconds", "tokens_per_s", "sequences_per_s")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """120 documents as JSONL records and a BPE tokenizer trained on them."""
    from seqpack.tokenizer import BPEConfig, Tokenizer
    from seqpack.tokenizer.train import train_bpe_corpus

    root = tmp_path_factory.mktemp("stream-train")
    docs = synthetic_documents(120, seed=5)
    res = train_bpe_corpus(
        documents=docs, config=BPEConfig(vocab_size=300, special_tokens=("<|endoftext|>",), workers=1)
    )
    Tokenizer(res.vocab, res.merges, list(res.special_tokens)).save(root / "tok")
    with open(root / "docs.jsonl", "w", encoding="utf-8") as f:
        for d in docs:
            f.write(json.dumps({"text": d}) + "\n")
    return root


def cfg(corpus: Path, out: Path, **kw) -> TrainConfig:
    # buffer 40 < the 100 training documents: several buffers an epoch; 14 steps x 6 rows cross an epoch
    base = dict(
        data=str(corpus / "docs.jsonl"),
        out=str(out),
        stream=True,
        tokenizer=str(corpus / "tok"),
        max_len=64,
        buffer_size=40,
        eval_examples=20,
        steps=14,
        batch_size=6,
        progress=False,
        threads=1,
        eval_every=5,
        checkpoint_every=4,
    )
    return TrainConfig(**{**base, **kw})


def untimed(run: Path) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in TIMING} for r in read_metrics(run)]


def test_batches_are_the_streams_rows_in_order(corpus):
    """A batch holds the packed stream's next rows (the examples past the held-out ones), then the next epoch's."""
    from seqpack.tokenizer import open_tokenizer

    c = cfg(corpus, corpus / "unused")
    data = StreamTrainData(c)
    tok = open_tokenizer(corpus / "tok")
    rows = list(
        PackedStream(
            _Records([str(corpus / "docs.jsonl")], 20),
            tokenizer=tok,
            config=StreamConfig(max_len=64, buffer_size=40, seed=0),
        )
    )
    n = len(rows)
    got = torch.cat([data.batch(data.units_at(0, s, 7))["input_ids"] for s in range(0, n + 7, 7)])
    want = np.stack([r["input_ids"] for r in rows])
    assert torch.equal(got[:n], torch.from_numpy(want.astype(np.int64)))
    assert got.shape[0] > n  # the next epoch follows
    held = PackedStream(
        _Records([str(corpus / "docs.jsonl")], 0, 20), tokenizer=tok, config=StreamConfig(max_len=64, buffer_size=40)
    )
    assert sum(int(r["num_sequences"]) for r in held) == data.eval_sequences


@pytest.mark.parametrize("cut", [1, 6, 11])  # before the first checkpoint, mid-epoch, in the second epoch
def test_a_stream_run_cut_and_resumed_equals_the_uninterrupted_one(corpus, tmp_path, cut):
    whole = tmp_path / "whole"
    s = train(cfg(corpus, whole))
    assert s["steps"] == 14 and s["sequences"] > 14 * 6

    def interrupt(step, rec):
        if step == cut:
            os.kill(os.getpid(), signal.SIGINT)

    run = tmp_path / "cut"
    with pytest.raises(KeyboardInterrupt, match=f"interrupted at step {cut}"):
        train(cfg(corpus, run), on_step=interrupt)
    train(cfg(corpus, run), resume=True)
    a, b = (torch.load(r / "checkpoint.pt", weights_only=True) for r in (whole, run))
    assert all(torch.equal(a["model_state"][k], b["model_state"][k]) for k in a["model_state"])
    assert a["data_state"] == b["data_state"] and untimed(whole) == untimed(run)


def test_resume_refuses_other_inputs_and_other_stream_settings(corpus, tmp_path):
    run = tmp_path / "run"

    def interrupt(step, rec):
        if step == 3:
            os.kill(os.getpid(), signal.SIGINT)

    with pytest.raises(KeyboardInterrupt):
        train(cfg(corpus, run), on_step=interrupt)
    with pytest.raises(ValueError, match=r"options.*buffer_size"):
        train(cfg(corpus, run, buffer_size=50), resume=True)
    other = tmp_path / "other.jsonl"
    lines = (corpus / "docs.jsonl").read_text(encoding="utf-8").splitlines()
    other.write_text(
        "\n".join(lines[:-1] + [json.dumps({"text": "a changed last document."})]) + "\n", encoding="utf-8"
    )
    with pytest.raises(ValueError, match="trained on other data"):
        train(cfg(corpus, run, data=str(other)), resume=True)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--stream"], "pass --max-len"),
        (["--stream", "--max-len", "64"], "pass --steps N"),
        (["--stream", "--max-len", "64", "--steps", "2"], "pass --tokenizer DIR"),
        (["--max-len", "64"], "pass --stream too"),
        (["--stream", "--max-len", "64", "--steps", "2", "--padded"], "drop --padded"),
    ],
)
def test_stream_refusals_are_one_line(corpus, tmp_path, capsys, args, message):
    code = main(["train", "--data", str(corpus / "docs.jsonl"), "--out", str(tmp_path / "run"), "--quiet", *args])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and message in err and "Traceback" not in err, err
    assert not (tmp_path / "run").exists()


SCRIPT = """
import os, signal, sys
from seqpack.train import TrainConfig, train
kw = dict(data=sys.argv[1], out=sys.argv[2], stream=True, tokenizer=sys.argv[3], max_len=64, buffer_size=40,
          eval_examples=20, steps=10, batch_size=6, progress=False, threads=1, checkpoint_every=4)
cut = int(sys.argv[4])
def interrupt(step, rec):
    if step == cut:
        os.kill(os.getpid(), signal.SIGINT)
try:
    train(TrainConfig(**kw), resume=cut < 0, on_step=interrupt if cut > 0 else None)
except KeyboardInterrupt:
    pass
"""


def test_two_ranks_resume_their_streams_exactly(corpus, tmp_path):
    """torchrun, 2 gloo ranks, each reading its own share of the stream: cut at step 5 and resumed,
    the run ends where the uninterrupted one does (every rank's stream position is in the checkpoint)."""
    script = tmp_path / "run.py"
    script.write_text(textwrap.dedent(SCRIPT), encoding="utf-8")

    def torchrun(out: Path, cut: int) -> None:
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "2",
            str(script),
            str(corpus / "docs.jsonl"),
            str(out),
            str(corpus / "tok"),
            str(cut),
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=Path(__file__).parents[2])
        assert proc.returncode == 0, proc.stderr[-3000:]

    torchrun(tmp_path / "whole", 0)
    torchrun(tmp_path / "cut", 5)
    ck = torch.load(tmp_path / ".cut.partial" / "checkpoint.pt", weights_only=True)
    assert ck["state"]["step"] == 5 and [s["stream"]["shard"] for s in ck["data_state"]] == [0, 1]
    torchrun(tmp_path / "cut", -1)
    a, b = (torch.load(tmp_path / r / "checkpoint.pt", weights_only=True) for r in ("whole", "cut"))
    assert all(torch.equal(a["model_state"][k], b["model_state"][k]) for k in a["model_state"])
    assert a["data_state"] == b["data_state"] and untimed(tmp_path / "whole") == untimed(tmp_path / "cut")


def test_a_small_stream_holds_out_a_share_by_default(corpus, tmp_path, capsys):
    """60 records: the default holds out eval_fraction of them (3), not a fixed 1,000 that would
    leave nothing to train on; holding out every record is refused in one line saying what fits."""
    small = tmp_path / "small.jsonl"
    small.write_text("".join((corpus / "docs.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)[:60]))
    base = [
        "train",
        "--data",
        str(small),
        "--stream",
        "--tokenizer",
        str(corpus / "tok"),
        "--max-len",
        "64",
        "--steps",
        "2",
        "--batch-size",
        "2",
        "--quiet",
    ]
    assert main([*base, "--out", str(tmp_path / "run")]) == 0
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["data"]["eval_examples"] == 3 and config["data"]["held_out_packs"] >= 1
    capsys.readouterr()
    assert main([*base, "--out", str(tmp_path / "run2"), "--eval-examples", "60"]) == 2
    err = capsys.readouterr().err
    assert "holds out every one of its 60 examples" in err and "--eval-examples 3" in err and err.count("\n") == 1
