from __future__ import annotations

import sys

import pytest

from seqpack.pipeline.engine import LocalEngine, get_engine


def test_local_engine_maps_in_order():
    assert list(get_engine("local").map(pow, [(2, 3), (3, 2), (5, 0)])) == [8, 9, 1]
    assert isinstance(get_engine(), LocalEngine)


def test_shards_at_once_on_threads_keep_the_order():
    import time

    def slow(x):
        time.sleep(0.01 * (5 - x))  # later items finish first
        return x * x

    assert list(get_engine("local", shards_at_once=2).map(slow, [(i,) for i in range(5)])) == [0, 1, 4, 9, 16]
    with pytest.raises(ValueError, match="--shards-at-once must be >= 1"):
        get_engine("local", shards_at_once=0)


def test_bad_engine_choices_say_how_to_fix():
    with pytest.raises(ValueError, match=r"local|ray"):
        get_engine("spark")
    with pytest.raises(ValueError, match="--ray-address needs --engine ray"):
        get_engine("local", address="auto")


def test_ray_missing_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    with pytest.raises(ValueError, match=r"pip install 'seqpack\[ray\]'"):
        get_engine("ray")


def test_an_address_that_does_not_answer_fails_fast():
    pytest.importorskip("ray")
    with pytest.raises(ValueError, match=r"cannot reach a Ray cluster at 127\.0\.0\.1:9"):
        get_engine("ray", address="127.0.0.1:9")


def test_ray_engine_runs_tasks_and_reraises_their_errors():
    pytest.importorskip("ray")
    engine = get_engine("ray", num_cpus=2)
    try:
        assert list(engine.map(pow, [(2, k) for k in range(10)])) == [2**k for k in range(10)]
        with pytest.raises(ZeroDivisionError):
            list(engine.map(divmod, [(1, 0)]))
    finally:
        engine.close()


def test_more_shards_at_once_than_cores_is_refused():
    from seqpack._parallel import default_workers

    n = max(default_workers(), 2)
    assert get_engine("local", shards_at_once=n).shards_at_once == n
    assert get_engine("local").shards_at_once == min(2, default_workers())  # the default: two where two cores are
    with pytest.raises(
        ValueError,
        match=rf"--shards-at-once 1000: more shards at once than this machine's .*pass --shards-at-once {n} or less",
    ):
        get_engine("local", shards_at_once=1000)


@pytest.mark.parametrize(
    "command",
    [
        ["tokenize", "corpus", "--tokenizer", "t", "--out", "s"],
        ["pack", "s", "--task", "clm", "--max-len", "8", "--tokenizer", "t", "--out", "o"],
    ],
)
def test_shards_at_once_is_an_option_of_the_local_engine(command):
    from seqpack.cli.args import engine_from_args
    from seqpack.cli.main import build_parser

    args = build_parser().parse_args([*command, "--shards-at-once", "1"])
    assert args.shards_at_once == 1 and engine_from_args(args).shards_at_once == 1
    with pytest.raises(ValueError, match=r"--shards-at-once applies to --engine local"):
        engine_from_args(build_parser().parse_args([*command, "--engine", "ray", "--shards-at-once", "2"]))
