from __future__ import annotations

import math

import pytest
import torch

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
