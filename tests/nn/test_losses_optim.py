from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from seqpack.nn import (
    Lamb,
    adjust_betas,
    gather_slots,
    multilabel_loss,
    packed_accumulation,
    packed_learning_rate,
    qa_logits,
    qa_loss,
    slot_cross_entropy,
    token_loss,
)
from tests.nn._packs import packs, segment_rows


def test_token_loss_sequence_vs_token_golden() -> None:
    # row: sequence 1 = tokens 0-1 (one target), sequence 2 = tokens 2-5 (three targets)
    logits = torch.zeros(1, 6, 2)
    logits[0, 0] = torch.tensor([math.log(3.0), 0.0])  # p(target 0) = 3/4
    labels = torch.tensor([[0, -100, 1, 1, 1, -100]])
    seg = torch.tensor([[1, 1, 2, 2, 2, 2]])
    a, b = -math.log(0.75), math.log(2.0)
    assert token_loss(logits, labels, seg) == pytest.approx((a + b) / 2, rel=1e-6)  # paper Listing 1
    assert token_loss(logits, labels, seg, reduction="token") == pytest.approx((a + 3 * b) / 4, rel=1e-6)  # HF
    with pytest.raises(ValueError, match="reduction must be one of"):
        token_loss(logits, labels, seg, reduction="mean")
    with pytest.raises(ValueError, match="on a padding token"):
        token_loss(logits, torch.tensor([[0, -100, 1, 1, 1, 1]]), torch.tensor([[1, 1, 2, 2, 2, 0]]))


def test_slot_losses_ignore_empty_slots() -> None:
    logits = torch.zeros(2, 3, 4)
    labels = torch.tensor([[1, 2, -100], [3, -100, -100]])
    loss, per = slot_cross_entropy(logits, labels)
    assert loss == pytest.approx(math.log(4.0)) and per[0, 2] == 0
    targets = torch.tensor([[[1.0, 0.0], [-100.0, -100.0]]])
    loss, per = multilabel_loss(torch.zeros(1, 2, 2), targets)
    assert loss == pytest.approx(math.log(2.0)) and per[0, 1] == 0  # mean over real sequences x labels
    with pytest.raises(ValueError, match=r"\(B, D, C\)"):
        slot_cross_entropy(torch.zeros(2, 3), labels)


def test_qa_logits_minus_inf_outside_each_sequence() -> None:
    seg = torch.tensor([[1, 1, 2, 2, 2, 0]])
    start = torch.tensor([[0.5, 1.0, 2.0, 0.0, -1.0, 9.0]])
    s_slots, e_slots = qa_logits(start, start, seg, 3)
    assert s_slots[0, 0].tolist()[:2] == [0.5, 1.0] and all(math.isinf(x) for x in s_slots[0, 0, 2:].tolist())
    assert torch.isinf(s_slots[0, 2]).all()  # empty slot
    loss, per = qa_loss(s_slots, e_slots, torch.tensor([[1, 2, -100]]), torch.tensor([[1, 2, -100]]))
    p1 = math.exp(1.0) / (math.exp(0.5) + math.exp(1.0))  # only the sequence's own two tokens compete
    p2 = math.exp(2.0) / (math.exp(2.0) + 1 + math.exp(-1.0))
    assert per[0, 0] == pytest.approx(-math.log(p1), rel=1e-6) and per[0, 1] == pytest.approx(-math.log(p2), rel=1e-6)
    assert loss == pytest.approx((-math.log(p1) - math.log(p2)) / 2, rel=1e-6)
    zero_filled = torch.where(torch.isinf(s_slots), 0.0, s_slots)  # the pitfall: 0 leaks probability mass
    assert not torch.allclose(zero_filled.log_softmax(-1)[0, 0, 1], s_slots.log_softmax(-1)[0, 0, 1])
    assert not torch.isnan(torch.stack([loss, per.sum()])).any()


def test_gather_slots_bad_shapes() -> None:
    with pytest.raises(ValueError, match=r"must be \(B, T, H\)"):
        gather_slots(torch.zeros(1, 5, 2), torch.ones(1, 6, dtype=torch.long), 2)


def test_lamb_first_step_golden() -> None:
    w = torch.nn.Parameter(torch.tensor([3.0, 4.0]))
    w.grad = torch.tensor([1.0, -1.0])
    opt = Lamb([w], lr=0.1, weight_decay=0.0, eps=1e-12)
    opt.step()
    trust = 5.0 / math.sqrt(2.0)  # ||w|| / ||update||, update = m_hat / sqrt(v_hat) = sign(g)
    assert w.tolist() == pytest.approx([3.0 - 0.1 * trust, 4.0 + 0.1 * trust], rel=1e-6)


def test_lamb_matches_reference_over_steps() -> None:
    torch.manual_seed(0)
    w = torch.nn.Parameter(torch.randn(5, 3))
    ref = w.detach().clone()
    m, v = torch.zeros_like(ref), torch.zeros_like(ref)
    opt = Lamb([w], lr=0.01, betas=(0.8, 0.9), weight_decay=0.1, eps=1e-6)
    for t in range(1, 6):
        g = torch.randn(5, 3)
        w.grad = g.clone()
        opt.step()
        m = 0.8 * m + 0.2 * g
        v = 0.9 * v + 0.1 * g * g
        u = (m / (1 - 0.8**t)) / ((v / (1 - 0.9**t)).sqrt() + 1e-6) + 0.1 * ref
        ref = ref - 0.01 * min(float(ref.norm() / u.norm()), 10.0) * u
        assert torch.allclose(w.detach(), ref, atol=1e-6)


def test_hyperparameter_helpers() -> None:
    assert adjust_betas((0.9, 0.999), 1.0) == (0.9, 0.999)
    assert packed_learning_rate(1e-3, 2.0) == 1e-3
    assert packed_learning_rate(1e-3, 4.0, rule="sqrt") == pytest.approx(2e-3)
    assert packed_learning_rate(1e-3, 2.0, rule="linear") == pytest.approx(2e-3)
    assert packed_accumulation(3, 2.0) == 2 and packed_accumulation(1, 3.0) == 1
    with pytest.raises(ValueError, match="packing_factor must be"):
        adjust_betas((0.9, 0.999), 0.5)
    with pytest.raises(ValueError, match="beta2 must be in"):
        adjust_betas((0.9, 1.0), 2.0)
    with pytest.raises(ValueError, match="rule must be one of"):
        packed_learning_rate(1e-3, 2.0, rule="cubic")
    with pytest.raises(ValueError, match="betas"):
        Lamb([torch.nn.Parameter(torch.zeros(1))], betas=(0.9, 1.5))


@settings(max_examples=40, deadline=None)
@given(packs(max_len=24), st.booleans(), st.floats(0.0, 1.0), st.integers(0, 2**16))
def test_dense_and_gathered_token_losses_agree(pack, shift: bool, density: float, seed: int) -> None:
    """The two ways of :func:`sequence_token_losses` (every position's cross-entropy, or only the
    targets' gathered first) give the same per-sequence losses and the same logit gradients."""
    from seqpack.nn.losses import _dense_token_losses, _gathered_token_losses

    T, rows = pack
    seg = segment_rows(T, rows)
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 7, seg.shape, generator=g)
    labels[(torch.rand(seg.shape, generator=g) > density) | (seg == 0)] = -100
    if shift:  # no target may be a sequence's first token (it would be predicted from the one before)
        first = torch.ones_like(seg, dtype=torch.bool)
        first[:, 1:] = seg[:, 1:] != seg[:, :-1]
        labels[first] = -100
    base = torch.randn(*seg.shape, 7, generator=g, dtype=torch.float64)
    out = []
    for fn in (_dense_token_losses, _gathered_token_losses):
        logits = base.clone().requires_grad_()
        per, present = fn(logits, labels, seg, int(shift), None)
        (per * torch.arange(1, per.numel() + 1).view_as(per)).sum().backward()  # every slot weighs differently
        out.append((per.detach(), present, logits.grad))
    # float64: the same log-softmax per position, sums over <= 24 terms in another order
    torch.testing.assert_close(out[0][0], out[1][0], rtol=1e-12, atol=1e-12)
    assert torch.equal(out[0][1], out[1][1])
    torch.testing.assert_close(out[0][2], out[1][2], rtol=1e-12, atol=1e-12)


def test_vocab_logits_pad_and_cut_back() -> None:
    """Padded to a multiple of ``align`` (as on CUDA), the logits and every gradient are the plain
    product's: the padding rows are zeros, their columns cut off."""
    from seqpack.nn.heads import vocab_logits

    torch.manual_seed(0)
    h = torch.randn(5, 8, dtype=torch.float64, requires_grad=True)
    w = torch.randn(13, 8, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(13, dtype=torch.float64, requires_grad=True)
    gout = torch.randn(5, 13, dtype=torch.float64)
    grads = []
    for align in (1, 16):
        out = vocab_logits(h, w, bias, align=align)
        assert out.shape == (5, 13)
        (out * gout).sum().backward()
        grads.append((out.detach(), h.grad.clone(), w.grad.clone(), bias.grad.clone()))  # type: ignore[union-attr]
        for x in (h, w, bias):
            x.grad = None
    for a, b in zip(*grads):  # float64 products of 8 terms: the same sums, any kernel
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
