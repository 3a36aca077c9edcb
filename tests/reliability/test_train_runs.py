"""Training runs are written aside and renamed into place when finished, under one lock: a failed,
refused or concurrent ``train`` never changes a finished run, and never leaves one that looks complete."""

from __future__ import annotations

import errno
import subprocess
import sys
import time
from pathlib import Path

import pytest

from seqpack.cli.main import main
from seqpack.train import checkpoint as checkpoint_mod
from tests.reliability.test_outputs import tree_hash
from tests.train.conftest import build_datasets


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_datasets(tmp_path_factory.mktemp("train-data"), n_docs=80)["clm"]


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    _, err = capsys.readouterr()
    return code, err


def base(data: Path, out: Path) -> list[str]:
    return ["train", "--data", str(data), "--out", str(out), "--steps", "3", "--batch-size", "4", "--quiet"]


def fail_metrics_at(monkeypatch: pytest.MonkeyPatch, step: int, err: OSError) -> None:
    """The run's metrics log raises ``err`` when it writes step ``step`` (a disk that fills or fails)."""
    real = checkpoint_mod.MetricsLog.write

    def failing(self, record):
        if record.get("step") == step and "eval" not in record:
            raise err
        return real(self, record)

    monkeypatch.setattr(checkpoint_mod.MetricsLog, "write", failing)


def test_resume_of_a_finished_run_is_refused_and_changes_nothing(data: Path, tmp_path: Path, capsys) -> None:
    run = tmp_path / "run"
    assert cli(capsys, *base(data, run))[0] == 0
    before = tree_hash(run)
    code, err = cli(capsys, *base(data, run), "--resume")
    assert code == 2 and "is a finished run" in err and err.count("\n") == 1
    assert tree_hash(run) == before


def test_a_full_disk_during_overwrite_keeps_the_finished_run(
    data: Path, tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = tmp_path / "run"
    assert cli(capsys, *base(data, run))[0] == 0
    before = tree_hash(run)
    fail_metrics_at(monkeypatch, 2, OSError(errno.ENOSPC, "No space left on device"))
    code, err = cli(capsys, *base(data, run), "--overwrite")
    assert code == 2 and "No space left on device" in err and "Traceback" not in err and err.count("\n") == 1
    assert tree_hash(run) == before  # the old run, whole: no new metrics mixed into it
    assert not (tmp_path / ".run.lock").exists()


def test_an_interrupted_run_is_not_at_run_until_resumed(
    data: Path, tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = tmp_path / "run"
    real = checkpoint_mod.MetricsLog.write
    fail_metrics_at(monkeypatch, 3, OSError(errno.EIO, "I/O error"))
    assert cli(capsys, *base(data, run), "--checkpoint-every", "1")[0] == 2
    assert not run.exists() and (tmp_path / ".run.partial" / "checkpoint.pt").is_file()
    code, err = cli(capsys, *base(data, run))
    assert code == 2 and "an unfinished run is in" in err
    monkeypatch.setattr(checkpoint_mod.MetricsLog, "write", real)
    assert cli(capsys, *base(data, run), "--resume")[0] == 0
    assert (run / "summary.json").is_file() and not (tmp_path / ".run.partial").exists()


def test_a_second_train_to_the_same_out_is_refused(data: Path, tmp_path: Path, capsys) -> None:
    run = tmp_path / "run"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            (
                "import sys, time\n"
                "from seqpack._atomic import output_lock\n"
                f"with output_lock({str(run)!r}):\n"
                "    print('held', flush=True)\n"
                "    time.sleep(60)\n"
            ),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        t0 = time.monotonic()
        code, err = cli(capsys, *base(data, run))
        assert code == 2 and "another seqpack job is writing it now" in err and time.monotonic() - t0 < 30
        assert not run.exists()
    finally:
        holder.kill()
        holder.wait()


def test_train_refuses_an_out_over_its_data(data: Path, capsys) -> None:
    before = tree_hash(data)
    code, err = cli(capsys, *base(data, data / "run"))
    assert code == 2 and "lies inside the input" in err and tree_hash(data) == before
