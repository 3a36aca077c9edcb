# mypy: disable-error-code="union-attr,operator,arg-type,index"
# (PackedOutput's fields are Optional; these tests read the ones each head fills)
"""Encoders on packed rows (seqpack.nn.hf_encoder): the door reads each family's config and layers,
every head runs through the model's own modules on each document, and a packed batch gives what
each document gives alone through the unmodified model, gradients included; rows of one document
each run the model's own padded forward. (Every family and head: tests/nn/test_model_matrix.py.)"""

from __future__ import annotations

import functools
from typing import Any

import pytest
import torch
from hypothesis import given, settings

from seqpack.nn.hf_adapter import hf_inputs, is_reward_model, packed_forward
from seqpack.nn.hf_encoder import HEADS, Documents, _document_positions
from seqpack.nn.hf_support import ENCODER_TASKS, encoder_support, is_encoder
from tests.nn._packs import packs, spans

tf = pytest.importorskip("transformers")
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

V = 40
SMALL = {
    "vocab_size": V,
    "hidden_size": 16,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "intermediate_size": 32,
    "max_position_embeddings": 64,
    "hidden_dropout_prob": 0.0,
    "attention_probs_dropout_prob": 0.0,
}
CONFIGS: dict[str, Any] = {
    "roberta": lambda: tf.RobertaConfig(**SMALL, pad_token_id=1, type_vocab_size=1),  # as its checkpoints
    "distilbert": lambda: tf.DistilBertConfig(
        vocab_size=V,
        dim=16,
        n_layers=2,
        n_heads=2,
        hidden_dim=32,
        max_position_embeddings=64,
        dropout=0.0,
        attention_dropout=0.0,
    ),
    "albert": lambda: tf.AlbertConfig(**SMALL, embedding_size=8),
    "deberta-v2": lambda: tf.DebertaV2Config(
        **SMALL,
        relative_attention=True,
        pos_att_type=["p2c", "c2p"],
        position_biased_input=False,
        position_buckets=8,
        norm_rel_ebd="layer_norm",
    ),
    # local layers in windows of 4 (|i - j| <= 2), shorter than the documents
    "modernbert-mean": lambda: tf.ModernBertConfig(
        vocab_size=V,
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=32,
        local_attention=4,
        global_attn_every_n_layers=2,
        classifier_pooling="mean",
        pad_token_id=0,
    ),
    "modernbert-cls": lambda: tf.ModernBertConfig(
        vocab_size=V,
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=32,
        local_attention=4,
        global_attn_every_n_layers=2,
        classifier_pooling="cls",
        pad_token_id=0,
    ),
}
AUTO = {
    "sequence-classification": "AutoModelForSequenceClassification",
    "masked-lm": "AutoModelForMaskedLM",
    "question-answering": "AutoModelForQuestionAnswering",
    "token-classification": "AutoModelForTokenClassification",
}
C = 3


@functools.cache
def build(family: str, task: str, impl: str = "sdpa") -> Any:
    cfg = CONFIGS[family]()
    cfg.num_labels = 2 if task == "question-answering" else C
    torch.manual_seed(0)
    try:
        model = getattr(tf, AUTO[task]).from_config(cfg, attn_implementation=impl)
    except ValueError:  # no sdpa (DeBERTa's own attention)
        model = getattr(tf, AUTO[task]).from_config(cfg, attn_implementation="eager")
    with torch.no_grad():
        for p in model.parameters():
            if p.ndim >= 2:
                p.normal_(0.0, 0.3)
    return model.eval()


def make(T: int, rows: list[list[int]], task: str, seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    B, D = len(rows), max(len(r) for r in rows)
    ids = torch.zeros(B, T, dtype=torch.long)
    seg = torch.zeros(B, T, dtype=torch.long)
    labels = torch.full((B, T) if task in ("masked-lm", "token-classification") else (B, D), -100, dtype=torch.long)
    sp, ep = torch.full((B, D), -100), torch.full((B, D), -100)
    for b, k, at, n in spans(rows):
        ids[b, at : at + n] = torch.randint(2, V, (n,), generator=g)
        seg[b, at : at + n] = k + 1
        if task in ("masked-lm", "token-classification"):
            labels[b, at : at + n : 2] = torch.randint(0, V if task == "masked-lm" else C, ((n + 1) // 2,), generator=g)
        else:
            labels[b, k] = int(torch.randint(0, C, (1,), generator=g))
        sp[b, k], ep[b, k] = at + n // 2, at + n - 1
    batch = {"input_ids": ids, "segment_ids": seg}
    if task == "question-answering":
        batch.update(start_positions=sp, end_positions=ep)
    else:
        batch["labels"] = labels
    return batch


def alone(model: Any, task: str, batch: dict[str, torch.Tensor], b: int, k: int, at: int, n: int) -> tuple[Any, Any]:
    kw: dict[str, Any] = {"input_ids": batch["input_ids"][b : b + 1, at : at + n]}
    if task == "question-answering":
        out = model(
            **kw,
            start_positions=batch["start_positions"][b, k : k + 1] - at,
            end_positions=batch["end_positions"][b, k : k + 1] - at,
        )
        return (out.start_logits[0], out.end_logits[0]), out.loss
    if task == "sequence-classification":
        out = model(**kw, labels=batch["labels"][b, k : k + 1])
    else:
        out = model(**kw, labels=batch["labels"][b : b + 1, at : at + n])
    return (out.logits[0],), out.loss


def got(out: Any, task: str, b: int, k: int, at: int, n: int) -> tuple[torch.Tensor, ...]:
    if task == "question-answering":
        return out.extra["start_logits"][b, k, at : at + n], out.extra["end_logits"][b, k, at : at + n]
    if task == "sequence-classification":
        return (out.slot_logits[b, k],)
    return (out.logits[b, at : at + n],)


CASES = [(f, t) for f in CONFIGS for t in AUTO if not (f.startswith("modernbert") and t != "sequence-classification")]
CASES += [
    ("modernbert-cls", "masked-lm"),
    ("modernbert-cls", "question-answering"),
    ("modernbert-cls", "token-classification"),
]


@pytest.mark.parametrize(("family", "task"), CASES)
@settings(max_examples=3, deadline=None)
@given(pack=packs(max_rows=2, max_len=20, max_depth=3, min_len=2))
def test_packed_rows_equal_each_document_alone(family: str, task: str, pack) -> None:
    """Outputs, the loss (the mean of the documents' own losses) and every gradient."""
    T, rows = pack
    model = build(family, task)
    batch = make(T, rows, task, seed=T)
    model.zero_grad(set_to_none=True)
    out = packed_forward(model, batch)
    out.loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    losses = []
    for b, k, at, n in spans(rows):
        want, loss = alone(model, task, batch, b, k, at, n)
        for x, y in zip(got(out, task, b, k, at, n), want):
            assert (x - y).abs().max() <= 1e-5 * max(1.0, float(y.abs().max())), (family, task)
        losses.append(loss)
    total = torch.stack(losses).mean()
    assert abs(float(out.loss) - float(total)) <= 1e-5 * max(1.0, abs(float(total)))
    total.backward()
    for name, p in model.named_parameters():
        if name in grads:
            assert (grads[name] - p.grad).abs().max() <= 1e-5 + 1e-4 * p.grad.abs().max(), name
    model.zero_grad(set_to_none=True)


def test_a_window_and_the_pooling_are_each_documents_own() -> None:
    """Documents longer than ModernBERT's window (|i - j| <= 2 on its local layer) and its mean
    pooling: dropping the window or pooling the row would move the logits far past 1e-5."""
    import seqpack.nn.hf_encoder as enc

    model = build("modernbert-mean", "sequence-classification")
    batch = make(24, [[10, 9, 5]], "sequence-classification", seed=1)
    right = packed_forward(model, batch).slot_logits
    saved = enc._windows
    enc._windows = lambda base: __import__("contextlib").nullcontext()  # what a dropped window gives
    try:
        wrong = packed_forward(model, batch).slot_logits
    finally:
        enc._windows = saved
    assert (right - wrong).abs().max() > 1e-3


def test_robertas_positions_are_what_it_makes_for_each_document_alone() -> None:
    """From ``padding_idx + 1``, a token equal to the pad id keeping ``padding_idx`` (transformers'
    ``create_position_ids_from_input_ids``, the document alone)."""
    from transformers.models.roberta.modeling_roberta import RobertaEmbeddings

    ids = torch.tensor([[5, 1, 7, 8, 9, 1, 4, 0, 0]])
    seg = torch.tensor([[1, 1, 1, 2, 2, 2, 2, 0, 0]])
    pos = _document_positions(ids, seg, padding_idx=1)
    for s, (lo, hi) in {1: (0, 3), 2: (3, 7)}.items():
        want = RobertaEmbeddings.create_position_ids_from_input_ids(ids[:, lo:hi], 1)
        assert pos[:, lo:hi].tolist() == want.tolist(), s
    assert _document_positions(ids, seg, None)[0, :7].tolist() == [0, 1, 2, 0, 1, 2, 3]


def test_the_door_reads_each_family() -> None:
    r = encoder_support(build("roberta", "sequence-classification"))
    assert (r.task, r.mask, r.padding_idx, r.windows, r.token_types, r.refusal) == (
        "sequence-classification",
        "4d",
        1,
        False,
        False,
        None,
    )  # one token type: none passed
    d = encoder_support(build("deberta-v2", "masked-lm"))
    assert (d.mask, d.embeddings_mask, d.padding_idx) == ("deberta", "mask", None)
    m = encoder_support(build("modernbert-mean", "token-classification"))
    assert (m.task, m.windows, m.token_types) == ("token-classification", True, False)
    bert = tf.BertForSequenceClassification(tf.BertConfig(**SMALL))
    assert encoder_support(bert).token_types and is_encoder(bert) and not is_reward_model(bert)
    assert is_encoder(tf.RobertaForSequenceClassification(CONFIGS["roberta"]()))
    assert not is_reward_model(tf.RobertaForSequenceClassification(CONFIGS["roberta"]()))  # was refused as one
    assert not is_encoder(tf.BertLMHeadModel(tf.BertConfig(**SMALL, is_decoder=True)))
    llama = tf.LlamaForSequenceClassification(
        tf.LlamaConfig(vocab_size=V, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32)
    )
    assert is_reward_model(llama) and not is_encoder(llama)
    assert {t for t, _ in ENCODER_TASKS} == set(HEADS)


@pytest.mark.parametrize(
    ("model", "match"),
    [
        (
            lambda: tf.FNetForMaskedLM(
                tf.FNetConfig(vocab_size=V, hidden_size=16, num_hidden_layers=1, intermediate_size=32)
            ),
            "takes no attention mask",
        ),
        (
            lambda: tf.ConvBertForSequenceClassification(tf.ConvBertConfig(**SMALL, embedding_size=16)),
            "convolution over the sequence",
        ),
        (lambda: tf.BigBirdForMaskedLM(tf.BigBirdConfig(**SMALL)), "random blocks"),
        (lambda: tf.RoFormerForMaskedLM(tf.RoFormerConfig(**SMALL, embedding_size=16)), "takes no position_ids"),
        (lambda: tf.NystromformerForMaskedLM(tf.NystromformerConfig(**SMALL)), "landmarks"),
        (
            lambda: tf.XLMForSequenceClassification(tf.XLMConfig(vocab_size=V, emb_dim=16, n_layers=1, n_heads=2)),
            "makes its attention mask itself",
        ),
        (lambda: tf.BertModel(tf.BertConfig(**SMALL)), "no packed adapter for BertModel"),
    ],
)
def test_what_cannot_be_exact_is_refused_in_one_line(model, match) -> None:
    m = model()
    batch = {"input_ids": torch.ones(1, 6, dtype=torch.long), "segment_ids": torch.tensor([[1, 1, 1, 2, 2, 0]])}
    with pytest.raises(ValueError, match=match) as e:
        packed_forward(m, batch)
    assert "\n" not in str(e.value)


def test_rows_of_one_document_run_the_models_own_padded_forward() -> None:
    """Padded rows (``seqpack train --padded``): the model's own forward with a 2-D mask and its own
    positions; the same outputs as the packed path forced on those rows."""
    model = build("roberta", "sequence-classification")
    batch = make(12, [[7], [12], [4]], "sequence-classification", seed=3)
    seen: list[Any] = []
    handle = model.roberta.register_forward_pre_hook(lambda m, a, kw: seen.append(kw), with_kwargs=True)
    try:
        own = packed_forward(model, batch)
        packed = packed_forward(model, batch, padded=False)
    finally:
        handle.remove()
    assert seen[0]["attention_mask"].ndim == 2 and seen[0].get("position_ids") is None
    assert seen[1]["attention_mask"].ndim == 4 and seen[1]["position_ids"][0, 0] == 2  # padding_idx + 1
    assert (own.slot_logits - packed.slot_logits).abs().max() <= 1e-5
    assert abs(float(own.loss) - float(packed.loss)) <= 1e-6
    with pytest.raises(ValueError, match="rows of one document each"):
        packed_forward(model, make(12, [[5, 4]], "sequence-classification", seed=1), padded=True)


def test_token_classification_per_token_reduction_is_transformers_own_loss() -> None:
    """``reduction="token"``: every labelled token's loss over their count, what transformers'
    ``*ForTokenClassification`` computes over the same tokens."""
    model = build("deberta-v2", "token-classification")
    rows = [[6, 9], [11]]
    batch = make(16, rows, "token-classification", seed=2)
    out = packed_forward(model, batch, reduction="token")
    logits = torch.cat([alone(model, "token-classification", batch, b, k, at, n)[0][0] for b, k, at, n in spans(rows)])
    labels = torch.cat([batch["labels"][b, at : at + n] for b, k, at, n in spans(rows)])
    want = torch.nn.functional.cross_entropy(logits, labels, ignore_index=-100)
    assert abs(float(out.loss) - float(want)) <= 1e-5


def test_albert_pretraining_reads_each_documents_sentence_order() -> None:
    """ALBERT's pre-training heads (its sentence-order head on each document's pooled first token)."""
    cfg = tf.AlbertConfig(**SMALL, embedding_size=8)
    torch.manual_seed(0)
    model = tf.AlbertForPreTraining(cfg).eval()
    rows = [[5, 7], [9]]
    batch = make(14, rows, "masked-lm", seed=4)
    batch["next_sentence_label"] = torch.tensor([[0, 1], [1, -100]])
    out = packed_forward(model, batch)
    for b, k, at, n in spans(rows):
        ref = model(input_ids=batch["input_ids"][b : b + 1, at : at + n])
        assert (out.slot_logits[b, k] - ref.sop_logits[0]).abs().max() <= 1e-5
        assert (out.logits[b, at : at + n] - ref.prediction_logits[0]).abs().max() <= 1e-5
    assert out.extra["nsp_loss"] is not None and out.extra["mlm_loss"] is not None


def test_model_call_inputs_are_refused_where_packed_forward_is_needed() -> None:
    batch = {"input_ids": torch.full((1, 6), 5), "segment_ids": torch.tensor([[1, 1, 1, 2, 2, 0]])}
    ok = hf_inputs(build("roberta", "masked-lm"), batch)
    assert ok["attention_mask"].shape == (1, 1, 6, 6) and ok["position_ids"].tolist() == [[2, 3, 4, 2, 3, 1]]
    for family in ("modernbert-cls", "deberta-v2"):
        with pytest.raises(ValueError, match=r"run it through seqpack\.nn\.hf_adapter\.packed_forward"):
            hf_inputs(build(family, "masked-lm"), batch)


def test_documents_unpack_and_scatter() -> None:
    seg = torch.tensor([[1, 1, 2, 2, 2, 0], [1, 1, 1, 1, 0, 0]])
    docs = Documents.of(seg)
    assert docs.row.tolist() == [0, 0, 1] and docs.start.tolist() == [0, 2, 0] and docs.length.tolist() == [2, 3, 4]
    x = torch.arange(12.0).view(2, 6)[..., None]
    states, real = docs.unpack(x, 4)
    assert states[1, :, 0].tolist() == [2.0, 3.0, 4.0, 0.0] and real[1].tolist() == [True, True, True, False]
    assert docs.scatter(torch.tensor([1.0, 2.0, 3.0]), 2).tolist() == [[1.0, 2.0], [3.0, 0.0]]
    assert not docs.one_per_row and Documents.of(torch.tensor([[1, 1, 0], [1, 0, 0]])).one_per_row
