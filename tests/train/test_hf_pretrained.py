"""``--hf-model DIR`` with weights: a released checkpoint fine-tuned on packed rows (its weights
loaded, its vocabulary checked, ``RUN/model/`` written for ``from_pretrained``), and LoRA through peft."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from seqpack.train import TrainConfig, train

transformers = pytest.importorskip("transformers")

LLAMA = {
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "intermediate_size": 64,
    "max_position_embeddings": 64,
}
BERT = {
    "hidden_size": 32,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "intermediate_size": 64,
    "max_position_embeddings": 64,
    "hidden_dropout_prob": 0.0,
    "attention_probs_dropout_prob": 0.0,
}


@pytest.fixture(scope="module")
def released(datasets, tmp_path_factory) -> dict[str, Path]:
    """A seqpack tokenizer (with [CLS], [SEP] and [MASK]) exported as a Hugging Face tokenizer directory, data packed with it (clm,
    classification, mlm, qa, multi-label), and a tiny Llama and BERTs (a classifier, a pre-training
    checkpoint, a span head, a multi-label classifier) saved with that tokenizer beside them."""
    from seqpack.pipeline import PackConfig, build_packed_dataset
    from seqpack.store import build_store
    from seqpack.tokenizer import Tokenizer, open_tokenizer
    from seqpack.train.pretrained import tokenizer_files
    from tests.train.conftest import qa_examples, synthetic_documents

    root = tmp_path_factory.mktemp("released")
    base = Tokenizer.load(datasets["tokenizer"])  # seqpack's tokenizer with BERT's specials, exported (cls/sep/mask)
    Tokenizer(base.vocab, base.merges, [*base.special_tokens, "[CLS]", "[SEP]", "[MASK]"]).save(root / "own")
    files = tokenizer_files(root / "own")
    (root / "tok").mkdir()
    for name, data in files.items():
        (root / "tok" / name).write_bytes(data)
    tok = open_tokenizer(root / "tok")
    assert type(tok).__name__ == "HFTokenizer"
    vocab = tok.vocab_size
    docs = synthetic_documents(120)
    store = build_store(docs, tok, root / "store", workers=1)
    build_packed_dataset(store, tok, root / "clm", PackConfig(task="clm", max_len=64))
    rng = np.random.default_rng(0)
    examples = [{"text": d.replace("\n", " "), "label": int(rng.integers(0, 2))} for d in docs]
    build_packed_dataset(examples, tok, root / "cls", PackConfig.for_task("classification", max_len=64))
    build_packed_dataset(store, tok, root / "mlm", PackConfig(task="mlm", max_len=64))
    build_packed_dataset(qa_examples(docs[:60]), tok, root / "qa", PackConfig.for_task("qa", max_len=64, doc_stride=16))
    tags = ["a", "b", "c"]
    multi = [
        {"text": d.replace("\n", " "), "label": sorted({str(t) for t in rng.choice(tags, int(rng.integers(0, 3)))})}
        for d in docs
    ]
    build_packed_dataset(multi, tok, root / "multi", PackConfig.for_task("multilabel", max_len=64))
    info = {k: json.loads((root / k / "manifest.json").read_text())["task_info"] for k in ("cls", "mlm", "qa", "multi")}
    torch.manual_seed(0)
    llama = transformers.LlamaForCausalLM(transformers.LlamaConfig(vocab_size=vocab, **LLAMA))
    llama.save_pretrained(root / "llama")
    bert = transformers.BertForSequenceClassification(
        transformers.BertConfig(vocab_size=info["cls"]["vocab_size"], num_labels=2, **BERT)
    )
    bert.save_pretrained(root / "bert")
    # a pre-training checkpoint, as BERT's are released: MLM and next-sentence heads (the mlm task trains both)
    transformers.BertForPreTraining(
        transformers.BertConfig(vocab_size=info["mlm"]["vocab_size"], **BERT)
    ).save_pretrained(root / "bert_mlm")
    transformers.BertForQuestionAnswering(
        transformers.BertConfig(vocab_size=info["qa"]["vocab_size"], num_labels=2, **BERT)
    ).save_pretrained(root / "bert_qa")
    transformers.BertForSequenceClassification(
        transformers.BertConfig(
            vocab_size=info["multi"]["vocab_size"],
            num_labels=len(tags),
            problem_type="multi_label_classification",
            **BERT,
        )
    ).save_pretrained(root / "bert_multi")
    models = ("llama", "bert", "bert_mlm", "bert_qa", "bert_multi")
    for d in models:
        for name, data in files.items():
            (root / d / name).write_bytes(data)
    return {"root": root, **{k: root / k for k in ("clm", "cls", "mlm", "qa", "multi", *models)}}


def _run(data: Path, model: Path, out: Path, **kw) -> dict:
    opts = {"steps": 2, "batch_size": 4, "progress": False, "eval_fraction": 0.1, **kw}
    return train(TrainConfig(data=str(data), out=str(out), hf_model=str(model), **opts))


def _weights(directory: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(directory / "model.safetensors"))


@pytest.mark.parametrize(
    ("data", "model", "auto"),
    [
        ("clm", "llama", "AutoModelForCausalLM"),
        ("cls", "bert", "AutoModelForSequenceClassification"),
        ("mlm", "bert_mlm", "AutoModelForMaskedLM"),
        ("qa", "bert_qa", "AutoModelForQuestionAnswering"),
        ("multi", "bert_multi", "AutoModelForSequenceClassification"),
    ],
)
def test_a_checkpoint_s_weights_are_loaded_and_written_back(released, tmp_path, capsys, data, model, auto):
    """A vanishing learning rate leaves RUN/model/ holding the checkpoint's weights: AdamW moves a
    weight by at most ~lr = 1e-12 a step (its update is normalised), below float32's spacing near any
    weight of size > 1e-5 (which then stays bitwise); a weight at 0 (a bias) moves to ~1e-12. So
    every weight is within 2 steps x lr (x1.01) of the checkpoint's, relative spacing 2^-23 aside; a learning rate
    moves them a little. ``AutoModel*.from_pretrained("RUN/model")`` loads the run's model in a
    process that knows nothing of seqpack's attention (the config names sdpa)."""
    want = _weights(released[model])
    _run(released[data], released[model], tmp_path / "still", lr=1e-12, progress=True)
    err = capsys.readouterr().err
    assert "(loaded weights)" in err.splitlines()[0], err
    got = _weights(tmp_path / "still" / "model")
    assert set(got) == set(want)
    for k in want:
        torch.testing.assert_close(got[k], want[k], rtol=2**-23, atol=2 * 1e-12 * 1.01, msg=k)
    assert (tmp_path / "still" / "model" / "tokenizer.json").is_file()
    _run(released[data], released[model], tmp_path / "moved", lr=1e-3)
    moved = _weights(tmp_path / "moved" / "model")
    delta = max(float((moved[k] - want[k]).abs().max()) for k in want)
    assert 0 < delta < 0.05  # two steps of at most ~lr each
    m = getattr(transformers, auto).from_pretrained(tmp_path / "moved" / "model", local_files_only=True)
    assert m.config._attn_implementation in ("sdpa", "eager")
    assert torch.equal(
        m.get_input_embeddings().weight,
        moved[next(k for k in moved if ("embed" in k and "word" in k) or k.endswith("embed_tokens.weight"))],
    )
    transformers.AutoTokenizer.from_pretrained(tmp_path / "moved" / "model")


def test_the_first_step_s_loss_is_transformers_own_loss_of_the_checkpoint(released, tmp_path):
    """The first step's loss (reduction token: every target token's loss over their count) is what
    transformers computes for the checkpoint on each document of that step's rows alone. Both sum
    ~10^3 float32 cross-entropies of size ~6 in different orders (the packed forward's softmax over
    a row, transformers' over each document): relative error ~ sqrt(n) * 2^-24 per sum, well under
    1e-5; 1e-5 relative leaves room for the attention kernels' own reductions."""
    from seqpack.train.data import TrainData

    s = _run(released["clm"], released["llama"], tmp_path / "run", steps=1, lr=1e-12, reduction="token")
    assert s["steps"] == 1
    first = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[0])
    data = TrainData(str(released["clm"]), eval_fraction=0.1, eval_tokens=0)
    b = data.batch(data.units_at(0, 0, 4))
    model = transformers.LlamaForCausalLM.from_pretrained(
        released["llama"], local_files_only=True, attn_implementation="eager"
    ).eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for r in range(b["input_ids"].shape[0]):
            seg = b["segment_ids"][r]
            for s_id in seg.unique().tolist():
                if s_id == 0:
                    continue
                ids = b["input_ids"][r][seg == s_id][None].long()
                out = model(ids, labels=ids)
                n = ids.shape[1] - 1
                total += float(out.loss) * n
                count += n
    assert count > 0
    assert math.isclose(first["loss"], total / count, rel_tol=1e-5), (first["loss"], total / count)


def test_a_classifier_s_first_loss_is_transformers_own_loss_of_the_checkpoint(released, tmp_path):
    """The same for a released ``BertForSequenceClassification``: the first step's loss (the mean over
    the step's texts) is the mean of transformers' own loss of the checkpoint on each text alone, its
    token types and label (dropout is off in the checkpoint's config). ~10 float32 cross-entropies
    of size ~0.7 summed in another order, each after a softmax over a row rather than the text alone:
    relative error ~1e-6, so 1e-5 relative holds, while one token attending across texts moves a
    loss by ~1e-2."""
    from seqpack.pipeline import PackConfig, build_packed_dataset
    from seqpack.tokenizer import open_tokenizer
    from seqpack.train.data import TrainData

    records = [{"text": " ".join(["a short review"] * (1 + i % 5)), "label": i % 2} for i in range(60)]
    short = tmp_path / "short"  # texts of 4 to 16 tokens: several to a row
    build_packed_dataset(
        records, open_tokenizer(released["root"] / "tok"), short, PackConfig.for_task("classification", max_len=64)
    )
    _run(short, released["bert"], tmp_path / "run", steps=1, lr=1e-12)
    first = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[0])
    data = TrainData(str(short), eval_fraction=0.1, eval_tokens=0)
    b = data.batch(data.units_at(0, 0, 4))
    model = transformers.BertForSequenceClassification.from_pretrained(
        released["bert"], local_files_only=True, attn_implementation="eager"
    ).eval()
    losses = []
    with torch.no_grad():
        for r in range(b["input_ids"].shape[0]):
            seg = b["segment_ids"][r]
            for k in seg.unique().tolist():
                if k == 0:
                    continue
                sel = seg == k
                out = model(
                    b["input_ids"][r][sel][None].long(),
                    token_type_ids=b["token_type_ids"][r][sel][None].long(),
                    labels=b["labels"][r, k - 1][None].long(),
                )
                losses.append(float(out.loss))
    assert len(losses) > 4  # packed: more texts than the step's 4 rows
    want = sum(losses) / len(losses)
    assert math.isclose(first["loss"], want, rel_tol=1e-5), (first["loss"], want)


def test_a_tokenizer_mismatch_is_refused_before_any_step(released, datasets, tmp_path):
    """Data packed with another tokenizer (seqpack's own, the same vocabulary but another fingerprint),
    or with more tokens than the model's embeddings, is refused in one line naming the fix; no
    checkpoint is written."""
    with pytest.raises(ValueError, match=r"packed with another tokenizer.*re-pack .* --tokenizer"):
        _run(datasets["clm"], released["llama"], tmp_path / "a")
    small = released["root"] / "small"
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(transformers.LlamaConfig(vocab_size=100, **LLAMA)).save_pretrained(small)
    with pytest.raises(ValueError, match=r"embeddings hold 100 tokens, fewer than .*re-pack .* --tokenizer"):
        _run(released["clm"], small, tmp_path / "b")
    for d in ("a", "b"):
        assert not list(tmp_path.glob(f"**/{d}/checkpoint.pt")) and not list(tmp_path.glob("**/checkpoint.pt"))


def test_a_config_alone_still_trains_from_scratch(released, tmp_path, capsys):
    f = tmp_path / "config.json"
    f.write_text(json.dumps({"model_type": "llama", **LLAMA}))
    _run(released["clm"], f, tmp_path / "run", progress=True)
    assert "(initialised from the config)" in capsys.readouterr().err.splitlines()[0]
    m = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "run" / "model", local_files_only=True)
    assert m.config.vocab_size == json.loads((released["clm"] / "manifest.json").read_text())["vocab_size"]


def test_from_pretrained_after_a_resumed_run(released, tmp_path):
    """An interrupted run resumed: RUN/model/ holds the resumed run's last weights, those of the
    uninterrupted run (the same steps on the same rows)."""
    _run(released["clm"], released["llama"], tmp_path / "whole", steps=3)
    stop = {"at": 2}

    def on_step(step, rec):
        if step == stop["at"]:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train(
            TrainConfig(
                data=str(released["clm"]),
                out=str(tmp_path / "part"),
                hf_model=str(released["llama"]),
                steps=3,
                batch_size=4,
                progress=False,
                eval_fraction=0.1,
                checkpoint_every=1,
            ),
            on_step=on_step,
        )
    train(
        TrainConfig(
            data=str(released["clm"]),
            out=str(tmp_path / "part"),
            hf_model=str(released["llama"]),
            steps=3,
            batch_size=4,
            progress=False,
            eval_fraction=0.1,
            checkpoint_every=1,
        ),
        resume=True,
    )
    a, b = _weights(tmp_path / "whole" / "model"), _weights(tmp_path / "part" / "model")
    assert all(torch.equal(a[k], b[k]) for k in a)
    transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "part" / "model", local_files_only=True)


def test_lora_writes_an_adapter_peft_loads_and_a_merged_model(released, tmp_path):
    peft = pytest.importorskip("peft")
    _run(released["clm"], released["llama"], tmp_path / "run", lora_rank=4, lora_merge=True, lr=1e-2)
    out = tmp_path / "run" / "model"
    cfg = json.loads((out / "adapter_config.json").read_text())
    assert cfg["r"] == 4 and set(cfg["target_modules"]) == {"q_proj", "v_proj"}
    base = transformers.LlamaForCausalLM.from_pretrained(released["llama"], local_files_only=True)
    ids = torch.arange(1, 20)[None]
    with torch.no_grad():
        before = base(ids).logits
        tuned = peft.PeftModel.from_pretrained(base, out).eval()
        after = tuned(ids).logits
        merged = transformers.AutoModelForCausalLM.from_pretrained(out / "merged", local_files_only=True).eval()
        assert float((after - before).abs().max()) > 0  # the adapter learned something
        torch.testing.assert_close(merged(ids).logits, after, rtol=1e-4, atol=1e-4)
    # only the adapters trained: the base weights in the checkpoint are the released ones
    state = torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=True)["model_state"]
    want = _weights(released["llama"])
    for k, v in want.items():
        k2 = next(s for s in state if s.endswith(k.replace(".weight", ".base_layer.weight")) or s.endswith(k))
        assert torch.equal(state[k2], v), k


def test_packed_rows_stay_exact_with_adapters(released):
    """With LoRA adapters (their B made nonzero), the packed forward's loss of each row's documents
    equals each document's loss alone (float32 rounding: a softmax over 64 vs the document's tokens)."""
    pytest.importorskip("peft")
    from seqpack.nn.hf_adapter import packed_forward
    from seqpack.train.data import TrainData
    from seqpack.train.pretrained import add_lora

    model = transformers.LlamaForCausalLM.from_pretrained(released["llama"], local_files_only=True)
    model = add_lora(model, "CAUSAL_LM", rank=4, targets="q_proj,k_proj,v_proj,o_proj")
    torch.manual_seed(1)
    for name, p in model.named_parameters():
        if "lora_B" in name:
            p.data.normal_(0, 0.1)
    model.eval()
    data = TrainData(str(released["clm"]), eval_fraction=0.1, eval_tokens=0)
    b = data.batch(data.units_at(0, 0, 4))
    b = {k: v for k, v in b.items() if k != "num_sequences"}
    with torch.no_grad():
        packed = packed_forward(
            model, {k: v.long() if v.dtype != torch.bool else v for k, v in b.items()}, reduction="token"
        )
        total, count = 0.0, 0
        for r in range(b["input_ids"].shape[0]):
            seg = b["segment_ids"][r]
            for s_id in seg.unique().tolist():
                if s_id == 0:
                    continue
                ids = b["input_ids"][r][seg == s_id][None].long()
                n = ids.shape[1] - 1
                total += float(model(ids, labels=ids).loss) * n
                count += n
    assert math.isclose(float(packed.loss), total / count, rel_tol=1e-5)


def test_lora_on_a_classifier_trains_its_new_head_whole(released, tmp_path):
    """A classifier's head is the task's own: it trains whole beside the adapters (peft's SEQ_CLS),
    and the adapter directory loads back onto the released model."""
    peft = pytest.importorskip("peft")
    _run(released["cls"], released["bert"], tmp_path / "run", lora_rank=2, lora_targets="query,value", lr=1e-2)
    out = tmp_path / "run" / "model"
    cfg = json.loads((out / "adapter_config.json").read_text())
    assert set(cfg["target_modules"]) == {"query", "value"} and cfg["task_type"] == "SEQ_CLS"
    base = transformers.BertForSequenceClassification.from_pretrained(released["bert"], local_files_only=True)
    head = base.classifier.weight.detach().clone()
    tuned = peft.PeftModel.from_pretrained(base, out)
    assert not torch.equal(tuned.base_model.model.classifier.modules_to_save["default"].weight, head)


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"lora_rank": 4}, "pass --hf-model DIR too"),
        ({"hf_model": "m", "lora_merge": True}, "pass --lora-rank R too"),
        ({"hf_model": "m", "lora_rank": -1}, "lora_rank must be >= 0"),
        ({"hf_model": "m", "lora_rank": 2, "lora_targets": " , "}, "module names like q_proj"),
    ],
)
def test_lora_options_are_checked(kw, match):
    with pytest.raises(ValueError, match=match):
        TrainConfig(data="d", out="o", **kw)


@pytest.mark.parametrize("how", ["sharded", "bin"])
def test_sharded_and_pytorch_bin_checkpoints_load(released, tmp_path, how):
    """A checkpoint in shards (an index beside them) or as pytorch_model.bin loads as one file does."""
    import shutil

    model = transformers.LlamaForCausalLM.from_pretrained(released["llama"], local_files_only=True)
    src = tmp_path / "src"
    if how == "sharded":
        model.save_pretrained(src, max_shard_size="20KB")
        assert (src / "model.safetensors.index.json").is_file()
    else:
        src.mkdir()
        model.config.save_pretrained(src)
        torch.save(model.state_dict(), src / "pytorch_model.bin")
    for f in released["llama"].glob("*token*"):
        shutil.copy(f, src / f.name)
    _run(released["clm"], src, tmp_path / "run", steps=1, lr=1e-12)
    got, want = _weights(tmp_path / "run" / "model"), _weights(released["llama"])
    for k in want:
        torch.testing.assert_close(got[k], want[k], rtol=2**-23, atol=1e-12 * 1.01, msg=k)


def test_a_base_checkpoint_gets_a_new_head_said_in_its_first_line(released, tmp_path, capsys):
    """A pre-training checkpoint under a classifier (the paper's fine-tuning): the encoder's weights
    are the checkpoint's, the classifier is new, the pre-training heads are left unused, and the first
    line and the run's config say so (transformers' own load report is not printed)."""
    _run(released["cls"], released["bert_mlm"], tmp_path / "run", lr=1e-12, progress=True)
    err = capsys.readouterr().err
    assert "LOAD REPORT" not in err
    assert "(loaded weights; new: classifier; unused: cls.predictions, cls.seq_relationship)" in err.splitlines()[0]
    spec = json.loads((tmp_path / "run" / "config.json").read_text())["model"]
    assert spec["new"] == ["classifier"] and spec["resized"] == []
    got, want = _weights(tmp_path / "run" / "model"), _weights(released["bert_mlm"])
    for k in got:
        if k.startswith("bert."):
            torch.testing.assert_close(got[k], want[k], rtol=2**-23, atol=2 * 1e-12 * 1.01, msg=k)


def test_a_head_of_another_size_is_refused_unless_started_anew(released, tmp_path, capsys):
    """A three-label classifier on two named labels: refused in one line before any step; with
    ``--ignore-mismatched-sizes`` its classifier starts anew, and ``RUN/model/``'s config names the
    data's labels."""
    from seqpack.cli.main import main
    from seqpack.pipeline import PackConfig, build_packed_dataset
    from seqpack.tokenizer import open_tokenizer

    records = [{"text": f"a review number {i}", "label": "pos" if i % 3 else "neg"} for i in range(40)]
    named = tmp_path / "named"
    build_packed_dataset(
        records, open_tokenizer(released["root"] / "tok"), named, PackConfig.for_task("classification", max_len=64)
    )
    args = [
        "train",
        "--data",
        str(named),
        "--hf-model",
        str(released["bert_multi"]),
        "--steps",
        "1",
        "--batch-size",
        "2",
        "--quiet",
        "--out",
    ]
    assert main([*args, str(tmp_path / "refused")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "classifier.bias is (3,) in the checkpoint but (2,)" in err, err
    assert "pass --ignore-mismatched-sizes" in err and not (tmp_path / "refused" / "checkpoint.pt").exists()
    assert main([*args, str(tmp_path / "run"), "--ignore-mismatched-sizes"]) == 0
    saved = json.loads((tmp_path / "run" / "model" / "config.json").read_text())
    assert saved["id2label"] == {"0": "neg", "1": "pos"} and saved["label2id"] == {"neg": 0, "pos": 1}
    spec = json.loads((tmp_path / "run" / "config.json").read_text())["model"]
    assert spec["resized"] == ["classifier"]


def test_lora_trains_a_head_new_to_the_checkpoint_whole(released, tmp_path):
    """LoRA from a classifier checkpoint onto QA: the span head is new, so it trains whole beside the
    adapters (not frozen at its random start) and is saved with the adapter."""
    pytest.importorskip("peft")
    _run(released["qa"], released["bert"], tmp_path / "run", lora_rank=2, lora_targets="query,value", lr=1e-2)
    cfg = json.loads((tmp_path / "run" / "model" / "adapter_config.json").read_text())
    assert "qa_outputs" in (cfg["modules_to_save"] or [])
    state = torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=True)["model_state"]
    trained = [k for k in state if "qa_outputs.modules_to_save" in k]
    original = [k for k in state if "qa_outputs.original_module" in k]
    assert trained and original
    assert any(
        not torch.equal(state[k], state[k.replace("modules_to_save.default", "original_module")]) for k in trained
    )


def test_ignore_mismatched_sizes_needs_a_checkpoint():
    with pytest.raises(ValueError, match="pass --hf-model DIR too"):
        TrainConfig(data="d", out="o", ignore_mismatched_sizes=True)


def test_a_stream_tokenized_by_another_tokenizer_is_refused_with_its_own_fix(released, datasets, tmp_path):
    """Examples read as a stream are tokenized by ``--tokenizer`` as they come: a tokenizer other than
    the model's is refused before any step, and the fix is that option, not a re-pack."""
    from tests.train.conftest import synthetic_documents

    jsonl = tmp_path / "train.jsonl"
    jsonl.write_text("".join(json.dumps({"text": d}) + "\n" for d in synthetic_documents(40)))
    with pytest.raises(ValueError, match=r"is read with another tokenizer than the model's; pass --tokenizer .*llama"):
        _run(jsonl, released["llama"], tmp_path / "run", stream=True, tokenizer=str(datasets["tokenizer"]), max_len=64)
    _run(jsonl, released["llama"], tmp_path / "ok", stream=True, tokenizer=str(released["llama"]), max_len=64, steps=1)
    assert (tmp_path / "ok" / "model" / "model.safetensors").is_file()


def test_run_model_never_replaces_a_folder_seqpack_did_not_make(released, tmp_path):
    """``RUN/model/`` is replaced only inside a run directory: a ``model/`` folder of the user's
    beside no run is refused and survives, files included; in a run it is replaced whole."""
    from seqpack.train.pretrained import write_model_dir

    model = transformers.LlamaForCausalLM.from_pretrained(released["llama"], local_files_only=True)
    mine = tmp_path / "mine"
    (mine / "model").mkdir(parents=True)
    (mine / "model" / "notes.txt").write_text("keep me")
    with pytest.raises(FileExistsError):
        write_model_dir(model, mine, tokenizer={}, merge=False)
    assert (mine / "model" / "notes.txt").read_text() == "keep me"
    assert sorted(p.name for p in mine.iterdir()) == ["model"]  # nothing left beside it
    run = tmp_path / "run"
    _run(released["clm"], released["llama"], run, steps=1)
    write_model_dir(model, run, tokenizer={}, merge=False)
    assert (run / "model" / "model.safetensors").is_file()
