"""The TRL range is stated once: the hf extra pins it, and each trainer refuses a TRL outside it
in one line before any work."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from seqpack.train.trl_support import TRL_RANGE, check_trl

ROOT = Path(__file__).resolve().parents[2]


def test_the_hf_extra_pins_the_range() -> None:
    extra = re.search(r"^hf = \[(.*?)^\]", (ROOT / "pyproject.toml").read_text(), re.M | re.S)
    assert extra and f'"{TRL_RANGE}"' in extra.group(1)


def test_the_installed_trl_is_in_the_range() -> None:
    pytest.importorskip("trl")
    check_trl()


@pytest.mark.parametrize(
    ("module", "name"),
    [("trl_sft", "PackedSFTTrainer"), ("trl_dpo", "PackedDPOTrainer"), ("trl_grpo", "PackedGRPOTrainer")],
)
def test_each_trainer_refuses_a_trl_outside_it(monkeypatch, module, name) -> None:
    import importlib

    trl = pytest.importorskip("trl")
    cls = getattr(importlib.import_module(f"seqpack.train.{module}"), name)
    monkeypatch.setattr(trl, "__version__", "1.12.0")
    with pytest.raises(ValueError, match=re.escape(TRL_RANGE)):
        kw = {"packed": "packed/", "args": None} if name == "PackedDPOTrainer" else {}
        cls(model=None, **kw)  # refused before TRL's own __init__ reads anything
