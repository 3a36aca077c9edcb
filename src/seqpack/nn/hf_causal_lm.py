"""A transformers causal LM's training step, made lean: the vocabulary head only at the targets,
fused with its loss, and the norms and MLPs compiled.

    add_target_head(model)                      # model(..., labels=..., target_head=True) -> TargetHeadOutput
    out = model(**batch, target_head=True)      # batch: TRL's padding-free rows, or padded ones
    out.loss, out.num_targets, out.num_correct  # token-mean loss; counts on the device (no sync)
    compile_blocks(model)                       # each layer's norms and MLP through inductor

**The head at the targets.** ``labels`` (B, T) hold ``-100`` where there is no target (padding,
prompts, the first token of each packed sequence). Position ``t`` predicts ``labels[t + 1]``, so
the head runs on the N positions whose next label is a target, not on all B x T, and
`seqpack.nn.cross_entropy.linear_cross_entropy` turns those N hidden states into the loss
without ever holding the (N, V) logits whole:

    labels   [[-100  5  6 -100  8]]   ->  positions 0 1 3 predict 5 6 8     (N = 3 of T = 5)

The loss is the sum of the targets' cross-entropies over ``num_items_in_batch`` (the targets of
the whole accumulated batch, as transformers passes it) or over N: the same as the model's own
``loss`` with ``labels``. Only models whose logits are exactly ``lm_head(last hidden state)`` take
it (`HEAD_AT_TARGETS`; no logit scaling or soft-capping).

**Compiled blocks.** ``compile_blocks`` hands each decoder layer's two RMSNorms and its MLP, and
the final norm, to ``torch.compile`` (dynamic shapes: the token count changes every packed
batch). Inductor fuses RMSNorm's float32 upcast, mean, rsqrt and scale, and SwiGLU's
``silu(gate) * up``, forward and backward, into a few kernels, and saves fewer activations;
attention and the matrix products are left as they are. Layers of one class share one compiled
graph.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from seqpack.errors import UserError
from seqpack.nn.cross_entropy import linear_cross_entropy
from seqpack.nn.losses import IGNORE_INDEX

#: transformers ``model_type``\\ s whose logits are exactly ``lm_head(last hidden state)`` (no scaling
#: or soft-capping), so the head can run at the targets alone
HEAD_AT_TARGETS = ("llama", "gpt2", "qwen2", "qwen3", "mistral", "qwen3_5_text", "qwen3_next", "nemotron_h", "lfm2")


@dataclass
class TargetHeadOutput:
    loss: torch.Tensor  # () float32
    num_targets: torch.Tensor  # () int64: positions with a target
    num_correct: torch.Tensor  # () int64: targets that are the head's top token


def next_token_targets(labels: torch.Tensor, *, ignore_index: int = IGNORE_INDEX) -> tuple[torch.Tensor, torch.Tensor]:
    """Flat positions (over B x T) whose next label is a target, and those targets.  # (N,), (N,)

    >>> next_token_targets(torch.tensor([[-100, 5, 6, -100, 8]]))
    (tensor([0, 1, 3]), tensor([5, 6, 8]))
    """
    nxt = torch.full_like(labels, ignore_index)
    nxt[:, :-1] = labels[:, 1:]
    flat = nxt.reshape(-1)
    where = (flat != ignore_index).nonzero().squeeze(1)
    return where, flat[where]


def _check_head(model: Any) -> Any:  # the model's lm_head: a Linear, or a module with weight and bias
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    kind = getattr(config, "model_type", None)
    if kind not in HEAD_AT_TARGETS:
        raise UserError(
            f"the head-at-targets loss takes {', '.join(HEAD_AT_TARGETS)} models (logits = lm_head(hidden)); "
            f"{type(model).__name__} is {kind!r}: use its own loss"
        )
    for name in ("final_logit_softcapping", "logit_scale", "logits_scaling"):
        if getattr(config, name, None) not in (None, 1, 1.0):
            raise UserError(
                f"{type(model).__name__}'s config sets {name}; the head-at-targets loss assumes plain logits"
            )
    head = model.get_output_embeddings()
    if head is None:
        raise UserError(f"{type(model).__name__} has no output embeddings (lm_head)")
    return head


def causal_lm_loss(
    model: Any,
    inputs: Mapping[str, Any],
    *,
    num_items_in_batch: int | torch.Tensor | None = None,
    ignore_index: int = IGNORE_INDEX,
) -> TargetHeadOutput:
    """The model's next-token loss with the head at the targets only (see the module).

    ``inputs``: the model's keywords plus ``labels`` (B, T); TRL's padding-free rows
    (``input_ids`` (1, total), ``position_ids``, ``cu_seq_lens_q/k``...) or padded ones."""
    head = _check_head(model)
    if "labels" not in inputs:
        raise UserError("the batch has no 'labels' column")
    labels = inputs["labels"]
    kw = {k: v for k, v in inputs.items() if k not in ("labels", "num_items_in_batch", "shift_labels")}
    kw["use_cache"] = False
    where, targets = next_token_targets(labels, ignore_index=ignore_index)  # before the backbone: no wait on it
    hidden = model.base_model(**kw).last_hidden_state  # (B, T, H)
    h = hidden.reshape(-1, hidden.shape[-1]).index_select(0, where)  # (N, H)
    n = where.numel()
    denom = num_items_in_batch if num_items_in_batch is not None else max(n, 1)
    weights = torch.ones(n, dtype=torch.float32, device=h.device) / torch.as_tensor(denom, device=h.device).float()
    loss, top1 = linear_cross_entropy(h, head.weight, targets, weights, bias=head.bias, ignore_index=ignore_index)
    return TargetHeadOutput(loss=loss, num_targets=torch.tensor(n, device=h.device), num_correct=top1.sum())


def add_target_head(model: Any) -> None:
    """Patch ``model.forward`` so that ``model(..., labels=labels, target_head=True)`` returns
    `TargetHeadOutput` (`causal_lm_loss`); without ``target_head`` the forward is the
    one it had. Called through the model (not beside it), so wrappers such as DDP see the pass."""
    _check_head(model)
    previous = model.forward

    @functools.wraps(type(model).forward)
    def forward(self: Any, *args: Any, target_head: bool = False, **kwargs: Any) -> Any:
        if not target_head:
            return previous(*args, **kwargs)
        if args:
            raise TypeError("target_head=True takes keyword arguments only (input_ids=..., labels=...)")
        num = kwargs.pop("num_items_in_batch", None)
        return causal_lm_loss(self, kwargs, num_items_in_batch=num)

    model.forward = types.MethodType(forward, model)


def compile_blocks(model: Any, *, dynamic: bool = True) -> int:
    """``torch.compile`` each decoder layer's norms and MLP, and the final norm, in place (see the
    module); returns how many modules. Refuses a model without Llama-style layers
    (``model.model.layers[i].mlp`` / ``input_layernorm`` / ``post_attention_layernorm``)."""
    inner = getattr(model, "model", None)
    layers = getattr(inner, "layers", None)
    parts = ("input_layernorm", "mlp", "post_attention_layernorm")
    if layers is None or not all(hasattr(layer, p) for layer in layers for p in parts):
        raise UserError(
            f"compile_blocks takes Llama-style decoder layers (model.model.layers[i].{', .'.join(parts)}); "
            f"{type(model).__name__} has none"
        )
    mods = [getattr(layer, p) for layer in layers for p in parts]
    norm = getattr(inner, "norm", None)
    if isinstance(norm, torch.nn.Module):
        mods.append(norm)
    for m in mods:
        m.compile(dynamic=dynamic)
    return len(mods)


__all__ = [
    "HEAD_AT_TARGETS",
    "TargetHeadOutput",
    "add_target_head",
    "causal_lm_loss",
    "compile_blocks",
    "next_token_targets",
]
