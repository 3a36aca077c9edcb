"""``clm``: causal language modelling on a token store (GPT; transformers causal LMs).

Causal LM: each document's tokens + EOS is a sequence; long ones are split, truncated or dropped.

Labels follow the Hugging Face convention (the model shifts them by one inside):
``labels == input_ids`` except the first token of every sequence, which is -100,
so that in a pack no token learns to predict the next sequence's first token.

    >>> s = clm_sequences(np.array([1, 2, 3, 4, 5]), np.array([0, 3, 5]), max_len=3, eos_id=0)
    >>> [s.sequence(i)["input_ids"].tolist() for i in range(s.num_sequences)]
    [[1, 2, 3], [0], [4, 5, 0]]
    >>> s.example_ids.tolist(), s.sequence(2)["labels"].tolist()
    ([0, 0, 1], [-100, 5, 0])

A split piece is a sequence of its own: its positions restart at 0 and it
attends only to itself.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from collections.abc import Sequence as Seq
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from seqpack._ids import token_ids
from seqpack.data.sequences import (
    IGNORE_INDEX,
    OVERFLOW,
    Sequences,
    check_overflow,
    concat_ranges,
    id_dtype,
    label_dtype,
    offsets_of,
    overflow_error,
)
from seqpack.errors import UserError
from seqpack.packing.histogram import check_max_len
from seqpack.tasks._lm import LM_TRAINING, count_empty
from seqpack.tasks.base import auto_model, open_store
from seqpack.tasks.spec import (
    SEGMENTS,
    Derived,
    HFModels,
    OwnModels,
    Packing,
    PackSettings,
    Rows,
    Streaming,
    Task,
)

if TYPE_CHECKING:
    import torch

    from seqpack.nn.models.common import PackedOutput
    from seqpack.store import TokenStore
    from seqpack.tokenizer.types import AnyTokenizer


def _append_eos(tokens: np.ndarray, offsets: np.ndarray, eos_id: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One EOS after each document (compiled; `_append_eos_oracle` is the rule): new
    offsets shift by the number of EOS before them. ``offsets`` run from 0 to ``tokens.size``.

    >>> flat, off, lens = _append_eos(np.array([1, 2, 3, 4, 5]), np.array([0, 3, 5]), 0)
    >>> flat.tolist(), off.tolist(), lens.tolist()
    ([1, 2, 3, 0, 4, 5, 0], [0, 4, 7], [4, 3])
    """
    from seqpack import _native

    dt = np.result_type(tokens.dtype, np.min_scalar_type(eos_id))
    new_off = offsets + np.arange(offsets.size, dtype=np.int64)
    flat = _native.append_to_each(np.ascontiguousarray(tokens, dtype=dt), offsets, np.asarray(eos_id, dtype=dt))
    return flat, new_off, np.diff(new_off)


def _append_eos_oracle(
    tokens: np.ndarray, offsets: np.ndarray, eos_id: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`_append_eos` in numpy: mark where each EOS goes, and put the tokens everywhere else."""
    n_docs = offsets.size - 1
    new_off = offsets + np.arange(n_docs + 1)
    flat = np.empty(tokens.size + n_docs, dtype=np.result_type(tokens.dtype, np.min_scalar_type(eos_id)))
    is_eos = np.zeros(flat.size, dtype=bool)
    is_eos[new_off[1:] - 1] = True
    flat[is_eos] = eos_id
    flat[~is_eos] = tokens
    return flat, new_off, np.diff(new_off)


def clm_sequences(
    tokens: np.ndarray,
    offsets: np.ndarray,
    *,
    max_len: int,
    eos_id: int | None,
    overflow: str = "split",
    vocab_size: int | None = None,
) -> Sequences:
    """Documents ``tokens[offsets[i]:offsets[i+1]]`` -> causal-LM sequences of <= ``max_len``."""
    seqs, labels_dtype = clm_inputs(
        tokens, offsets, max_len=max_len, eos_id=eos_id, overflow=overflow, vocab_size=vocab_size
    )
    labels = shifted_labels(seqs.token_fields["input_ids"], seqs.offsets, labels_dtype)
    return dataclasses.replace(seqs, token_fields={**seqs.token_fields, "labels": labels})


def clm_inputs(
    tokens: np.ndarray,
    offsets: np.ndarray,
    *,
    max_len: int,
    eos_id: int | None,
    overflow: str = "split",
    vocab_size: int | None = None,
) -> tuple[Sequences, np.dtype]:
    """`clm_sequences` without its labels, and the dtype they have (what a sharded job saves:
    it makes the labels after the gather, `shifted_labels`).

    >>> s, dt = clm_inputs(np.array([1, 2, 3]), np.array([0, 3]), max_len=8, eos_id=0, vocab_size=50257)
    >>> list(s.token_fields), s.token_fields["input_ids"].tolist(), dt
    (['input_ids'], [1, 2, 3, 0], dtype('int32'))
    """
    check_max_len(max_len)
    check_overflow(overflow)
    tokens = np.asarray(tokens)
    offsets = np.asarray(offsets, dtype=np.int64)
    doc_len = np.diff(offsets)
    n_docs = doc_len.size
    dropped: dict[str, int] = {}
    info: dict[str, object] = {"eos_id": eos_id, "overflow": overflow}
    if eos_id is not None:
        tokens, offsets, doc_len = _append_eos(tokens, offsets, eos_id)
    empty = doc_len == 0
    if empty.any():
        dropped["empty"] = int(empty.sum())
    long = doc_len > max_len
    n_long = int(long.sum())
    starts = offsets[:-1]
    if overflow == "error" and n_long:
        raise overflow_error(n_long, max_len, ("split", "truncate", "drop", "error"))
    if overflow == "split":
        tokens, new_offsets, example_ids = _split(tokens, offsets, doc_len, max_len)
        info["split_documents"] = n_long
    else:
        keep = ~empty & (~long if overflow == "drop" else True)
        example_ids = np.flatnonzero(keep)
        lens = np.minimum(doc_len[keep], max_len)
        tokens = tokens[concat_ranges(starts[keep], lens)]
        new_offsets = offsets_of(lens)
        if n_long and overflow == "drop":
            dropped["too_long"] = n_long
        if overflow == "truncate":
            info["truncated_documents"] = n_long
            info["truncated_tokens"] = int((doc_len[long] - max_len).sum())
    max_id = max(int(tokens.max()) if tokens.size else 0, (vocab_size or 1) - 1)
    seqs = Sequences(
        task="clm",
        offsets=new_offsets,
        example_ids=example_ids.astype(np.int64),
        token_fields={"input_ids": tokens.astype(id_dtype(max_id), copy=False)},
        num_examples=n_docs,
        dropped=dropped,
        info=info,
    )
    return seqs, label_dtype(max_id)


def shifted_labels(input_ids: np.ndarray, offsets: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Causal-LM labels: ``input_ids`` as ``dtype``, with -100 at the first token of every sequence.

    >>> shifted_labels(np.array([7, 8, 9, 4]), np.array([0, 3, 3, 4]), np.dtype(np.int16)).tolist()
    [-100, 8, 9, -100]
    """
    labels = input_ids.astype(dtype)
    labels[offsets[:-1][np.diff(offsets) > 0]] = IGNORE_INDEX
    return labels


def _split(
    tokens: np.ndarray, offsets: np.ndarray, doc_len: np.ndarray, max_len: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Cut every document into pieces of ``max_len`` (the last one shorter): tokens, offsets, doc ids."""
    pieces = -(-doc_len // max_len)
    example_ids = np.repeat(np.arange(doc_len.size), pieces)
    within = np.arange(example_ids.size) - np.repeat(offsets_of(pieces)[:-1], pieces)
    piece_start = offsets[:-1][example_ids] + within * max_len
    piece_len = np.minimum(max_len, doc_len[example_ids] - within * max_len)
    new_offsets = np.append(piece_start, offsets[-1]).astype(np.int64)
    if not np.array_equal(np.diff(new_offsets), piece_len):  # only when docs are not contiguous
        tokens, new_offsets = tokens[concat_ranges(piece_start, piece_len)], offsets_of(piece_len)
    return tokens, new_offsets, example_ids


def clm_oracle(
    documents: Seq[Seq[int]], *, max_len: int, eos_id: int | None, overflow: str = "split"
) -> list[tuple[int, list[int], list[int]]]:
    """The obvious per-document loop: ``(example_id, input_ids, labels)`` per sequence."""
    out = []
    for d, doc in enumerate(documents):
        ids = list(doc) + ([] if eos_id is None else [eos_id])
        if not ids:
            continue
        if len(ids) > max_len:
            if overflow == "error":
                raise UserError("too long")
            if overflow == "drop":
                continue
            if overflow == "truncate":
                ids = ids[:max_len]
        for s in range(0, len(ids), max_len):
            piece = ids[s : s + max_len]
            out.append((d, piece, [IGNORE_INDEX, *piece[1:]]))
    return out


def _token_list(doc: Any, i: int) -> np.ndarray:
    """A document of token ids, checked (`seqpack._ids.token_ids`); a text asks for a tokenizer."""
    if isinstance(doc, (str, bytes)):
        raise UserError(
            f"example {i}: a clm stream without a tokenizer reads lists of token ids, got "
            f"{type(doc).__name__}; pass tokenizer=... for texts"
        )
    return token_ids(doc, what=f"example {i}")


@dataclass(frozen=True, kw_only=True)
class CLMOptions:
    overflow: str = field(
        default="split", metadata={"help": "documents longer than max_len: split|truncate|drop|error"}
    )
    eos_token: str = field(default="<|endoftext|>", metadata={"help": "appended to each document ('' for none)"})

    def __post_init__(self) -> None:
        check_overflow(self.overflow, allowed=OVERFLOW)


def _rebuild_labels(name: str, fields: Mapping[str, np.ndarray], offsets: np.ndarray, dtype: Any) -> np.ndarray:
    """The labels a sharded job did not save, made again from the gathered ``input_ids``."""
    assert name == "labels", name
    return shifted_labels(fields["input_ids"], offsets, np.dtype(dtype))


def _inputs(source: Any, tokenizer: AnyTokenizer, config: PackSettings) -> tuple[TokenStore, dict[str, Any]]:
    """The store, and `clm_sequences`'s options."""
    o: CLMOptions = config.options
    if config.max_len < 2:  # each sequence's first token has no target: one token per row learns nothing
        raise UserError(f"--max-len {config.max_len} leaves a causal LM no target; pass --max-len 2 or more")
    store = open_store(source, tokenizer, config.task)
    eos = None
    if o.eos_token:
        eos = tokenizer.token_to_id(o.eos_token)
        if eos is None:
            raise UserError(
                f"tokenizer has no token {o.eos_token!r}; pass --eos-token TOKEN, or --eos-token '' for none"
            )
    return store, {
        "max_len": config.max_len,
        "eos_id": eos,
        "overflow": o.overflow,
        "vocab_size": tokenizer.vocab_size,
    }


def build(source: Any, tokenizer: AnyTokenizer, config: PackSettings) -> Sequences:
    """The sequences of a token store's documents (`clm_sequences`)."""
    store, kw = _inputs(source, tokenizer, config)
    return count_empty(store, clm_sequences(store.tokens, store.offsets, **kw))


def stored(source: Any, tokenizer: AnyTokenizer, config: PackSettings) -> tuple[Sequences, dict[str, Any]]:
    """What a sharded job saves: the sequences without their labels (made again after the gather)."""
    store, kw = _inputs(source, tokenizer, config)
    seqs, labels_dtype = clm_inputs(store.tokens, store.offsets, **kw)
    return count_empty(store, seqs), {"labels": labels_dtype}


def store_lengths(lengths: np.ndarray, max_len: int, options: CLMOptions) -> np.ndarray:
    """What `clm_inputs` makes of documents of ``lengths``: an EOS each (with ``eos_token``),
    then ``overflow`` at ``max_len`` (split into pieces of ``max_len``, the last shorter).

        >>> store_lengths(np.array([3, 0, 9]), 4, CLMOptions()).tolist()
        [4, 1, 4, 4, 2]
    """
    n = np.asarray(lengths, dtype=np.int64) + (1 if options.eos_token else 0)
    n = n[n > 0]
    if options.overflow == "split":
        pieces = -(-n // max_len)
        within = np.arange(int(pieces.sum())) - np.repeat(offsets_of(pieces)[:-1], pieces)
        return np.minimum(max_len, np.repeat(n, pieces) - within * max_len)
    if options.overflow == "truncate":
        return np.minimum(n, max_len)
    if options.overflow == "drop":
        return n[n <= max_len]
    return n  # error: the histogram refuses what is too long, naming the option


def stream(
    records: list[Any], tokenizer: AnyTokenizer | None, config: PackSettings, context: dict[str, Any]
) -> Sequences:
    """Documents of a stream: token-id lists taken as they are (no tokenizer: no EOS added), or
    texts (strings, or records with ``text``) encoded by ``tokenizer`` with its EOS after each."""
    o: CLMOptions = config.options
    eos = None
    if tokenizer is None:
        docs = [_token_list(r, i) for i, r in enumerate(records)]
    else:
        texts = [r if isinstance(r, str) else r.get("text") if isinstance(r, Mapping) else None for r in records]
        bad = next((i for i, t in enumerate(texts) if not isinstance(t, str)), None)
        if bad is not None:
            raise UserError(
                f"example {bad}: a clm stream with a tokenizer reads strings or records with a 'text' "
                f"string, got {type(records[bad]).__name__}"
            )
        docs = [np.asarray(tokenizer.encode(t), dtype=np.int64) for t in texts if isinstance(t, str)]  # all are
        if o.eos_token:
            eos = tokenizer.token_to_id(o.eos_token)
            if eos is None:
                raise UserError(f"tokenizer has no token {o.eos_token!r}; pass options={{'eos_token': ''}} for none")
    lens = np.array([d.size for d in docs], dtype=np.int64)
    flat = np.concatenate(docs) if docs else np.zeros(0, np.int64)
    vocab = tokenizer.vocab_size if tokenizer is not None else None
    return clm_sequences(
        flat, offsets_of(lens), max_len=config.max_len, eos_id=eos, overflow=o.overflow, vocab_size=vocab
    )


def gpt(kind: str, size: str, vocab: int, manifest: Mapping[str, Any], extra: dict[str, Any]) -> tuple[Any, Any]:
    """seqpack's GPT of ``size`` over ``vocab`` tokens."""
    from seqpack.nn.models import GPT, GPTConfig

    mc = GPTConfig.of_size(size, vocab_size=vocab, **extra)
    return GPT(mc), mc


def gpt_forward(
    model: torch.nn.Module, batch: Mapping[str, torch.Tensor], *, reduction: str, objective: Any = None
) -> PackedOutput:
    """GPT's forward pass on a packed batch, the loss at the (shifted) labels."""
    return model(
        batch["input_ids"],
        batch["segment_ids"],
        reduction=reduction,
        position_ids=batch["position_ids"],
        labels=batch.get("labels"),
    )


#: seqpack's GPT trains a causal-LM task (clm, chat)
GPT_MODELS = OwnModels(kinds=("gpt",), build=gpt, forward=gpt_forward)
#: transformers' causal LMs train it
HF_CAUSAL_LMS = HFModels(build=auto_model("AutoModelForCausalLM"), lora_task_type="CAUSAL_LM")

TASK = Task(
    name="clm",
    summary="causal language modelling on a token store",
    options_type=CLMOptions,
    rows=Rows(token_labels=True, causal_lm=True, derived_columns=(("labels", "lm_labels"), *SEGMENTS)),
    packing=Packing(
        reads="store",
        build=build,
        stored=stored,
        derived=Derived(fields=("labels",), rebuild=_rebuild_labels),
        tokens_from_store=True,  # the store's tokens and an EOS a document: a compiled copy
        store_lengths=store_lengths,
        stream=Streaming(build=stream),
    ),
    training=LM_TRAINING,
    models=GPT_MODELS,
    hf=HF_CAUSAL_LMS,
)
