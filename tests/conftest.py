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

# Under `make test`'s two xdist workers on two cores, each worker (and the commands it launches)
# computes on one thread: two workers of two threads each oversubscribe the cores (the model matrix's
# set-up took 187 s so against 33 s alone). Set before any test module imports torch.
if os.environ.get("PYTEST_XDIST_WORKER"):
    for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_var, "1")

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


#: tests measured over ~5 s on 2 cores (`make test` prints the slowest ten; move a test here when it
#: joins them): node ids, or a file's path for all of its tests
SLOW = (
    "tests/nn/test_model_matrix.py",
    "tests/nn/test_compile.py",
    "tests/rl/test_trl_grpo.py::test_a_short_run_takes_trls_steps",
    "tests/cli/test_cli.py::test_demo_on_a_small_corpus",
    "tests/reliability/test_messages.py::test_dash_is_stdin_and_a_closed_pipe_is_no_error",
    "tests/nn/test_hf_padding_free.py::test_flex_attention_forward_on_cpu",
    "tests/nn/test_hf_causal_lm.py::test_compiled_blocks_equal_eager",
    "tests/packing/test_wikipedia.py::test_nnlshp_depth3_count",
    "tests/packing/test_plan.py::test_other_distributions_near_the_lp_bound",
    "tests/pipeline/test_job.py::test_ray_engine_writes_the_same_bytes",
    "tests/pipeline/test_engine.py::test_ray_engine_runs_tasks_and_reraises_their_errors",
    "tests/pipeline/test_golden.py::test_ray_engine_packs_byte_identical_to_golden",
    "tests/tasks/vision/test_vision_cli.py::test_ray_workers_pack_the_same_rows",
    "tests/pipeline/test_streaming.py::test_memory_stays_bounded_on_a_long_stream",
    "tests/tokenizer/test_train.py::test_parallel_and_chunked_match_single_pass",
    "tests/train/test_loop.py::test_cli_train_and_bad_input",
)
#: what launches several processes (torchrun, spawned ranks): read in the test's own source
LAUNCHES = ("torchrun", "torch.distributed.run", "mp.spawn", "torch.multiprocessing")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The tiers (`pyproject.toml` registers them; `make test-fast` leaves out all but the unit one):
    ``install`` (tests/test_install.py: builds and installs), ``docs`` (tests/docs/: every code block,
    the site build), ``multiprocess`` (a launch of several processes), ``gpu`` (skipped without
    CUDA), ``slow`` (`SLOW`)."""
    import inspect

    for item in items:
        nodeid = item.nodeid.split("[")[0]
        path = nodeid.split("::")[0]
        if path == "tests/test_install.py":
            item.add_marker(pytest.mark.install)
        if path.startswith("tests/docs/"):
            item.add_marker(pytest.mark.docs)
        if any(nodeid == s or path == s for s in SLOW):
            item.add_marker(pytest.mark.slow)
        if any("CUDA" in str(m.kwargs.get("reason", "")) for m in item.iter_markers("skipif")):
            item.add_marker(pytest.mark.gpu)
        fn = getattr(item, "function", None)
        try:
            source = inspect.getsource(fn) if fn is not None else ""
        except (OSError, TypeError):
            source = ""
        if any(word in source for word in LAUNCHES):
            item.add_marker(pytest.mark.multiprocess)
