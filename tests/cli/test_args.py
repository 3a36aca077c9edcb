"""One source of defaults: every CLI option that maps to a config field defaults to the field's default."""

from __future__ import annotations

import dataclasses

import pytest

from seqpack.cli.args import default_of
from seqpack.cli.main import build_parser


def defaults(argv: list[str]) -> dict:
    return vars(build_parser().parse_args(argv))


@pytest.mark.parametrize(
    "argv,cls_path",
    [
        (["train", "--data", "d", "--out", "o"], "seqpack.train.config:TrainConfig"),
        (["bench"], "seqpack.experiments.bench:BenchConfig"),
        (
            ["pack", "s", "--task", "clm", "--max-len", "8", "--tokenizer", "t", "--out", "o"],
            "seqpack.pipeline.pack:PackConfig",
        ),
    ],
)
def test_cli_defaults_are_the_dataclass_defaults(argv: list[str], cls_path: str) -> None:
    import importlib

    mod, name = cls_path.split(":")
    cls = getattr(importlib.import_module(mod), name)
    got = defaults(argv)
    checked = 0
    for f in dataclasses.fields(cls):
        if f.name in got and (f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING):
            assert got[f.name] == default_of(cls, f.name), f.name
            checked += 1
    assert checked >= 4


def test_task_options_are_not_stated_by_the_cli() -> None:
    """Task options given nowhere are absent (the task's dataclass default applies), and a
    given one that the task lacks is refused by name."""
    from seqpack.pipeline import PackConfig

    got = defaults(["pack", "s", "--task", "qa", "--max-len", "8", "--tokenizer", "t", "--out", "o"])
    assert "doc_stride" not in got and "overflow" not in got
    assert PackConfig(task="qa", max_len=8).options.doc_stride == 128
    with pytest.raises(ValueError, match="--overflow does not apply to task qa"):
        PackConfig.for_task("qa", max_len=8, overflow="drop")


def test_every_command_is_its_module_and_runs_without_the_others() -> None:
    # the table names each module's own NAME; a command imports no other subcommand's module
    import importlib
    import subprocess
    import sys

    from seqpack.cli.main import COMMANDS

    for name, module in COMMANDS.items():
        assert name == importlib.import_module(f"seqpack.cli.{module}").NAME
    code = (
        "import sys\nfrom seqpack.cli.main import build_parser\nbuild_parser('encode')\n"
        "print(sorted(m for m in sys.modules if m.startswith('seqpack.cli.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['seqpack.cli.args', 'seqpack.cli.encode', 'seqpack.cli.main']"
    helps = build_parser().format_help()
    assert all(name in helps for name in COMMANDS) and "train a byte-level BPE tokenizer" in helps


def test_tokenize_imports_neither_the_tasks_nor_the_packed_format() -> None:
    """``seqpack tokenize`` builds a token store: its parser and job load no task, packing planner or
    packed-format module (``seqpack.pipeline`` loads its names on first use)."""
    import json
    import subprocess
    import sys

    code = (
        "import json, sys\nfrom seqpack.cli.main import build_parser\nbuild_parser('tokenize')\n"
        "from seqpack.pipeline import build_sharded_store, get_engine\n"
        "print(json.dumps(sorted({m.split('.')[1] for m in sys.modules if m.startswith('seqpack.') and m.count('.') > 1})))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    loaded = set(json.loads(out))  # the seqpack packages it loaded modules of
    assert not loaded & {"tasks", "data", "packing"}, loaded
    assert {"pipeline", "store", "cli"} <= loaded


def test_encode_loads_a_tokenizer_and_encodes_without_numpy(tmp_path) -> None:
    """``seqpack encode`` opens a tokenizer directory and encodes a text: no numpy (~45 ms of its start-up)."""
    import json
    import subprocess
    import sys

    from seqpack.tokenizer import BPEConfig, Tokenizer, train_bpe_corpus

    r = train_bpe_corpus(documents=["low lower newest widest"] * 20, config=BPEConfig(vocab_size=270, workers=1))
    Tokenizer(r.vocab, r.merges, []).save(tmp_path / "tok")
    (tmp_path / "text.txt").write_text("low lower", encoding="utf-8")
    code = (
        "import json, sys\nfrom seqpack.cli.main import main\n"
        f"main(['encode', '--tokenizer', {str(tmp_path / 'tok')!r}, {str(tmp_path / 'text.txt')!r}])\n"
        "print(json.dumps('numpy' in sys.modules), file=sys.stderr)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(done.stderr.strip().splitlines()[-1]) is False
    assert done.stdout.strip()  # the ids were printed


def test_only_the_program_leaves_its_objects_to_the_os(tmp_path) -> None:
    """``main()`` run as the program freezes what it holds once the command is done (the collection
    CPython runs at exit would walk it all); ``main(argv)`` called by a caller leaves its collector be."""
    import gc
    import subprocess
    import sys

    from seqpack.cli.main import main

    (tmp_path / "t.txt").write_text("low lower newest widest " * 20, encoding="utf-8")
    argv = ["train-tokenizer", str(tmp_path / "t.txt"), "--vocab-size", "270", "--out", str(tmp_path / "a"), "--json"]
    before = gc.get_freeze_count()
    assert main(argv) == 0 and gc.get_freeze_count() == before
    argv[-2] = str(tmp_path / "b")
    code = (
        f"import gc, sys\nsys.argv = ['seqpack', *{argv!r}]\nfrom seqpack.cli.main import main\n"
        "assert main() == 0\nprint(gc.get_freeze_count() > 0, file=sys.stderr)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stderr.strip().splitlines()[-1] == "True"
    assert (tmp_path / "b" / "tokenizer.json").read_bytes() == (tmp_path / "a" / "tokenizer.json").read_bytes()
