from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

# no example database and no .hypothesis/ in the checkout: tests write only to temp dirs.
# derandomize: every run (here and in CI) draws the same examples, so a suite that passed once
# passes again; new edge cases go in as explicit @example lines.
settings.register_profile("seqpack", database=None, derandomize=True)
settings.load_profile("seqpack")
try:
    import atexit
    import shutil
    import tempfile

    from hypothesis.configuration import set_hypothesis_home_dir

    _HYPOTHESIS_HOME = tempfile.mkdtemp(prefix="seqpack-hypothesis-")
    set_hypothesis_home_dir(_HYPOTHESIS_HOME)
    atexit.register(shutil.rmtree, _HYPOTHESIS_HOME, ignore_errors=True)  # each test process removes its own
except ImportError:  # pragma: no cover - older hypothesis
    pass

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data"


@pytest.fixture(autouse=True, scope="session")
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory):
    """The built-in corpus cache goes to a temp dir, never to ~/.cache."""
    old = os.environ.get("SEQPACK_CACHE_DIR")
    os.environ["SEQPACK_CACHE_DIR"] = str(tmp_path_factory.mktemp("seqpack-cache"))
    yield
    if old is None:
        os.environ.pop("SEQPACK_CACHE_DIR", None)
    else:
        os.environ["SEQPACK_CACHE_DIR"] = old


def shared(*parts: str) -> Path:
    """A path under ../shared/data; skips the test if it is absent."""
    p = SHARED_DATA.joinpath(*parts)
    if not p.exists():
        pytest.skip(f"shared data not available: {p}")
    return p


@pytest.fixture
def cs336() -> Path:
    return shared("cs336")
