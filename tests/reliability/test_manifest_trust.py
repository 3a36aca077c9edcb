"""A packed dataset's manifest is checked like the data it describes: its own checksum, every field a
reader needs present, well-typed and adding up, each part listed once, and read exactly as listed.
Damaged image-text datasets (an example table emptied, a part swapped or left out) are refused in
one line naming the part, never trained on and never an internal error. Each case damages a copy of
a tiny packed dataset in ``tmp_path``."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from seqpack.cli.main import main
from seqpack.data.format import CHECKSUM, manifest_checksum, read_manifest, write_manifest
from tests.data import CLM_FACTS, NO_LABELS
from tests.golden.make_packed import GOLDEN
from tests.reliability.test_trust import cli, one_line

CLM = GOLDEN / "clm-store"  # 59 packs of max_len 64 in three parts of 20, 20 and 19 rows


def copy(tmp_path: Path, src: Path = CLM) -> Path:
    d = tmp_path / "packed"
    shutil.copytree(src, d)
    return d


def edit(d: Path, change: Callable[[dict[str, Any]], Any], *, reseal: bool = False) -> None:
    """``change`` made to ``d``'s manifest by hand, or as a writer would make it (``reseal``: its own
    checksum made again)."""
    m = json.loads((d / "manifest.json").read_text(encoding="utf-8"))
    change(m)
    if reseal:
        write_manifest(d, m)
    else:
        (d / "manifest.json").write_text(json.dumps(m), encoding="utf-8")


def commands(d: Path) -> dict[str, list[str]]:
    """The commands that read a packed dataset's manifest (its histogram) and nothing else."""
    return {
        "stats": ["stats", "--histogram", str(d), "--max-len", "64"],
        "plan": ["plan", "--histogram", str(d), "--max-len", "64"],
    }


def shifted_histogram(m: dict[str, Any]) -> None:
    """Two sequences' lengths moved one each way: the counts still sum to num_sequences and num_tokens."""
    c = m["histogram"]["counts"]
    n = next(i for i in range(1, len(c) - 1) if c[i - 1] and c[i + 1])
    c[n - 1] -= 1
    c[n + 1] -= 1
    c[n] += 2


# ---- 1. the manifest carries its own checksum ------------------------------------------------------------


def test_every_writer_seals_the_manifest_last(tmp_path: Path) -> None:
    m = read_manifest(CLM)  # the pack job's
    assert list(m)[-1] == CHECKSUM and m[CHECKSUM] == manifest_checksum(m)
    from seqpack.data import pack_sequences, write_packed
    from seqpack.data.sequences import from_lists

    written = write_packed(
        pack_sequences(from_lists([[1, 2], [3]]), 4), tmp_path / "p", extra=NO_LABELS
    )  # the in-memory writer's
    assert list(written)[-1] == CHECKSUM and read_manifest(tmp_path / "p") == written


EDITS_THAT_ADD_UP = {
    "histogram": shifted_histogram,
    "efficiency": lambda m: m.update(efficiency=0.99),
    "dropped": lambda m: m.update(dropped={}),
    "tokenizer_hash": lambda m: m.update(tokenizer_hash="0" * 64),
    "a part's checksum": lambda m: m["shards"][0].update(checksum="1:00000000"),
}


@pytest.mark.parametrize("change", list(EDITS_THAT_ADD_UP))
def test_an_edit_that_adds_up_is_refused_as_edited_by_hand(change: str, tmp_path: Path) -> None:
    d = copy(tmp_path)
    edit(d, EDITS_THAT_ADD_UP[change])
    with pytest.raises(ValueError, match=r"manifest\.json: edited by hand") as e:
        read_manifest(d)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("command", ["stats", "plan"])
def test_a_histogram_edited_by_hand_is_neither_reported_nor_planned(command: str, tmp_path: Path, capsys) -> None:
    d = copy(tmp_path)
    assert cli(capsys, *commands(d)[command])[0] == 0
    edit(d, shifted_histogram)
    code, err = cli(capsys, *commands(d)[command])
    assert one_line(code, err) and "manifest.json: edited by hand (its checksum does not match)" in err, err


def test_a_manifest_without_its_checksum_is_refused(tmp_path: Path, capsys) -> None:
    """Deleting the checksum is no way around it: every manifest carries one."""
    d = copy(tmp_path)
    edit(d, lambda m: m.pop(CHECKSUM))
    with pytest.raises(ValueError, match=f"no {CHECKSUM}"):
        read_manifest(d)
    code, err = cli(capsys, *commands(d)["stats"])
    assert one_line(code, err) and "re-run seqpack pack" in err
    edit(d, lambda m: m.pop("histogram"))  # a missing field is named first
    code, err = cli(capsys, *commands(d)["stats"])
    assert one_line(code, err) and "histogram must hold counts" in err


# ---- 2. each part listed once ------------------------------------------------------------------------------

PART_TWICE = {
    "the same path": lambda m: m["shards"].__setitem__(1, dict(m["shards"][0])),
    "another spelling of it": lambda m: m["shards"].__setitem__(
        1, {**m["shards"][0], "file": "data/./part-00000.parquet"}
    ),
}


@pytest.mark.parametrize("reseal", [False, True], ids=["by-hand", "resealed"])
@pytest.mark.parametrize("change", list(PART_TWICE))
def test_a_part_listed_twice_is_refused(change: str, reseal: bool, tmp_path: Path, capsys) -> None:
    d = copy(tmp_path)
    edit(d, PART_TWICE[change], reseal=reseal)  # parts 0 and 1 both hold 20 rows: num_packs still adds up
    with pytest.raises(ValueError, match=r"lists the part .*part-00000\.parquet' twice"):
        read_manifest(d)
    from seqpack.data import load_packed

    with pytest.raises(ValueError, match="twice"):
        load_packed(d)
    code, err = cli(capsys, *commands(d)["stats"])
    assert one_line(code, err) and "twice" in err


def test_an_example_table_part_listed_twice_is_refused(tmp_path: Path) -> None:
    from seqpack.data import pack_sequences, write_packed
    from tests.data.test_example_table import seqs_with_table

    d = tmp_path / "p"
    write_packed(pack_sequences(seqs_with_table([3, 4, 2]), 8), d, extra=CLM_FACTS)
    edit(d, lambda m: m["example_table"]["parts"].append(m["example_table"]["parts"][0]), reseal=True)
    with pytest.raises(ValueError, match=r"example table part 'examples/part-00000\.parquet' twice"):
        read_manifest(d)


# ---- 3. every field a reader needs present and well-typed -------------------------------------------------

MISSING = {
    "histogram": lambda m: m.pop("histogram"),
    "histogram counts": lambda m: m["histogram"].pop("counts"),
    "histogram a list": lambda m: m.update(histogram=[1, 2, 3]),
    "histogram counts of strings": lambda m: m["histogram"].update(counts=[str(c) for c in m["histogram"]["counts"]]),
    "histogram counts negative": lambda m: m["histogram"]["counts"].__setitem__(0, -1),
    "histogram counts short": lambda m: m["histogram"].update(counts=m["histogram"]["counts"][:10]),
    "num_sequences": lambda m: m.pop("num_sequences"),
    "num_tokens a float": lambda m: m.update(num_tokens=float(m["num_tokens"])),
    "max_depth": lambda m: m.pop("max_depth"),
    "task": lambda m: m.pop("task"),
    "task a number": lambda m: m.update(task=3),
    "a part's checksum a number": lambda m: m["shards"][0].update(checksum=5),
}


@pytest.mark.parametrize("reseal", [False, True], ids=["by-hand", "resealed"])
@pytest.mark.parametrize("change", list(MISSING))
def test_a_field_missing_or_mistyped_is_one_line(change: str, reseal: bool, tmp_path: Path, capsys) -> None:
    d = copy(tmp_path)
    edit(d, MISSING[change], reseal=reseal)
    for argv in commands(d).values():
        code, err = cli(capsys, *argv)
        assert one_line(code, err) and "manifest.json" in err and "re-run seqpack pack" in err, err


FACTS_MISSING = {
    "token_labels": lambda m: m.pop("token_labels"),
    "float_labels": lambda m: m.pop("float_labels"),
    "causal_lm": lambda m: m.pop("causal_lm"),
    "causal_lm a number": lambda m: m.update(causal_lm=1),
}


@pytest.mark.parametrize("change", list(FACTS_MISSING))
def test_a_manifest_without_the_tasks_facts_is_refused_by_its_readers(change: str, tmp_path: Path, capsys) -> None:
    """A manifest that does not record the task's facts (as a writer would have sealed it) is refused
    by every reader of the rows, saying to pack again; `write_packed` will not write one."""
    pytest.importorskip("torch")
    from seqpack.data import PackedDataset, pack_sequences, write_packed
    from seqpack.data.sequences import from_lists

    d = copy(tmp_path)
    edit(d, FACTS_MISSING[change], reseal=True)
    with pytest.raises(ValueError, match=r"packed: its manifest does not record token_labels, .*seqpack pack$"):
        PackedDataset(d)
    code, err = cli(capsys, "train", "--data", str(d), "--out", str(tmp_path / "run"), "--quiet")
    assert one_line(code, err) and str(d) in err and "pack the data again with seqpack pack" in err, err
    with pytest.raises(TypeError, match="extra has no boolean token_labels, float_labels, causal_lm"):
        write_packed(pack_sequences(from_lists([[1, 2], [3]]), 4), tmp_path / "p")


# ---- 4. hf_dataset reads exactly the manifest's parts ------------------------------------------------------


def test_hf_dataset_reads_the_manifests_parts_not_every_file_beside_them(tmp_path: Path) -> None:
    pytest.importorskip("datasets")
    from seqpack.data import hf_dataset

    d = copy(tmp_path)
    (d / "data" / "notes.parquet").write_bytes(b"not a Parquet file")  # a stray file
    shutil.copyfile(d / "data" / "part-00000.parquet", d / "data" / "part-00000 (copy).parquet")  # a stray copy
    ds = hf_dataset(d, cache_dir=tmp_path / "cache")
    assert len(ds) == read_manifest(d)["num_packs"] == 59


# ---- 5. damaged image-text datasets ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def vision(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny image-text dataset packed by ``seqpack pack``: several token parts and several example
    table parts, its model config beside it."""
    pytest.importorskip("transformers")
    pytest.importorskip("PIL")
    pytest.importorskip("torch")
    from seqpack.experiments.tiny_vlm import tiny_config, tiny_processor
    from tests.tasks.vision.test_vision_cli import write_records

    d = tmp_path_factory.mktemp("vision")
    processor = tiny_processor("llava")
    processor.save_pretrained(d / "processor")
    tiny_config("llava", processor).save_pretrained(d / "model")
    jsonl, _ = write_records(d, n=18)  # parts of 4 examples, the last of 2
    code = main(
        [
            "pack",
            str(jsonl),
            "--task",
            "vision",
            "--max-len",
            "256",
            "--tokenizer",
            str(d / "processor"),
            "--out",
            str(d / "packs"),
            "--shard-examples",
            "4",
            "--shard-packs",
            "2",
            "--json",
        ]
    )
    assert code == 0
    m = read_manifest(d / "packs")
    assert len(m["shards"]) >= 3 and len(m["example_table"]["parts"]) >= 3
    return d


def _swap(a: Path, b: Path) -> None:
    t = a.with_name("swap.tmp")
    os.rename(a, t)
    os.rename(b, a)
    os.rename(t, b)


def _rewrite_part(d: Path, k: int, change: Callable[[Any], Any]) -> None:
    """Example table part ``k`` rewritten as ``change`` makes its table, the manifest made to agree
    (rows, checksum and its own checksum), as another writer would leave it."""
    import pyarrow.parquet as pq

    from seqpack._stages import file_checksum

    f = d / "examples" / f"part-{k:05d}.parquet"
    t = change(pq.read_table(f))
    pq.write_table(t, f)
    edit(d, lambda m: m["example_table"]["parts"][k].update(rows=t.num_rows, checksum=file_checksum(f)), reseal=True)


def _no_checksums(m: dict[str, Any]) -> None:
    """A manifest as written before parts carried checksums."""
    for p in m["shards"] + m["example_table"]["parts"]:
        p.pop("checksum", None)
    m.pop(CHECKSUM, None)


DAMAGE: dict[str, tuple[Callable[[Path], Any], str]] = {
    "an example part emptied": (
        lambda d: (d / "examples" / "part-00001.parquet").write_bytes(b""),
        "examples/part-00001.parquet: changed since seqpack pack wrote it",
    ),
    "an example part emptied, no checksums": (
        lambda d: (edit(d, _no_checksums, reseal=True), (d / "examples" / "part-00001.parquet").write_bytes(b"")),  # type: ignore[func-returns-value]  # two edits in one lambda
        "examples/part-00001.parquet: missing or corrupt example table part",
    ),
    "an example part truncated": (
        lambda d: (d / "examples" / "part-00001.parquet").write_bytes(
            (d / "examples" / "part-00001.parquet").read_bytes()[:100]
        ),
        "examples/part-00001.parquet: changed since seqpack pack wrote it",
    ),
    "an example part's rows removed": (
        lambda d: _rewrite_part(d, 1, lambda t: t.slice(0, 0)),
        "which the example table lacks",
    ),
    "an example part's rows removed, no checksums": (
        lambda d: (edit(d, _no_checksums, reseal=True), _rewrite_part(d, 1, lambda t: t.slice(0, 0))),  # type: ignore[func-returns-value]  # two edits in one lambda
        "which the example table lacks",
    ),
    "an example part left out": (
        lambda d: edit(d, lambda m: m["example_table"]["parts"].pop(1), reseal=True),
        "which the example table lacks",
    ),
    "every example part left out": (
        lambda d: edit(d, lambda m: m["example_table"].update(parts=[]), reseal=True),
        "data/part-00000.parquet: its rows name example",
    ),
    "an example part of other ids": (
        lambda d: _rewrite_part(d, 1, lambda t: t.set_column(0, "example_id", _plus(t.column(0), 1000))),
        "which the example table lacks",
    ),
    "an example part's images dropped": (
        lambda d: _rewrite_part(d, 1, lambda t: t.drop(["images"])),
        "examples/part-00001.parquet: no column 'images'",
    ),
    "two example parts swapped": (
        lambda d: _swap(d / "examples" / "part-00000.parquet", d / "examples" / "part-00001.parquet"),
        "examples/part-00000.parquet: changed since seqpack pack wrote it",
    ),
    "two example parts of other sizes swapped, no checksums": (
        lambda d: (edit(d, _no_checksums, reseal=True), _swap(*_unequal_parts(d))),  # type: ignore[func-returns-value]  # two edits in one lambda
        "examples, the manifest says",
    ),
    "two token parts swapped": (
        lambda d: _swap(d / "data" / "part-00000.parquet", d / "data" / "part-00002.parquet"),
        "data/part-00000.parquet: changed since seqpack pack wrote it",
    ),
    "a token part listed twice": (
        lambda d: edit(d, lambda m: m["shards"].__setitem__(1, dict(m["shards"][0])), reseal=True),
        "lists the part 'data/part-00000.parquet' twice",
    ),
}


def _unequal_parts(d: Path) -> tuple[Path, Path]:
    """Two example table parts of different row counts (parts of equal counts swapped are read
    alike: rows are joined to their examples by id, wherever they lie)."""
    parts = read_manifest(d)["example_table"]["parts"]
    a, b = next((p, q) for p in parts for q in parts if p["rows"] != q["rows"])
    return d / a["file"], d / b["file"]


def _plus(col: Any, k: int) -> Any:
    import pyarrow as pa

    return pa.array(col.to_numpy() + k)


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_image_text_dataset_is_refused_in_one_line(damage: str, vision: Path, tmp_path: Path, capsys) -> None:
    d = copy(tmp_path, vision / "packs")
    make, message = DAMAGE[damage]
    make(d)
    code, err = cli(
        capsys,
        "train",
        "--data",
        str(d),
        "--hf-model",
        str(vision / "model"),
        "--out",
        str(tmp_path / "run"),
        "--steps",
        "1",
        "--batch-size",
        "2",
        "--quiet",
    )
    assert one_line(code, err) and message in err, err
    assert not (tmp_path / "run").exists()


def test_the_undamaged_image_text_dataset_trains(vision: Path, tmp_path: Path, capsys) -> None:
    code, err = cli(
        capsys,
        "train",
        "--data",
        str(vision / "packs"),
        "--hf-model",
        str(vision / "model"),
        "--out",
        str(tmp_path / "run"),
        "--steps",
        "1",
        "--batch-size",
        "2",
        "--quiet",
    )
    assert code == 0, err
