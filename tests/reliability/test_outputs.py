"""No command changes its inputs: an ``--out`` that is, contains or lies inside an input (or holds the
working directory) is refused in one line, exit 2, before any work; the inputs' bytes are unchanged."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np
import pytest

from tests.cli.test_cli import EOT, run


def tree_hash(*paths: Path) -> str:
    """SHA-256 over every file's relative name and bytes (what must not change)."""
    h = hashlib.sha256()
    for root in paths:
        files = sorted(root.rglob("*")) if root.is_dir() else [root]
        for f in files:
            if f.is_file():
                h.update(str(f.relative_to(root.parent)).encode() + b"\0" + f.read_bytes())
    return h.hexdigest()


@pytest.fixture
def made(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> dict[str, Path]:
    d = tmp_path / "dir"
    d.mkdir()
    corpus = d / "corpus.txt"
    corpus.write_text(("the quick brown fox jumps over the lazy dog. " * 20 + EOT) * 6, encoding="utf-8")
    tok, store = tmp_path / "tok", tmp_path / "store"
    assert (
        run(capsys, "train-tokenizer", str(corpus), "--vocab-size", "270", "--out", str(tok), "--workers", "1")[0] == 0
    )
    assert run(capsys, "tokenize", str(corpus), "--tokenizer", str(tok), "--out", str(store))[0] == 0
    lengths = d / "h.npy"
    np.save(lengths, np.array([0, 3, 5, 2] + [0] * 61, dtype=np.int64))  # a histogram of lengths up to 64
    return {"dir": d, "corpus": corpus, "tok": tok, "store": store, "lengths": lengths}


CASES = {
    "pack onto its store": lambda m: [
        "pack",
        str(m["store"]),
        "--task",
        "clm",
        "--max-len",
        "64",
        "--tokenizer",
        str(m["tok"]),
        "--out",
        str(m["store"]),
        "--overwrite",
    ],
    "pack inside its store": lambda m: [
        "pack",
        str(m["store"]),
        "--task",
        "clm",
        "--max-len",
        "64",
        "--tokenizer",
        str(m["tok"]),
        "--out",
        str(m["store"] / "packed"),
    ],
    "pack onto its tokenizer": lambda m: [
        "pack",
        str(m["store"]),
        "--task",
        "clm",
        "--max-len",
        "64",
        "--tokenizer",
        str(m["tok"]),
        "--out",
        str(m["tok"]),
        "--overwrite",
    ],
    "tokenize into its corpus's directory": lambda m: [
        "tokenize",
        str(m["corpus"]),
        "--tokenizer",
        str(m["tok"]),
        "--out",
        str(m["dir"]),
        "--overwrite",
    ],
    "tokenize onto its tokenizer": lambda m: [
        "tokenize",
        str(m["corpus"]),
        "--tokenizer",
        str(m["tok"]),
        "--out",
        str(m["tok"]),
        "--overwrite",
    ],
    "train-tokenizer into its corpus's directory": lambda m: [
        "train-tokenizer",
        str(m["corpus"]),
        "--vocab-size",
        "270",
        "--out",
        str(m["dir"]),
        "--overwrite",
    ],
    "train-tokenizer onto its corpus": lambda m: [
        "train-tokenizer",
        str(m["corpus"]),
        "--vocab-size",
        "270",
        "--out",
        str(m["corpus"]),
        "--overwrite",
    ],
    "bench --calibrate onto its lengths": lambda m: [
        "bench",
        "--calibrate",
        "--lengths",
        str(m["lengths"]),
        "--max-len",
        "64",
        "--out",
        str(m["lengths"]),
        "--overwrite",
    ],
    "plan onto its histogram": lambda m: [
        "plan",
        "--histogram",
        str(m["lengths"]),
        "--max-len",
        "64",
        "--out",
        str(m["lengths"]),
        "--overwrite",
    ],
    "plan's plot onto its histogram": lambda m: [
        "plan",
        "--histogram",
        str(m["lengths"]),
        "--max-len",
        "64",
        "--plot",
        str(m["lengths"]),
        "--overwrite",
    ],
    "train onto its data": lambda m: ["train", "--data", str(m["store"]), "--out", str(m["store"]), "--overwrite"],
    "train inside its tokenizer": lambda m: [
        "train",
        "--data",
        str(m["corpus"]),
        "--stream",
        "--tokenizer",
        str(m["tok"]),
        "--max-len",
        "64",
        "--steps",
        "1",
        "--out",
        str(m["tok"] / "run"),
    ],
    "compare onto its data": lambda m: ["compare", "--data", str(m["store"]), "--out", str(m["store"] / "cmp")],
    "demo into its corpus's directory": lambda m: ["demo", "--corpus", str(m["corpus"]), "--out", str(m["dir"])],
}


@pytest.mark.parametrize("case", list(CASES))
def test_an_output_over_an_input_is_refused_and_the_inputs_stay(
    case: str,
    made: dict[str, Path],
    capsys: pytest.CaptureFixture[str],
) -> None:
    before = tree_hash(made["dir"], made["tok"], made["store"])
    code, _, err = run(capsys, *CASES[case](made))
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert "the input" in err and "pick an output outside every input" in err
    assert tree_hash(made["dir"], made["tok"], made["store"]) == before
    leftovers = [p.name for p in made["dir"].parent.iterdir() if p.name.startswith(".")]
    assert leftovers == []  # no .partial, .lock, .tmp-* or .old-* left anywhere


def test_out_dot_is_refused(
    made: dict[str, Path], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    work = made["dir"].parent / "work"
    work.mkdir()
    (work / "keep.txt").write_text("mine")
    monkeypatch.chdir(work)
    code, _, err = run(
        capsys, "tokenize", str(made["corpus"]), "--tokenizer", str(made["tok"]), "--out", ".", "--overwrite"
    )
    assert code == 2 and "holds the working directory" in err
    assert (
        sorted(os.listdir(work)) == ["keep.txt"]
        and sorted(p.name for p in work.parent.iterdir() if p.name.startswith(".")) == []
    )


def test_a_link_to_an_input_is_the_input(made: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    link = made["dir"].parent / "alias"
    link.symlink_to(made["store"], target_is_directory=True)
    before = tree_hash(made["store"])
    code, _, err = run(
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
        str(link),
        "--overwrite",
    )
    assert code == 2 and "is the input" in err and tree_hash(made["store"]) == before


def test_two_outputs_on_one_path_are_refused(made: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    out = made["dir"].parent / "plan.json"
    code, _, err = run(
        capsys, "plan", "--histogram", str(made["lengths"]), "--max-len", "64", "--out", str(out), "--plot", str(out)
    )
    assert code == 2 and "--plot" in err and "is also --out" in err and not out.exists()


def test_every_command_declares_what_it_writes_and_reads() -> None:
    """The one guard sees every output: each option a command writes to (``--out``, ``--plot``) is
    declared, and every declared name is one of the command's options."""
    import argparse

    from seqpack.cli.main import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, p in sub.choices.items():
        dests = {a.dest for a in p._actions}
        d = p._defaults
        declared = set(d.get("paths_file", ())) | set(d.get("paths_dir", ()))
        writes = {a.dest for a in p._actions if {"--out", "--plot"} & set(a.option_strings)}
        assert writes <= declared, f"{name} writes {writes - declared} outside the guard"
        assert declared | set(d.get("paths_read", ())) <= dests, f"{name} declares options it does not have"
