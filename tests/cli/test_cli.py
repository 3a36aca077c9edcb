from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from seqpack.cli.main import main

EOT = "<|endoftext|>"


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    p = tmp_path / "corpus.txt"
    p.write_text(("the quick brown fox jumps over the lazy dog. " * 30 + EOT) * 5, encoding="utf-8")
    return p


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_train_encode_decode(capsys, tmp_path, corpus):
    code, out, _ = run(
        capsys,
        "train-tokenizer",
        str(corpus),
        "--vocab-size",
        "280",
        "--out",
        str(tmp_path / "tok"),
        "--json",
        "--workers",
        "1",
    )
    assert code == 0
    summary = json.loads(out)
    for key in ("vocab_size", "num_merges", "seconds", "pretokenize_seconds", "merge_seconds"):
        assert key in summary
    assert summary["vocab_size"] == 280 and summary["num_merges"] == 23
    text = tmp_path / "in.txt"
    text.write_text("the lazy fox\nsleeps" + EOT, encoding="utf-8")
    code, ids, _ = run(capsys, "encode", "--tokenizer", str(tmp_path / "tok"), str(text))
    assert code == 0
    (tmp_path / "ids.txt").write_text(ids)
    code, back, _ = run(capsys, "decode", "--tokenizer", str(tmp_path / "tok"), str(tmp_path / "ids.txt"))
    assert code == 0 and back == text.read_text(encoding="utf-8")


def test_train_on_jsonl_and_human_output(capsys, tmp_path):
    p = tmp_path / "c.jsonl"
    p.write_text("\n".join(json.dumps({"body": "hello hello world"}) for _ in range(20)) + "\n")
    code, out, _ = run(
        capsys,
        "train-tokenizer",
        str(p),
        "--text-field",
        "body",
        "--vocab-size",
        "262",
        "--out",
        str(tmp_path / "t"),
        "--special-token",
        "<s>",
    )
    assert code == 0 and "trained 262 tokens" in out
    assert json.loads((tmp_path / "t" / "meta.json").read_text())["special_tokens"] == ["<s>"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["train-tokenizer", "{tmp}/missing.txt", "--vocab-size", "300", "--out", "{tmp}/o"],
            "missing.txt: no such file",
        ),
        (["train-tokenizer", "{corpus}", "--vocab-size", "200", "--out", "{tmp}/o"], "the minimum is 257"),
        (
            ["train-tokenizer", "{bad}", "--vocab-size", "300", "--out", "{tmp}/o", "--errors", "strict"],
            "invalid UTF-8 at byte offset 3",
        ),
        (
            ["tokenize", "{bad}", "--tokenizer", "{tok}", "--out", "{tmp}/s", "--errors", "strict"],
            "invalid UTF-8 at byte offset 3",
        ),
        (["train-tokenizer", "{empty}", "--vocab-size", "300", "--out", "{tmp}/o"], "corpus is empty"),
        (["train-tokenizer", "{corpus}", "--vocab-size", "300", "--out", "{full}"], "holds files seqpack did not make"),
        (["encode", "--tokenizer", "{tmp}/nope", "{corpus}"], "no such tokenizer directory"),
        (["decode", "--tokenizer", "{tok}", "{notids}"], "item 2 is 'x', expected an integer"),
        (["decode", "--tokenizer", "{tok}", "{bigid}"], "unknown token id 99999"),
        (["train-tokenizer", "--vocab-size", "x", "--out", "o"], "--vocab-size must be an integer, got 'x'"),
    ],
)
def test_bad_input_one_line_exit_2(capsys, tmp_path, corpus, argv, message):
    (tmp_path / "bad.txt").write_bytes(b"abc\xffdef")
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "f").write_text("x")
    (tmp_path / "notids.txt").write_text("1 x 3")
    (tmp_path / "bigid.txt").write_text("1 99999")
    from seqpack.tokenizer import Tokenizer

    Tokenizer({i: bytes([i]) for i in range(256)}, []).save(tmp_path / "tok")
    fill = {
        "tmp": str(tmp_path),
        "corpus": str(corpus),
        "bad": str(tmp_path / "bad.txt"),
        "empty": str(tmp_path / "empty.txt"),
        "full": str(tmp_path / "full"),
        "tok": str(tmp_path / "tok"),
        "notids": str(tmp_path / "notids.txt"),
        "bigid": str(tmp_path / "bigid.txt"),
    }
    args = [a.format(**fill) for a in argv]
    try:
        code = main(args)
    except SystemExit as e:  # argparse
        code = e.code
    _, err = capsys.readouterr()
    assert code == 2
    assert message in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_errors_replace_goes_on(capsys, tmp_path):
    p = tmp_path / "bad.txt"
    p.write_bytes(b"abc\xffdef abc abc")
    code, _, _ = run(
        capsys,
        "train-tokenizer",
        str(p),
        "--vocab-size",
        "258",
        "--out",
        str(tmp_path / "o"),
        "--errors",
        "replace",
        "--json",
    )
    assert code == 0


def test_unreachable_vocab_warns(capsys, tmp_path):
    p = tmp_path / "t.txt"
    p.write_text("ab ab")
    code, out, err = run(
        capsys, "train-tokenizer", str(p), "--vocab-size", "400", "--out", str(tmp_path / "o"), "--json"
    )
    assert code == 0 and "seqpack: warning:" in err and json.loads(out)["stopped_early"] is True


def test_real_process_no_traceback(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "seqpack", "encode", "--tokenizer", str(tmp_path / "none")],
        capture_output=True,
        text=True,
        input="",
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr.startswith("seqpack: error:") and "Traceback" not in proc.stderr


def test_encode_stdin(tmp_path, monkeypatch, capsys):
    import io

    from seqpack.tokenizer import Tokenizer

    Tokenizer({i: bytes([i]) for i in range(256)}, []).save(tmp_path / "tok")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"hi")))
    code, out, _ = run(capsys, "encode", "--tokenizer", str(tmp_path / "tok"))
    assert code == 0 and out == "104 105\n"


def test_demo_on_a_small_corpus(capsys, tmp_path, corpus):
    # one thread: beside a second test worker, two threads oversubscribe two cores (3x slower)
    argv = [
        "demo",
        "--corpus",
        str(corpus),
        "--out",
        str(tmp_path / "d"),
        "--vocab-size",
        "300",
        "--workers",
        "1",
        "--budget",
        "0.005",
        "--threads",
        "1",
        "--json",
    ]
    code, out, err = run(capsys, *argv)
    assert code == 0, err
    s = json.loads(out)
    assert s["fast_path_exact_on_sample"] and s["vocab_size"] <= 300
    for task in ("clm", "mlm"):
        assert s[task]["packs"] >= 1 and 0 < s[task]["efficiency"] <= 1
        assert (tmp_path / "d" / f"packed_{task}" / "manifest.json").is_file()
        tr = s[task]["training"]
        assert tr["sequences"]["padded"] == tr["sequences"]["packed"] > 0  # matched by packs: the same sequences
        # the same steps on the same sequences: eval losses agree to float rounding (fp32, a few steps)
        assert abs(tr["relative_loss_gap"]) <= 1e-4 and tr["pairing"] == "packs"
        assert (
            tr["realised_speedup"] == tr["interleaved"]["speedup"] > 0
            and len(tr["interleaved"]["speedup_per_round"]) == 1
        )
    # Table 1 on the paper's lengths: the run's pack counts beside the paper's (NNLSHP left out at this budget)
    wiki = {(r["algorithm"], r["depth"]): r["packs"] for r in s["table1"]["wikipedia"]}
    assert wiki[("spfhp", 2)] == 10_101_683 and wiki[("spfhp", 3)] == 9_094_695 and ("nnlshp", 3) not in wiki
    assert s["regime"]["packing_factor"] > 1.9 and s["regime"]["realized_speedup"] > 0
    ft = s["finetune"]
    assert (
        len(ft["classes"]) == 8
        and ft["packing_factor"] > 1
        and abs(ft["accuracy"]["packed"] - ft["accuracy"]["padded"]) <= 0.01
    )
    assert set(s["stage_seconds"]) >= {
        "table 1",
        "paper regime",
        "fine-tune",
        "convergence mlm",
        "convergence clm",
        "report",
    }
    for png in ("wiki_lengths", "cls_loss", "mlm_fill", "clm_loss", "throughput", "split"):
        assert (tmp_path / "d" / f"{png}.png").is_file(), png
    from seqpack.experiments.screenshot import missing_images

    html = tmp_path / "d" / "report.html"
    assert missing_images(html) == [] and "What this run shows" in html.read_text()
    # a second run reuses every finished stage; --fresh re-runs them
    code, out, err = run(capsys, *argv[:-1])
    assert code == 0 and out.count(": cached (") == 10 and "What the run shows" in out
    assert "(10 stages reused)" in out and "n/a: reused; --fresh to time it" in out  # no time claim for it
    code, out, err = run(capsys, *argv[:-1], "--fresh")
    assert code == 0 and ": cached (" not in out and "stages reused" not in out


def test_train_tokenizer_reads_a_pipe_and_a_fifo_like_a_file(tmp_path, corpus):
    """A stream has no size to plan chunks from; it trains exactly like the file it carries."""
    import os
    import threading

    def trained(source: str, out: str, **kw) -> str:
        cmd = [sys.executable, "-m", "seqpack.cli.main", "train-tokenizer", source, "--vocab-size", "300", "--out", out]
        r = subprocess.run(cmd, capture_output=True, cwd=tmp_path, **kw)
        assert r.returncode == 0, r.stderr.decode()
        return (tmp_path / out / "merges.txt").read_text(encoding="utf-8")

    want = trained(str(corpus), "file")
    with open(corpus, "rb") as f:
        assert trained("/dev/stdin", "pipe", stdin=f) == want
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: fifo.write_bytes(Path(corpus).read_bytes()))
    writer.start()
    assert trained(str(fifo), "from-fifo") == want
    writer.join()


def test_a_folder_is_read_file_by_file(capsys, tmp_path):
    """``train-tokenizer`` and ``tokenize`` take a folder: its text, JSON-lines and Parquet files in
    sorted path order (hidden files and other suffixes skipped), as if each were named."""
    folder = tmp_path / "corpus"
    (folder / "sub").mkdir(parents=True)
    (folder / "b.txt").write_text("second<|endoftext|>third", encoding="utf-8")
    (folder / "a.jsonl").write_text(json.dumps({"text": "first"}) + "\n", encoding="utf-8")
    (folder / "sub" / "c.md").write_text("fourth", encoding="utf-8")
    (folder / ".hidden.txt").write_text("never", encoding="utf-8")
    (folder / "notes.pdf").write_bytes(b"%PDF never")
    code, _, _ = run(capsys, "train-tokenizer", str(folder), "--vocab-size", "270", "--out", str(tmp_path / "tok"))
    assert code == 0
    code, _, _ = run(
        capsys, "tokenize", str(folder), "--tokenizer", str(tmp_path / "tok"), "--out", str(tmp_path / "s")
    )
    assert code == 0
    from seqpack.store import open_store
    from seqpack.tokenizer import Tokenizer

    tok, store = Tokenizer.load(tmp_path / "tok"), open_store(tmp_path / "s")
    assert [tok.decode(store[i].tolist()) for i in range(len(store))] == ["first", "second", "third", "fourth"]
    (tmp_path / "empty").mkdir()
    code, _, err = run(
        capsys, "tokenize", str(tmp_path / "empty"), "--tokenizer", str(tmp_path / "tok"), "--out", str(tmp_path / "s2")
    )
    assert code == 2 and "no input files in it" in err and not (tmp_path / "s2").exists()
    code, out, _ = run(
        capsys,
        "tokenize",
        str(folder),
        "--glob",
        "*.txt",
        "--tokenizer",
        str(tmp_path / "tok"),
        "--out",
        str(tmp_path / "s3"),
    )  # a pattern replaces the suffixes: .hidden.txt stays hidden
    assert code == 0 and "(1 file)" in out
    assert [tok.decode(d.tolist()) for d in open_store(tmp_path / "s3")] == ["second", "third"]
    from seqpack.corpus import read_documents

    assert list(read_documents([folder])) == ["first", "second", "third", "fourth"]  # the Python reader too


@pytest.mark.parametrize(
    "missing,argv,extra",
    [
        ("torch", ["demo", "--out", "{tmp}/demo"], "seqpack[torch]"),
        ("matplotlib", ["demo", "--out", "{tmp}/demo"], "seqpack[report]"),
        (
            "ray",
            ["tokenize", "{corpus}", "--tokenizer", "{tmp}/tok", "--out", "{tmp}/demo", "--engine", "ray"],
            "seqpack[ray]",
        ),
        (
            "matplotlib",
            ["plan", "--histogram", "wikipedia", "--max-len", "512", "--plot", "{tmp}/demo.png"],
            "seqpack[report]",
        ),
    ],
)
def test_a_missing_extra_is_named_before_any_work(capsys, tmp_path, corpus, monkeypatch, missing, argv, extra):
    """A command that needs an optional package says which extra installs it before its first stage
    (the demo used to run its data stages for minutes first), and leaves nothing behind."""
    import importlib.util

    code, _, _ = run(capsys, "train-tokenizer", str(corpus), "--vocab-size", "300", "--out", str(tmp_path / "tok"))
    assert code == 0
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == missing else real(name, *a))
    argv = [a.format(tmp=tmp_path, corpus=corpus) for a in argv]
    code, _out, err = run(capsys, *argv)
    assert code == 2 and extra in err and len(err.strip().splitlines()) == 1, err
    assert not any(p.name.startswith("demo") for p in tmp_path.iterdir())


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_folder_with_latin1_files_gets_through_and_says_so(capsys, tmp_path, workers):
    """Real folders of text hold a few Latin-1 files: by default both commands replace each invalid
    sequence with U+FFFD (Python's errors="replace", the same text) and say how many and where in one
    line; --errors strict refuses the file."""
    d = tmp_path / "docs"
    d.mkdir()
    (d / "a.md").write_text("plain readme text " * 40, encoding="utf-8")
    (d / "b.txt").write_bytes(
        "caf\u00e9 na\u00efve r\u00e9sum\u00e9 ".encode("latin-1") * 3
    )  # 12 invalid bytes (é ï é é, three times)
    code, _, err = run(
        capsys, "train-tokenizer", str(d), "--vocab-size", "270", "--out", str(tmp_path / "tok"), "--workers", workers
    )
    assert code == 0
    assert err.count("\n") == 1 and "replaced 12 invalid UTF-8 sequence(s) with U+FFFD in 1 file(s)" in err
    assert "b.txt: 12 from byte 3" in err and "--errors strict" in err
    code, _, err = run(
        capsys, "tokenize", str(d), "--tokenizer", str(tmp_path / "tok"), "--out", str(tmp_path / "store")
    )
    assert code == 0 and "replaced 12 invalid UTF-8 sequence(s)" in err and "b.txt: 12 from byte 3" in err
    code, _, err = run(
        capsys,
        "tokenize",
        str(d),
        "--tokenizer",
        str(tmp_path / "tok"),
        "--out",
        str(tmp_path / "s2"),
        "--errors",
        "strict",
    )
    assert code == 2 and "b.txt: invalid UTF-8 at byte offset 3" in err
