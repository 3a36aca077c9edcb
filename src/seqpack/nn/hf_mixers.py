"""State-carrying layers of transformers models on packed rows: every document from a zero state.

A hybrid model mixes tokens with layers that are not attention: Gated DeltaNet (Qwen3.5,
Qwen3-Next, OLMo hybrid, Kimi's delta attention), Mamba2's SSD (Nemotron-H, Granite 4, Bamba,
Falcon-H1, Zamba2), Mamba's selective scan (Mamba, Falcon-Mamba, Jamba, Zamba), short
convolutions (LFM2, and the one in front of each of the above), MiniMax's lightning attention,
RWKV's time mixing and token shift. Each carries a state along the row, so a packed row's second
document would start from the first one's state, and a convolution tap would reach back into it.

seqpack runs each such layer (a *mixer*) on the row's documents instead of on the row:

    mixers = find_mixers(model)                       # (("model.layers.0.linear_attn", module), ...)
    install_mixers(model)                             # once: each mixer reads the documents below
    with documents(segment_ids, branch_ids=None):     # (B, T): where each document starts
        logits = model(input_ids, position_ids=..., seqpack_plan=plan).logits

Inside the context, a mixer's input ``(B, T, H)`` is gathered into documents grouped by length
(`seqpack.nn.attention.per_document.plan_per_document`'s buckets, at most 12.5% padding at the
end of each document), the mixer's own forward runs once per bucket ``(n, Lb, H)`` from a zero
state, and its outputs are scattered back to ``(B, T, H)``. A mixer is causal, so the slots after
a document's end change nothing before it: the result is the document run alone, gradients
included, by construction, on any device and with whatever kernels the mixer's own code picks.
Attention and every per-token layer still run on the packed rows.

With ``branch_ids`` (a prompt shared by its completions: GRPO groups, preference pairs) each
completion's document is the prompt, then the completion; the prompt's outputs come from its
first copy. Each completion thus starts from the prompt's own final state, as when it is run
alone after its prompt.

Rows that hold one document each from their first token (padded rows) need no gather: a mixer
runs on them as they are, and its outputs at the padding are zeroed. A model call with
``position_ids`` restarting inside a row and no cache (TRL's padding-free rows), once
`install_mixers` has run, sets the documents from them. Activation checkpointing recomputes a
mixer in the backward pass on the documents of its forward.

Outside the context (generation, a plain call, a reference run) a mixer runs as it always does.
A mixer called with a packed row's boundaries but no documents (``seqpack_plan``,
``cu_seq_lens_q``, ``seq_idx``) refuses in one line rather than leak state.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from seqpack.errors import UserError

if TYPE_CHECKING:
    from seqpack.nn.attention.per_document import BucketPlan

#: parameters that only a recurrent or state-space layer owns: Mamba's and gated linear attention's
#: ``A_log`` and ``dt_bias``, RWKV's ``time_decay`` and ``time_first``
STATE_PARAMETERS = ("A_log", "dt_bias", "time_decay", "time_first")
#: parameter prefixes of a token shift (RWKV mixes each token with the one before it)
SHIFT_PREFIXES = ("time_mix_",)
#: buffers of a layer with a built-in per-head decay along the sequence (MiniMax's lightning attention)
DECAY_BUFFERS = ("slope_rate",)
#: keywords that describe the packed row's boundaries to a kernel; inside a document they are wrong
ROW_BOUNDARIES = ("seqpack_plan", "cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k", "seq_idx")
#: keywords that hold a cache; a mixer runs packed rows only without one
CACHES = ("cache", "cache_params", "past_key_values", "past_key_value", "state")


def _owns_state(module: torch.nn.Module) -> bool:
    own = [name for name, _ in module.named_parameters(recurse=False)]
    bufs = [name for name, _ in module.named_buffers(recurse=False)]
    return (
        any(p in STATE_PARAMETERS or p.startswith(SHIFT_PREFIXES) for p in own)
        or any(b in DECAY_BUFFERS for b in bufs)
        or any(isinstance(child, torch.nn.Conv1d) for child in module.children())
    )


def find_mixers(model: torch.nn.Module) -> tuple[tuple[str, torch.nn.Module], ...]:
    """The layers that carry state along the sequence, outermost first: a module that owns a state
    parameter (`STATE_PARAMETERS`), a token shift, a decay buffer or a ``Conv1d`` over the sequence,
    and is not inside another such module.

    >>> import transformers
    >>> cfg = transformers.MambaConfig(vocab_size=16, hidden_size=8, state_size=4, num_hidden_layers=2)
    >>> [name for name, _ in find_mixers(transformers.MambaForCausalLM(cfg))]
    ['backbone.layers.0.mixer', 'backbone.layers.1.mixer']
    """
    inner = getattr(model, "_orig_mod", model)
    found: list[tuple[str, torch.nn.Module]] = []
    for name, module in inner.named_modules():
        if any(name.startswith(f"{outer}.") for outer, _ in found):
            continue
        if _owns_state(module) and not isinstance(module, torch.nn.Conv1d):
            found.append((name, module))
    return tuple(found)


@dataclass(frozen=True)
class Documents:
    """Where a packed row's documents are: the bucket plan of ``(B, T)`` rows (`plan_per_document`)."""

    shape: tuple[int, int]
    #: the bucket plan; None when every row holds at most one document,
    #: from its first token (padded rows): a causal layer then runs on the rows as they are
    plan: BucketPlan | None
    #: (B, T) bool, the real tokens, when ``plan`` is None: padding outputs are zeroed, as a gather gives them
    real: torch.Tensor | None = None


_CURRENT: contextvars.ContextVar[Documents | None] = contextvars.ContextVar("seqpack_documents", default=None)


@contextlib.contextmanager
def documents(segment_ids: torch.Tensor, *, branch_ids: torch.Tensor | None = None) -> Iterator[Documents]:
    """Mixers called inside run on the documents of ``segment_ids`` (B, T) (0: padding), each
    completion of a shared prefix (``branch_ids``) after its prompt (see the module)."""
    docs = _make(segment_ids, branch_ids)
    token = _CURRENT.set(docs)
    try:
        yield docs
    finally:
        _CURRENT.reset(token)


def _make(segment_ids: torch.Tensor, branch_ids: torch.Tensor | None) -> Documents:
    from seqpack.nn.attention.per_document import plan_per_document
    from seqpack.nn.masks import shares_prefix, split_branches

    if branch_ids is not None and not shares_prefix(segment_ids, branch_ids):
        segment_ids, branch_ids = split_branches(segment_ids, branch_ids), None
    shape = (int(segment_ids.shape[0]), int(segment_ids.shape[1]))
    if branch_ids is None and _one_leading_document(segment_ids):
        return Documents(shape=shape, plan=None, real=segment_ids > 0)
    return Documents(
        shape=shape, plan=plan_per_document(segment_ids, causal=True, dtype=torch.float32, branch_ids=branch_ids)
    )


def _one_leading_document(segment_ids: torch.Tensor) -> bool:
    """Every row is one document from its first token, then padding (``[[1, 1, 0], [1, 0, 0]]``)."""
    real = segment_ids > 0
    same = (segment_ids == real.to(segment_ids.dtype)).all()
    return bool(same and (real[:, 1:] <= real[:, :-1]).all())


def current_documents() -> Documents | None:
    """The documents of the packed call in progress, or None outside one."""
    return _CURRENT.get()


def _in_backward() -> bool:
    """Inside autograd's backward: a checkpointed layer recomputing its forward."""
    return bool(torch._C._current_graph_task_id() != -1)


def _per_token(value: Any, shape: tuple[int, int]) -> bool:
    return isinstance(value, torch.Tensor) and value.ndim >= 2 and tuple(value.shape[:2]) == shape


def _gather(x: torch.Tensor, plan: BucketPlan) -> list[torch.Tensor]:
    """``(B, T, ...)`` -> one ``(n, Lb, ...)`` per bucket."""
    flat = x.reshape(-1, *x.shape[2:]).index_select(0, plan.gather)
    sizes = [bk.n * bk.size for bk in plan.buckets]
    return [part.view(bk.n, bk.size, *x.shape[2:]) for bk, part in zip(plan.buckets, flat.split(sizes))]


def _scatter(parts: list[torch.Tensor], plan: BucketPlan, shape: tuple[int, int]) -> torch.Tensor:
    """One ``(n, Lb, ...)`` per bucket -> ``(B, T, ...)``; padding tokens get zeros."""
    tail = parts[0].shape[2:]
    flat = [p.reshape(-1, *tail) for p in parts]
    flat.append(parts[0].new_zeros(1, *tail))
    return torch.cat(flat).index_select(0, plan.inverse).view(*shape, *tail)


def _refuse_boundaries(module: torch.nn.Module, kwargs: dict[str, Any]) -> None:
    given = [k for k in ROW_BOUNDARIES if kwargs.get(k) is not None]
    if given:
        raise UserError(
            f"{type(module).__name__} carries state along the sequence and was called on a packed row "
            f"({', '.join(given)}) without its documents; run the model through seqpack "
            "(seqpack.nn.hf_adapter.packed_forward, seqpack.rl, attach_packed_attention), which gives every "
            "such layer its documents"
        )


def _packed_call(
    module: torch.nn.Module, original: Any, docs: Documents, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """``original`` on each bucket of documents; outputs scattered back to the packed rows."""
    kwargs = {k: v for k, v in kwargs.items() if k not in ROW_BOUNDARIES}
    if args:
        hidden, args = args[0], args[1:]
    else:
        hidden = kwargs.pop("hidden_states")
    held = sorted(k for k in CACHES if kwargs.get(k) is not None)
    if held:
        raise UserError(
            f"{type(module).__name__} runs packed rows without a cache, and got {', '.join(held)}: call the model "
            "with use_cache=False (a packed row's cache would hold its last document's state only)"
        )
    if tuple(hidden.shape[:2]) != docs.shape:
        raise UserError(
            f"{type(module).__name__} got rows of shape {tuple(hidden.shape[:2])} inside documents of rows "
            f"{docs.shape}: a packed call must give the documents of the rows the model runs"
        )
    if "attention_mask" in kwargs:
        kwargs["attention_mask"] = None  # a document has no padding; the row's mask is not its
    if docs.plan is None:  # one document a row, then padding: causal, so the padding changes nothing before it
        return _zero_padding(original(hidden, *args, **kwargs), docs)
    bad = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
    if bad:
        raise UserError(f"{type(module).__name__} takes tensors by position; seqpack cannot tell which are per token")
    tokens = {k: _gather(v, docs.plan) for k, v in kwargs.items() if _per_token(v, docs.shape)}
    pairs = {  # per-token tuples, such as rotary (cos, sin)
        k: [_gather(x, docs.plan) for x in v]
        for k, v in kwargs.items()
        if isinstance(v, tuple) and v and all(_per_token(x, docs.shape) for x in v)
    }
    outs: list[Any] = []
    for i, part in enumerate(_gather(hidden, docs.plan)):
        call = {**kwargs, **{k: parts[i] for k, parts in tokens.items()}}
        call.update({k: tuple(parts[i] for parts in each) for k, each in pairs.items()})
        outs.append(original(part, *args, **call))
    first = outs[0]
    if isinstance(first, torch.Tensor):
        return _scatter(outs, docs.plan, docs.shape)
    if isinstance(first, tuple) and first and isinstance(first[0], torch.Tensor):
        # per-token outputs (Zaya's query, key and value) go back to the rows; anything else beside them
        # (attention weights, a state) is per bucket, not per row: None
        sizes = [(bk.n, bk.size) for bk in docs.plan.buckets]
        return tuple(
            _scatter([o[j] for o in outs], docs.plan, docs.shape)
            if all(isinstance(o[j], torch.Tensor) and tuple(o[j].shape[:2]) == sz for o, sz in zip(outs, sizes))
            else None
            for j in range(len(first))
        )
    raise UserError(f"{type(module).__name__} returns {type(first).__name__}; seqpack cannot scatter it back")


def _zero_padding(out: Any, docs: Documents) -> Any:
    """Per-token outputs with zeros at the padding (``docs.real``), as the gathered path gives."""
    real = docs.real
    assert real is not None

    def zeroed(x: Any) -> Any:
        if not _per_token(x, docs.shape):
            return x
        return x * real.view(*docs.shape, *([1] * (x.ndim - 2))).to(x.dtype)

    return tuple(zeroed(x) for x in out) if isinstance(out, tuple) else zeroed(out)


def _wrap(module: torch.nn.Module) -> None:
    original = module.forward
    last: dict[str, Documents] = {}

    @functools.wraps(original)
    def forward(*args: Any, **kwargs: Any) -> Any:
        docs = _CURRENT.get()
        if docs is None and _in_backward():  # activation checkpointing recomputes after the call returned
            docs = last.get("docs")
        if docs is None:
            _refuse_boundaries(module, kwargs)
            return original(*args, **kwargs)
        if torch.is_grad_enabled():
            last["docs"] = docs
        return _packed_call(module, original, docs, args, kwargs)

    forward.__dict__["seqpack_mixer"] = True
    module.forward = forward  # this instance only
    _WRAPPED.add(module)


_WRAPPED: weakref.WeakSet[torch.nn.Module] = weakref.WeakSet()


def restarting_segments(position_ids: torch.Tensor) -> torch.Tensor | None:
    """Documents from ``position_ids`` (B, T) that restart at 0 inside a row (padding-free rows,
    TRL's packed rows), or None when no row restarts.  # (B, T)

    >>> restarting_segments(torch.tensor([[0, 1, 2, 0, 1]])).tolist()
    [[1, 1, 1, 2, 2]]
    """
    pos = position_ids[0] if position_ids.ndim == 3 else position_ids  # mRoPE (3 or 4, B, T): the text row
    if pos.ndim != 2 or pos.shape[1] < 2 or not bool((pos[:, 1:] == 0).any()):
        return None
    return (pos == 0).cumsum(-1).clamp(min=1).int()


def _documents_from_positions(module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Forward pre-hook: a call with restarting ``position_ids`` and no documents gets them."""
    if _CURRENT.get() is not None or any(kwargs.get(k) is not None for k in CACHES) or kwargs.get("use_cache"):
        return
    pos = kwargs.get("position_ids")
    seg = restarting_segments(pos) if isinstance(pos, torch.Tensor) else None
    if seg is not None:
        _HOOKED[module] = _CURRENT.set(_make(seg, None))


def _reset(module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> None:
    token = _HOOKED.pop(module, None)
    if token is not None:
        _CURRENT.reset(token)


_HOOKED: weakref.WeakKeyDictionary[torch.nn.Module, contextvars.Token[Documents | None]] = weakref.WeakKeyDictionary()
_HOOKS: weakref.WeakSet[torch.nn.Module] = weakref.WeakSet()


def install_mixers(model: torch.nn.Module) -> tuple[str, ...]:
    """Make every mixer of ``model`` (`find_mixers`) read the documents of the packed call in
    progress (idempotent), and a call of ``model`` with ``position_ids`` restarting inside a row
    (and no cache) give them; returns the mixers' names."""
    names = []
    for name, module in find_mixers(model):
        if module not in _WRAPPED:
            _wrap(module)
        names.append(name)
    inner = getattr(model, "_orig_mod", model)
    if names and inner not in _HOOKS:
        inner.register_forward_pre_hook(_documents_from_positions, with_kwargs=True)
        inner.register_forward_hook(_reset, with_kwargs=True, always_call=True)
        _HOOKS.add(inner)
    return tuple(names)


def prepared(model: torch.nn.Module) -> bool:
    """`install_mixers` has run on ``model`` and found mixers (a set lookup: asked at every packed call)."""
    return getattr(model, "_orig_mod", model) in _HOOKS


__all__ = [
    "CACHES",
    "DECAY_BUFFERS",
    "ROW_BOUNDARIES",
    "SHIFT_PREFIXES",
    "STATE_PARAMETERS",
    "Documents",
    "current_documents",
    "documents",
    "find_mixers",
    "install_mixers",
    "prepared",
    "restarting_segments",
]
