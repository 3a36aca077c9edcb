"""State-carrying layers on packed rows (seqpack.nn.hf_mixers): each document from a zero state,
exact against the document alone, gradients included; refused where seqpack cannot give documents."""

from __future__ import annotations

import warnings

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from seqpack.nn.hf_mixers import documents, find_mixers, install_mixers, restarting_segments

transformers = pytest.importorskip("transformers")

#: float32, a few layers of width 32 over at most ~60 tokens: the packed and the lone runs differ in
#: summation order only (a batch of documents against one, chunked scans padded differently), each
#: op rounding at 2^-24 relative, far below 1e-5; a leaked state moves log-probs by 1e-1 and more
TOLERANCE = 1e-5


class Leaky(torch.nn.Module):
    """A toy mixer: a causal depthwise convolution, then a decaying running sum (a recurrent state)."""

    def __init__(self, width: int = 4) -> None:
        super().__init__()
        self.conv = torch.nn.Conv1d(width, width, 3, groups=width, padding=2)
        self.A_log = torch.nn.Parameter(torch.zeros(width))

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        T = hidden_states.shape[1]
        x = self.conv(hidden_states.transpose(1, 2))[..., :T].transpose(1, 2)  # (B, T, W)
        decay = torch.sigmoid(self.A_log)
        state, out = torch.zeros_like(x[:, 0]), []
        for t in range(T):
            state = decay * state + x[:, t]
            out.append(state)
        return torch.stack(out, 1)


class Toy(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList([Leaky(), torch.nn.Linear(4, 4), Leaky()])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x) if isinstance(layer, Leaky) else torch.tanh(layer(x))
        return x


def test_find_mixers_names_the_outermost_state_carrying_layers() -> None:
    assert [n for n, _ in find_mixers(Toy())] == ["layers.0", "layers.2"]


def test_a_hand_computed_row() -> None:
    """Documents [a b] [c]: c's output is c's alone; without documents it carries a and b's state."""
    torch.manual_seed(0)
    model = Toy()
    install_mixers(model)
    x = torch.randn(1, 3, 4)
    with documents(torch.tensor([[1, 1, 2]])):
        packed = model(x)
    assert torch.allclose(packed[0, :2], model(x[:, :2])[0], atol=1e-6)
    assert torch.allclose(packed[0, 2], model(x[:, 2:])[0, 0], atol=1e-6)
    assert not torch.allclose(model(x)[0, 2], model(x[:, 2:])[0, 0], atol=1e-3)  # the leak the documents stop


@settings(max_examples=25, deadline=None)
@given(st.lists(st.lists(st.integers(1, 9), min_size=1, max_size=4), min_size=1, max_size=3), st.integers(0, 3))
def test_packed_rows_equal_each_document_alone_gradients_included(rows: list[list[int]], pad: int) -> None:
    torch.manual_seed(0)
    model = Toy()
    install_mixers(model)
    T = max(sum(r) for r in rows) + pad
    seg = torch.zeros(len(rows), T, dtype=torch.long)
    for b, lengths in enumerate(rows):
        seg[b, : sum(lengths)] = torch.repeat_interleave(torch.arange(1, len(lengths) + 1), torch.tensor(lengths))
    x = torch.randn(len(rows), T, 4, requires_grad=True)
    with documents(seg):
        out = model(x)
    out.sum().backward()
    packed_grad = x.grad.clone()  # type: ignore[union-attr]  # x.grad: backward() set it
    x.grad = None
    for b, lengths in enumerate(rows):
        at = 0
        for n in lengths:
            alone = model(x[b : b + 1, at : at + n])
            assert torch.allclose(out[b, at : at + n], alone[0], atol=TOLERANCE)
            alone.sum().backward()
            at += n
    assert torch.allclose(packed_grad, x.grad, atol=TOLERANCE)  # type: ignore[arg-type]  # padding: no output, no gradient


def test_padded_rows_run_as_they_are() -> None:
    """One document a row from its first token (``--padded``): no gather, the same outputs."""
    torch.manual_seed(0)
    model = Toy()
    install_mixers(model)
    seg = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0]])
    x = torch.randn(2, 4, 4)
    with documents(seg) as docs:
        out = model(x)
    assert docs.plan is None
    assert torch.allclose(out[0, :3], model(x[:1, :3])[0], atol=1e-6)
    assert torch.allclose(out[1, :1], model(x[1:, :1])[0], atol=1e-6)
    with documents(torch.tensor([[0, 1, 1, 0]])) as docs:  # left padding: gathered
        assert docs.plan is not None


def test_a_shared_prompt_hands_its_state_to_each_completion() -> None:
    """Prompt p p p, completions c c and r: each completion as after the prompt alone."""
    torch.manual_seed(0)
    model = Toy()
    install_mixers(model)
    x = torch.randn(1, 6, 4)
    seg = torch.tensor([[1, 1, 1, 1, 1, 1]])
    br = torch.tensor([[0, 0, 0, 1, 1, 2]])
    with documents(seg, branch_ids=br):
        out = model(x)
    first = model(x[:, :5])[0]
    second = model(torch.cat([x[:, :3], x[:, 5:]], 1))[0]
    assert torch.allclose(out[0, :5], first, atol=1e-6)
    assert torch.allclose(out[0, 5], second[3], atol=1e-6)


class Rotated(Leaky):
    """A mixer that also reads per-token tensors: rotary ``(cos, sin)`` and positions."""

    def forward(  # type: ignore[override]
        self,
        hidden_states: torch.Tensor,
        position_embeddings: tuple[torch.Tensor, torch.Tensor],
        position_ids: torch.Tensor,
    ) -> torch.Tensor:
        cos, sin = position_embeddings
        return super().forward(hidden_states * cos + sin) + position_ids[..., None]


def test_per_token_keywords_are_gathered_with_the_hidden_states() -> None:
    torch.manual_seed(0)
    mixer = Rotated()
    install_mixers(mixer)
    x, pos = torch.randn(1, 5, 4), torch.tensor([[0, 1, 2, 0, 1]])
    cos, sin = torch.randn(1, 5, 4), torch.randn(1, 5, 4)
    with documents(torch.tensor([[1, 1, 1, 2, 2]])):
        packed = mixer(x, position_embeddings=(cos, sin), position_ids=pos)
    second = mixer(x[:, 3:], position_embeddings=(cos[:, 3:], sin[:, 3:]), position_ids=pos[:, 3:])
    assert torch.allclose(packed[:, 3:], second, atol=1e-6)


def test_restarting_positions_give_documents() -> None:
    assert restarting_segments(torch.tensor([[0, 1, 2, 3]])) is None
    assert restarting_segments(torch.tensor([[0, 1, 0, 0, 1]])).tolist() == [[1, 1, 2, 3, 3]]  # type: ignore[union-attr]  # None: no row restarts


def _qwen35(layer_types: tuple[str, ...] = ("linear_attention", "full_attention")) -> torch.nn.Module:
    cfg = transformers.Qwen3_5TextConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        linear_num_value_heads=2,
        linear_num_key_heads=1,
        linear_key_head_dim=16,
        linear_value_head_dim=16,
        layer_types=list(layer_types),
    )
    torch.manual_seed(0)
    model = transformers.Qwen3_5ForCausalLM(cfg).float().eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.ndim >= 2:
                p.normal_(0.0, 0.2)
    return model


def _alone_logprobs(model: torch.nn.Module, ids: list[int]) -> torch.Tensor:
    logits = model(input_ids=torch.tensor([ids]), use_cache=False).logits[0]
    return logits.log_softmax(-1)[torch.arange(len(ids) - 1), torch.tensor(ids[1:])]


DOCS = [[3, 9, 4, 7, 11, 5, 8], [6, 2, 13], [7, 7, 1, 12, 9, 3]]


@pytest.mark.parametrize("impl", ["seqpack_packed", "sdpa", "seqpack_varlen"])
def test_qwen35_packed_forward_is_each_document_alone(impl: str) -> None:
    from seqpack.nn.hf_adapter import packed_forward
    from seqpack.nn.hf_attention import register_packed_attention
    from seqpack.nn.hf_padding_free import register_varlen_attention

    register_packed_attention()
    register_varlen_attention()
    model = _qwen35()
    ids = torch.tensor([[t for d in DOCS for t in d]])
    seg = torch.repeat_interleave(torch.arange(1, 4), torch.tensor([len(d) for d in DOCS]))[None]
    model.set_attn_implementation(impl)  # type: ignore[operator]  # a transformers model's method
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        logits = packed_forward(model, {"input_ids": ids, "segment_ids": seg}).logits[0]  # type: ignore[index]  # PackedOutput.logits: asked for
    model.set_attn_implementation("eager")  # type: ignore[operator]  # a transformers model's method
    at = 0
    for d in DOCS:
        got = logits[at : at + len(d)].log_softmax(-1)[torch.arange(len(d) - 1), torch.tensor(d[1:])]
        assert (got - _alone_logprobs(model, d)).abs().max() <= TOLERANCE
        at += len(d)


def test_a_plan_by_hand_on_a_hybrid_refuses_at_the_first_call() -> None:
    """A new user's route: seqpack_packed installed, a plan, restarting positions, no documents."""
    from seqpack.nn.attention import plan_attention
    from seqpack.nn.hf_attention import register_packed_attention

    register_packed_attention()
    model = _qwen35()
    model.set_attn_implementation("seqpack_packed")  # type: ignore[operator]  # a transformers model's method
    seg = torch.tensor([[1, 1, 1, 2, 2]])
    plan = plan_attention(seg, causal=True)
    with pytest.raises(ValueError, match=r"linear_attention layers.*not with a plan by hand") as e:
        model(
            input_ids=torch.tensor([[3, 4, 5, 6, 7]]),
            position_ids=torch.tensor([[0, 1, 2, 0, 1]]),
            seqpack_plan=plan,
            use_cache=False,
        )
    assert "\n" not in str(e.value)


def test_padding_free_rows_on_an_unprepared_hybrid_refuse_at_the_first_call() -> None:
    from seqpack.nn.hf_padding_free import register_varlen_attention

    model = _qwen35(("full_attention", "linear_attention"))  # attention first: its call is the first to see the row
    model.set_attn_implementation(register_varlen_attention())  # type: ignore[operator]  # a transformers model's method
    cu = torch.tensor([0, 3, 5], dtype=torch.int32)
    with pytest.raises(ValueError, match="prepare_packed") as e:
        model(
            input_ids=torch.tensor([[3, 4, 5, 6, 7]]),
            position_ids=torch.tensor([[0, 1, 2, 0, 1]]),
            cu_seq_lens_q=cu,
            cu_seq_lens_k=cu,
            max_length_q=3,
            max_length_k=3,
            use_cache=False,
        )
    assert "\n" not in str(e.value)


def test_restarting_positions_alone_are_exact_once_prepared() -> None:
    """TRL's padding-free rows: one row, positions restarting at each document, no seqpack call."""
    from seqpack.nn.hf_support import prepare_packed

    model = _qwen35()
    assert prepare_packed(model).mixers == ("Qwen3_5GatedDeltaNet",)
    ids = [t for d in DOCS for t in d]
    pos = torch.cat([torch.arange(len(d)) for d in DOCS])[None]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        logits = model(input_ids=torch.tensor([ids]), position_ids=pos, use_cache=False).logits[0]
    # the full-attention layer still sees the whole row here (eager, no mask): compare the first document only
    d = DOCS[0]
    got = logits[: len(d)].log_softmax(-1)[torch.arange(len(d) - 1), torch.tensor(d[1:])]
    assert (got - _alone_logprobs(model, d)).abs().max() <= TOLERANCE


def test_checkpointed_layers_recompute_on_their_documents() -> None:
    """Activation checkpointing recomputes each layer in backward, after the packed call returned."""
    from seqpack.nn.hf_adapter import packed_forward

    model = _qwen35().train()
    ids = torch.tensor([[t for d in DOCS for t in d]])
    seg = torch.repeat_interleave(torch.arange(1, 4), torch.tensor([len(d) for d in DOCS]))[None]
    batch = {"input_ids": ids, "segment_ids": seg, "labels": ids.clone()}
    grads = []
    for checkpointing in (False, True):
        if checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})  # type: ignore[operator]  # a transformers model's method
        model.zero_grad(set_to_none=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            packed_forward(model, batch).loss.backward()  # type: ignore[union-attr]  # PackedOutput.loss: set when the batch has targets
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    for n, g in grads[0].items():
        assert torch.allclose(g, grads[1][n], atol=1e-6), n


def test_context_parallel_refuses_a_hybrid() -> None:
    from seqpack.nn.hf_attention import register_packed_attention
    from seqpack.train.context_parallel import check_cp_model

    register_packed_attention()
    model = _qwen35()
    model.set_attn_implementation("seqpack_packed")  # type: ignore[operator]  # a transformers model's method
    with pytest.raises(ValueError, match="Qwen3_5GatedDeltaNet layers carry state along the whole row"):
        check_cp_model(model)


def test_the_sft_trainers_head_at_targets_loss_on_a_hybrid_is_each_document_alone() -> None:
    """PackedSFTTrainer's route: TRL's padding-free row (positions restarting at each document), the
    model called by the trainer, not by seqpack; the loss equals the documents' own losses."""
    from seqpack.nn.hf_causal_lm import add_target_head
    from seqpack.nn.hf_padding_free import register_varlen_attention
    from seqpack.nn.hf_support import prepare_packed

    model = _qwen35()
    model.set_attn_implementation(register_varlen_attention())  # type: ignore[operator]  # a transformers model's method
    prepare_packed(model)
    add_target_head(model)
    ids = torch.tensor([[t for d in DOCS for t in d]])
    pos = torch.cat([torch.arange(len(d)) for d in DOCS])[None]
    labels = torch.where(pos == 0, -100, ids)  # no target across a document's start
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cu = torch.tensor([0, *torch.tensor([len(d) for d in DOCS]).cumsum(0).tolist()], dtype=torch.int32)
        m = max(len(d) for d in DOCS)  # TRL's padding-free collator's keywords
        got = model(
            input_ids=ids,
            position_ids=pos,
            labels=labels,
            target_head=True,
            cu_seq_lens_q=cu,
            cu_seq_lens_k=cu,
            max_length_q=m,
            max_length_k=m,
        ).loss
        model.set_attn_implementation("eager")  # type: ignore[operator]  # a transformers model's method
        want = -torch.cat([_alone_logprobs(model, d) for d in DOCS]).mean()
    assert abs(float(got) - float(want)) <= TOLERANCE
