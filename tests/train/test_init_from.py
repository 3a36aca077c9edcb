"""``--init-from RUN``: a run's seqpack model starts from an earlier run's weights (an MLM run's
encoder under a new classification or QA head), or is refused in one line before any step."""

from __future__ import annotations

import json
import os
import signal

import pytest
import torch

from seqpack.cli.main import main
from seqpack.train import TrainConfig, train
from seqpack.train.data import TrainData
from seqpack.train.models import TaskModule, build_model
from seqpack.train.step_loss import component_means, loss_units, step_loss

from .conftest import synthetic_documents


def cfg(data, out, **kw):
    base = dict(
        data=str(data), out=str(out), steps=2, batch_size=6, progress=False, eval_fraction=0.1, threads=1, eval_tokens=0
    )
    return TrainConfig(**{**base, **kw})


def weights(run):
    return torch.load(run / "checkpoint.pt", weights_only=True)["model_state"]


@pytest.fixture(scope="module")
def cls_data(datasets, tmp_path_factory):
    """Docstring-like classification rows packed with the MLM data's tokenizer."""
    from seqpack.pipeline import PackConfig, build_packed_dataset
    from seqpack.tokenizer import open_tokenizer

    docs = synthetic_documents(90, seed=3)
    rows = [{"text": d, "label": ("kings", "queens", "swords")[i % 3]} for i, d in enumerate(docs)]
    out = tmp_path_factory.mktemp("cls") / "cls"
    build_packed_dataset(
        rows, open_tokenizer(datasets["tokenizer"]), out, PackConfig.for_task("classification", max_len=64)
    )
    return out


@pytest.fixture(scope="module")
def mlm_run(datasets, tmp_path_factory):
    out = tmp_path_factory.mktemp("mlm") / "mlm"
    train(cfg(datasets["mlm"], out))
    return out


@pytest.mark.parametrize("padded", [False, True])
def test_a_classifier_starts_from_the_mlm_runs_encoder_and_a_new_head(cls_data, mlm_run, tmp_path, capsys, padded):
    c = cfg(cls_data, tmp_path / "cls", init_from=str(mlm_run), lr=1e-12, steps=1, padded=padded, progress=True)
    s = train(c)
    first = capsys.readouterr().err.splitlines()[0]
    mlm, got = weights(mlm_run), weights(tmp_path / "cls")
    encoder = [k for k in got if k.startswith("bert.")]
    assert encoder and all(torch.allclose(got[k], mlm[k], atol=1e-9) for k in encoder)  # lr 1e-12: step 0's weights
    assert {k for k in got if k not in mlm} == {"classifier.weight", "classifier.bias"}  # the head is new
    n = len([k for k in got if k in mlm])
    assert f"{n} tensors from {mlm_run} (head new: classifier)" in first
    assert s["init_from"] == {"run": str(mlm_run), "tensors": n, "new": ["classifier"]}
    recorded = json.loads((tmp_path / "cls" / "config.json").read_text())
    assert recorded["train"]["init_from"] == str(mlm_run) and recorded["init_from"]["tensors"] == n


def test_the_first_step_loss_is_the_initialised_models_loss(cls_data, mlm_run, tmp_path):
    c = cfg(cls_data, tmp_path / "cls", init_from=str(mlm_run), steps=1, dropout=0.0)
    train(c)
    logged = json.loads((tmp_path / "cls" / "metrics.jsonl").read_text().splitlines()[0])
    # the model built as the run builds it (seeded), given the MLM run's encoder, on the run's first batch
    data = TrainData(c.data, eval_fraction=c.eval_fraction)
    torch.manual_seed(c.seed)
    model, _ = build_model(data.manifest, c)
    mlm = weights(mlm_run)
    model.load_state_dict({k: v for k, v in mlm.items() if k in model.state_dict()}, strict=False)
    units = data.units_at(c.seed, 0, c.batch_size)
    batch = data.batch(units)
    local = loss_units(batch, data.task, c.reduction)
    out = TaskModule(model.train(), data.task, c.reduction)(batch)
    want = float(step_loss(component_means(out, data.task), local, local, world=1).detach())
    assert logged["step"] == 1 and logged["loss"] == pytest.approx(want, rel=1e-5)


def test_qa_starts_from_the_mlm_runs_encoder(datasets, mlm_run, tmp_path):
    s = train(cfg(datasets["qa"], tmp_path / "qa", init_from=str(mlm_run), steps=1))
    assert s["init_from"]["new"] == ["qa"]


def refused(capsys, *argv):
    code = main(["train", *argv])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    return err


def test_refusals_are_one_line_before_any_step_and_write_nothing(datasets, cls_data, mlm_run, tmp_path, capsys):
    gpt = tmp_path / "gpt"
    train(cfg(datasets["clm"], gpt, steps=1))
    other_tok = tmp_path / "other"
    _other_vocab_run(datasets, other_tok)
    out = tmp_path / "new"
    common = ["--data", str(cls_data), "--out", str(out), "--steps", "1", "--batch-size", "4", "--quiet"]
    cases = {
        "another size": (["--init-from", str(mlm_run), "--size", "small"], "another size (hidden 128 vs 256"),
        "GPT into BERT": (
            ["--init-from", str(gpt)],
            "its model is GPT, this run builds BERT (BertForSequenceClassification)",
        ),
        "a vocabulary mismatch": (["--init-from", str(other_tok / "run")], "re-pack with the earlier run's tokenizer"),
        "with --resume": (["--init-from", str(mlm_run), "--resume"], "--resume continues"),
        "not a run": (["--init-from", str(datasets["mlm"])], "not a seqpack training run"),
        "a missing path": (["--init-from", str(tmp_path / "nowhere")], "not a seqpack training run"),
        "with --hf-model": (["--init-from", str(mlm_run), "--hf-model", str(tmp_path / "hf")], "drop one of them"),
    }
    damaged = tmp_path / "damaged"  # a copy of the MLM run whose weights were edited after saving
    import shutil

    shutil.copytree(mlm_run, damaged)
    ck = torch.load(damaged / "checkpoint.pt", weights_only=True)
    k = next(iter(ck["model_state"]))
    ck["model_state"][k] = ck["model_state"][k] + 1
    torch.save(ck, damaged / "checkpoint.pt")
    cases["a damaged run"] = (["--init-from", str(damaged)], "edited); start from another run, or from an intact copy")
    for name, (extra, says) in cases.items():
        err = refused(capsys, *common, *extra)
        assert says in err, (name, err)
        assert name == "with --resume" or "resume" not in err.split(";")[-1], (name, err)  # the fix is not a resume's
        assert not out.exists() and not any(p.name.startswith(".new") for p in tmp_path.iterdir()), name


def _other_vocab_run(datasets, root):
    """An MLM run on data packed with another tokenizer (a larger vocabulary)."""
    from seqpack.pipeline import PackConfig, build_packed_dataset
    from seqpack.store import build_store
    from seqpack.tokenizer import BPEConfig, Tokenizer
    from seqpack.tokenizer.train import train_bpe_corpus

    docs = synthetic_documents(60, seed=5)
    res = train_bpe_corpus(
        documents=docs, config=BPEConfig(vocab_size=300, special_tokens=("<|endoftext|>",), workers=1)
    )
    tok = Tokenizer(res.vocab, res.merges, list(res.special_tokens))
    store = build_store(docs, tok, root / "store", workers=1)
    build_packed_dataset(store, tok, root / "mlm", PackConfig(task="mlm", max_len=64))
    train(cfg(root / "mlm", root / "run", steps=1, batch_size=2))


def test_a_resumed_run_keeps_where_its_first_weights_came_from(cls_data, mlm_run, tmp_path):
    c = cfg(cls_data, tmp_path / "cls", init_from=str(mlm_run), steps=3)

    def interrupt(step, rec):
        if step == 1:
            os.kill(os.getpid(), signal.SIGINT)

    with pytest.raises(KeyboardInterrupt):
        train(c, on_step=interrupt)
    train(c.replace(init_from=None), resume=True)
    recorded = json.loads((tmp_path / "cls" / "config.json").read_text())
    assert recorded["train"]["init_from"] == str(mlm_run) and recorded["init_from"]["new"] == ["classifier"]
    assert json.loads((tmp_path / "cls" / "summary.json").read_text())["init_from"]["run"] == str(mlm_run)
