"""Preference objectives on packed pairs: predictors, the shared-prefix mask on every backend that
takes it (and a clear refusal elsewhere), no contamination between responses or pairs, the losses."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from seqpack.data.columns import pack_sequences
from seqpack.data.torch_dataset import to_tensors
from seqpack.nn.attention import SHARED_PREFIX, plan_attention
from seqpack.nn.masks import attention_mask, split_branches
from seqpack.nn.models import GPT, GPTConfig
from seqpack.nn.preference import (
    PreferenceLoss,
    ResponseLogps,
    bradley_terry,
    predictor_index,
    response_ends,
)
from seqpack.tasks.preference.forward import policy_logps
from seqpack.tasks.preference.records import Pairs
from seqpack.tasks.preference.sequences import preference_sequences

V = 50
pytestmark = pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")


def pairs(n: int, seed: int = 0) -> Pairs:
    rng = np.random.default_rng(seed)
    draw = lambda lo, hi: rng.integers(1, V, rng.integers(lo, hi))  # noqa: E731
    return Pairs(
        [draw(2, 9) for _ in range(n)],
        [draw(1, 7) for _ in range(n)],
        [draw(1, 7) for _ in range(n)],
        np.arange(n),
        None,
        n,
    )


def batch_of(p: Pairs, layout: str, max_len: int = 48) -> dict[str, torch.Tensor]:
    seqs = preference_sequences(p, layout=layout, max_len=max_len)
    cols = pack_sequences(seqs, max_len, algorithm="best").columns
    return to_tensors(cols)


def gpt(backend: str = "sdpa") -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=V, hidden=32, layers=2, heads=2, attention=backend)).eval()


def test_predictors_in_the_pairs_layout() -> None:
    seg = torch.tensor([[1, 1, 1, 1, 1, 1, 0]])
    br = torch.tensor([[1, 1, 1, 2, 2, 2, 0]])  # p0 p1 c0 | p0 p1 r0
    assert predictor_index(seg, br).tolist() == [[-1, 0, 1, -1, 3, 4, -1]]


def test_split_branches_runs_the_pairs_layout_on_any_backend() -> None:
    b = batch_of(pairs(6), "pairs")
    model = gpt()
    out = model(b["input_ids"], b["segment_ids"], position_ids=b["position_ids"], branch_ids=b["branch_ids"]).logits
    split = split_branches(b["segment_ids"], b["branch_ids"])
    for backend in ("per_document", "eager", "sdpa"):
        other = gpt(backend)(b["input_ids"], split, position_ids=b["position_ids"]).logits
        real = split > 0
        # the same arithmetic per query row, other kernels: fp32 rounding of 32-wide dot products
        torch.testing.assert_close(other[real], out[real], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("backend", ["varlen", "flash_varlen"])
def test_a_shared_prefix_is_refused_by_backends_that_cannot_mask_it(backend: str) -> None:
    b = batch_of(pairs(3), "shared-prefix")
    with pytest.raises(ValueError, match=r"sdpa|eager|flex"):
        plan_attention(b["segment_ids"], causal=True, backend=backend, branch_ids=b["branch_ids"])


def _flex_ok() -> bool:
    try:
        from torch.nn.attention.flex_attention import create_block_mask  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.mark.parametrize("layout", ["shared-prefix", "pairs"])
@pytest.mark.parametrize("backend", list(SHARED_PREFIX))
def test_no_contamination(layout: str, backend: str) -> None:
    """Changing a rejected response changes no chosen-response logit (nor any prompt's); changing one
    pair changes no other pair's outputs."""
    if backend == "flex" and not _flex_ok():
        pytest.skip("this torch has no FlexAttention")
    p = pairs(8)
    b = batch_of(p, layout)
    model = gpt(backend)

    def logits(batch: dict[str, torch.Tensor]) -> torch.Tensor:
        with torch.no_grad():
            return model(
                batch["input_ids"],
                batch["segment_ids"],
                position_ids=batch["position_ids"],
                branch_ids=batch["branch_ids"],
            ).logits

    base = logits(b)
    changed = dict(b)
    ids = b["input_ids"].clone()
    rej = b["branch_ids"] == 2
    if layout == "pairs":
        rej &= b["labels"] != -100  # the rejected response, not its copy of the prompt
    ids[rej] = (ids[rej] + 7) % (V - 1) + 1
    changed["input_ids"] = ids
    out = logits(changed)
    keep = (b["segment_ids"] > 0) & (b["branch_ids"] != 2)
    assert torch.equal(out[keep], base[keep])  # bit for bit: the rows those queries read are the same
    assert not torch.equal(out[rej], base[rej])  # the change did reach the rejected response

    # one pair changed: every other pair's outputs equal
    row, slot = 0, 1
    other = dict(b)
    ids = b["input_ids"].clone()
    mine = (b["segment_ids"] == slot) & (torch.arange(ids.shape[0])[:, None] == row)
    ids[mine] = (ids[mine] + 3) % (V - 1) + 1
    other["input_ids"] = ids
    out = logits(other)
    rest = (b["segment_ids"] > 0) & ~mine
    assert torch.equal(out[rest], base[rest])


@pytest.mark.parametrize("backend", ["eager", "sdpa", "per_document"])
def test_shared_prefix_equals_pairs(backend: str) -> None:
    """Both layouts give each response the same log-probability (the shared prefix is exact)."""
    p = pairs(10)
    model = gpt(backend)
    got = {}
    for layout in ("shared-prefix", "pairs"):
        b = batch_of(p, layout)
        with torch.no_grad():
            lp = policy_logps(model, b)
        got[layout] = sorted(zip(lp.chosen[lp.present].tolist(), lp.rejected[lp.present].tolist()))
    # sums of <= 7 fp32 log-probabilities computed over other key sets: 1e-5 relative
    np.testing.assert_allclose(np.array(got["shared-prefix"]), np.array(got["pairs"]), rtol=1e-5)


@pytest.mark.parametrize("backend", [b for b in SHARED_PREFIX if b != "eager"])
def test_shared_prefix_backends_equal_the_reference(backend: str) -> None:
    if backend == "flex" and not _flex_ok():
        pytest.skip("this torch has no FlexAttention")
    b = batch_of(pairs(9, seed=4), "shared-prefix", max_len=64)

    def logits(name: str) -> torch.Tensor:
        with torch.no_grad():
            return gpt(name)(
                b["input_ids"], b["segment_ids"], position_ids=b["position_ids"], branch_ids=b["branch_ids"]
            ).logits

    real = b["segment_ids"] > 0
    # the same masked softmax, other kernels and key orders: fp32 rounding of 16-wide dot products
    torch.testing.assert_close(logits(backend)[real], logits("eager")[real], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("backend", ["sdpa", "per_document"])
def test_shared_prefix_gradients_equal_the_reference(backend: str) -> None:
    """per_document gathers the prompt in front of each response: its keys get gradient from both."""
    b = batch_of(pairs(7, seed=5), "shared-prefix", max_len=64)
    grads = {}
    for name in ("eager", backend):
        model = gpt(name).train()
        lp = policy_logps(model, b)
        (lp.chosen.sum() - 0.5 * lp.rejected.sum()).backward()
        grads[name] = {n: p.grad for n, p in model.named_parameters()}
    for n, g in grads["eager"].items():  # sums of ~100 log-probabilities: fp32, 1e-5 of the largest entry
        torch.testing.assert_close(grads[backend][n], g, rtol=0.0, atol=1e-5 * float(g.abs().max()) + 1e-8, msg=n)  # type: ignore[union-attr]  # p.grad: backward() set it


def test_dense_mask_matches_its_diagram() -> None:
    seg, br = torch.tensor([[1, 1, 1, 1, 1, 1]]), torch.tensor([[0, 0, 1, 1, 2, 2]])
    m = attention_mask(seg, causal=True, branch_ids=br)[0, 0].int().tolist()
    assert m == [
        [1, 0, 0, 0, 0, 0],
        [1, 1, 0, 0, 0, 0],
        [1, 1, 1, 0, 0, 0],
        [1, 1, 1, 1, 0, 0],
        [1, 1, 0, 0, 1, 0],
        [1, 1, 0, 0, 1, 1],
    ]


def test_response_ends() -> None:
    b = batch_of(pairs(4), "shared-prefix")
    ends_c, ends_r = response_ends(b["labels"], b["segment_ids"], b["branch_ids"])
    for r in range(b["labels"].shape[0]):
        for d in range(int(b["segment_ids"][r].max())):
            cols = ((b["segment_ids"][r] == d + 1) & (b["labels"][r] != -100)).nonzero().squeeze(1)
            br = b["branch_ids"][r, cols]
            assert int(ends_c[r, d]) == int(cols[br == 1].max()) and int(ends_r[r, d]) == int(cols[br == 2].max())


def _logps(c: float, r: float, nc: int = 4, nr: int = 2) -> ResponseLogps:
    t = lambda x: torch.tensor([[x]], dtype=torch.float64)  # noqa: E731
    return ResponseLogps(t(c), t(r), t(nc), t(nr), torch.tensor([[True]]))


def test_losses_by_hand() -> None:
    pol, ref = (
        _logps(-3.0, -5.0),
        (torch.tensor([[-4.0]], dtype=torch.float64), torch.tensor([[-4.5]], dtype=torch.float64)),
    )
    ls, b = 0.1, 0.5
    d = b * ((-3.0 + 4.0) - (-5.0 + 4.5))  # 0.75
    sig = lambda x: 1 / (1 + math.exp(-x))  # noqa: E731
    loss, rc, rr = PreferenceLoss(beta=b, label_smoothing=ls)(pol, ref)
    assert math.isclose(float(loss), -(1 - ls) * math.log(sig(d)) - ls * math.log(sig(-d)), rel_tol=1e-12)
    assert math.isclose(float(rc), b * 1.0) and math.isclose(float(rr), b * -0.5)
    loss, _, _ = PreferenceLoss(kind="ipo", beta=b)(pol, ref)
    assert math.isclose(float(loss), ((1.0 / 4 - (-0.5) / 2) - 1 / (2 * b)) ** 2, rel_tol=1e-12)
    loss, _, _ = PreferenceLoss(kind="simpo", beta=2.0, gamma=0.5)(pol)
    assert math.isclose(float(loss), -math.log(sig(2.0 * (-3.0 / 4 + 5.0 / 2) - 0.5)), rel_tol=1e-12)
    loss, _, _ = PreferenceLoss(kind="orpo", beta=b)(pol)
    mc, mr = -0.75, -2.5
    odds = (mc - mr) - (math.log1p(-math.exp(mc)) - math.log1p(-math.exp(mr)))
    assert math.isclose(float(loss), -mc - b * math.log(sig(odds)), rel_tol=1e-12)
    with pytest.raises(ValueError, match="reference"):
        PreferenceLoss()(pol, None)
    bt = bradley_terry(
        torch.tensor([[1.0]], dtype=torch.float64),
        torch.tensor([[0.25]], dtype=torch.float64),
        torch.tensor([[0.5]], dtype=torch.float64),
    )
    assert math.isclose(float(bt), -math.log(sig(0.25)), rel_tol=1e-12)


def test_loss_options_are_checked() -> None:
    with pytest.raises(ValueError, match=r"sigmoid|ipo"):
        PreferenceLoss(kind="kto")
    with pytest.raises(ValueError, match="beta"):
        PreferenceLoss(beta=0)
    with pytest.raises(ValueError, match="label_smoothing"):
        PreferenceLoss(label_smoothing=0.5)


def test_gpt_logits_only_where_needed_equal_full_logits() -> None:
    b = batch_of(pairs(5), "shared-prefix")
    model = gpt()
    with torch.no_grad():
        lp = policy_logps(model, b)
        full = model(
            b["input_ids"], b["segment_ids"], position_ids=b["position_ids"], branch_ids=b["branch_ids"]
        ).logits
    pred = predictor_index(b["segment_ids"], b["branch_ids"])
    rows, cols = (b["labels"] != -100).nonzero(as_tuple=True)
    tok = F.log_softmax(full[rows, pred[rows, cols]], -1).gather(1, b["labels"][rows, cols][:, None]).squeeze(1)
    want = torch.zeros_like(lp.chosen).index_put_(
        (rows, b["segment_ids"][rows, cols] - 1),
        torch.where(b["branch_ids"][rows, cols] == 1, tok, 0.0),
        accumulate=True,
    )
    torch.testing.assert_close(lp.chosen, want, rtol=1e-6, atol=1e-6)  # the same numbers, summed in another order


def test_bidirectional_branches_on_per_document_equal_eager() -> None:
    from seqpack.nn.attention import packed_attention
    from seqpack.nn.attention.dense import eager_attention

    seg, br = torch.tensor([[1, 1, 1, 1, 2, 2, 2, 0]]), torch.tensor([[0, 1, 1, 2, 0, 1, 2, 0]])
    q, k, v = (torch.randn(1, 2, 8, 4, generator=torch.Generator().manual_seed(i)) for i in range(3))
    got = packed_attention(q, k, v, plan_attention(seg, causal=False, backend="per_document", branch_ids=br), scale=0.5)
    want = eager_attention(q, k, v, attention_mask(seg, causal=False, branch_ids=br, dtype=torch.float32), scale=0.5)
    torch.testing.assert_close(got[..., :7, :], want[..., :7, :], rtol=1e-5, atol=1e-6)  # 4-wide fp32 dot products
