"""Trust, second round: no command deletes what it did not make, no non-finite run ends "green", no
stale reuse, every manifest field checked against the rows it describes, every output path form
refused before any work. Each case is what a careless or hostile user tried."""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from seqpack.cli.main import main
from tests.reliability.test_outputs import tree_hash
from tests.train.conftest import build_datasets


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    try:
        code = main(list(argv))
    except SystemExit as e:  # argparse refuses the option itself
        code = int(e.code or 0)
    _, err = capsys.readouterr()
    return code, err


def one_line(code: int, err: str) -> bool:
    return code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    made = build_datasets(tmp_path_factory.mktemp("trust-data"), n_docs=80)
    return {**made, "store": made["tokenizer"].parent / "store"}


# ---- 1. demo --out never replaces folders it did not make ----------------------------------------


def test_demo_refuses_a_directory_it_did_not_make(tmp_path: Path, capsys) -> None:
    d = tmp_path / "d"
    (d / "store").mkdir(parents=True)
    (d / "tokenizer").mkdir()
    (d / "store" / "mydata.txt").write_text("keep")
    corpus = tmp_path / "c.txt"
    corpus.write_text("a few words of text<|endoftext|>and some more words here" * 3)
    before = tree_hash(d)
    code, err = cli(capsys, "demo", "--corpus", str(corpus), "--out", str(d), "--vocab-size", "300")
    assert one_line(code, err) and "did not make" in err and "pick another --out" in err
    assert tree_hash(d) == before


def test_demo_claims_new_empty_and_its_own_directories(tmp_path: Path) -> None:
    from seqpack.experiments.demo import MARKER, claim_output

    claim_output(tmp_path / "new")  # made, and marked
    assert (tmp_path / "new" / MARKER).is_file()
    (tmp_path / "new" / "store").mkdir()
    claim_output(tmp_path / "new")  # its own: reused
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("x")
    with pytest.raises(ValueError, match="did not make"):
        claim_output(mine)
    assert sorted(os.listdir(mine)) == ["notes.txt"]  # nothing written beside the user's files


# ---- 2. a pack resume never reuses parts made from an older store ----------------------------------


def test_a_store_edited_in_place_is_refused_by_a_resumed_pack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from seqpack.pipeline import OutputOptions, PackConfig, build_packed_dataset, build_sharded_store
    from seqpack.pipeline import job as job_mod
    from seqpack.store import ShardedTokenStore
    from tests.reliability.test_resume import _fail_at
    from tests.store.test_store import byte_tokenizer
    from tests.tasks.test_sequences import text_docs

    tok = byte_tokenizer()
    store = build_sharded_store(text_docs(60), tok, tmp_path / "store", shard_chars=400).path
    cfg = PackConfig.for_task("clm", max_len=64)
    with monkeypatch.context() as m:
        _fail_at(m, job_mod, "packs_stage", "part-00002.parquet")
        with pytest.raises(OSError):
            build_packed_dataset(store, tok, tmp_path / "p", cfg, output=OutputOptions(shard_packs=7))
    shard = ShardedTokenStore(store).shards[1].path
    f = shard / "tokens.bin"
    st = f.stat()
    data = bytearray(f.read_bytes())
    data[0:4] = bytes(b ^ 1 for b in data[0:4])  # four bytes, in place, the mtime put back
    f.write_bytes(bytes(data))
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    with pytest.raises(ValueError, match="changed since seqpack tokenize"):
        build_packed_dataset(store, tok, tmp_path / "p", cfg, output=OutputOptions(shard_packs=7))


def test_the_store_records_its_checksums_and_verifies_them(tmp_path: Path) -> None:
    from seqpack.store import TokenStore, build_store
    from tests.store.test_store import byte_tokenizer

    s = build_store(["hello world", "", "more text"], byte_tokenizer(), tmp_path / "s")
    assert set(s.meta["checksums"]) == {"tokens.bin", "offsets.idx"}
    assert TokenStore(tmp_path / "s").verify()
    meta = json.loads((tmp_path / "s" / "meta.json").read_text())
    del meta["checksums"]  # a store written before checksums: nothing to verify against
    (tmp_path / "s" / "meta.json").write_text(json.dumps(meta))
    assert not TokenStore(tmp_path / "s").verify()


# ---- 3. train --resume never continues on other data ------------------------------------------------


def _interrupted_run(data: Path, out: Path) -> None:
    from seqpack.train import TrainConfig, train

    def stop(step: int, rec: dict) -> None:
        if step == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train(
            TrainConfig(
                data=str(data), out=str(out), steps=4, batch_size=4, checkpoint_every=1, progress=False, size="tiny"
            ),
            on_step=stop,
        )


def test_resume_refuses_a_repack_with_other_tokens(made: dict[str, Path], tmp_path: Path) -> None:
    from seqpack.pipeline import OutputOptions, PackConfig, build_packed_dataset
    from seqpack.store import TokenStore
    from seqpack.tokenizer import Tokenizer
    from seqpack.train import TrainConfig, train

    data = tmp_path / "clm"
    shutil.copytree(made["clm"], data)
    _interrupted_run(data, tmp_path / "run")
    tok = Tokenizer.load(made["tokenizer"])
    store = TokenStore(made["store"])
    ids = np.array(store.tokens)
    other = tmp_path / "other-store"
    shutil.copytree(made["store"], other)
    swapped = np.where(ids == ids[0], ids[1], np.where(ids == ids[1], ids[0], ids)).astype(ids.dtype)  # same lengths
    from seqpack.store import StoreWriter

    with StoreWriter(other, vocab_size=store.vocab_size, tokenizer_hash=store.tokenizer_hash, overwrite=True) as w:
        w.add_batch(swapped, np.asarray(store.offsets))
    build_packed_dataset(
        TokenStore(other), tok, data, PackConfig(task="clm", max_len=64), output=OutputOptions(overwrite=True)
    )
    cfg = TrainConfig(
        data=str(data),
        out=str(tmp_path / "run"),
        steps=4,
        batch_size=4,
        checkpoint_every=1,
        progress=False,
        size="tiny",
    )
    with pytest.raises(ValueError, match="trained on other data"):
        train(cfg, resume=True)


def test_resume_refuses_rows_edited_after_packing(made: dict[str, Path], tmp_path: Path) -> None:
    from seqpack.train import TrainConfig, train

    data = tmp_path / "clm"
    shutil.copytree(made["clm"], data)
    _interrupted_run(data, tmp_path / "run")
    part = next((data / "data").glob("*.parquet"))
    raw = bytearray(part.read_bytes())
    raw[len(raw) // 2] ^= 1  # the manifest untouched
    part.write_bytes(bytes(raw))
    cfg = TrainConfig(
        data=str(data),
        out=str(tmp_path / "run"),
        steps=4,
        batch_size=4,
        checkpoint_every=1,
        progress=False,
        size="tiny",
    )
    with pytest.raises(ValueError, match="changed since seqpack pack"):
        train(cfg, resume=True)


# ---- 4. nothing non-finite ends with exit 0 -----------------------------------------------------------


def test_a_diverging_run_stops_at_the_step_in_one_line(made: dict[str, Path], tmp_path: Path, capsys) -> None:
    code, err = cli(
        capsys,
        "train",
        "--data",
        str(made["clm"]),
        "--out",
        str(tmp_path / "run"),
        "--size",
        "tiny",
        "--steps",
        "6",
        "--batch-size",
        "4",
        "--lr",
        "1e30",
        "--warmup",
        "0",
        "--quiet",
    )
    assert one_line(code, err) and "step " in err and ("loss is nan" in err or "gradient norm is" in err)
    assert not (tmp_path / "run").exists()  # nothing that looks finished


@pytest.mark.parametrize(
    "option",
    [
        {"weight_decay": math.nan},
        {"lr": math.inf},
        {"clip": math.nan},
        {"warmup": math.inf},
        {"betas": (math.nan, 0.99)},
        {"beta": math.inf},
        {"simpo_gamma": math.nan},
        {"label_smoothing": math.nan},
    ],
)
def test_non_finite_options_are_refused(option: dict, made: dict[str, Path], tmp_path: Path) -> None:
    from seqpack.train import TrainConfig

    with pytest.raises(ValueError, match=r"finite|must be"):
        TrainConfig(data=str(made["clm"]), out=str(tmp_path / "r"), **option)


@pytest.mark.parametrize(
    "option",
    [{"steps": 10.5}, {"batch_size": 4.0}, {"padded": "no"}, {"lr": "1e-3"}, {"betas": (0.9, "0.99")}, {"seed": True}],
)
def test_options_of_the_wrong_type_are_refused(option: dict, tmp_path: Path) -> None:
    from seqpack.train import TrainConfig

    with pytest.raises(TypeError, match=f"{next(iter(option))}.* must be"):
        TrainConfig(data="d", out=str(tmp_path / "r"), **option)


def _checkpoint(made: dict[str, Path], tmp_path: Path) -> Path:
    _interrupted_run(made["clm"], tmp_path / "run")
    return next(p for p in (tmp_path / "run", tmp_path / ".run.partial") if (p / "checkpoint.pt").is_file())


def test_a_damaged_checkpoint_is_refused(made: dict[str, Path], tmp_path: Path) -> None:
    import torch

    from seqpack.train.checkpoint import load_checkpoint

    run = _checkpoint(made, tmp_path)
    ck = torch.load(run / "checkpoint.pt", weights_only=True)
    want = {k: ck[k] for k in ("model", "data", "options")}
    raw = (run / "checkpoint.pt").read_bytes()
    places = np.linspace(len(raw) // 4, 3 * len(raw) // 4, 10).astype(int)
    refused = 0
    for off in places:  # 64 flipped bytes, at ten places
        b = bytearray(raw)
        b[off : off + 64] = bytes(x ^ 0xFF for x in b[off : off + 64])
        (run / "checkpoint.pt").write_bytes(bytes(b))
        with pytest.raises(ValueError, match=r"not a readable checkpoint|digest|NaN|not a seqpack"):
            load_checkpoint(run, **want)
        refused += 1
    assert refused == 10


def test_a_checkpoint_with_nan_weights_is_refused(made: dict[str, Path], tmp_path: Path) -> None:
    import torch

    from seqpack.train.checkpoint import load_checkpoint, save_checkpoint

    run = _checkpoint(made, tmp_path)
    ck = torch.load(run / "checkpoint.pt", weights_only=True)
    name = next(k for k, v in ck["model_state"].items() if v.is_floating_point())
    ck["model_state"][name][0] = math.nan
    save_checkpoint(
        run, {k: v for k, v in ck.items() if k not in ("kind", "format_version", "digest")}
    )  # a valid digest
    with pytest.raises(ValueError, match="NaN or inf"):
        load_checkpoint(run, model=ck["model"], data=ck["data"], options=ck["options"])


def test_a_full_disk_while_saving_a_checkpoint_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from seqpack.train.checkpoint import save_checkpoint

    def full(*a: object, **k: object) -> None:
        raise RuntimeError(
            "[enforce fail at inline_container.cc:664] . PytorchStreamWriter failed writing file data/3: "
            "file write failed"
        )

    monkeypatch.setattr(torch, "save", full)
    with pytest.raises(OSError, match=r"writing the checkpoint failed.*--resume"):
        save_checkpoint(tmp_path, {"model_state": {}})
    assert list(tmp_path.iterdir()) == []


def test_a_nan_margin_is_refused_when_packing(tmp_path: Path) -> None:
    from seqpack.pipeline import PackConfig, build_sequences
    from seqpack.tokenizer import open_tokenizer
    from tests.hf_tokenizers import bpe_tokenizer_dir

    records = [{"prompt": "p", "chosen": " yes", "rejected": " no", "margin": m} for m in (1.0, math.nan)]
    with pytest.raises(ValueError, match="example 1: 'margin' is nan"):
        build_sequences(
            records, open_tokenizer(bpe_tokenizer_dir(tmp_path / "tok")), PackConfig.for_task("preference", max_len=64)
        )


# ---- 5. hand-edited manifests ---------------------------------------------------------------------------

EDITS = {
    "task clm -> mlm": lambda m: m.update(task="mlm"),
    "task and its config -> mlm": lambda m: (m.update(task="mlm"), m["config"].update(task="mlm")),
    "every mark of the task -> mlm": lambda m: (m.update(task="mlm", causal_lm=False), m["config"].update(task="mlm")),
    "max_len smaller": lambda m: m.update(max_len=m["max_len"] // 2),
    "max_len larger": lambda m: m.update(max_len=m["max_len"] * 2),
    "num_sequences": lambda m: m.update(num_sequences=m["num_sequences"] + 1),
    "num_tokens": lambda m: m.update(num_tokens=5),
    "max_depth": lambda m: m.update(max_depth=1),
    "derived_columns emptied": lambda m: m.update(derived_columns={}),
    "input_ids a float": lambda m: m["columns"]["input_ids"].update(dtype="float32"),
    "input_ids another int": lambda m: m["columns"]["input_ids"].update(dtype="int64"),
    "input_ids shape": lambda m: m["columns"]["input_ids"].update(shape=[7]),
}


@pytest.mark.parametrize("edit", list(EDITS))
def test_an_edited_manifest_is_refused_in_one_line(edit: str, made: dict[str, Path], tmp_path: Path, capsys) -> None:
    data = tmp_path / "clm"
    shutil.copytree(made["clm"], data)
    m = json.loads((data / "manifest.json").read_text())
    EDITS[edit](m)
    (data / "manifest.json").write_text(json.dumps(m))
    code, err = cli(
        capsys,
        "train",
        "--data",
        str(data),
        "--out",
        str(tmp_path / "run"),
        "--size",
        "tiny",
        "--steps",
        "1",
        "--quiet",
    )
    assert one_line(code, err), err
    assert not (tmp_path / "run").exists()


# ---- 6. a reward model on pairs with a margin column ---------------------------------------------------


def test_reward_loss_takes_the_margins_of_the_batchs_depth(tmp_path: Path) -> None:
    """A batch whose rows hold fewer pairs than the dataset's deepest row: its margins are cut to its
    depth, as the reference log-probabilities are (this crashed on a shape mismatch)."""
    import torch

    from seqpack.data import load_packed
    from seqpack.data.torch_dataset import to_tensors
    from seqpack.nn.models import GPTConfig, GPTReward
    from seqpack.nn.preference import PreferenceLoss, bradley_terry
    from seqpack.pipeline import PackConfig, build_packed_dataset
    from seqpack.tasks.preference.forward import preference_forward
    from seqpack.tokenizer import open_tokenizer
    from tests.hf_tokenizers import bpe_tokenizer_dir, preference_records

    records = [{**r, "margin": 0.25 * i} for i, r in enumerate(preference_records(40, seed=5))]
    tok = open_tokenizer(bpe_tokenizer_dir(tmp_path / "tok"))
    m = build_packed_dataset(records, tok, tmp_path / "p", PackConfig.for_task("preference", max_len=512))
    _, cols = load_packed(tmp_path / "p")
    depth = cols["num_sequences"]
    assert m["max_depth"] > 1 and cols["margin"].shape[1] == m["max_depth"]
    row = int(np.argmin(depth))  # a row shallower than the deepest
    assert depth[row] < m["max_depth"]
    batch = {k: v for k, v in to_tensors({k: c[row : row + 1] for k, c in cols.items()}).items() if k != "example_ids"}
    torch.manual_seed(0)
    model = GPTReward(GPTConfig(vocab_size=tok.vocab_size, hidden=16, layers=1, heads=2, max_position=512))
    out = preference_forward(model, batch, PreferenceLoss(kind="bt"))
    d = int(depth[row])
    want = bradley_terry(out.extra["chosen_rewards"], out.extra["rejected_rewards"], batch["margin"][:, :d]).mean()
    assert torch.allclose(out.loss, want)  # type: ignore[arg-type]  # PackedOutput.loss: set when the batch has targets


# ---- 7. line endings ---------------------------------------------------------------------------------


@pytest.mark.parametrize("ending", ["\n", "\r\n"])
def test_one_per_line_reads_every_line_ending(ending: str, tmp_path: Path) -> None:
    from seqpack.corpus.readers import read_text

    p = tmp_path / "t.txt"
    p.write_bytes(ending.join(["first line", "", "second", "  ", "third", ""]).encode())
    assert list(read_text(p, one_per_line=True)) == ["first line", "second", "  ", "third"]


# ---- 8. memory follows the data, not the arguments -------------------------------------------------------


def test_a_long_run_reaches_bpe_in_pieces_of_at_most_a_mebibyte() -> None:
    from seqpack import _native
    from seqpack.tokenizer.pretokenize import MAX_PIECE_BYTES, split_words

    text = "x " + "a" * (MAX_PIECE_BYTES - 1) + "é" + "a" * (MAX_PIECE_BYTES + 5) + " " * (3 * MAX_PIECE_BYTES) + "b"
    ref = split_words(text)
    assert "".join(ref) == text and max(len(w.encode()) for w in ref) <= MAX_PIECE_BYTES
    assert list(_native.split_words(text)) == ref  # the compiled splitter cuts at the same places
    assert split_words("short words here") == ["short", " words", " here"]


def test_training_on_a_long_run_costs_what_its_pieces_cost(tmp_path: Path) -> None:
    from seqpack.tokenizer import BPEConfig
    from seqpack.tokenizer.pretokenize import MAX_PIECE_BYTES
    from seqpack.tokenizer.train import train_bpe_corpus

    run = "z" * (3 * MAX_PIECE_BYTES)  # one pre-token of 3 MiB: counted as three 1 MiB pieces
    res = train_bpe_corpus(documents=[run], config=BPEConfig(vocab_size=270, workers=1))
    same = train_bpe_corpus(documents=["z" * MAX_PIECE_BYTES] * 3, config=BPEConfig(vocab_size=270, workers=1))
    assert res.merges == same.merges and len(res.merges) == 14


@pytest.mark.parametrize(
    "flags", [["--world-size", "1000000000"], ["--world-size", "4", "--micro-batch", "1000000000"]]
)
def test_balancing_arguments_past_the_packs_are_refused(flags: list[str], tmp_path: Path, capsys) -> None:
    h = tmp_path / "h.npy"
    counts = np.zeros(512, np.int64)
    counts[[10, 100, 300, 511]] = [5, 7, 3, 2]
    np.save(h, counts)
    code, err = cli(capsys, "plan", "--histogram", str(h), "--max-len", "512", *flags)
    assert one_line(code, err) and "no step could be filled" in err


def test_mlm_passes_are_each_made_compact_and_give_the_same_sequences() -> None:
    import tempfile

    from seqpack.store import build_store
    from seqpack.tasks.mlm import MLMConfig, mlm_sequences
    from seqpack.tokenizer.tokenizer import Tokenizer
    from tests.tasks.test_sequences import text_docs

    tok = Tokenizer(
        {i: bytes([i]) for i in range(256)}, [], special_tokens=["<|endoftext|>", "[CLS]", "[SEP]", "[MASK]"]
    )
    store = build_store(text_docs(40), tok, Path(tempfile.mkdtemp()) / "s")
    one = mlm_sequences(store, tok, MLMConfig(max_len=64, seed=3))
    three = mlm_sequences(store, tok, MLMConfig(max_len=64, seed=3, dupe_factor=3))
    n, t = one.num_sequences, int(one.offsets[-1])
    assert three.num_sequences > 2 * n and np.array_equal(three.offsets[: n + 1], one.offsets)  # pass 1 = dupe 1
    for k, v in one.token_fields.items():
        assert three.token_fields[k].dtype == v.dtype and np.array_equal(three.token_fields[k][:t], v)
    assert np.array_equal(three.example_ids[:n], one.example_ids)


def test_the_memory_limit_is_the_process_own_cgroups() -> None:
    from seqpack._resources import cgroup_limit_files

    v1 = "12:cpu,cpuacct:/x\n4:memory:/slurm/uid_1/job_7\n0::/"
    assert cgroup_limit_files(v1)[:2] == [
        "/sys/fs/cgroup/memory/slurm/uid_1/job_7/memory.limit_in_bytes",
        "/sys/fs/cgroup/memory/slurm/uid_1/memory.limit_in_bytes",
    ]
    assert cgroup_limit_files("0::/system.slice/run.scope")[0] == "/sys/fs/cgroup/system.slice/run.scope/memory.max"


# ---- 9. every output path form -----------------------------------------------------------------------------


def _link_forms(tmp_path: Path) -> dict[str, Path]:
    (tmp_path / "target").mkdir()
    forms = {
        "dangling": tmp_path / "dangling",
        "to a directory": tmp_path / "link",
        "a loop": tmp_path / "loop1",
        "through a loop": tmp_path / "loop1" / "sub",
    }
    forms["dangling"].symlink_to(tmp_path / "nowhere")
    forms["to a directory"].symlink_to(tmp_path / "target", target_is_directory=True)
    (tmp_path / "loop1").symlink_to(tmp_path / "loop2")
    (tmp_path / "loop2").symlink_to(tmp_path / "loop1")
    return forms


@pytest.mark.parametrize("form", ["dangling", "to a directory", "a loop", "through a loop"])
@pytest.mark.parametrize("command", ["pack", "tokenize", "train-tokenizer", "train"])
def test_a_linked_output_is_refused_before_any_work(
    form: str, command: str, made: dict[str, Path], tmp_path: Path, capsys
) -> None:
    out = _link_forms(tmp_path)[form]
    corpus = tmp_path / "c.txt"
    corpus.write_text("some words<|endoftext|>more words")
    argv = {
        "pack": ["pack", str(made["store"]), "--task", "clm", "--max-len", "64", "--tokenizer", str(made["tokenizer"])],
        "tokenize": ["tokenize", str(corpus), "--tokenizer", str(made["tokenizer"])],
        "train-tokenizer": ["train-tokenizer", str(corpus), "--vocab-size", "260"],
        "train": ["train", "--data", str(made["clm"]), "--size", "tiny", "--steps", "1", "--quiet"],
    }[command]
    links = {p: os.readlink(p) for p in tmp_path.iterdir() if p.is_symlink()}
    code, err = cli(capsys, *argv, "--out", str(out))
    assert one_line(code, err) and ("symbolic link" in err or "loop" in err)
    assert {p: os.readlink(p) for p in tmp_path.iterdir() if p.is_symlink()} == links  # every link as it was
    assert list((tmp_path / "target").iterdir()) == [] and not (tmp_path / "nowhere").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no .partial, .lock or .tmp


def test_train_never_replaces_a_directory_that_is_not_a_run(made: dict[str, Path], tmp_path: Path, capsys) -> None:
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep")
    code, err = cli(
        capsys, "train", "--data", str(made["clm"]), "--out", str(out), "--size", "tiny", "--steps", "1", "--quiet"
    )
    assert one_line(code, err) and "did not make (notes.txt)" in err and (out / "notes.txt").read_text() == "keep"


@pytest.mark.parametrize("flags", [["--threads", "100000"], ["--max-position", "1000000000000"]])
def test_train_arguments_that_set_memory_or_threads_are_refused(
    flags: list[str], made: dict[str, Path], tmp_path: Path, capsys
) -> None:
    code, err = cli(
        capsys,
        "train",
        "--data",
        str(made["clm"]),
        "--out",
        str(tmp_path / "r"),
        "--size",
        "tiny",
        "--steps",
        "1",
        "--quiet",
        *flags,
    )
    assert one_line(code, err) and not (tmp_path / "r").exists()  # (10^5 threads crashed torch; the table took 1.9 PiB)


# ---- 11. hints that name the command's own flags; numbers refused before work --------------------------------


def test_stats_names_its_own_flag_for_long_lengths(tmp_path: Path, capsys) -> None:
    np.save(tmp_path / "l.npy", np.array([10, 2000, 30]))
    code, err = cli(capsys, "stats", "--lengths", str(tmp_path / "l.npy"), "--max-len", "1024")
    assert one_line(code, err) and "pass --max-len 2000 or more" in err


@pytest.mark.parametrize("budget", ["inf", "nan", "0", "1e9"])
def test_demo_budget_is_checked_before_any_stage(budget: str, tmp_path: Path, capsys) -> None:
    corpus = tmp_path / "c.txt"
    corpus.write_text("words<|endoftext|>more words")
    code, err = cli(capsys, "demo", "--corpus", str(corpus), "--out", str(tmp_path / "d"), "--budget", budget)
    assert one_line(code, err) and "budget must be" in err and not (tmp_path / "d").exists()
