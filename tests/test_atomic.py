"""The one atomic-write helper: a target is complete or absent, never half-written."""

from __future__ import annotations

import pytest

from seqpack._atomic import OutputKind, atomic_directory, atomic_file, write_text_atomic

#: a kind told by a file ``made.json`` holding ``{"kind": "seqpack.test"}``
TEST = OutputKind("test output", ("made.json", "kind", "seqpack.test"))


def test_atomic_file_replaces_in_one_rename(tmp_path) -> None:
    target = tmp_path / "sub" / "state.json"
    write_text_atomic(target, "one")
    with pytest.raises(RuntimeError), atomic_file(target) as tmp:
        tmp.write_text("half", encoding="utf-8")
        raise RuntimeError("killed mid-write")
    assert target.read_text(encoding="utf-8") == "one"  # the old content survives a failed write
    assert [p.name for p in target.parent.iterdir()] == ["state.json"]  # no temp file left
    write_text_atomic(target, "two")
    assert target.read_text(encoding="utf-8") == "two"


def test_atomic_directory_is_complete_or_absent(tmp_path) -> None:
    out = tmp_path / "out"
    with pytest.raises(RuntimeError), atomic_directory(out, kind=TEST) as tmp:
        (tmp / "a").write_text("x", encoding="utf-8")
        raise RuntimeError("killed")
    assert not out.exists() and list(tmp_path.iterdir()) == []
    with atomic_directory(out, kind=TEST) as tmp:
        (tmp / "a").write_text("x", encoding="utf-8")
    assert (out / "a").read_text(encoding="utf-8") == "x"
    with pytest.raises(FileExistsError, match="--overwrite"), atomic_directory(out, kind=TEST):
        pass


def test_a_second_job_on_the_same_output_refuses(tmp_path):
    import subprocess
    import sys

    from seqpack._atomic import output_lock

    out = tmp_path / "out"
    with output_lock(out):
        code = (
            "from seqpack._atomic import OutputKind, atomic_directory\n"
            f"with atomic_directory({str(out)!r}, kind=OutputKind('t')):\n    pass\n"
        )
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        assert r.returncode != 0 and "another seqpack job is writing it" in r.stderr
        with atomic_directory(out, kind=TEST) as tmp:  # the holder itself may write (re-entrant)
            (tmp / "x").write_text("1")
    assert (out / "x").read_text() == "1"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # lock file removed


def test_atomic_files_get_the_mode_open_gives(tmp_path):
    from seqpack._atomic import FILE_MODE, atomic_file

    with atomic_file(tmp_path / "f") as tmp:
        tmp.write_text("x")
    plain = tmp_path / "plain"
    plain.write_text("x")
    assert (tmp_path / "f").stat().st_mode & 0o777 == plain.stat().st_mode & 0o777 == FILE_MODE
