"""TRL's ``GRPOTrainer`` with its log-probability pass packed: ``PackedGRPOTrainer``.

    from seqpack.train.trl_grpo import PackedGRPOTrainer
    trainer = PackedGRPOTrainer(model=model, reward_funcs=reward, args=trl.GRPOConfig(...), train_dataset=prompts)
    trainer.train()

Everything of TRL stays: generation, rewards, advantages, the loss of every ``loss_type`` with its
normalisations, logging and callbacks. One method is replaced, the narrowest TRL allows:
``_get_per_token_logps_and_entropies``, which TRL calls for the policy (in the loss), the old policy
and the reference. TRL hands it padded rows (left-padded prompts, right-padded completions, each
prompt repeated for its G completions); here the rows are taken apart, each group's prompt written
once with its completions after it (`seqpack.rl.pack_rollouts`, ``layout="shared-prefix"``; rows
whose prompts are equal share one), packed into rows of at most ``max_len`` tokens (default: the
width of TRL's padded rows), run once (`seqpack.rl.rollout_logprobs`: the vocabulary head
only where a completion token is predicted), and the values put back in TRL's ``(B, T)`` form.
Exact against TRL's padded pass (tests/rl).

The model keeps its own attention for generation (``sdpa``, say); the packed pass runs ``attention``
(default ``seqpack_packed``: seqpack's plans, per-document buckets on CPU, FlexAttention on CUDA;
``None``: the model's own, which must take a shared prefix as a dense mask, ``sdpa`` or ``eager``,
or run ``layout="pairs"``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
import trl

from seqpack.errors import UserError
from seqpack.nn.hf_attention import PACKED_IMPL, register_packed_attention
from seqpack.nn.hf_support import prepare_packed
from seqpack.rl.logprobs import rollout_logprobs, to_padded
from seqpack.rl.rollouts import LAYOUTS, layout_name, pack_rollouts, row_length
from seqpack.train.trl_support import check_trl


def unpad_rollouts(
    input_ids: torch.Tensor, attention_mask: torch.Tensor, logits_to_keep: int
) -> tuple[list[list[int]], list[list[list[int]]], list[tuple[int, int] | None]]:
    """TRL's padded rows -> ``(prompts, completions per prompt, (prompt, completion) of each row)``:
    rows with equal prompts form one group, in the order they first appear. A row whose completion
    mask is all zeros (TRL's ``mask_truncated_completions``) has no completion to score: ``None``.

        >>> ids = torch.tensor([[0, 5, 6, 7, 8], [0, 5, 6, 9, 0], [4, 5, 6, 3, 0], [4, 5, 6, 2, 2]])
        >>> mask = torch.tensor([[0, 1, 1, 1, 1], [0, 1, 1, 1, 0], [1, 1, 1, 1, 0], [1, 1, 1, 0, 0]])
        >>> unpad_rollouts(ids, mask, 2)
        ([[5, 6], [4, 5, 6]], [[[7, 8], [9]], [[3]]], [(0, 0), (0, 1), (1, 0), None])
    """
    prompts: list[list[int]] = []
    groups: list[list[list[int]]] = []
    where: list[tuple[int, int] | None] = []
    seen: dict[tuple[int, ...], int] = {}
    ids, mask = input_ids.tolist(), attention_mask.bool().tolist()
    for r, (row, keep) in enumerate(zip(ids, mask)):
        cut = len(row) - logits_to_keep
        prompt = tuple(t for t, k in zip(row[:cut], keep[:cut]) if k)
        comp_keep = keep[cut:]
        n = sum(comp_keep)
        if comp_keep[:n] != [True] * n:
            raise UserError(
                f"row {r}: the completion mask is not a run of ones then padding; PackedGRPOTrainer takes "
                "right-padded completions (TRL's form)"
            )
        if n == 0:  # masked out whole (a truncated completion): nothing of it is scored
            where.append(None)
            continue
        g = seen.setdefault(prompt, len(prompts))
        if g == len(prompts):
            prompts.append(list(prompt))
            groups.append([])
        where.append((g, len(groups[g])))
        groups[g].append(row[cut : cut + n])
    return prompts, groups, where


def _config(model: Any) -> Any:
    inner = getattr(model, "module", model)  # DistributedDataParallel
    return getattr(inner, "_orig_mod", inner).config  # torch.compile


@contextlib.contextmanager
def attention_as(model: Any, impl: str | None) -> Iterator[None]:
    """``model`` runs attention implementation ``impl`` inside the block (None: its own); its
    configuration is put back after (generation keeps the model's own)."""
    before = _config(model)._attn_implementation
    if impl is not None:
        _set_attention(model, impl)
    try:
        yield
    finally:
        _config(model)._attn_implementation = before


def _set_attention(model: Any, impl: str) -> None:
    if impl == PACKED_IMPL:
        register_packed_attention()
    _config(model)._attn_implementation = impl


class PackedGRPOTrainer(trl.GRPOTrainer):
    """``trl.GRPOTrainer`` whose per-token log-probabilities come from packed rows; see the module."""

    def __init__(
        self,
        *args: Any,
        max_len: int | None = None,
        layout: str = "shared-prefix",
        attention: str | None = PACKED_IMPL,
        max_tokens: int | None = None,
        **kwargs: Any,
    ) -> None:
        check_trl()  # a TRL whose methods these overrides do not know: refused before any work
        if max_tokens is not None:  # the old name, kept for one release
            max_len = row_length(max_len, max_tokens, "PackedGRPOTrainer")
        layout = layout_name(layout, "PackedGRPOTrainer")
        if layout not in LAYOUTS:
            raise UserError(f"layout must be one of {'|'.join(LAYOUTS)}, got {layout!r}")
        if max_len is not None and max_len < 2:
            raise UserError(f"max_len must be >= 2 (tokens per packed row), got {max_len}")
        self.max_len, self.layout, self.attention = max_len, layout, attention
        super().__init__(*args, **kwargs)
        prepare_packed(self.model)  # a layer packed rows would make wrong: refused before any step
        # the policy runs ``attention`` from now on (gradient checkpointing recomputes its layers in the
        # backward pass, after the log-probability pass has returned), its own only while it generates
        self._own_attention = _config(self.model)._attn_implementation
        if attention is not None:
            _set_attention(self.model, attention)

    def _generate(self, prompts: list[Any]) -> Any:
        with attention_as(self.model, self._own_attention):
            return super()._generate(prompts)

    def _get_per_token_logps_and_entropies(
        self,
        model: Any,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        logits_to_keep: int,
        batch_size: int | None = None,
        compute_entropy: bool = False,
        compute_aux_loss: bool = False,
        **multimodal: Any,
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        if compute_aux_loss or any(v is not None for v in multimodal.values()):
            raise UserError(
                "PackedGRPOTrainer packs text rollouts; a mixture-of-experts auxiliary loss or image "
                "inputs run through trl.GRPOTrainer"
            )
        prompts, groups, where = unpad_rollouts(input_ids, attention_mask, logits_to_keep)
        shape = (int(input_ids.shape[0]), logits_to_keep)
        if not prompts:  # every completion masked out: nothing to score (the loss masks these rows)
            zeros = torch.zeros(shape, device=input_ids.device)
            anchor = next((p for p in model.parameters() if p.requires_grad), None)
            if anchor is not None and torch.is_grad_enabled():  # the loss's backward still finds the model
                zeros = zeros + 0.0 * anchor.reshape(-1)[0]
            return zeros, (zeros.detach().clone() if compute_entropy else None), None
        cap = self.max_len or int(input_ids.shape[1])
        packed = pack_rollouts(prompts, groups, max_len=cap, layout=self.layout)
        with self.accelerator.autocast(), attention_as(model, self.attention):
            logps, ents = rollout_logprobs(model, packed, temperature=self.temperature, entropies=compute_entropy)
        return (
            _to_rows(logps, packed, where, shape),
            _to_rows(ents, packed, where, shape) if ents is not None else None,
            None,
        )


def _to_rows(
    values: torch.Tensor, packed: Any, where: list[tuple[int, int] | None], shape: tuple[int, int]
) -> torch.Tensor:
    """Completion values in rollout order -> TRL's ``(B, logits_to_keep)`` rows; a masked-out row
    (``None`` in ``where``) is zeros, which TRL's loss masks.  # (B, W)"""
    padded = to_padded(values, packed, width=shape[1])[0]
    out = padded.new_zeros(shape)
    kept = [r for r, w in enumerate(where) if w is not None]
    order = [int(packed.group_offsets[w[0]]) + w[1] for w in where if w is not None]  # TRL's row -> packed completion
    out[torch.tensor(kept, device=out.device)] = padded[torch.tensor(order, device=out.device)]
    return out


__all__ = ["PackedGRPOTrainer", "attention_as", "unpad_rollouts"]
