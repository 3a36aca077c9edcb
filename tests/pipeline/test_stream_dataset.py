"""``StreamingPackedDataset`` under torch's DataLoader and torchdata's ``StatefulDataLoader``: 2 ranks
x 2 workers read every example once, and a loader restored from its state yields exactly the batches
the uninterrupted one yielded from there."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from seqpack.pipeline import StreamingPackedDataset, collate_stream  # noqa: E402


def docs(n: int, seed: int = 0) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(1, 200, size=int(rng.integers(1, 300))).tolist() for _ in range(n)]


def batches(loader, n: int | None = None) -> list[dict]:
    out = []
    for b in loader:
        out.append({k: v.clone() for k, v in b.items()})
        if n is not None and len(out) == n:
            break
    return out


def same(a: list[dict], b: list[dict]) -> bool:
    return len(a) == len(b) and all(
        x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x) for x, y in zip(a, b)
    )


def test_two_ranks_two_workers_read_every_example_once():
    d = docs(300)
    seen = []
    for rank in range(2):
        ds = StreamingPackedDataset(d, max_len=256, buffer_size=32, rank=rank, world_size=2, chunk=4)
        loader = torch.utils.data.DataLoader(ds, batch_size=4, num_workers=2, collate_fn=collate_stream)
        for b in loader:
            assert b["input_ids"].shape[1] == 256 and b["position_ids"].shape == b["input_ids"].shape
            ex = b["example_ids"]
            seen += ex[ex >= 0].tolist()
    tokens: dict[int, int] = {}
    assert sorted(set(seen)) == list(range(300))
    del tokens


@pytest.mark.parametrize("workers", [0, 2])
def test_a_stateful_dataloader_resumes_exactly(workers):
    tdl = pytest.importorskip("torchdata.stateful_dataloader")
    d = docs(400, seed=1)

    def loader():
        ds = StreamingPackedDataset(d, max_len=256, buffer_size=32, rank=1, world_size=2, chunk=4, seed=3)
        return tdl.StatefulDataLoader(ds, batch_size=3, num_workers=workers, collate_fn=collate_stream)

    whole = batches(loader())
    for stop in (1, 5, len(whole) - 1):
        first = loader()
        it = iter(first)
        for _ in range(stop):
            next(it)
        state = first.state_dict()
        del it
        again = loader()
        again.load_state_dict(state)
        assert same(batches(again), whole[stop:]), stop


def test_its_state_refuses_another_configuration():
    d = docs(100)
    ds = StreamingPackedDataset(d, max_len=256, buffer_size=16)
    it = iter(ds)
    next(it)
    state = ds.state_dict()
    other = StreamingPackedDataset(d, max_len=128, buffer_size=16)
    with pytest.raises(ValueError, match="saved with max_len=256, this stream has max_len=128"):
        other.load_state_dict(state)


def test_a_transformers_trainer_resumes_on_the_same_rows(tmp_path):
    """transformers' Trainer resumes an iterable dataset by replaying it and skipping the batches it
    trained on; the stream is a pure function of its input and configuration, so steps 4-6 after a
    resume from step 3 see the rows, and give the losses, of the uninterrupted run (the same
    operations on the same values in the same order: equal to float rounding, 1e-6 relative)."""
    transformers = pytest.importorskip("transformers")
    d = docs(200, seed=5)

    def collate(rows):
        b = collate_stream(rows)
        return {"input_ids": b["input_ids"], "labels": b["labels"], "position_ids": b["position_ids"]}

    def trainer(out, steps):
        torch.manual_seed(0)
        model = transformers.LlamaForCausalLM(
            transformers.LlamaConfig(
                vocab_size=256,
                hidden_size=32,
                intermediate_size=64,
                num_hidden_layers=2,
                num_attention_heads=4,
                num_key_value_heads=2,
                attn_implementation="sdpa",
            )
        )
        args = transformers.TrainingArguments(
            output_dir=str(out),
            max_steps=steps,
            per_device_train_batch_size=2,
            save_strategy="steps",
            save_steps=3,
            logging_steps=1,
            report_to=[],
            use_cpu=True,
            learning_rate=1e-3,
            seed=0,
            disable_tqdm=True,
        )
        ds = StreamingPackedDataset(d, max_len=128, buffer_size=16, chunk=4)
        return transformers.Trainer(model=model, args=args, train_dataset=ds, data_collator=collate)

    whole = trainer(tmp_path / "whole", 6)
    whole.train()
    losses = [h["loss"] for h in whole.state.log_history if "loss" in h]
    resumed = trainer(tmp_path / "whole", 6)
    resumed.train(resume_from_checkpoint=str(tmp_path / "whole" / "checkpoint-3"))
    after = [h["loss"] for h in resumed.state.log_history if "loss" in h and h["step"] > 3]
    assert len(losses) == 6 and after == pytest.approx(losses[3:], rel=1e-6)
