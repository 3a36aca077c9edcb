"""Context-parallel attention and loss on CPU (gloo, fp32): C = 2 and 4 ranks, each holding its
per-document chunks of the same rows, give the logits, the loss and (summed over ranks) the
gradients of the unsplit rows, for seqpack's GPT and a transformers Llama.

Rows: documents of length 1 up to the whole row, rows of one document, a row of six 1-token
documents, and trailing padding.

Tolerances: the split and unsplit passes differ only in the order of the attention's sums (<= 48
keys in another order) and of the loss and gradient sums over ranks, fp32 (eps 1.2e-7): logits and
losses within 1e-5 (sqrt(48) * eps * |x| with activations of order 1 is ~1e-6), gradients within
1e-4 relative (sums of hundreds of terms, summed again over ranks). One token attending across a
document boundary, or a mis-weighted document in the loss, moves them by 1e-2 or more.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from seqpack.data.context_parallel import cp_placement, cp_shard, cp_shard_index

T = 48  # divisible by 2C for C = 1, 2, 3, 4, 6, 8, 12
V = 50
ROWS = ([1, 5, 9, 3], [48], [1, 1, 1, 1, 1, 1], [17, 7], [9, 13, 1])  # document lengths; rounded to 8 they fit in 48


def batch() -> dict[str, np.ndarray]:
    """The rows: ids, per-document positions, CLM labels (HF convention) and the aligned targets."""
    rng = np.random.default_rng(0)
    seg = np.zeros((len(ROWS), T), np.int64)
    pos = np.zeros((len(ROWS), T), np.int64)
    for b, lengths in enumerate(ROWS):
        at = 0
        for d, n in enumerate(lengths, start=1):
            seg[b, at : at + n], pos[b, at : at + n] = d, np.arange(n)
            at += n
    ids = np.where(seg > 0, rng.integers(1, V, size=seg.shape), 0)
    labels = np.where((seg > 0) & (pos > 0), ids, -100)  # the first token of a document has no target
    targets = np.full_like(labels, -100)
    targets[:, :-1] = labels[:, 1:]  # the target of position t: labels[t + 1] (-100 across a boundary)
    return {"input_ids": ids, "segment_ids": seg, "position_ids": pos, "labels": labels, "targets": targets}


def shard(cols: dict[str, np.ndarray], cp: int, rank: int) -> tuple[dict[str, torch.Tensor], np.ndarray]:
    """Rank ``rank``'s share of every row (B, T / cp), and where each of its slots reads from (-1: padding)."""
    keep = ("input_ids", "segment_ids", "position_ids", "targets")
    parts = [
        cp_shard({k: cols[k][b] for k in keep}, cols["segment_ids"][b], cp=cp, rank=rank) for b in range(len(ROWS))
    ]
    srcs = []
    for b in range(len(ROWS)):
        lay = cp_placement(cols["segment_ids"][b], cp=cp)
        srcs.append(lay.src[cp_shard_index(lay.spans, cp=cp, rank=rank)])
    return {k: torch.from_numpy(np.stack([p[k] for p in parts])) for k in keep}, np.stack(srcs)


def gpt_pass(model, cols, plan=None):
    h = model(cols["input_ids"], cols["segment_ids"], position_ids=cols["position_ids"], plan=plan, logits=False).hidden
    return model.token_logits(h)


def llama_pass(model, cols, plan=None):
    from seqpack.nn.attention import plan_attention

    if plan is None:
        plan = plan_attention(cols["segment_ids"], causal=True, backend="sdpa")
    return model(input_ids=cols["input_ids"], position_ids=cols["position_ids"], seqpack_plan=plan).logits


def build(kind: str) -> torch.nn.Module:
    torch.manual_seed(0)
    if kind == "gpt":
        from seqpack.nn.models import GPT, GPTConfig

        return GPT(GPTConfig.of_size("tiny", vocab_size=V, max_position=T, dropout=0.0))
    from transformers import LlamaConfig, LlamaForCausalLM

    from seqpack.nn.hf_attention import PACKED_IMPL, register_packed_attention

    register_packed_attention()
    cfg = LlamaConfig(
        vocab_size=V,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,  # type: ignore[call-arg]  # attn_implementation: every config takes it, its typed signature does not list it
        num_key_value_heads=2,
        max_position_embeddings=T,
        attn_implementation=PACKED_IMPL,
    )
    return LlamaForCausalLM(cfg).float()


CASES = (("gpt", "sequence"), ("gpt", "token"), ("llama", "sequence"))


def _worker(rank: int, size: int, init: str, out: str) -> None:
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=size)
    torch.set_num_threads(1)
    try:
        torch.save(
            {f"{kind}-{reduction}": _case(rank, size, kind, reduction) for kind, reduction in CASES},
            Path(out) / f"{rank}.pt",
        )
    finally:
        dist.destroy_process_group()


def _case(rank: int, size: int, kind: str, reduction: str) -> dict:
    """This rank's pass on its share against the unsplit pass (run in every process)."""
    from seqpack.nn.attention import plan_context_parallel
    from seqpack.nn.losses import sharded_token_loss

    model = build(kind)
    run = gpt_pass if kind == "gpt" else llama_pass
    cols = {k: torch.from_numpy(v) for k, v in batch().items()}
    logits = run(model, cols)
    full_loss = _unsplit_loss(logits, cols, reduction)
    full_loss.backward()
    full_grads = {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    mine, src = shard(batch(), size, rank)
    local = run(model, mine, plan_context_parallel(mine["segment_ids"], mine["position_ids"]))
    loss = sharded_token_loss(local, mine["targets"], mine["segment_ids"], reduction=reduction)
    loss.backward()
    grads = {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}
    for g in grads.values():
        dist.all_reduce(g)
    total = loss.detach().clone()
    dist.all_reduce(total)
    real = torch.from_numpy(src >= 0)
    b, j = real.nonzero(as_tuple=True)
    want = logits.detach()[b, torch.from_numpy(src)[b, j]]
    return {
        "logit_diff": float((local.detach()[b, j] - want).abs().max()),
        "loss": float(total),
        "full_loss": float(full_loss),
        "grads": grads,
        "full_grads": full_grads,
        "tokens": int(real.sum()),
    }


def _unsplit_loss(logits: torch.Tensor, cols: dict[str, torch.Tensor], reduction: str) -> torch.Tensor:
    """The reference: seqpack's packed loss on the whole rows (HF labels, shifted inside)."""
    from seqpack.nn.losses import token_loss

    return token_loss(logits, cols["labels"], cols["segment_ids"], reduction=reduction, shift=True)


def run_ranks(size: int, tmp: Path) -> list[dict]:
    init = f"file://{tempfile.mkdtemp(dir=tmp)}/init"
    import transformers  # noqa: F401  (imported once here: forked ranks inherit it)

    # fork: the ranks start with torch and transformers already imported (spawn re-imports them, ~10 s a rank)
    mp.start_processes(_worker, args=(size, init, str(tmp)), nprocs=size, join=True, start_method="fork")
    return [torch.load(tmp / f"{r}.pt", weights_only=True) for r in range(size)]


@pytest.mark.parametrize("size", [2, 4])
def test_cp_ranks_equal_the_unsplit_rows(tmp_path, size):
    """Every case of :data:`CASES` in one set of ``size`` processes."""
    pytest.importorskip("transformers")
    got = run_ranks(size, tmp_path)
    real = int((batch()["segment_ids"] > 0).sum())
    for kind, reduction in CASES:
        case = [g[f"{kind}-{reduction}"] for g in got]
        assert sum(c["tokens"] for c in case) == real  # every real token on exactly one rank
        for c in case:
            assert c["logit_diff"] < 1e-5, (kind, reduction)
            assert abs(c["loss"] - c["full_loss"]) < 1e-5, (kind, reduction)  # the ranks' parts sum to the unsplit loss
            assert c["grads"].keys() == c["full_grads"].keys()
            for k, want in c["full_grads"].items():
                torch.testing.assert_close(
                    c["grads"][k],
                    want,
                    rtol=1e-4,
                    atol=1e-6 * float(want.abs().max()) + 1e-9,
                    msg=lambda m, k=k, kind=kind, reduction=reduction: f"{kind} {reduction} {k}: {m}",
                )


def test_one_rank_without_a_process_group_is_the_unsplit_pass():
    """C = 1: the plan and the loss run without any process group and equal the packed pass."""
    from seqpack.nn.attention import plan_context_parallel
    from seqpack.nn.losses import sharded_token_loss

    assert not (dist.is_available() and dist.is_initialized())
    model = build("gpt")
    cols = {k: torch.from_numpy(v) for k, v in batch().items()}
    mine, src = shard(batch(), 1, 0)
    local = gpt_pass(model, mine, plan_context_parallel(mine["segment_ids"], mine["position_ids"]))
    full = gpt_pass(model, cols)
    real = torch.from_numpy(src >= 0)
    b, j = real.nonzero(as_tuple=True)
    assert float((local[b, j] - full[b, torch.from_numpy(src)[b, j]]).detach().abs().max()) < 1e-5
    ours = sharded_token_loss(local, mine["targets"], mine["segment_ids"])
    assert float(ours) == pytest.approx(float(_unsplit_loss(full, cols, "sequence")), abs=1e-5)


def test_a_plan_from_segment_ids_alone_is_refused():
    from seqpack.nn.attention import plan_attention

    with pytest.raises(ValueError, match="plan_context_parallel"):
        plan_attention(torch.ones(1, 4, dtype=torch.long), causal=True, backend="context_parallel")


if os.name != "posix":  # pragma: no cover
    pytestmark = pytest.mark.skip("gloo process groups over a file store are tested on POSIX")
