from __future__ import annotations

import json
import os
import signal

import numpy as np
import pytest
import torch

from seqpack.cli.main import main
from seqpack.train import TrainConfig, train
from seqpack.train.checkpoint import read_metrics
from seqpack.train.data import TrainData
from seqpack.train.models import TaskModule, build_model
from seqpack.train.step_loss import component_means, loss_units, step_loss

TIMING = ("step_seconds", "compute_seconds", "data_seconds", "train_seconds", "tokens_per_s", "sequences_per_s")


def cfg(data, out, **kw):
    base = dict(
        data=str(data),
        out=str(out),
        steps=4,
        batch_size=6,
        progress=False,
        eval_fraction=0.1,
        threads=2,
        eval_at_start=True,
    )
    return TrainConfig(**{**base, **kw})


def params(run):
    return torch.load(run / "checkpoint.pt", weights_only=False)["model_state"]


def untimed(records):
    return [{k: v for k, v in r.items() if k not in TIMING} for r in records]


@pytest.mark.parametrize("task", ["mlm", "clm"])
@pytest.mark.parametrize("padded", [False, True])
def test_runs_and_writes_its_files(datasets, tmp_path, task, padded):
    s = train(cfg(datasets[task], tmp_path / "run", padded=padded))
    assert s["steps"] == 4 and s["sequences"] > 0 and s["padded"] is padded
    recs = read_metrics(tmp_path / "run")
    assert [r["step"] for r in recs if "eval" not in r] == [1, 2, 3, 4]
    assert [r["step"] for r in recs if "eval" in r] == [0, 4]
    if padded:
        assert all(r["step_sequences"] == 6 for r in recs if "eval" not in r)
    ev = s["eval"]
    keys = {"loss", "lm_loss", "lm_token_loss", "lm_accuracy"} | (
        {"nsp_loss", "nsp_accuracy"} if task == "mlm" else set()
    )
    assert keys <= set(ev) and np.isfinite(ev["loss"])
    assert ev["loss"] < recs[0]["eval"]["loss"]  # 4 steps of 1e-3 learn something
    for f in ("config.json", "summary.json", "checkpoint.pt"):
        assert (tmp_path / "run" / f).is_file()


@pytest.mark.parametrize(
    "task,reduction", [("mlm", "sequence"), ("mlm", "token"), ("clm", "sequence"), ("clm", "token"), ("qa", "sequence")]
)
def test_packed_batch_equals_its_sequences_padded(datasets, task, reduction):
    """Same sequences, packed rows vs one per row: the same loss and the same gradient."""
    packed, padded = TrainData(datasets[task]), TrainData(datasets[task], padded=True)
    packs = np.arange(5)
    chosen = np.flatnonzero(np.isin(padded.spans[:, 0], packed.train_packs[packs]))
    results = []
    for data, units in ((packed, packs), (padded, chosen)):
        torch.manual_seed(0)
        model, _ = build_model(data.manifest, cfg(datasets[task], "x", dropout=0.0))
        b = data.batch(units)
        n = loss_units(b, task, reduction)
        out = TaskModule(model, task, reduction)(b)
        loss = step_loss(component_means(out, task), n, n)
        loss.backward()
        results.append(
            (loss.detach(), n, {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None})
        )
    (l1, n1, g1), (l2, n2, g2) = results
    assert torch.equal(n1, n2)
    torch.testing.assert_close(l1, l2, rtol=1e-5, atol=1e-6)
    assert g1.keys() == g2.keys()
    for k in g1:
        torch.testing.assert_close(g1[k], g2[k], rtol=1e-4, atol=1e-5 + 1e-4 * float(g1[k].abs().max()))


def accumulated_grads(data, manifest_cfg, groups, task="mlm", reduction="sequence"):
    """The trainer's step arithmetic: micro-batches normalised by the step's total units."""
    torch.manual_seed(0)
    model, _ = build_model(data.manifest, manifest_cfg)
    batches = [data.batch(g) for g in groups]
    local = [loss_units(b, task, reduction) for b in batches]
    total = torch.stack(local).sum(0)
    objective = TaskModule(model, task, reduction)
    for b, n in zip(batches, local):
        step_loss(component_means(objective(b), task), n, total).backward()
    return {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}


def test_accumulation_equals_one_big_batch(datasets, tmp_path):
    """2 x 4 rows == 1 x 8 rows. Weights after AdamW are not compared element-wise: Adam divides
    by sqrt(v) + eps, so for a weight whose gradient is ~eps (1e-8) a float-order difference of
    1e-13 in the gradient moves it by up to ~lr, whatever the accumulation does. What accumulation
    must preserve is the gradient and the loss, compared here with tolerances derived from fp32."""
    data = TrainData(datasets["mlm"])
    c = cfg(datasets["mlm"], "x", dropout=0.0)
    units = np.arange(8)
    one = accumulated_grads(data, c, [units])
    two = accumulated_grads(data, c, [units[:4], units[4:]])
    assert one.keys() == two.keys()
    for k in one:
        # Each element is a sum of per-token terms; splitting it into two partial sums reorders
        # the fp32 additions (eps 1.2e-7): ~1e-6 of the tensor's scale covers hundreds of terms,
        # while a missing or per-micro-batch normalisation is off by a factor of ~2.
        scale = float(one[k].abs().max())
        torch.testing.assert_close(two[k], one[k], rtol=1e-5, atol=1e-6 * scale + 1e-12)
    a = train(cfg(datasets["mlm"], tmp_path / "a", batch_size=8, accumulation=1, dropout=0.0, steps=2))
    b = train(cfg(datasets["mlm"], tmp_path / "b", batch_size=4, accumulation=2, dropout=0.0, steps=2))
    assert a["sequences"] == b["sequences"]
    ra, rb = (next(r for r in read_metrics(tmp_path / x) if r.get("step") == 1 and "eval" not in r) for x in "ab")
    assert ra["step_sequences"] == rb["step_sequences"]
    # step 1: the same terms summed in another order (fp32, relative error ~ n * eps)
    for key in ("loss", "grad_norm"):
        assert abs(ra[key] - rb[key]) <= 1e-5 * abs(ra[key]), key


def test_sigint_checkpoint_and_resume_is_identical(datasets, tmp_path):
    whole = tmp_path / "whole"
    train(cfg(datasets["mlm"], whole, steps=6, eval_every=2))  # dropout on: the RNG state must be restored

    def interrupt(step, rec):
        if step == 3:
            os.kill(os.getpid(), signal.SIGINT)

    cut = tmp_path / "cut"
    with pytest.raises(KeyboardInterrupt, match="interrupted at step 3"):
        train(cfg(datasets["mlm"], cut, steps=6, eval_every=2), on_step=interrupt)
    partial = tmp_path / ".cut.partial"  # an unfinished run is written aside, never at RUN
    assert not cut.exists() and torch.load(partial / "checkpoint.pt", weights_only=False)["state"]["step"] == 3
    train(cfg(datasets["mlm"], cut, steps=6, eval_every=2), resume=True)
    assert not partial.exists() and (cut / "summary.json").is_file()
    pw, pc = params(whole), params(cut)
    assert all(torch.equal(pw[k], pc[k]) for k in pw)
    assert untimed(read_metrics(whole)) == untimed(read_metrics(cut))


def test_match_sequences_and_adjust_hparams(datasets, tmp_path):
    data = TrainData(datasets["mlm"], eval_fraction=0.1)
    s = train(cfg(datasets["mlm"], tmp_path / "m", batch_size=12, match="sequences"))
    assert s["rows_per_batch"] == round(12 / data.packing_factor) < 12
    train(cfg(datasets["mlm"], tmp_path / "h", adjust_hparams=True, optimizer="lamb"))
    info = json.loads((tmp_path / "h" / "config.json").read_text())
    p = data.packing_factor
    assert info["betas"] == pytest.approx([0.9**p, 0.999**p])


def run_cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_train_and_bad_input(datasets, tmp_path, capsys):
    run = tmp_path / "run"
    base = ["train", "--data", str(datasets["mlm"]), "--out", str(run), "--steps", "2", "--batch-size", "4", "--quiet"]
    code, out, err = run_cli(capsys, *base, "--json")
    assert code == 0 and json.loads(out)["steps"] == 2
    code, out, err = run_cli(
        capsys, *base[:4], str(tmp_path / "bf16"), *base[5:], "--dtype", "bf16", "--gradient-checkpointing"
    )
    assert code == 0, err
    recorded = json.loads((tmp_path / "bf16" / "config.json").read_text())["train"]
    assert recorded["dtype"] == "bf16" and recorded["gradient_checkpointing"] is True
    cases = [
        (["train", "--data", str(tmp_path / "bf16"), "--out", str(tmp_path / "x"), "--quiet"], "packed dataset"),
        ([*base[:4], str(tmp_path / "fresh"), *base[5:], "--resume"], "no checkpoint"),
        ([*base, "--resume", "--size", "small"], "is a finished run"),  # nothing to resume: the run is done
        ([*base, "--overwrite", "--max-position", "32"], "need 64 positions"),
        (base, "already holds a run"),
        ([*base[:2], str(datasets["clm"]), *base[3:], "--model", "bert", "--overwrite"], "use --model gpt"),
    ]
    for argv, msg in cases:
        code, out, err = run_cli(capsys, *argv)
        assert code == 2 and msg in err and err.count("\n") == 1, (argv, err)


def test_qa_trains_and_reports_exact_match(datasets, tmp_path):
    s = train(cfg(datasets["qa"], tmp_path / "qa", steps=6, lr=3e-3))
    ev = s["eval"]
    assert {"loss", "span_loss", "exact_match"} <= set(ev) and 0.0 <= ev["exact_match"] <= 1.0
    first = read_metrics(tmp_path / "qa")[0]["eval"]
    assert ev["span_loss"] < first["span_loss"]  # 6 steps learn something
    assert s["padded"] is False and s["steps"] == 6
    p = train(cfg(datasets["qa"], tmp_path / "qa-padded", steps=2, padded=True))
    assert p["padded"] is True and "exact_match" in p["eval"]


@pytest.mark.parametrize("task", ["mlm", "clm"])
def test_padded_run_matched_by_packs_takes_the_packed_runs_steps(datasets, tmp_path, task):
    """``--padded --match packs``: each step holds the packed run's sequences, one per row, so the two
    runs follow the same trajectory. Per-sequence losses over the same sequences: the only difference
    is fp32 rounding of attention over padded vs packed rows (~1e-7 relative per step, compounding
    through Adam over 5 steps), far below what another batch of sequences would give (~1e-2)."""
    a = train(cfg(datasets[task], tmp_path / "packed", steps=5, batch_size=4, dropout=0.0))
    b = train(cfg(datasets[task], tmp_path / "padded", steps=5, batch_size=4, dropout=0.0, padded=True, match="packs"))
    ra, rb = ([r for r in read_metrics(tmp_path / x) if "eval" not in r and "loss" in r] for x in ("packed", "padded"))
    assert [r["step_sequences"] for r in ra] == [r["step_sequences"] for r in rb]
    assert [r["step_tokens"] for r in ra] == [r["step_tokens"] for r in rb]
    for x, y in zip(ra, rb):
        assert abs(x["loss"] - y["loss"]) <= 1e-5 * abs(x["loss"])
    assert abs(a["eval"]["loss"] - b["eval"]["loss"]) <= 1e-5 * abs(a["eval"]["loss"])
    with pytest.raises(ValueError, match="--match packs is for the padded run"):
        cfg(datasets[task], "x", match="packs")


def test_bf16_autocast_trains_within_bf16_rounding_of_fp32(datasets, tmp_path):
    """``dtype="bf16"``: forward and loss under autocast over fp32 weights. The step-0 eval loss (the
    same initial weights) differs from fp32's, so autocast was on (0 difference: it was not), by
    about bf16's rounding: each logit is computed from inputs rounded to 8 significant bits
    (u = 2^-8), a relative error of a few u through the tiny model's two layers, and the mean
    cross-entropy moves by about as much relatively; 2% (~5u) bounds it, a broken path is O(1)."""
    runs = {d: train(cfg(datasets["clm"], tmp_path / d, dtype=d, steps=2)) for d in ("fp32", "bf16")}
    first = {d: read_metrics(tmp_path / d)[0]["eval"]["loss"] for d in runs}
    assert 0 < abs(first["bf16"] - first["fp32"]) < 0.02 * first["fp32"]
    assert np.isfinite(runs["bf16"]["eval"]["loss"])
    assert json.loads((tmp_path / "bf16" / "config.json").read_text())["train"]["dtype"] == "bf16"
    w = params(tmp_path / "bf16")
    assert all(v.dtype == torch.float32 for v in w.values() if v.is_floating_point())  # weights stay fp32


@pytest.mark.parametrize("task", ["mlm", "clm"])
def test_gradient_checkpointing_trains_the_same_weights(datasets, tmp_path, task):
    """Recomputing each block in the backward pass repeats the same float operations on the same
    inputs, with the RNG replayed (dropout is on: the same masks), so the weights after 3 steps are
    bitwise those of the run that kept its activations."""
    runs = {
        on: train(cfg(datasets[task], tmp_path / str(on), steps=3, dropout=0.1, gradient_checkpointing=on))
        for on in (False, True)
    }
    a, b = params(tmp_path / "False"), params(tmp_path / "True")
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert runs[True]["eval"] == runs[False]["eval"]


def test_gradient_checkpointing_recomputes_the_blocks(datasets):
    """With checkpointing a block runs twice per training step (forward, then again in backward)."""
    from seqpack.train.models import enable_checkpointing

    data = TrainData(datasets["clm"], eval_fraction=0.1)
    model, _ = build_model(data.manifest, cfg(datasets["clm"], "unused"))
    calls = []
    model.blocks[0].register_forward_pre_hook(lambda *a: calls.append(1))  # the recomputation stops early: no post-hook
    b = data.batch(np.arange(2))
    for on in (False, True):
        if on:
            enable_checkpointing(model)
        calls.clear()
        TaskModule(model, "clm", "sequence")(b).loss.backward()
        assert len(calls) == (2 if on else 1)


def test_resume_of_a_checkpoint_from_before_an_added_option(datasets, tmp_path):
    """A checkpoint written before ``dtype`` existed was trained in fp32: it resumes under the default;
    turning gradient checkpointing on at the resume is allowed (it changes no result)."""
    run = tmp_path / "run"

    def interrupt(step, rec):
        if step == 2:
            os.kill(os.getpid(), signal.SIGINT)

    with pytest.raises(KeyboardInterrupt):
        train(cfg(datasets["clm"], run, steps=4), on_step=interrupt)
    path = tmp_path / ".run.partial" / "checkpoint.pt"
    ck = torch.load(path, weights_only=False)
    del ck["options"]["dtype"], ck["options"]["gradient_checkpointing"]
    torch.save(ck, path)
    s = train(cfg(datasets["clm"], run, steps=4, gradient_checkpointing=True), resume=True)
    assert s["steps"] == 4
    with pytest.raises(KeyboardInterrupt):
        train(cfg(datasets["clm"], tmp_path / "b", steps=4), on_step=interrupt)
    with pytest.raises(ValueError, match="dtype"):
        train(cfg(datasets["clm"], tmp_path / "b", steps=4, dtype="bf16"), resume=True)


def test_a_run_in_a_log_says_what_it_does_at_once_and_then_every_so_often(datasets, tmp_path, capsys, monkeypatch):
    """Off a terminal (a log file), ``train`` prints its first line before any work, a progress line
    at the first step, at most every LOG_INTERVAL seconds, and at the last; the initial weights are
    evaluated only when asked (``eval_at_start``)."""
    import seqpack.train.loop as loop

    monkeypatch.setattr(loop, "LOG_INTERVAL", 0.0)  # a line at every step
    train(cfg(datasets["clm"], tmp_path / "run", steps=3, progress=True, eval_at_start=False))
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("packed GPT, attention auto: steps 1-3 of 6 rows; eval at the end on ") and err[
        0
    ].endswith("metrics.jsonl")
    steps = [ln for ln in err if ln.startswith("packed: step ")]
    assert [ln.split(",")[0] for ln in steps] == ["packed: step 1/3", "packed: step 2/3", "packed: step 3/3"]
    assert all(", loss " in ln for ln in steps)
    assert [r["step"] for r in read_metrics(tmp_path / "run") if "eval" in r] == [3]  # no step-0 evaluation
    monkeypatch.setattr(loop, "LOG_INTERVAL", 3600.0)  # the first and the last step only
    train(cfg(datasets["clm"], tmp_path / "run2", steps=3, progress=True))
    steps = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("packed: step ")]
    assert [ln.split(",")[0] for ln in steps] == ["packed: step 1/3", "packed: step 3/3"]


def test_an_evaluation_reads_a_bounded_fixed_sample_of_the_held_out_packs(datasets, tmp_path):
    """``eval_tokens`` bounds an evaluation's real tokens with a seeded sample of the held-out packs:
    the same sample for every run, within the bound (one pack at least), training untouched."""
    from hypothesis import example, given, settings
    from hypothesis import strategies as st

    from seqpack.train.data import EVAL_SAMPLE_SEED, eval_sample

    whole = TrainData(datasets["clm"], eval_fraction=0.3)
    fill = whole.pack_stats[:, 0]
    held = whole.eval_packs
    for bound in (1, int(fill[held].min()), 3 * int(fill[held].max()), int(fill[held].sum()) - 1):
        data = TrainData(datasets["clm"], eval_fraction=0.3, eval_tokens=bound)
        assert np.array_equal(data.train_packs, whole.train_packs) and np.array_equal(data.held_out_packs, held)
        assert set(data.eval_packs) <= set(held) and list(data.eval_packs) == sorted(data.eval_packs)
        assert data.eval_tokens == int(fill[data.eval_packs].sum())
        assert data.eval_tokens <= bound or len(data.eval_packs) == 1
        assert np.array_equal(
            data.eval_packs, TrainData(datasets["clm"], eval_fraction=0.3, eval_tokens=bound).eval_packs
        )
    assert np.array_equal(TrainData(datasets["clm"], eval_fraction=0.3, eval_tokens=10**9).eval_packs, held)

    @settings(max_examples=50, deadline=None)
    @given(st.lists(st.integers(0, 50), min_size=1, max_size=30), st.integers(0, 400))
    @example(fills=[2], bound=1)  # one pack over the bound: it is the whole sample
    @example(fills=[5, 5], bound=1)  # every pack over the bound: one of them
    def sample(fills, bound):  # the sample is the longest prefix of one seeded order within the bound
        f = np.asarray(fills)
        held = np.arange(f.size)
        got = eval_sample(held, f, bound)
        if bound == 0 or f.sum() <= bound:
            assert np.array_equal(got, held)
        else:
            assert got.size >= 1 and (f[got].sum() <= bound or got.size == 1)
            order = np.random.default_rng(EVAL_SAMPLE_SEED).permutation(held)
            assert np.array_equal(np.sort(order[: got.size]), got)
            assert got.size < f.size or f.size == 1  # over the bound: never the whole set, bar one pack
            assert f[order[: got.size + 1]].sum() > bound  # the longest: one more pack would pass the bound

    sample()

    run = tmp_path / "run"
    s = train(cfg(datasets["clm"], run, steps=2, eval_tokens=int(fill[held].min())))
    described = json.loads((run / "config.json").read_text())["data"]
    assert described["eval_packs"] == 1 and described["held_out_packs"] == len(
        TrainData(datasets["clm"], eval_fraction=0.1).eval_packs
    )
    assert "loss" in s["eval"]


def test_the_default_evaluation_is_sized_to_the_run(datasets, tmp_path, capsys):
    """By default an evaluation reads a tenth of the tokens the run trains on (a seeded sample of
    the held-out packs, one at least), at most EVAL_TOKENS_CAP: a 2-step run does not evaluate every
    held-out pack; the first line says what it reads against what the run trains on."""
    from seqpack.train.config import EVAL_TOKENS_CAP, run_eval_tokens

    run = tmp_path / "run"
    s = train(cfg(datasets["clm"], run, steps=2, batch_size=2, eval_fraction=0.3, eval_at_start=False, progress=True))
    err = capsys.readouterr().err
    described = json.loads((run / "config.json").read_text())["data"]
    whole = TrainData(datasets["clm"], eval_fraction=0.3)
    trained = 2 * 2 * float(whole.unit_tokens.mean())
    assert described["held_out_packs"] == len(whole.eval_packs) and described["eval_packs"] < len(whole.eval_packs)
    assert described["eval_tokens"] <= max(
        run_eval_tokens(int(trained)), int(whole.pack_stats[whole.eval_packs, 0].max())
    )
    assert f"({described['eval_tokens']:,} tokens, " in err and "of the ~" in err and "tokens trained on" in err
    assert run_eval_tokens(10**12) == EVAL_TOKENS_CAP and "loss" in s["eval"]
