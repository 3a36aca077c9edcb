"""`seqpack.integrations` names every transformers / datasets / TRL entry point, each the object
its home module defines, loaded on first use."""

from __future__ import annotations

import subprocess
import sys

import pytest

import seqpack.integrations as integrations


@pytest.mark.parametrize("name", integrations.__all__)
def test_each_name_is_its_homes_object(name) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    if (name.startswith("Packed") and "Trainer" in name) or name == "TRL_RANGE":
        pytest.importorskip("trl")
    assert getattr(integrations, name) is not None


def test_importing_it_loads_no_heavy_library() -> None:
    code = "import sys, seqpack.integrations; print(sorted(m for m in ('torch', 'transformers', 'trl', 'datasets') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
