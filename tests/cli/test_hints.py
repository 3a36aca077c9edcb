"""Every flag an error tells the user to pass exists: in the command that printed it (the scenarios
below), and, for every hint in the source, in some command (a hint naming a flag no command has, like
``stats --overflow``, fails here)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from seqpack.cli.main import COMMANDS, build_parser
from tests.cli.test_cli import run

ROOT = Path(__file__).resolve().parents[2]
FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)")
HINT = re.compile(r"[Pp]ass (--[a-z][a-z0-9-]*)")


def _options(name: str) -> set[str]:
    parser = build_parser(name)._subparsers._group_actions[0].choices[name]  # type: ignore[union-attr,index]  # argparse's private parts
    return {s for a in parser._actions for s in a.option_strings}


def test_every_hint_in_the_source_names_a_real_flag():
    pytest.importorskip("torch")  # train's and bench's options are built with torch
    every = set().union(*(_options(n) for n in COMMANDS))
    hints = {
        m.group(1): str(p.relative_to(ROOT))
        for p in (ROOT / "src" / "seqpack").rglob("*.py")
        for m in HINT.finditer(p.read_text(encoding="utf-8"))
    }
    assert len(hints) >= 10
    unknown = {flag: where for flag, where in hints.items() if flag not in every}
    assert not unknown, f"hints naming flags no command has: {unknown}"


@pytest.fixture
def files(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("one two three<|endoftext|>" + "four five six seven " * 40, encoding="utf-8")
    np.save(tmp_path / "lengths.npy", np.array([3, 70]))
    (tmp_path / "bad.txt").write_bytes(b"ok \xff bad")
    (tmp_path / "cls.jsonl").write_text(json.dumps({"text": "a b c " * 50, "label": 1}) + "\n", encoding="utf-8")
    return tmp_path


SCENARIOS = [  # (command line, a word the message must hold)
    ("stats --lengths {t}/lengths.npy --max-len 64", "--max-len"),
    ("plan --histogram {t}/store --max-len 8 --task mlm", "--histogram"),
    ("train-tokenizer {t}/corpus.txt --vocab-size 300 --out {t}/tok", "--overwrite"),
    ("tokenize {t}/bad.txt --tokenizer {t}/tok --out {t}/s2 --errors strict", "--errors"),
    (
        "pack {t}/cls.jsonl --task classification --max-len 16 --tokenizer {t}/tok --out {t}/p --overflow error",
        "--overflow",
    ),
    ("pack {t}/store --task clm --max-len 16 --tokenizer {t}/tok --out {t}/p --overflow error", "--overflow"),
    ("pack {t}/store --task clm --max-len 4096 --tokenizer {t}/tok --out {t}/store", "--out"),
]


def test_every_flag_a_message_names_is_the_commands_own(capsys, files):
    t = files
    assert run(capsys, "train-tokenizer", str(t / "corpus.txt"), "--vocab-size", "300", "--out", str(t / "tok"))[0] == 0
    assert (
        run(capsys, "tokenize", str(t / "corpus.txt"), "--tokenizer", str(t / "tok"), "--out", str(t / "store"))[0] == 0
    )
    for line, word in SCENARIOS:
        argv = line.format(t=t).split()
        code, _, err = run(capsys, *argv)
        assert code == 2 and word in err, (line, err)
        named = set(FLAG.findall(err))
        assert named <= _options(argv[0]), (line, err, named - _options(argv[0]))
