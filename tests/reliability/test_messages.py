"""Bad arguments and damaged files give one clear line and exit 2 (no traceback, naming the file or
flag, with hints that name flags the command has); small Unix manners hold (``-`` is stdin, a
closed pipe is not an error, a killed job leaves no temp file)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from seqpack.cli.main import main
from tests.cli.test_cli import EOT

ROOT = Path(__file__).resolve().parents[2]


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as e:  # argparse refuses the option itself
        code = int(e.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def one_line(code: int, err: str) -> bool:
    return code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1


@pytest.fixture
def made(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Path]:
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(("the quick brown fox jumps over the lazy dog. " * 20 + EOT) * 6, encoding="utf-8")
    assert cli(capsys, "train-tokenizer", str(corpus), "--vocab-size", "270", "--out", str(tmp_path / "tok"))[0] == 0
    assert (
        cli(capsys, "tokenize", str(corpus), "--tokenizer", str(tmp_path / "tok"), "--out", str(tmp_path / "store"))[0]
        == 0
    )
    assert (
        cli(
            capsys,
            "pack",
            str(tmp_path / "store"),
            "--task",
            "clm",
            "--max-len",
            "64",
            "--tokenizer",
            str(tmp_path / "tok"),
            "--out",
            str(tmp_path / "packed"),
            "--shard-packs",
            "4",
        )[0]
        == 0
    )
    h = np.zeros(64, np.int64)
    h[[5, 20, 63]] = [9, 4, 2]
    np.save(tmp_path / "h.npy", h)
    return {
        "root": tmp_path,
        "corpus": corpus,
        "tok": tmp_path / "tok",
        "store": tmp_path / "store",
        "packed": tmp_path / "packed",
        "h": tmp_path / "h.npy",
    }


def test_numbers_past_any_machine(made: dict[str, Path], capsys) -> None:
    r = made["root"]
    cases = [
        (
            [
                "pack",
                str(made["store"]),
                "--task",
                "clm",
                "--max-len",
                str(10**20),
                "--tokenizer",
                str(made["tok"]),
                "--out",
                str(r / "o"),
            ],
            "--max-len must be at most 2,147,483,647",
        ),
        (
            [
                "tokenize",
                str(made["corpus"]),
                "--tokenizer",
                str(made["tok"]),
                "--out",
                str(r / "o"),
                "--shard-mb",
                "inf",
            ],
            "--shard-mb must be >= 0.001 and <= 1,048,576, got inf",
        ),
        (
            ["train-tokenizer", str(made["corpus"]), "--vocab-size", str(10**20), "--out", str(r / "o")],
            "--vocab-size must be at most 2,147,483,647",
        ),
    ]
    for argv, msg in cases:
        code, _, err = cli(capsys, *argv)
        assert one_line(code, err) and msg in err, (argv, err)


def test_a_full_disk_in_pack_names_the_output(made: dict[str, Path], capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    from seqpack.pipeline import stages

    def full(*a: object) -> None:
        raise OSError("2951418 requested and 716736 written")

    monkeypatch.setattr(stages, "write_parquet_groups", full)
    code, _, err = cli(
        capsys,
        "pack",
        str(made["store"]),
        "--task",
        "clm",
        "--max-len",
        "64",
        "--tokenizer",
        str(made["tok"]),
        "--out",
        str(made["root"] / "o"),
    )
    assert one_line(code, err) and "part-00000.parquet: writing failed" in err and "free space" in err


def test_a_hand_edited_manifest_or_a_corrupt_part_names_the_file(made: dict[str, Path], capsys) -> None:
    from seqpack.data import PackedDataset

    m_path = made["packed"] / "manifest.json"
    good = m_path.read_text()
    m = json.loads(good)
    m["num_packs"] += 5
    m_path.write_text(json.dumps(m))
    with pytest.raises(ValueError, match=r"manifest.json: its shards hold .* rows, not num_packs"):
        PackedDataset(made["packed"])
    m = json.loads(good)
    m["columns"]["input_ids"]["shape"] = ["x"]
    m_path.write_text(json.dumps(m))
    code, _, err = cli(
        capsys,
        "train",
        "--data",
        str(made["packed"]),
        "--out",
        str(made["root"] / "run"),
        "--steps",
        "1",
        "--batch-size",
        "2",
        "--quiet",
    )
    assert one_line(code, err) and "manifest.json: column 'input_ids'" in err
    m_path.write_text(good)
    part = made["packed"] / "data" / "part-00000.parquet"
    data = bytearray(part.read_bytes())
    data[len(data) // 3 : len(data) // 3 + 64] = bytes(64)  # a zeroed run of bytes inside the compressed pages
    part.write_bytes(bytes(data))
    code, _, err = cli(
        capsys,
        "train",
        "--data",
        str(made["packed"]),
        "--out",
        str(made["root"] / "run"),
        "--steps",
        "1",
        "--batch-size",
        "2",
        "--quiet",
    )
    assert one_line(code, err) and "part-00000.parquet" in err, err


def test_an_unknown_hf_model_type_is_short(made: dict[str, Path], capsys) -> None:
    cfg = made["root"] / "config.json"
    cfg.write_text(json.dumps({"model_type": "llamaa", "hidden_size": 32}))
    code, _, err = cli(
        capsys,
        "train",
        "--data",
        str(made["packed"]),
        "--out",
        str(made["root"] / "run"),
        "--hf-model",
        str(cfg),
        "--steps",
        "1",
        "--quiet",
    )
    assert one_line(code, err) and "no model_type 'llamaa'" in err and len(err) < 400


def test_hints_name_flags_the_command_has(made: dict[str, Path], capsys) -> None:
    bad = made["root"] / "ids.txt"
    bad.write_bytes(b"1 2 \xff")
    code, _, err = cli(capsys, "decode", str(bad), "--tokenizer", str(made["tok"]))
    assert one_line(code, err) and "--errors" not in err and "digits and whitespace" in err
    run = [
        "compare",
        "--data",
        str(made["packed"]),
        "--out",
        str(made["root"] / "cmp"),
        "--steps",
        "1",
        "--batch-size",
        "2",
        "--quiet",
    ]
    assert cli(capsys, *run)[0] == 0
    code, _, err = cli(capsys, *run)
    assert one_line(code, err) and "--overwrite" in err and "--resume" not in err


def test_small_manners(made: dict[str, Path], capsys) -> None:
    r = made["root"]
    code, _, err = cli(capsys, "stats", "--lengths", str(made["store"]), "--max-len", "64")
    assert one_line(code, err) and "a directory" in err
    code, _, err = cli(
        capsys,
        "pack",
        str(made["store"]),
        "--task",
        "clm",
        "--max-len",
        "1",
        "--tokenizer",
        str(made["tok"]),
        "--out",
        str(r / "o"),
    )
    assert one_line(code, err) and "leaves a causal LM no target" in err
    (r / "plan.json").write_text("mine")
    code, _, err = cli(capsys, "plan", "--histogram", str(made["h"]), "--max-len", "64", "--out", str(r / "plan.json"))
    assert one_line(code, err) and "pass --overwrite" in err and (r / "plan.json").read_text() == "mine"
    code, _, err = cli(
        capsys, "plan", "--histogram", str(made["h"]), "--max-len", "64", "--out", str(r / "plan.json"), "--overwrite"
    )  # not a plan seqpack wrote: kept
    assert one_line(code, err) and "not a JSON file seqpack wrote" in err and (r / "plan.json").read_text() == "mine"
    (r / "plan.json").unlink()
    for _ in range(2):  # a plan seqpack wrote is replaced
        assert (
            cli(
                capsys,
                "plan",
                "--histogram",
                str(made["h"]),
                "--max-len",
                "64",
                "--out",
                str(r / "plan.json"),
                "--overwrite",
            )[0]
            == 0
        )
    code, out, _ = cli(
        capsys, "train-tokenizer", "/proc/self/status", "--vocab-size", "260", "--out", str(r / "pt"), "--json"
    )
    assert code == 0 and json.loads(out)["input_size"] > 0  # /proc files say 0 bytes, yet hold text
    code, _, err = cli(capsys, "demo", "--corpus", str(r / "missing.txt"), "--out", str(r / "demo"))
    assert code == 2 and not (r / "demo").exists()  # no empty directory left
    mode = (made["packed"] / "data" / "part-00000.parquet").stat().st_mode & 0o777
    assert mode & 0o044 == 0o044 or os.umask(os.umask(0)) & 0o044  # readable by others, as open() makes files


def _seqpack(*argv: str, **kw: object) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), **kw.pop("env", {})}  # type: ignore[dict-item]
    return subprocess.Popen([sys.executable, "-m", "seqpack", *argv], env=env, **kw)  # type: ignore[call-overload]


def test_dash_is_stdin_and_a_closed_pipe_is_no_error(made: dict[str, Path]) -> None:
    p = _seqpack(
        "tokenize",
        "-",
        "--tokenizer",
        str(made["tok"]),
        "--out",
        str(made["root"] / "s2"),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    out, err = p.communicate(made["corpus"].read_bytes(), timeout=120)
    assert p.returncode == 0 and b"6 documents" in out, err
    hist = np.ones(64, np.int64)  # small: every algorithm's plan in a second; the pipe is what is tested
    np.save(made["root"] / "hist.npy", hist)
    p = _seqpack(
        "plan",
        "--histogram",
        str(made["root"] / "hist.npy"),
        "--max-len",
        "64",
        "--compare",
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert p.stdout is not None
    p.stdout.close()  # `| head -0`: the reader is gone before the table is written
    _, err = p.communicate(timeout=300)
    assert p.returncode == 0 and err == b"", err


def test_a_killed_train_tokenizer_on_stdin_leaves_no_spool_file(tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    p = _seqpack(
        "train-tokenizer",
        "-",
        "--vocab-size",
        "300",
        "--out",
        str(tmp_path / "t"),
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={"TMPDIR": str(tmp)},
    )
    assert p.stdin is not None
    p.stdin.write(b"some text to spool " * 50_000)
    p.stdin.flush()
    time.sleep(1.0)  # the copy to the spool file is under way (stdin is still open)
    p.send_signal(signal.SIGKILL)
    p.wait(timeout=60)
    p.stdin.close()
    assert list(tmp.iterdir()) == []


def test_an_unwritable_out_is_refused_before_training(
    made: dict[str, Path], capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    import seqpack._atomic as atomic
    import seqpack.tokenizer.train as train_mod

    ro = made["root"] / "ro"
    ro.mkdir()
    real = os.access
    monkeypatch.setattr(atomic.os, "access", lambda p, mode: False if Path(p) == ro else real(p, mode))

    def never(*a: object, **k: object) -> None:
        raise AssertionError("trained before checking --out")

    monkeypatch.setattr(train_mod, "train_bpe_inputs", never)
    code, _, err = cli(capsys, "train-tokenizer", str(made["corpus"]), "--vocab-size", "270", "--out", str(ro / "tok"))
    assert one_line(code, err) and f"cannot write in {ro}" in err and ".lock" not in err
