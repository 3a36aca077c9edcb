"""Image-text samples packed exactly: each sample is the processor's own, keeps its (m)RoPE positions
in a row, and the packed model pass equals each sample alone and TRL's own unpacked VLM SFT.

Tolerances: fp32 throughout. Packed and alone runs differ only in the order and length of the
attention sums (a row of <= 512 keys against one sample's keys) and the loss mean's summation
order; with activations of order 1 that is <= sqrt(512) * 2**-23 * |x| ~ 3e-6 for logits, so 1e-5
holds with margin, while one token attending across samples moves logits by 1e-2 or more here.
"""

from __future__ import annotations

import io

import numpy as np
import pytest

pytest.importorskip("transformers")
pytest.importorskip("PIL")
torch = pytest.importorskip("torch")

from seqpack.data import hf_dataset  # noqa: E402
from seqpack.experiments.tiny_vlm import FAMILIES, synthetic_records, tiny_processor, tiny_vlm  # noqa: E402
from seqpack.pipeline import PackConfig, build_packed_dataset  # noqa: E402
from seqpack.tasks.vision import (  # noqa: E402
    POSITION_SCHEMES,
    ProcessorTokenizer,
    VisionCollator,
    VisionRows,
    mrope_positions,
    pack_vision,
    vision_samples,
)

ATOL = 1e-5  # see the module docstring
COUNTS = (0, 1, 3, 1, 0, 2, 3, 1)  # images per record: none, one and three, mixed sizes


def records(seed: int = 0) -> list[dict]:
    return [r for k, n in enumerate(COUNTS) for r in synthetic_records(1, seed=seed + k, images=(n, n), side=(20, 110))]


def write(recs: list[dict], processor, out, max_len: int = 512) -> dict:
    """The pack job on records in memory: a packed dataset, its images in the example table."""
    return build_packed_dataset(
        recs, ProcessorTokenizer(processor), out, PackConfig.for_task("vision", max_len=max_len)
    )


@pytest.fixture(scope="module", params=FAMILIES)
def vlm(request):
    processor, model = tiny_vlm(request.param)
    return request.param, processor, model


def pil(data: bytes):
    from PIL import Image

    return Image.open(io.BytesIO(data)).convert("RGB")


def as_row(parts: list[dict]) -> dict:
    """Samples (``VisionSamples.sample``) side by side as one row."""
    return {
        "input_ids": np.concatenate([p["input_ids"] for p in parts]),
        "labels": np.concatenate([p["labels"] for p in parts]),
        "seq_lengths": np.array([p["input_ids"].size for p in parts]),
        "images": [b for p in parts for b in p["images"]],
        "image_grids": np.concatenate([p["grids"] for p in parts]).reshape(-1, 3),
    }


def test_each_sample_is_the_processors_own_and_trls_labels(vlm):
    """Ids as the processor makes them; labels where TRL's ``assistant_only_loss`` puts them."""
    from trl.trainer.sft_trainer import DataCollatorForVisionLanguageModeling

    _, processor, _ = vlm
    recs = records()
    s = vision_samples(recs, processor, max_len=1024)
    assert s.num_samples == len(recs) and np.diff(s.image_offsets).tolist() == list(COUNTS)
    trl = DataCollatorForVisionLanguageModeling(processor, assistant_only_loss=True)
    batch = trl([{"messages": r["messages"], "images": [pil(b) for b in r["images"]]} for r in recs])
    for i, r in enumerate(recs):
        one, n = s.sample(i), int(batch["attention_mask"][i].sum())
        assert one["images"] == r["images"]
        assert np.array_equal(one["input_ids"], batch["input_ids"][i, :n].numpy())
        assert np.array_equal(one["labels"], batch["labels"][i, :n].numpy())
        assert (one["labels"] != -100).any() and not (
            one["input_ids"][one["labels"] != -100] == processor.image_token_id
        ).any()


def test_packed_rows_equal_each_sample_alone(vlm):
    """Loss, logits and gradients of a packed batch equal those of every sample run alone."""
    _, processor, model = vlm
    s = vision_samples(records(), processor, max_len=512)
    packs = pack_vision(s, max_len=512)
    assert packs.num_rows < s.num_samples  # rows hold several samples
    collate = VisionCollator(processor)
    batch = collate([packs.row(i) for i in range(packs.num_rows)])
    model.zero_grad()
    out = model(**batch)
    out.loss.backward()
    packed_grads = {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}
    order = np.concatenate([packs.packing.pack(i) for i in range(packs.num_rows)])
    model.zero_grad()
    total, at, targets = 0.0, 0, int((s.labels != -100).sum())
    for i in order.tolist():
        one = s.sample(int(i))
        alone = model(**collate([as_row([one])]))
        n = one["input_ids"].size
        assert torch.allclose(out.logits[0, at : at + n], alone.logits[0], atol=ATOL, rtol=0)
        k = int((one["labels"] != -100).sum())  # the model shifts; the first label is always -100
        (alone.loss * k / targets).backward()  # the sum of per-sample sums over all targets: the packed mean
        total += float(alone.loss) * k
        at += n
    assert float(out.loss) == pytest.approx(total / targets, abs=ATOL)
    for k, p in model.named_parameters():
        if p.grad is not None:
            assert torch.allclose(packed_grads[k], p.grad, atol=ATOL, rtol=0), k
    model.zero_grad()


def test_packed_loss_and_gradients_equal_trls_unpacked_vlm_sft(vlm):
    """TRL's own collator (padded, one sample per row) and seqpack's packed rows: same loss and gradients."""
    from trl.trainer.sft_trainer import DataCollatorForVisionLanguageModeling

    _, processor, model = vlm
    recs = records(seed=20)
    trl = DataCollatorForVisionLanguageModeling(processor, assistant_only_loss=True)
    padded = trl([{"messages": r["messages"], "images": [pil(b) for b in r["images"]]} for r in recs])
    packs = pack_vision(vision_samples(recs, processor, max_len=512), max_len=512)
    grads = []
    for batch in (padded, VisionCollator(processor)([packs.row(i) for i in range(packs.num_rows)])):
        model.zero_grad()
        loss = model(**batch).loss
        loss.backward()
        grads.append((float(loss), {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}))
    model.zero_grad()
    (trl_loss, trl_grads), (ours, our_grads) = grads
    assert ours == pytest.approx(trl_loss, abs=ATOL)
    assert trl_grads.keys() == our_grads.keys()
    for k in trl_grads:
        assert torch.allclose(trl_grads[k], our_grads[k], atol=ATOL, rtol=0), k


def test_no_token_attends_across_samples(vlm):
    """Rewriting one sample's tokens and image leaves every logit of its row-mate unchanged."""
    _, processor, model = vlm
    s = vision_samples(records(seed=40), processor, max_len=1024)
    a, b = s.sample(2), s.sample(1)  # three images, then one
    other = vision_samples(records(seed=41), processor, max_len=1024).sample(2)
    collate = VisionCollator(processor)
    with torch.no_grad():
        first = model(**collate([as_row([a, b])])).logits[0, a["input_ids"].size :]
        changed = model(**collate([as_row([other, b])])).logits[0, other["input_ids"].size :]
    # masked keys get exactly zero weight, so b's logits differ only by the attention sums' lengths
    assert torch.allclose(first, changed, atol=ATOL, rtol=0)


def test_rope_positions_are_the_models_own(vlm):
    """Each sample's three rope axes equal the model's ``get_rope_index`` on it alone."""
    family, processor, model = vlm
    if POSITION_SCHEMES["mrope"] is not VisionCollator(processor).positions:
        pytest.skip(f"{family} has 1-D positions")
    s = vision_samples(records(), processor, max_len=1024)
    for i in range(s.num_samples):
        one = s.sample(i)
        ids = torch.from_numpy(one["input_ids"])[None]
        types = (ids == processor.image_token_id).int()
        if not one["images"]:
            continue  # the model's own rule for text alone: 0..n-1 on every axis
        ref, _ = model.model.get_rope_index(ids, mm_token_type_ids=types, image_grid_thw=torch.from_numpy(one["grids"]))
        got = mrope_positions(one["input_ids"] == processor.image_token_id, one["grids"], merge=2)
        assert np.array_equal(got, ref[:, 0].numpy())


def test_a_samples_positions_in_any_row_are_its_own():
    """Hypothesis over mixes of samples: every sample's slice of a row's positions is its own alone,
    and the first axis restarts at each sample."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    processor = tiny_processor("qwen2_vl")
    s = vision_samples(records(seed=60), processor, max_len=1024)
    collate = VisionCollator(processor)
    alone = [collate([as_row([s.sample(i)])])["position_ids"][:, 0].numpy() for i in range(s.num_samples)]

    @settings(max_examples=30, deadline=None)
    @given(st.lists(st.integers(0, s.num_samples - 1), min_size=1, max_size=6))
    def check(mix):
        pos = collate([as_row([s.sample(i) for i in mix])])["position_ids"][:, 0].numpy()
        at = 0
        for i in mix:
            n = alone[i].shape[1]
            assert np.array_equal(pos[:, at : at + n], alone[i])
            assert np.array_equal(pos[0, at : at + n], np.arange(n))
            at += n
        assert at == pos.shape[1]

    check()


def test_rows_written_read_back_and_handed_to_datasets(tmp_path):
    """The pack job's rows read back as pack_vision makes them in memory, and through hf_dataset
    (the packed columns, each row's images and grids joined from the example table)."""
    processor = tiny_processor("qwen2_vl")
    packs = pack_vision(vision_samples(records(), processor, max_len=512), max_len=512)
    m = write(records(), processor, tmp_path / "packs")
    rows = VisionRows(tmp_path / "packs")
    ds = hf_dataset(tmp_path / "packs", cache_dir=tmp_path / "cache")
    assert len(rows) == len(ds) == packs.num_rows == m["num_packs"] and m["num_sequences"] == len(COUNTS)
    assert m["task_info"]["images"] == sum(COUNTS) and m["example_table"]["parts"][0]["rows"] == len(COUNTS)
    for i in range(packs.num_rows):
        want, got, hf = packs.row(i), rows[i], ds[i]
        for k in ("input_ids", "labels", "seq_lengths", "example_ids", "image_grids"):
            assert np.array_equal(want[k], got[k]), (i, k)
        n, fill = len(want["seq_lengths"]), int(want["seq_lengths"].sum())
        assert np.array_equal(np.asarray(hf["input_ids"])[:fill], want["input_ids"]) and hf["num_sequences"] == n
        assert np.array_equal(np.asarray(hf["example_ids"])[:n], want["example_ids"])
        assert np.array_equal(np.asarray(hf["image_grids"]), want["image_grids"].reshape(-1))
        assert want["images"] == got["images"] == hf["images"]
    stats = packs.stats()
    assert stats["tokens"] == int(packs.samples.lengths.sum()) == m["num_tokens"] and 0 <= stats["padding_fraction"] < 1


def test_sft_trainer_trains_on_the_packed_rows(tmp_path):
    """TRL's ``SFTTrainer`` with seqpack's rows and collator: its first loss is the packed batch's."""
    from trl import SFTConfig, SFTTrainer

    processor, model = tiny_vlm("qwen2_vl")
    packs = pack_vision(vision_samples(records(), processor, max_len=512), max_len=512)
    write(records(), processor, tmp_path / "packs")
    collate = VisionCollator(processor)
    with torch.no_grad():
        want = float(model(**collate([packs.row(i) for i in range(packs.num_rows)])).loss)
    args = SFTConfig(
        output_dir=str(tmp_path / "out"),
        max_steps=1,
        per_device_train_batch_size=packs.num_rows,
        remove_unused_columns=False,
        dataset_kwargs={"skip_prepare_dataset": True},
        report_to=[],
        bf16=False,
        logging_steps=1,
        save_strategy="no",
        disable_tqdm=True,
    )
    trainer = SFTTrainer(
        model=model,
        args=args,
        train_dataset=hf_dataset(tmp_path / "packs", cache_dir=tmp_path / "c"),
        data_collator=collate,
        processing_class=processor,
    )
    trainer.train()
    # the same tokens in another row order: only the loss mean's summation order differs
    assert trainer.state.log_history[0]["loss"] == pytest.approx(want, abs=ATOL)


@pytest.mark.parametrize(
    "case, message",
    [
        ({"images": ["no/such.png"]}, "example 0: image 0: no such file no/such.png"),
        ({"images": [b"not an image"]}, "example 0: image 0: not a readable image"),
        ({"images": []}, "example 0: its messages hold 1 image placeholder(s) but 'images' has 0 image(s)"),
        ({"side": 600}, "example 0: image 0 alone becomes"),
    ],
)
def test_bad_input_is_refused_in_one_line(case, message):
    processor = tiny_processor("qwen2_vl")
    rec = synthetic_records(1, seed=3, images=(1, 1), side=(case.get("side", 40),) * 2)[0]
    if "images" in case:
        rec["images"] = case["images"]
    with pytest.raises(ValueError) as e:
        vision_samples([rec], processor, max_len=128)
    assert str(e.value).startswith(message) and "\n" not in str(e.value)


def test_a_long_sample_is_cut_between_turns_never_inside_an_image():
    processor = tiny_processor("qwen2_vl")
    rec = synthetic_records(1, seed=5, images=(1, 1), side=(60, 60), turns=(3, 3))[0]
    img = synthetic_records(1, seed=6, images=(1, 1), side=(60, 60))[0]["images"][0]
    rec["messages"][2]["content"].insert(0, {"type": "image"})  # a second image, in the second user turn
    rec["images"].append(img)
    whole = vision_samples([rec], processor, max_len=4096)
    n = int(whole.lengths[0])
    for max_len in range(40, n, 7):
        s = vision_samples([rec], processor, max_len=max_len)
        if not s.num_samples:
            assert s.dropped == {"too_long": 1}
            continue
        one = s.sample(0)
        m = one["input_ids"].size
        assert m <= max_len and np.array_equal(one["input_ids"], whole.sample(0)["input_ids"][:m])
        assert one["input_ids"][-1] == processor.tokenizer.convert_tokens_to_ids("<|im_end|>")  # a whole turn
        image_tokens = int((one["input_ids"] == processor.image_token_id).sum())
        assert image_tokens == int(one["grids"].prod(axis=1).sum()) // 4  # whole images, and only theirs
    with pytest.raises(ValueError, match=r"exceed max_len=100; pass --overflow truncate\|drop"):
        vision_samples([rec], processor, max_len=100, overflow="error")
    assert vision_samples([rec], processor, max_len=n - 1, overflow="drop").dropped == {"too_long": 1}


@pytest.mark.parametrize("family", FAMILIES)
def test_seqpack_packed_attention_gives_the_same_pass(family):
    """The text model on seqpack's packed attention (a plan from the positions, ``sum(l^2)`` work on
    CPU) gives the logits and gradients of transformers' own masked sdpa; the vision encoder keeps its own."""
    from seqpack.nn.hf_attention import PACKED_IMPL, attach_packed_attention

    processor, model = tiny_vlm(family)
    packs = pack_vision(vision_samples(records(seed=80), processor, max_len=512), max_len=512)
    batch = VisionCollator(processor)([packs.row(i) for i in range(packs.num_rows)])
    runs = []
    for packed in (False, True):
        if packed:
            handle = attach_packed_attention(model)
        model.zero_grad()
        out = model(**batch)
        out.loss.backward()
        runs.append(
            (out.logits.detach(), {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None})
        )
    handle.remove()
    assert model.config.get_text_config()._attn_implementation == PACKED_IMPL
    assert model.config.vision_config._attn_implementation != PACKED_IMPL
    (ref, ref_grads), (got, grads) = runs
    assert torch.allclose(got, ref, atol=ATOL, rtol=0)
    for k in ref_grads:
        assert torch.allclose(grads[k], ref_grads[k], atol=ATOL, rtol=0), k


def test_records_from_a_jsonl_file_with_image_paths_beside_it(tmp_path):
    """Image paths relative to the records file; the same samples as the records given in memory."""
    import json

    processor = tiny_processor("qwen2_vl")
    recs = records()
    on_disk = []
    for i, r in enumerate(recs):
        names = []
        for k, b in enumerate(r["images"]):
            (tmp_path / "img").mkdir(exist_ok=True)
            (tmp_path / "img" / f"{i}-{k}.png").write_bytes(b)
            names.append(f"img/{i}-{k}.png")
        on_disk.append({"messages": r["messages"], "images": names})
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in on_disk), encoding="utf-8")
    a, b = (
        vision_samples(recs, processor, max_len=1024),
        vision_samples(tmp_path / "train.jsonl", processor, max_len=1024),
    )
    assert np.array_equal(a.input_ids, b.input_ids) and np.array_equal(a.labels, b.labels) and a.images == b.images


def test_records_from_parquet_bytes_and_an_hf_dataset_of_images(tmp_path):
    """Parquet with the images as bytes gives the same samples; an HF dataset's ``Image`` column
    (decoded to PIL on reading) gives the same tokens and labels, its images kept as PNG."""
    import datasets
    import pyarrow as pa
    import pyarrow.parquet as pq

    processor = tiny_processor("qwen2_vl")
    recs = records()
    want = vision_samples(recs, processor, max_len=1024)
    pq.write_table(
        pa.table({"messages": [r["messages"] for r in recs], "images": [r["images"] for r in recs]}),
        tmp_path / "train.parquet",
    )
    got = vision_samples(tmp_path / "train.parquet", processor, max_len=1024)
    assert np.array_equal(got.input_ids, want.input_ids) and got.images == want.images
    ds = datasets.Dataset.from_dict(
        {"messages": [r["messages"] for r in recs], "images": [[pil(b) for b in r["images"]] for r in recs]},
        features=None,
    ).cast_column("images", datasets.Sequence(datasets.Image()))
    hf = vision_samples(ds, processor, max_len=1024)
    assert np.array_equal(hf.input_ids, want.input_ids) and np.array_equal(hf.labels, want.labels)
    assert np.array_equal(hf.grids, want.grids) and all(b[:8] == b"\x89PNG\r\n\x1a\n" for b in hf.images)


def test_a_directory_of_the_former_image_text_format_is_refused_in_one_line(tmp_path):
    """Image-text rows are the packed format now; a directory seqpack wrote before says to pack again."""
    import json

    from seqpack.data import PackedDataset

    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "manifest.json").write_text(json.dumps({"kind": "seqpack-vision-packs", "format_version": 2}))
    for read in (PackedDataset, VisionRows):
        with pytest.raises(ValueError, match="pack the records again with seqpack pack --task vision") as e:
            read(tmp_path / "old")
        assert "\n" not in str(e.value)


def test_training_rows_written_without_their_processor_is_refused(tmp_path, capsys):
    import shutil

    from seqpack.cli.main import main

    processor = tiny_processor("llava")
    write(records(), processor, tmp_path / "packs")
    shutil.rmtree(tmp_path / "packs" / "processor")
    code = main(["train", "--data", str(tmp_path / "packs"), "--out", str(tmp_path / "run"), "--steps", "1"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "holds no processor/" in err and "Traceback" not in err
    assert not (tmp_path / "run").exists()
