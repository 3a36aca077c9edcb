"""``seqpack pack --task vision`` and ``seqpack train --hf-model VLM_CONFIG``: the library's rows
from the command line, a training step whose per-sample losses are each sample's own, exact resume,
and one-line refusals.

Tolerances: fp32, as in test_vision.py: a packed row and a sample alone differ only in the order
and length of the attention and loss sums (<= 512 terms of order 1: <= sqrt(512) * 2**-23 ~ 3e-6),
so 1e-5 holds with margin while one token attending across samples moves a loss by 1e-2 or more.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("transformers")
pytest.importorskip("PIL")
torch = pytest.importorskip("torch")

from seqpack.cli.main import main  # noqa: E402
from seqpack.experiments.tiny_vlm import synthetic_records, tiny_config, tiny_processor, tiny_vlm  # noqa: E402
from seqpack.tasks import get_task  # noqa: E402
from seqpack.tasks.vision import VisionCollator, VisionRows, pack_vision, vision_samples  # noqa: E402
from seqpack.tasks.vision.processor import load_processor  # noqa: E402
from seqpack.train import TrainConfig, train  # noqa: E402
from seqpack.train.checkpoint import read_metrics  # noqa: E402
from seqpack.train.data import TrainData  # noqa: E402
from seqpack.train.models import build_model  # noqa: E402

ATOL = 1e-5  # see the module docstring
TIMING = ("step_seconds", "compute_seconds", "data_seconds", "train_seconds", "tokens_per_s", "sequences_per_s")


def write_records(folder: Path, n: int = 24, seed: int = 3) -> tuple[Path, list[dict]]:
    """``n`` records as JSONL with their images as PNG files beside it (paths relative to it)."""
    recs = synthetic_records(n, seed=seed, side=(20, 90))
    (folder / "img").mkdir(parents=True)
    with open(folder / "train.jsonl", "w", encoding="utf-8") as f:
        for i, r in enumerate(recs):
            paths = []
            for k, data in enumerate(r["images"]):
                (folder / "img" / f"{i}_{k}.png").write_bytes(data)
                paths.append(f"img/{i}_{k}.png")
            f.write(json.dumps({"messages": r["messages"], "images": paths}) + "\n")
    return folder / "train.jsonl", recs


@pytest.fixture(scope="module", params=["qwen2_vl", "llava"])
def packed(request, tmp_path_factory):
    """A family's processor and config saved, its records packed by ``seqpack pack``."""
    family, d = request.param, tmp_path_factory.mktemp(request.param)
    processor = tiny_processor(family)
    processor.save_pretrained(d / "processor")
    tiny_config(family, processor).save_pretrained(d / "model")
    jsonl, recs = write_records(d)
    code = main(
        [
            "pack",
            str(jsonl),
            "--task",
            "vision",
            "--max-len",
            "512",
            "--tokenizer",
            str(d / "processor"),
            "--out",
            str(d / "packs"),
            "--json",
        ]
    )
    assert code == 0
    return family, d, recs


def test_saved_processors_load_without_a_video_processor(tmp_path):
    """A Qwen2-VL processor's directory names a video processor (torchvision); the loader falls back
    to its image processor and tokenizer, and LLaVA's loads as it is."""
    for family in ("qwen2_vl", "qwen2_5_vl", "llava"):
        p = tiny_processor(family)
        p.save_pretrained(tmp_path / family)
        q = load_processor(tmp_path / family)
        assert type(q).__name__ == type(p).__name__ and q.image_processor.to_dict() == p.image_processor.to_dict()
        assert q.chat_template == p.chat_template and q.tokenizer.get_vocab() == p.tokenizer.get_vocab()


def test_pack_cli_writes_the_librarys_rows(packed):
    """The command's rows are those of vision_samples + pack_vision on the same records, and the
    directory keeps the processor they were made with."""
    _family, d, recs = packed
    rows = VisionRows(d / "packs")
    processor = load_processor(d / "packs" / "processor")
    want = pack_vision(vision_samples(recs, processor, max_len=512), max_len=512)
    assert len(rows) == want.num_rows and rows.manifest["task"] == "vision"
    assert rows.manifest["kind"] == "seqpack.packed_dataset" and len(rows.examples) == len(recs)
    assert rows.manifest["task_info"]["images"] == sum(len(r["images"]) for r in recs)
    assert rows.manifest["num_sequences"] == len(recs) and rows.manifest["efficiency"] > 0.5
    for i in range(len(rows)):
        got, exp = rows[i], want.row(i)
        for k in ("input_ids", "labels", "seq_lengths", "example_ids", "image_grids"):
            assert np.array_equal(got[k], exp[k]), (i, k)
        assert got["images"] == exp["images"]  # the files' bytes, as read


def test_every_job_option_packs_the_same_rows(packed, tmp_path):
    """The pack job's options apply to image-text rows as to any task: input shards of 7 examples on
    2 threads (one example-table part each), parts of 3 packs, .bin columns, lz4, plain encoding and
    the derived columns stored give the same rows and images as the default job; the Parquet rows
    name the examples the example table holds."""
    import pyarrow.parquet as pq

    _family, d, recs = packed
    out = tmp_path / "opts"
    code = main(
        [
            "pack",
            str(d / "train.jsonl"),
            "--task",
            "vision",
            "--max-len",
            "512",
            "--tokenizer",
            str(d / "processor"),
            "--out",
            str(out),
            "--shard-examples",
            "7",
            "--shards-at-once",
            "2",
            "--shard-packs",
            "3",
            "--export-bin",
            "--compression",
            "lz4",
            "--encoding",
            "plain",
            "--write-derived",
            "--json",
        ]
    )
    assert code == 0
    a, b = VisionRows(d / "packs"), VisionRows(out)
    parts = b.manifest["example_table"]["parts"]
    assert [p["rows"] for p in parts] == [7, 7, 7, 3] and b.manifest["bin"] and len(b.manifest["shards"]) > 1
    assert len(a) == len(b)
    for i in range(len(a)):
        x, y = a[i], b[i]
        assert x["images"] == y["images"] and all(np.array_equal(x[k], y[k]) for k in x if k != "images"), i
    ids = sorted(pq.read_table(out / p["file"]).column("example_id").to_pylist() for p in parts)
    flat = [i for part in ids for i in part]
    assert flat == sorted(flat) == list(range(len(recs)))


def test_train_batch_losses_are_each_samples_own(packed):
    """The task's forward on a training batch (rows side by side, packed attention): each sample's
    loss equals the same weights' loss on that sample alone (sdpa, one sample per call)."""
    family, d, recs = packed
    data = TrainData(d / "packs", eval_fraction=0.2)
    cfg = TrainConfig(data=str(d / "packs"), out=str(d / "unused"), hf_model=str(d / "model"), progress=False)
    torch.manual_seed(0)
    model, spec = build_model(data.manifest, cfg)
    processor, alone_model = tiny_vlm(family)
    model.load_state_dict(alone_model.state_dict())
    model.eval()
    assert spec["library"] == "transformers"
    units = np.arange(min(3, data.num_units))
    batch = data.batch(units)
    task = get_task("vision")
    with torch.no_grad():
        out = task.hf_models().run(model, batch, reduction="sequence")
    rows = VisionRows(d / "packs")
    examples = np.concatenate([rows[int(i)]["example_ids"] for i in data.train_packs[units]])
    samples = vision_samples(recs, processor, max_len=512)
    collate = VisionCollator(processor)
    losses = []
    for j, e in enumerate(examples.tolist()):
        one = samples.sample(int(np.flatnonzero(samples.example_ids == e)[0]))
        row = {
            "input_ids": one["input_ids"],
            "labels": one["labels"],
            "seq_lengths": np.array([one["input_ids"].size]),
            "images": one["images"],
            "image_grids": one["grids"],
        }
        with torch.no_grad():
            losses.append(float(alone_model(**collate([row])).loss))
        assert float(out.per_sequence[0, j]) == pytest.approx(losses[-1], abs=ATOL), j
    assert bool(out.present.all()) and out.per_sequence.shape == (1, len(examples))
    assert float(out.loss) == pytest.approx(float(np.mean(losses)), abs=ATOL)
    assert float(task.trains().loss_units(batch, "sequence")[0]) == len(examples)


def test_train_cli_runs_and_resumes_exactly(packed, tmp_path):
    """`seqpack train --hf-model` on the rows; a run cut at step 2 and resumed ends with the weights
    and metrics of the uninterrupted one (the same sums in the same order: equal bits)."""
    _family, d, _ = packed
    base = dict(
        data=str(d / "packs"),
        hf_model=str(d / "model"),
        steps=4,
        batch_size=2,
        progress=False,
        eval_fraction=0.2,
        eval_batch_size=2,
        threads=2,
        dropout=None,
    )
    whole = tmp_path / "whole"
    s = train(TrainConfig(out=str(whole), **base))
    assert s["steps"] == 4 and s["sequences"] > 4 and s["task"] == "vision" and np.isfinite(s["eval"]["lm_loss"])
    assert s["attention"]["implementation"] == "seqpack_packed"

    def interrupt(step, rec):
        if step == 2:
            os.kill(os.getpid(), signal.SIGINT)

    cut = tmp_path / "cut"
    with pytest.raises(KeyboardInterrupt, match="interrupted at step 2"):
        train(TrainConfig(out=str(cut), **base), on_step=interrupt)
    train(TrainConfig(out=str(cut), **base), resume=True)
    a, b = (torch.load(r / "checkpoint.pt", weights_only=True)["model_state"] for r in (whole, cut))
    assert all(torch.equal(a[k], b[k]) for k in a)
    untimed = [[{k: v for k, v in r.items() if k not in TIMING} for r in read_metrics(x)] for x in (whole, cut)]
    assert untimed[0] == untimed[1]


def test_train_cli_prints_its_summary(packed, tmp_path, capsys):
    _family, d, _ = packed
    code = main(
        [
            "train",
            "--data",
            str(d / "packs"),
            "--hf-model",
            str(d / "model"),
            "--out",
            str(tmp_path / "run"),
            "--steps",
            "1",
            "--batch-size",
            "2",
            "--eval-fraction",
            "0.2",
            "--quiet",
            "--reduction",
            "token",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0 and "ForConditionalGeneration: 1 steps" in out and "attention: seqpack_packed" in out


@pytest.mark.parametrize(
    "args, message",
    [
        (["--model", "gpt"], "pass --hf-model"),
        ([], "pass --hf-model"),
        (["--padded"], "--padded is not offered for task vision"),
        (["--hf-model", "LLAMA"], "not a vision-language model"),
    ],
)
def test_train_refusals_are_one_line(packed, tmp_path, capsys, args, message):
    _family, d, _ = packed
    if "LLAMA" in args:
        from transformers import LlamaConfig

        LlamaConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2).save_pretrained(
            tmp_path / "llama"
        )
        args = ["--hf-model", str(tmp_path / "llama")]
    elif "--hf-model" not in args and args != [] and args[0] != "--model":
        args = args + ["--hf-model", str(d / "model")]
    code = main(
        [
            "train",
            "--data",
            str(d / "packs"),
            "--out",
            str(tmp_path / "run"),
            "--steps",
            "1",
            "--batch-size",
            "2",
            "--quiet",
            *args,
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and message in err and "Traceback" not in err, err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--position-offset", "2"], "--position-offset is not taken by task vision"),
        (["--context-parallel", "2"], "--context-parallel is not taken by task vision"),
        (["--overflow", "split"], "overflow must be one of truncate|drop|error"),
        (["--tokenizer-is-a-file"], "task vision reads the model's processor"),
    ],
)
def test_pack_refusals_are_one_line_and_write_nothing(packed, tmp_path, capsys, extra, message):
    _family, d, _ = packed
    tok = str(d / "processor")
    if extra == ["--tokenizer-is-a-file"]:
        tok, extra = str(d / "train.jsonl.missing"), []
    code = main(
        [
            "pack",
            str(d / "train.jsonl"),
            "--task",
            "vision",
            "--max-len",
            "512",
            "--tokenizer",
            tok,
            "--out",
            str(tmp_path / "out"),
            *extra,
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and message in err and "Traceback" not in err, err
    assert not (tmp_path / "out").exists()


def test_two_cpu_ranks_agree_with_one_process(packed, tmp_path):
    """torchrun, 2 gloo ranks (each half of every micro-batch; a rank whose rows hold no image leaves
    the vision encoder unused) == 1 process on the whole batch. Tolerance: Adam after 3 steps on
    gradients summed in another order across ranks (fp32), as for text runs
    (:func:`tests.train.conftest.assert_adam_weights_close`)."""
    from tests.train.conftest import assert_adam_weights_close, torchrun_train

    _family, d, _ = packed
    opts = [
        "--hf-model",
        str(d / "model"),
        "--steps",
        "3",
        "--batch-size",
        "4",
        "--eval-fraction",
        "0.2",
        "--threads",
        "1",
    ]
    torchrun_train(d / "packs", tmp_path / "two", *opts, "--quiet")
    main(["train", "--data", str(d / "packs"), "--out", str(tmp_path / "one"), *opts, "--quiet"])
    p2, p1 = (torch.load(tmp_path / r / "checkpoint.pt", weights_only=True)["model_state"] for r in ("two", "one"))
    assert_adam_weights_close(p2, p1, lr=1e-3, steps=3)  # the default AdamW, 3 steps

    def steps(run: Path) -> list[tuple[int, int, float]]:
        return [(r["step"], r["step_sequences"], round(r["loss"], 4)) for r in read_metrics(run) if "loss" in r]

    assert steps(tmp_path / "two") == steps(tmp_path / "one")


def test_the_processor_travels_to_other_processes_by_its_directory(packed):
    """What --tokenizer opens for task vision pickles by its directory (a processor made for images
    only does not pickle) and keeps its fingerprint; the copy saved beside the rows has the same one."""
    import pickle

    _family, d, _ = packed
    tok = get_task("vision").packs().open_tokenizer(d / "processor")
    again = pickle.loads(pickle.dumps(tok))
    assert again.processor is not tok.processor and again.vocab_size == tok.vocab_size
    assert (
        again.fingerprint()
        == tok.fingerprint()
        == get_task("vision").packs().open_tokenizer(d / "packs" / "processor").fingerprint()
    )


def test_a_stream_of_image_text_records_is_refused_in_one_line(packed):
    from seqpack.pipeline.streaming import PackedStream, StreamConfig

    _family, d, recs = packed
    tok = get_task("vision").packs().open_tokenizer(d / "processor")
    with pytest.raises(ValueError, match="task vision is not streamed") as e:
        PackedStream(recs, config=StreamConfig(task="vision", max_len=512), tokenizer=tok)
    assert "\n" not in str(e.value)


def test_ray_workers_pack_the_same_rows(packed, tmp_path):
    """On Ray, a worker opens the processor from its directory: the same rows and images as the job
    in this process (one family and one worker: what travels is the same for both)."""
    pytest.importorskip("ray")
    from seqpack.pipeline import PackConfig, build_packed_dataset
    from seqpack.pipeline.engine import get_engine

    family, d, _recs = packed
    if family != "qwen2_vl":
        pytest.skip("one family is enough for the engine")
    tok, engine = get_task("vision").packs().open_tokenizer(d / "processor"), get_engine("ray", num_cpus=1)
    try:
        build_packed_dataset(
            d / "train.jsonl",
            tok,
            tmp_path / "ray",
            PackConfig.for_task("vision", max_len=512),
            engine=engine,
            shard_examples=12,
        )
    finally:
        engine.close()
    a, b = VisionRows(d / "packs"), VisionRows(tmp_path / "ray")
    assert len(a) == len(b) and len(b.manifest["example_table"]["parts"]) == 2
    assert all(
        a[i]["images"] == b[i]["images"] and np.array_equal(a[i]["input_ids"], b[i]["input_ids"]) for i in range(len(a))
    )


def test_a_rerun_redoes_the_shard_whose_image_file_changed(packed, tmp_path, monkeypatch):
    """A job that failed after its sequences stages is finished by the next run, which reuses a
    shard's work only while the image files its records name are unchanged: an image rewritten
    under the same name redoes its shard, and the rows hold the new image."""
    import shutil

    import seqpack.pipeline.job as job_mod

    family, d, recs = packed
    if family != "qwen2_vl":
        pytest.skip("one family is enough for the job's keys")
    src = tmp_path / "src"
    shutil.copytree(d / "img", src / "img")
    shutil.copy(d / "train.jsonl", src / "train.jsonl")
    args = [
        "pack",
        str(src / "train.jsonl"),
        "--task",
        "vision",
        "--max-len",
        "512",
        "--tokenizer",
        str(d / "processor"),
        "--out",
        str(tmp_path / "out"),
        "--shard-examples",
        "12",
        "--json",
    ]
    real = job_mod.packs_stage
    monkeypatch.setattr(job_mod, "packs_stage", lambda *a: (_ for _ in ()).throw(OSError("disk full")))
    assert main(args) == 2
    monkeypatch.setattr(job_mod, "packs_stage", real)
    k = next(i for i, r in enumerate(recs) if r["images"] and i >= 12)  # an image of the second shard
    old = (src / "img" / f"{k}_0.png").read_bytes()
    new = recs[next(i for i, r in enumerate(recs) if r["images"] and r["images"][0] != old)]["images"][0]
    (src / "img" / f"{k}_0.png").write_bytes(new)
    from seqpack.pipeline import OutputOptions, PackConfig, build_packed_dataset

    tok = get_task("vision").packs().open_tokenizer(d / "processor")
    m = build_packed_dataset(
        src / "train.jsonl",
        tok,
        tmp_path / "out",
        PackConfig.for_task("vision", max_len=512),
        output=OutputOptions(),
        shard_examples=12,
    )
    assert "sequences-00000" in m["reused"] and "sequences-00001" in m["redone"]
    rows = VisionRows(tmp_path / "out")
    table = rows.examples.rows([k])[0]
    assert table["images"][0] == new != old
