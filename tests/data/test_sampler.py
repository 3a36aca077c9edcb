"""A dataset's balanced schedule (``seqpack pack --world-size``) and :class:`BalancedSampler`: every
pack once per epoch over the ranks, each step's ranks even, exact resume, damaged files refused."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from seqpack.data import BalancedSampler, from_lists, read_manifest, read_schedule
from seqpack.data.format import SCHEDULE
from seqpack.packing.balance import RowCost, ScheduleOptions, imbalance
from seqpack.pipeline import OutputOptions, PackConfig, build_packed_dataset
from seqpack.tokenizer.tokenizer import Tokenizer
from tests.cli.test_cli import EOT, run
from tests.data import CLM_FACTS

WORLD, MICRO = 4, 2


def _lengths(n: int = 300, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.minimum(rng.pareto(1.2, n) * 8 + 1, 128).astype(int)  # long tail up to max_len


@pytest.fixture(scope="module")
def scheduled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Sequences packed in memory at 128, with a 4-rank x 2-pack schedule."""
    from seqpack.data import pack_sequences, write_packed
    from seqpack.packing.balance import packing_schedule

    out = tmp_path_factory.mktemp("sched") / "packed"
    lengths = _lengths()
    seqs = from_lists([np.arange(n) % 50 for n in lengths], task="clm")
    pc = pack_sequences(seqs, 128, algorithm="best", seed=0)
    steps, info = packing_schedule(
        pc.packing.lengths,
        pc.packing.pack_offsets,
        pc.packing.sequence_index,
        ScheduleOptions(world_size=WORLD, micro_batch=MICRO),
    )
    write_packed(pc, out, extra={"schedule": info, **CLM_FACTS}, arrays={SCHEDULE: steps})
    return out


def test_schedule_holds_every_pack_once_and_is_balanced(scheduled: Path) -> None:
    m = read_manifest(scheduled)
    steps = read_schedule(scheduled)
    P = m["num_packs"]
    assert steps.shape == (m["schedule"]["steps"], WORLD, MICRO)
    assert sorted(steps[steps >= 0].tolist()) == list(range(P))
    s = m["schedule"]
    assert s["imbalance_balanced"] <= s["imbalance_sequential"] and s["imbalance_balanced"] < 1.05


def test_ranks_cover_each_full_step_once_and_resume_exactly(scheduled: Path) -> None:
    steps = read_schedule(scheduled)
    full = int((steps >= 0).all(axis=(1, 2)).sum())
    for epoch in (0, 1):
        per_rank = []
        for r in range(WORLD):
            s = BalancedSampler(scheduled, rank=r, world_size=WORLD, seed=7)
            s.set_epoch(epoch)
            got = list(s)
            assert len(got) == len(s) == full * MICRO
            per_rank.append(np.array(got).reshape(-1, MICRO))
            s.set_epoch(epoch, start_step=3)  # a resume at step 3 reads what the run had left
            assert list(s) == got[3 * MICRO :]
        together = np.stack(per_rank, axis=1)  # (steps, world, micro): each a step of the schedule
        as_sets = {tuple(sorted(x)) for x in steps[:full].reshape(full, -1).tolist()}
        assert {tuple(sorted(x)) for x in together.reshape(full, -1).tolist()} == as_sets
        assert len(np.unique(together)) == full * WORLD * MICRO
    a, b = (list(BalancedSampler(scheduled, rank=0, world_size=WORLD, seed=7)) for _ in range(2))
    assert a == b  # a pure function of (seed, epoch, start_step)


def test_last_partial_step_is_padded_with_its_own_packs(scheduled: Path) -> None:
    steps = read_schedule(scheduled)
    P = int((steps >= 0).sum())
    got = [list(BalancedSampler(scheduled, rank=r, world_size=WORLD, drop_last=False)) for r in range(WORLD)]
    assert len({len(g) for g in got}) == 1  # every rank takes as many steps
    assert set(np.concatenate(got).tolist()) == set(range(P))  # nothing is left out


def test_dataloader_gives_each_rank_its_step(scheduled: Path) -> None:
    import torch

    from seqpack.data import PackedDataset, collate_packed

    ds = PackedDataset(scheduled)
    sampler = BalancedSampler(scheduled, rank=1, world_size=WORLD)
    loader = torch.utils.data.DataLoader(ds, batch_size=sampler.micro_batch, sampler=sampler, collate_fn=collate_packed)
    first = next(iter(loader))
    want = list(sampler)[:MICRO]
    np.testing.assert_array_equal(first["input_ids"].numpy(), ds.rows.take(want)["input_ids"])


def test_wrong_world_and_damaged_schedule_refused(scheduled: Path, tmp_path: Path) -> None:
    import shutil

    with pytest.raises(ValueError, match="balances 4 ranks, not 8"):
        BalancedSampler(scheduled, rank=0, world_size=8)
    with pytest.raises(ValueError, match="rank must be"):
        BalancedSampler(scheduled, rank=4, world_size=WORLD)
    bad = tmp_path / "bad"
    shutil.copytree(scheduled, bad)
    steps = np.load(bad / SCHEDULE)
    steps[0, 0, 0] = steps[0, 0, 1]  # one pack twice, one never
    np.save(bad / SCHEDULE, steps)
    with pytest.raises(ValueError, match="not the schedule its manifest describes"):
        read_schedule(bad)


def test_unscheduled_dataset_says_how_to_get_one(tmp_path: Path) -> None:
    from seqpack.data import pack_sequences, write_packed

    write_packed(pack_sequences(from_lists([np.arange(5)] * 4, task="clm"), 16), tmp_path / "p", extra=CLM_FACTS)
    with pytest.raises(ValueError, match="--world-size W"):
        read_schedule(tmp_path / "p")


def test_pack_command_writes_a_schedule_on_every_path(capsys, tmp_path: Path) -> None:
    """The sharded store path and the in-memory path write the same schedule for the same packing."""
    from seqpack.store import build_store

    Tokenizer({i: bytes([i]) for i in range(256)}, [], special_tokens=[EOT]).save(tmp_path / "tok")
    tok = Tokenizer.load(tmp_path / "tok")
    docs = [f"Doc {i}. " + "Some words here. " * (i % 13) for i in range(80)]
    (tmp_path / "c.txt").write_text(EOT.join(docs), encoding="utf-8")
    code, _, err = run(
        capsys,
        "tokenize",
        str(tmp_path / "c.txt"),
        "--tokenizer",
        str(tmp_path / "tok"),
        "--out",
        str(tmp_path / "s"),
        "--workers",
        "1",
    )
    assert code == 0, err
    code, out, err = run(
        capsys,
        "pack",
        str(tmp_path / "s"),
        "--task",
        "clm",
        "--max-len",
        "256",
        "--tokenizer",
        str(tmp_path / "tok"),
        "--out",
        str(tmp_path / "p"),
        "--world-size",
        "2",
        "--micro-batch",
        "2",
    )
    assert code == 0, err
    assert "schedule:" in out and "balanced" in out
    sharded = read_schedule(tmp_path / "p")
    store = build_store(docs, tok, tmp_path / "plain", workers=1)  # one plain store: packed in memory
    build_packed_dataset(
        store,
        tok,
        tmp_path / "q",
        PackConfig(task="clm", max_len=256),
        output=OutputOptions(schedule=ScheduleOptions(world_size=2, micro_batch=2)),
    )
    np.testing.assert_array_equal(read_schedule(tmp_path / "q"), sharded)
    m = json.loads((tmp_path / "p" / "manifest.json").read_text())
    assert m["schedule"]["cost"] == RowCost.from_flops(hidden=1024, layers=1).to_dict()
    code, _, err = run(
        capsys,
        "pack",
        str(tmp_path / "s"),
        "--task",
        "clm",
        "--max-len",
        "256",
        "--tokenizer",
        str(tmp_path / "tok"),
        "--out",
        str(tmp_path / "r"),
        "--cost",
        str(tmp_path / "none.json"),
    )
    assert code == 2 and "--world-size" in err


def test_schedule_imbalance_is_recomputable(scheduled: Path) -> None:
    """The manifest's imbalance is the schedule's, priced by the recorded cost (nothing hidden)."""
    from seqpack.data.rows import PackedRows
    from seqpack.train.data import row_squares

    m = read_manifest(scheduled)
    seg = PackedRows(scheduled).take(np.arange(m["num_packs"]))["segment_ids"]
    cost = RowCost(**m["schedule"]["cost"])
    costs = cost.of((seg > 0).sum(1), row_squares(seg), seg.max(1))
    assert imbalance(costs, read_schedule(scheduled)) == pytest.approx(m["schedule"]["imbalance_balanced"], rel=1e-12)
