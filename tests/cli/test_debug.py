"""User errors are one line; a bug shows its traceback and asks for a report; ``--debug`` (or
``SEQPACK_DEBUG=1``) shows a user error's traceback too, with the exceptions it was raised from."""

from __future__ import annotations

from pathlib import Path

import pytest

from seqpack.cli.main import DEBUG_ENV, main


def _not_parquet(tmp_path: Path) -> Path:
    p = tmp_path / "bad.parquet"
    p.write_bytes(b"not a parquet file")
    return p


def test_a_user_error_is_one_line_without_debug(capsys, tmp_path, monkeypatch) -> None:
    monkeypatch.delenv(DEBUG_ENV, raising=False)
    code = main(["stats", "--lengths", str(tmp_path / "missing.npy"), "--max-len", "8"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and err.startswith("seqpack: error: ")
    assert "Traceback" not in err


@pytest.mark.parametrize("how", ["flag-before", "flag-after", "env"])
def test_debug_shows_the_traceback_and_its_chain(capsys, tmp_path, monkeypatch, how) -> None:
    monkeypatch.delenv(DEBUG_ENV, raising=False)
    pytest.importorskip("pyarrow")
    from seqpack.corpus import iter_records

    bad = _not_parquet(tmp_path)
    with pytest.raises(ValueError) as caught:  # the library keeps pyarrow's error as the cause
        list(iter_records(bad))
    assert caught.value.__cause__ is not None
    argv = ["tokenize", str(bad), "--tokenizer", str(tmp_path / "tok"), "--out", str(tmp_path / "out")]
    if how == "env":
        monkeypatch.setenv(DEBUG_ENV, "1")
    else:
        argv = ["--debug", *argv] if how == "flag-before" else [*argv, "--debug"]
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" in err
    assert err.rstrip().splitlines()[-1].startswith("seqpack: error: ")


def test_an_internal_error_prints_its_traceback_and_asks_for_a_report(capsys, tmp_path, monkeypatch) -> None:
    import seqpack.cli.paths

    def broken(args):  # a step with a bug in it, run for every command before its handler
        return {}["missing"]

    monkeypatch.setattr(seqpack.cli.paths, "check_paths", broken)
    code = main(["stats", "--lengths", str(tmp_path / "x.npy"), "--max-len", "8"])
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" in err and "KeyError" in err
    assert "this is a bug in seqpack" in err.splitlines()[-1]


@pytest.mark.parametrize(
    ("raised", "code"),
    [
        (ValueError("bad index 3"), 1),  # a ValueError of seqpack's own code or a library's: a bug
        (TypeError("unsupported operand"), 1),
        ("user", 2),  # seqpack.errors.UserError: one line, exit 2
        (FileNotFoundError(2, "No such file or directory", "x.npy"), 2),  # the system's: one line too
    ],
)
def test_errors_by_kind(capsys, tmp_path, monkeypatch, raised, code) -> None:
    """Only what a user can fix is one line: a `UserError` or the system's `OSError`; a plain
    ValueError or TypeError is a bug and shows its traceback."""
    import seqpack.cli.paths
    from seqpack.errors import UserError

    monkeypatch.delenv(DEBUG_ENV, raising=False)
    error = UserError("3 sequences exceed max_len=8; pass --overflow truncate") if raised == "user" else raised

    def failing(args):
        raise error

    monkeypatch.setattr(seqpack.cli.paths, "check_paths", failing)
    got = main(["stats", "--lengths", str(tmp_path / "x.npy"), "--max-len", "8"])
    err = capsys.readouterr().err
    assert got == code, err
    if code == 2:
        assert err.count("\n") == 1 and err.startswith("seqpack: error: ") and "Traceback" not in err
    else:
        assert "Traceback" in err and "this is a bug in seqpack" in err.splitlines()[-1]


def test_debug_off_when_the_variable_says_0(monkeypatch) -> None:
    from seqpack.cli.main import debugging

    monkeypatch.setenv(DEBUG_ENV, "0")
    assert not debugging(["stats"]) and debugging(["stats", "--debug"])
    monkeypatch.setenv(DEBUG_ENV, "1")
    assert debugging(["stats"])
