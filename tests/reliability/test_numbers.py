"""Numbers are checked where they enter: every numeric option of every command, a histogram's
lengths and counts, token ids, mlm's duplication, a stream's input. A value out of range is one
line naming the option, the argument or the file (exit 2 on the command line), never Python's
overflow text, never an array sized by it, never a silently empty epoch."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pytest

from seqpack.cli.main import COMMANDS, build_parser, main
from tests.store.test_store import byte_tokenizer


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    try:
        code = main(list(argv))
    except SystemExit as e:  # argparse refuses the option itself
        code = int(e.code or 0)
    return code, capsys.readouterr().err


def one_line(code: int, err: str) -> bool:
    return code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1


def numeric_options() -> list[tuple[str, str]]:
    """``(command, option)`` of every option whose value argparse converts (not a path or a choice)."""
    found = []
    for command in COMMANDS:
        parser = build_parser(command)
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[command]
        for action in sub._actions:
            if action.type is not None and action.type is not str and action.option_strings:
                found.append((command, action.option_strings[0]))
    return found


NUMERIC = numeric_options()
PAST_ANY_RANGE = ["1" + "0" * 40, "-" + "1" + "0" * 40, "nan", "inf", "1e400", "\u0663"]  # "٣": not ASCII digits


def test_the_numeric_options_are_found() -> None:
    names = {o for _, o in NUMERIC}
    assert {"--max-len", "--seed", "--shard-mb", "--dupe-factor", "--lr", "--workers", "--budget"} <= names
    assert len(NUMERIC) > 60


@pytest.mark.parametrize("command,option", NUMERIC, ids=[f"{c} {o}" for c, o in NUMERIC])
def test_every_numeric_option_is_range_checked_and_named(command: str, option: str, capsys) -> None:
    for value in PAST_ANY_RANGE:
        code, err = cli(capsys, command, option, value)
        assert one_line(code, err), (value, err)
        message = err.split(f"argument {option}: ", 1)[-1]  # argparse's own prefix aside, the line names it
        assert option in message, (value, err)


def test_seed_and_max_len_past_their_range_name_the_flag(capsys) -> None:
    code, err = cli(capsys, "train", "--data", "d", "--out", "r", "--seed", str(2**64))
    assert one_line(code, err) and "--seed must be at most 4,294,967,295, got 18,446,744,073,709,551,616" in err
    code, err = cli(capsys, "pack", "s", "--task", "clm", "--max-len", str(2**40), "--tokenizer", "t", "--out", "o")
    assert one_line(code, err) and "--max-len must be at most 2,147,483,647" in err
    for value in ("1e-9", "0", "-1"):
        code, err = cli(capsys, "tokenize", "x.txt", "--tokenizer", "t", "--out", "o", "--shard-mb", value)
        assert one_line(code, err) and "--shard-mb must be >= 0.001" in err


def test_the_cli_limits_are_the_library_limits() -> None:
    from seqpack.cli import numbers
    from seqpack.packing.histogram import MAX_LEN_LIMIT
    from seqpack.tokenizer.train import MAX_VOCAB

    assert numbers.TOKENS_PER_ROW == MAX_LEN_LIMIT == MAX_VOCAB


# ---- histograms ---------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["plan", "stats"])
def test_a_csv_length_past_any_row_is_refused_by_file_and_line(command: str, tmp_path: Path, capsys) -> None:
    f = tmp_path / "h.csv"
    f.write_text("length,count\n5,3\n1000000000000,1\n")
    code, err = cli(capsys, command, "--histogram", str(f), "--max-len", "64")
    assert one_line(code, err) and f"{f}:3: length 1,000,000,000,000 is past any row seqpack packs" in err


def test_a_csv_length_past_max_len_is_refused_before_the_histogram_is_laid_out(tmp_path: Path, capsys) -> None:
    f = tmp_path / "h.csv"
    f.write_text("length,count\n5,3\n2000000000,1\n")  # 2e9 int64 bins would be 16 GB
    code, err = cli(capsys, "plan", "--histogram", str(f), "--max-len", "64")
    assert one_line(code, err) and f"{f}:3: 1 sequences exceed max_len=64; pass --max-len 2000000000" in err
    f.write_text("length,count\n5,3\n2000000000,0\n")  # a row of no sequences lays nothing out
    code, err = cli(capsys, "stats", "--histogram", str(f), "--max-len", "64")
    assert code == 0, err


def test_counts_past_int64_are_refused(tmp_path: Path, capsys) -> None:
    f = tmp_path / "h.csv"
    f.write_text("length,count\n5,3\n10,99999999999999999999\n")
    code, err = cli(capsys, "plan", "--histogram", str(f), "--max-len", "64")
    assert one_line(code, err) and f"{f}:3: the rows up to here hold 1e+21 tokens" in err
    h = np.zeros(8, dtype=np.uint64)
    h[[2, 5]] = [3, 2**64 - 1]  # a cast to int64 would make it -1: "negative counts"
    np.save(tmp_path / "h.npy", h)
    code, err = cli(capsys, "stats", "--histogram", str(tmp_path / "h.npy"), "--max-len", "64")
    assert one_line(code, err) and "sequences of length 6" in err and "negative" not in err


@pytest.mark.parametrize(
    "lengths,message",
    [
        ([3.0, float("inf")], "lengths must be integers, got inf"),
        (np.array([3, 2**64 - 1], dtype=np.uint64), "the longest of length 18,446,744,073,709,551,615"),
        ([3, 2**70], "the longest of length 1,180,591,620,717,411,303,424"),
        ([3, 0, -7], r"2 sequences have length <= 0 \(the first: 0\)"),
    ],
)
def test_a_length_is_reported_as_what_it_is(lengths: object, message: str) -> None:
    from seqpack.packing import histogram

    with pytest.raises((TypeError, ValueError), match=message):
        histogram(lengths, 64)


def test_stats_lengths_file_of_uint64_says_its_value(tmp_path: Path, capsys) -> None:
    np.save(tmp_path / "l.npy", np.array([3, 2**64 - 1], dtype=np.uint64))
    code, err = cli(capsys, "stats", "--lengths", str(tmp_path / "l.npy"), "--max-len", "64")
    assert one_line(code, err) and "18,446,744,073,709,551,615" in err and "<= 0" not in err


# ---- token ids ----------------------------------------------------------------------------------

BIG_IDS = {
    "2**64 - 1": [5, 2**64 - 1],
    "2**64": [5, 2**64],
    "2**63": [2**63],
    "uint64": np.array([5, 2**63], np.uint64),
}


def _entry_points() -> dict[str, object]:
    from seqpack.pipeline.stream_dataset import StreamingPackedDataset
    from seqpack.rl import pack_rollouts

    tok = byte_tokenizer()
    return {
        "decode": tok.decode,
        "pack_rollouts": lambda ids: pack_rollouts([[3, 4]], [[ids]], max_len=64),
        "StreamingPackedDataset": lambda ids: list(StreamingPackedDataset([[5, 6, 7], ids], max_len=16, buffer_size=4)),
    }


@pytest.mark.parametrize("entry", ["decode", "pack_rollouts", "StreamingPackedDataset"])
@pytest.mark.parametrize("ids", list(BIG_IDS))
def test_ids_past_int64_are_refused_in_one_line(entry: str, ids: str) -> None:
    with pytest.raises(ValueError, match=r"token id \d+ is past any vocabulary \(ids are stored as int64"):
        _entry_points()[entry](BIG_IDS[ids])  # type: ignore[operator]


def test_pack_dataset_refuses_float_ids() -> None:
    datasets = pytest.importorskip("datasets")
    from seqpack.hf import pack_dataset

    ds = datasets.Dataset.from_dict({"input_ids": [[1.5, 2.0], [3.0]], "weights": [[0.5, 1.0], [1.0]]})
    with pytest.raises(ValueError, match=r"pack_dataset: column 'input_ids': token ids are integers, got float64"):
        pack_dataset(ds, 8)
    with pytest.raises(ValueError, match=r"column 'input_ids' of example 0: token ids are integers"):
        list(pack_dataset(ds.to_iterable_dataset(), 8))
    fine = datasets.Dataset.from_dict({"input_ids": [[1, 2], [3]], "weights": [[0.5, 1.0], [1.0]]})
    assert pack_dataset(fine, 8)[:]["weights"] == [[0.5, 1.0, 1.0]]  # other list columns may hold floats


# ---- mlm's duplication ----------------------------------------------------------------------------


def test_a_duplication_factor_past_its_bound_is_refused(tmp_path: Path, capsys) -> None:
    from seqpack.tasks.mlm import MAX_DUPE_FACTOR, MLMConfig

    code, err = cli(
        capsys,
        "pack",
        "s",
        "--task",
        "mlm",
        "--max-len",
        "64",
        "--tokenizer",
        "t",
        "--out",
        "o",
        "--dupe-factor",
        str(10**12),
    )
    assert one_line(code, err) and f"--dupe-factor must be at most {MAX_DUPE_FACTOR:,}" in err
    with pytest.raises(ValueError, match="dupe_factor must be >= 1 and at most 1,000"):
        MLMConfig(max_len=64, dupe_factor=10**12)


def test_a_duplication_past_memory_is_refused_before_the_first_pass(tmp_path: Path, monkeypatch, capsys) -> None:
    from seqpack import _resources
    from seqpack.pipeline import build_sharded_store
    from tests.tasks.test_sequences import text_docs

    tok = byte_tokenizer()
    tok.save(tmp_path / "tok")
    build_sharded_store(text_docs(40), tok, tmp_path / "store", shard_chars=500)
    monkeypatch.setattr(_resources, "machine_memory", lambda: 2**20)  # a machine of one MiB
    code, err = cli(
        capsys,
        "pack",
        str(tmp_path / "store"),
        "--task",
        "mlm",
        "--max-len",
        "64",
        "--tokenizer",
        str(tmp_path / "tok"),
        "--out",
        str(tmp_path / "o"),
        "--dupe-factor",
        "1000",
    )
    assert one_line(code, err) and "mlm's 1,000 passes over the" in err and "lower --dupe-factor" in err
    assert not (tmp_path / "o").exists()


# ---- a stream's input -----------------------------------------------------------------------------


def test_a_one_shot_iterator_is_refused_where_it_would_be_read_again() -> None:
    from seqpack.pipeline.stream_dataset import StreamingPackedDataset
    from seqpack.pipeline.streaming import PackedStream, StreamConfig

    def gen():
        yield from ([5, 6, 7], [1, 2], [3, 4, 5, 6])

    with pytest.raises(ValueError, match=r"one-shot iterator .*pass a list"):
        StreamingPackedDataset(gen(), max_len=16, buffer_size=4)
    ds = StreamingPackedDataset([[5, 6, 7], [1, 2], [3, 4, 5, 6]], max_len=16, buffer_size=4)
    assert len(list(ds)) == len(list(ds)) == 1  # a list: every epoch the same rows
    stream = PackedStream(gen(), config=StreamConfig(max_len=16, buffer_size=4))
    assert len(list(stream)) == 1  # read once: a generator is fine
    with pytest.raises(ValueError, match="PackedStream, read again, got a one-shot iterator"):
        list(stream)


# ---- tokenize's shards ----------------------------------------------------------------------------


def test_a_shard_size_that_would_cut_thousands_of_shards_is_refused(tmp_path: Path, capsys) -> None:
    tok = byte_tokenizer()
    tok.save(tmp_path / "tok")
    corpus = tmp_path / "big.txt"
    corpus.write_text(("word " * 200 + "\n") * 11_000)  # ~11 MiB: 11,000 shards of a KiB
    code, err = cli(
        capsys,
        "tokenize",
        str(corpus),
        "--tokenizer",
        str(tmp_path / "tok"),
        "--out",
        str(tmp_path / "s"),
        "--shard-mb",
        "0.001",
    )
    assert one_line(code, err) and "--shard-mb 0.001 would cut the" in err and "pass --shard-mb 0.002 or more" in err
    assert not (tmp_path / "s").exists()
