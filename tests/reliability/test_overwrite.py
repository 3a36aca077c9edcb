"""``--overwrite`` replaces only what seqpack made: an existing directory is replaced only when it is
empty or a seqpack output of the same kind (its own files say so); anything else (a home directory,
the working directory, an input's parent, a folder of the user's files, a seqpack directory of
another kind) is refused in one line, ``--overwrite`` or not, and not one byte of it changes."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seqpack._atomic import OutputKind, atomic_directory, check_output_dir
from seqpack.cli.main import main
from tests.reliability.test_outputs import tree_hash
from tests.train.conftest import build_datasets


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("overwrite")
    made = build_datasets(root / "data", n_docs=40)
    corpus = root / "inputs" / "corpus.txt"
    corpus.parent.mkdir()
    corpus.write_text("the quick brown fox jumps over the lazy dog. " * 40, encoding="utf-8")
    lengths = root / "inputs" / "h.npy"
    np.save(lengths, np.array([0, 3, 5, 2] + [0] * 60, dtype=np.int64))
    return {**made, "store": made["tokenizer"].parent / "store", "corpus": corpus, "lengths": lengths, "root": root}


def home_like(parent: Path) -> Path:
    """A directory like a user's home: dotfiles, a configuration folder, notes."""
    home = parent / "home"
    (home / ".config" / "pip").mkdir(parents=True)
    (home / ".config" / "pip" / "pip.conf").write_text("[global]\n")
    (home / ".bashrc").write_text("export PATH=$HOME/bin:$PATH\n")
    (home / "notes").mkdir()
    (home / "notes" / "todo.txt").write_text("keep me\n")
    return home


def unrelated(parent: Path) -> Path:
    """A folder of the user's own files, with names a seqpack output also uses."""
    d = parent / "mine"
    (d / "data").mkdir(parents=True)
    (d / "data" / "part-00000.parquet").write_bytes(b"not ours")
    (d / "meta.json").write_text('{"owner": "me"}')
    return d


#: each command, writing its output to ``out`` with --overwrite (a file output: ``out/.bashrc``)
COMMANDS: dict[str, Callable[[dict[str, Path], Path], list[str]]] = {
    "pack": lambda m, out: [
        "pack",
        str(m["store"]),
        "--task",
        "clm",
        "--max-len",
        "64",
        "--tokenizer",
        str(m["tokenizer"]),
        "--out",
        str(out),
        "--overwrite",
    ],
    "tokenize": lambda m, out: [
        "tokenize",
        str(m["corpus"]),
        "--tokenizer",
        str(m["tokenizer"]),
        "--out",
        str(out),
        "--overwrite",
    ],
    "train-tokenizer": lambda m, out: [
        "train-tokenizer",
        str(m["corpus"]),
        "--vocab-size",
        "270",
        "--workers",
        "1",
        "--out",
        str(out),
        "--overwrite",
    ],
    "train": lambda m, out: [
        "train",
        "--data",
        str(m["clm"]),
        "--size",
        "tiny",
        "--steps",
        "1",
        "--batch-size",
        "2",
        "--quiet",
        "--out",
        str(out),
        "--overwrite",
    ],
    "compare": lambda m, out: [
        "compare",
        "--data",
        str(m["clm"]),
        "--size",
        "tiny",
        "--steps",
        "1",
        "--batch-size",
        "2",
        "--out",
        str(out),
        "--overwrite",
    ],
    "demo": lambda m, out: ["demo", "--corpus", str(m["corpus"]), "--vocab-size", "300", "--out", str(out)],
    "plan --out": lambda m, out: [
        "plan",
        "--histogram",
        str(m["lengths"]),
        "--max-len",
        "64",
        "--out",
        str(out / ".bashrc"),
        "--overwrite",
    ],
    "plan --plot": lambda m, out: [
        "plan",
        "--histogram",
        str(m["lengths"]),
        "--max-len",
        "64",
        "--plot",
        str(out / ".bashrc"),
        "--overwrite",
    ],
    "bench --calibrate": lambda m, out: [
        "bench",
        "--calibrate",
        "--lengths",
        str(m["lengths"]),
        "--max-len",
        "64",
        "--out",
        str(out / ".bashrc"),
        "--overwrite",
    ],
}

#: the input each command reads whose parent directory a typo may name
READS = {
    "pack": "store",
    "tokenize": "corpus",
    "train-tokenizer": "corpus",
    "train": "clm",
    "compare": "clm",
    "demo": "corpus",
    "plan --out": "lengths",
    "plan --plot": "lengths",
    "bench --calibrate": "lengths",
}

#: where a typo points --out: each made in a fresh parent (or chosen among the inputs)
TARGETS: dict[str, Callable[[Path, dict[str, Path], str], Path]] = {
    "a home directory": lambda parent, m, command: home_like(parent),
    "a folder of unrelated files": lambda parent, m, command: unrelated(parent),
    "an input's parent": lambda parent, m, command: m[READS[command]].parent,
    "the working directory": lambda parent, m, command: home_like(parent),
}


@pytest.mark.parametrize("target", list(TARGETS))
@pytest.mark.parametrize("command", list(COMMANDS))
def test_overwrite_never_deletes_what_seqpack_did_not_make(
    command: str,
    target: str,
    made: dict[str, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    watched = TARGETS[target](tmp_path, made, command)
    out = watched
    if target == "the working directory":
        monkeypatch.chdir(watched)
        out = Path(".")
    if not (watched / ".bashrc").exists():  # what the file outputs would replace
        (watched / ".bashrc").write_text("mine\n")
    before = tree_hash(watched, made["root"])
    code = main(COMMANDS[command](made, out))
    _, err = capsys.readouterr()
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert tree_hash(watched, made["root"]) == before
    assert [p.name for p in watched.parent.iterdir() if p.name.startswith(f".{watched.name}.")] == []


@pytest.mark.parametrize(
    "make, refused",
    [
        (lambda m: m["tokenizer"], "holds a seqpack-tokenizer, not a packed dataset"),
        (lambda m: m["store"], "holds a seqpack.token_store, not a packed dataset"),
    ],
)
def test_a_seqpack_directory_of_another_kind_is_not_replaced(
    make: Callable[[dict[str, Path]], Path],
    refused: str,
    made: dict[str, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    other = tmp_path / "other"
    import shutil

    shutil.copytree(make(made), other)
    before = tree_hash(other)
    code = main(COMMANDS["pack"](made, other))
    _, err = capsys.readouterr()
    assert code == 2 and refused in err and tree_hash(other) == before


def test_an_output_of_the_same_kind_is_replaced_with_overwrite_only(
    made: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "packed"
    argv = COMMANDS["pack"](made, out)
    assert main(argv) == 0
    code = main(argv[:-1])  # without --overwrite
    _, err = capsys.readouterr()
    assert code == 2 and "holds a packed dataset; pass --overwrite to replace it" in err
    assert main(argv) == 0 and (out / "manifest.json").is_file()
    plan = tmp_path / "plan.json"
    plot = tmp_path / "plan.png"
    for _ in range(2):  # a plan and a plot seqpack wrote are replaced
        assert (
            main(
                [
                    "plan",
                    "--histogram",
                    str(made["lengths"]),
                    "--max-len",
                    "64",
                    "--out",
                    str(plan),
                    "--plot",
                    str(plot),
                    "--overwrite",
                ]
            )
            == 0
        )
    capsys.readouterr()


def test_a_run_directory_is_replaced_only_when_it_is_a_run(
    made: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    assert main(COMMANDS["train"](made, run)) == 0
    assert main(COMMANDS["train"](made, run)) == 0  # a run: replaced
    capsys.readouterr()
    partial = tmp_path / ".other.partial"  # a folder of that name the user made: a new run would empty it
    partial.mkdir()
    (partial / "keep.txt").write_text("x")
    code = main(COMMANDS["train"](made, tmp_path / "other"))
    _, err = capsys.readouterr()
    assert code == 2 and "did not make" in err and (partial / "keep.txt").read_text() == "x"


def test_a_work_directory_seqpack_did_not_make_is_not_emptied(
    made: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    work = tmp_path / ".store.partial"
    work.mkdir()
    (work / "keep.txt").write_text("x")
    code = main(COMMANDS["tokenize"](made, tmp_path / "store"))
    _, err = capsys.readouterr()
    assert code == 2 and "did not make" in err and (work / "keep.txt").read_text() == "x"


# ---- the rule itself, over any directory's contents -------------------------------------------

KIND = OutputKind("test output", ("made.json", "kind", "seqpack.test"))
NAMES = st.sampled_from([".bashrc", "notes", "data", "manifest.json", "meta.json", "made.json", "x.txt", ".git"])
TREES = st.recursive(
    st.binary(max_size=8),
    lambda children: st.dictionaries(NAMES, children, max_size=4),
    max_leaves=8,
).filter(lambda t: isinstance(t, dict))


def write_tree(root: Path, tree: dict[str, object]) -> None:
    root.mkdir(parents=True, exist_ok=True)
    for name, v in tree.items():
        if isinstance(v, dict):
            write_tree(root / name, v)
        else:
            assert isinstance(v, bytes)
            (root / name).write_bytes(v)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tree=TREES, ours=st.booleans(), overwrite=st.booleans())
def test_a_directory_is_replaced_only_when_empty_or_of_its_kind(
    tree: dict[str, object], ours: bool, overwrite: bool, tmp_path_factory: pytest.TempPathFactory
) -> None:
    parent = tmp_path_factory.mktemp("tree")
    out = parent / "out"
    tree = dict(tree)
    if ours:
        tree["made.json"] = b'{"kind": "seqpack.test"}'
    elif tree.get("made.json") == b'{"kind": "seqpack.test"}':
        tree["made.json"] = b""
    write_tree(out, tree)
    before = tree_hash(out)
    allowed = not tree or (ours and overwrite)
    try:
        with atomic_directory(out, kind=KIND, overwrite=overwrite) as tmp:
            (tmp / "new.txt").write_text("new")
    except FileExistsError as e:
        assert not allowed, e
        assert tree_hash(out) == before  # refused: not a byte changed
        assert ("did not make" in str(e)) == (not ours)
        with pytest.raises(FileExistsError):
            check_output_dir(out, overwrite=overwrite, kind=KIND)
    else:
        assert allowed
        assert sorted(os.listdir(out)) == ["new.txt"]
    assert [p.name for p in parent.iterdir()] == ["out"]  # no temp, old or lock file left
