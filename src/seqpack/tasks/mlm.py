"""``mlm``: BERT pre-training on a token store: sentence pairs with NSP and 15% masking (80/10/10).

BERT pre-training data (MLM + NSP), from a token store, as Devlin et al. build it.

1. Sentences: a token ends a sentence when it holds a newline, or ends in ``. ! ?``
   and the next token starts with whitespace (decided from the tokenizer's bytes).
2. Pairs, per document: gather sentences up to a target length (``max_len - 3``, or
   with ``short_seq_prob`` a random shorter one, which gives pre-training data its
   skewed length histogram); A = the first 1..k-1 of them; B = the rest, or, with
   ``random_next_prob`` (and always for a single sentence), a random span of another
   document (``next_sentence_label`` 1; the unused sentences are reused). The pair is
   trimmed to fit, one token at a time from the longer side, front or back at random.
3. ``[CLS] A [SEP] B [SEP]``, ``token_type_ids`` 0 then 1 (a pretrained tokenizer's own pair
   template, specials and mask token: `seqpack.tasks.specials`), and masking: ``mask_prob``
   of the non-special tokens (at most ``max_predictions``) get a label; of those 80 %
   become ``[MASK]``, 10 % a random token, 10 % stay. ``labels`` is -100 elsewhere.

Everything draws from one ``numpy`` generator seeded by ``seed``: same store, same
options, same seed -> identical sequences.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from seqpack._resources import check_memory
from seqpack.data.sequences import (
    IGNORE_INDEX,
    Sequences,
    id_dtype,
    label_dtype,
    offsets_of,
)
from seqpack.errors import UserError
from seqpack.packing.histogram import MAX_LEN_LIMIT, check_max_len
from seqpack.tasks._lm import add_lm_metrics, count_empty, lm_units
from seqpack.tasks.base import add_slot_metrics, open_store, slot_units
from seqpack.tasks.spec import HFModels, OwnModels, Packing, PackSettings, Rows, Task, Totals, Training
from seqpack.tasks.specials import task_specials

if TYPE_CHECKING:
    import torch
    from transformers import PretrainedConfig

    from seqpack.nn.models.common import PackedOutput
    from seqpack.store import TokenStore
    from seqpack.tokenizer.types import AnyTokenizer


#: passes over the corpus at most (BERT made 10): the sequences, and the memory, grow with each
MAX_DUPE_FACTOR = 1000


@dataclass(frozen=True, kw_only=True)
class MLMConfig:
    """Options of `mlm_sequences` (defaults: BERT's)."""

    max_len: int
    mask_prob: float = 0.15
    short_seq_prob: float = 0.1
    random_next_prob: float = 0.5
    max_predictions: int | None = None  # default: round(max_len * mask_prob)
    dupe_factor: int = 1
    seed: int = 0

    def __post_init__(self) -> None:
        check_max_len(self.max_len)
        if self.max_len < 5:
            raise UserError(f"max_len={self.max_len} is too small for [CLS] A [SEP] B [SEP]; use >= 5")
        for name in ("mask_prob", "short_seq_prob", "random_next_prob"):
            v = getattr(self, name)
            if not 0.0 <= v <= 1.0:
                raise UserError(f"{name} must be in [0, 1], got {v}")
        if self.max_predictions is not None and self.max_predictions < 1:
            raise UserError(f"max_predictions must be >= 1, got {self.max_predictions}")
        if not 1 <= self.dupe_factor <= MAX_DUPE_FACTOR:
            raise UserError(
                f"dupe_factor must be >= 1 and at most {MAX_DUPE_FACTOR:,} (each pass is another copy of the "
                f"corpus, masked anew), got {self.dupe_factor:,}"
            )

    @property
    def predictions(self) -> int:
        return self.max_predictions or max(1, round(self.max_len * self.mask_prob))


def sentence_tables(tokenizer: AnyTokenizer) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per vocab id: holds a newline, ends in sentence punctuation, starts with whitespace."""
    n = tokenizer.vocab_size
    newline, punct, space = (np.zeros(n, dtype=bool) for _ in range(3))
    for i, b in tokenizer.vocab.items():
        newline[i] = b"\n" in b
        punct[i] = b.rstrip(b" \t").endswith((b".", b"!", b"?"))
        space[i] = b[:1].isspace()
    return newline, punct, space


def sentence_ends(
    tokens: np.ndarray, doc_offsets: np.ndarray, tables: tuple[np.ndarray, np.ndarray, np.ndarray]
) -> np.ndarray:
    """Exclusive end of every sentence of every document, in order (flat token indices)."""
    newline, punct, space = tables
    t = np.asarray(tokens, dtype=np.int64)
    cut = newline[t]
    cut[:-1] |= punct[t[:-1]] & space[t[1:]]
    cut[doc_offsets[1:] - 1] = True  # a document's last token ends its last sentence
    return np.flatnonzero(cut) + 1


def mlm_sequences(store: TokenStore, tokenizer: AnyTokenizer, config: MLMConfig) -> Sequences:
    """Sentence pairs with NSP labels and 80/10/10 masking, from every document of ``store``."""
    specials = task_specials(tokenizer, "mlm", mask=True)
    assert specials.mask is not None  # task_specials refuses a tokenizer without one
    (pre, mid, post), (a_type, b_type) = specials.pair.pieces()
    vocab_size = specials.vocab_size
    tokens = np.asarray(store.tokens)
    offsets = np.asarray(store.offsets)
    ends = sentence_ends(tokens, offsets, sentence_tables(tokenizer))
    # sentences of document d: ends[sent_off[d]:sent_off[d + 1]]
    sent_off = np.searchsorted(ends, offsets, side="right")
    room = config.max_len - specials.pair.added
    if room < 2:
        raise UserError(
            f"max_len={config.max_len} leaves {room} tokens for a pair after the special tokens; raise --max-len"
        )
    builder = _PairBuilder(tokens, offsets, ends, sent_off, config, room)
    rng = builder.rng
    ids_t, labels_t = id_dtype(vocab_size - 1), label_dtype(vocab_size - 1)
    per_token = np.dtype(ids_t).itemsize + 1 + np.dtype(labels_t).itemsize  # ids, token types, labels
    check_memory(
        float(config.dupe_factor) * tokens.size * per_token,  # the passes' tokens alone: a lower bound
        what=f"mlm's {config.dupe_factor:,} passes over the {tokens.size:,} tokens of the store",
        hint="lower --dupe-factor",
    )
    passes = []  # each pass over the corpus made compact before the next: memory grows by what it keeps
    for _ in range(config.dupe_factor):
        seqs, types, labels, nsp, ex = [], [], [], [], []
        for d in range(len(store)):
            for a, b, is_random in builder.pairs(d):
                ids = np.concatenate([pre[0], a, mid[0], b, post[0]]).astype(np.int64)
                at = np.cumsum([len(pre[0]), a.size, len(mid[0]), b.size])
                special = np.r_[0 : at[0], at[1] : at[2], at[3] : ids.size]
                lab = _mask(ids, rng, config, specials.mask, tokenizer.vocab_size, special)
                seqs.append(ids)
                labels.append(lab)
                types.append(
                    np.concatenate([pre[1], np.full(a.size, a_type), mid[1], np.full(b.size, b_type), post[1]]).astype(
                        np.uint8
                    )
                )
                nsp.append(is_random)
                ex.append(d)
        lengths = np.array([s.size for s in seqs], dtype=np.int64)
        flat = np.concatenate(seqs).astype(ids_t) if seqs else np.zeros(0, ids_t)
        del seqs
        tt = np.concatenate(types).astype(np.uint8) if types else np.zeros(0, np.uint8)
        lab_flat = np.concatenate(labels).astype(labels_t) if labels else np.zeros(0, labels_t)
        passes.append((lengths, flat, tt, lab_flat, np.asarray(nsp, dtype=np.int8), np.asarray(ex, dtype=np.int64)))
        del labels
    lengths, flat, tt, lab_flat, nsp_all, ex_all = (np.concatenate(parts) for parts in zip(*passes))
    del passes
    return Sequences(
        task="mlm",
        offsets=offsets_of(lengths),
        example_ids=ex_all,
        token_fields={"input_ids": flat, "token_type_ids": tt, "labels": lab_flat},
        seq_fields={"next_sentence_label": nsp_all},
        num_examples=len(store),
        dropped=dict(builder.dropped),
        info={
            **specials.info(),
            "mask_prob": config.mask_prob,
            "short_seq_prob": config.short_seq_prob,
            "random_next_prob": config.random_next_prob,
            "max_predictions": config.predictions,
            "dupe_factor": config.dupe_factor,
            "data_seed": config.seed,
        },
    )


def _mask(
    ids: np.ndarray, rng: np.random.Generator, cfg: MLMConfig, mask_id: int, vocab: int, special: np.ndarray
) -> np.ndarray:
    """Mask ``ids`` in place, never at the ``special`` positions; returns the labels (-100 except
    at predicted positions)."""
    n = ids.size
    cand = np.delete(np.arange(n), special)
    k = min(cfg.predictions, max(1, round(cand.size * cfg.mask_prob)), cand.size)
    pos = np.sort(rng.choice(cand, size=k, replace=False))
    labels = np.full(n, IGNORE_INDEX, dtype=np.int64)
    labels[pos] = ids[pos]
    r = rng.random(k)
    ids[pos[r < 0.8]] = mask_id
    rand = pos[r >= 0.9]
    ids[rand] = rng.integers(0, vocab, size=rand.size)
    return labels


class _PairBuilder:
    """Google's ``create_instances_from_document``, on token arrays."""

    def __init__(
        self,
        tokens: np.ndarray,
        offsets: np.ndarray,
        ends: np.ndarray,
        sent_off: np.ndarray,
        cfg: MLMConfig,
        room: int,
    ) -> None:
        self.room = room  # tokens of A and B together
        self.tokens, self.offsets, self.ends, self.sent_off, self.cfg = tokens, offsets, ends, sent_off, cfg
        self.rng = np.random.default_rng(cfg.seed)
        self.n_docs = offsets.size - 1
        self.dropped: dict[str, int] = {}

    def sentences(self, d: int) -> list[tuple[int, int]]:
        e = self.ends[self.sent_off[d] : self.sent_off[d + 1]].tolist()
        return list(zip([int(self.offsets[d]), *e[:-1]], e))

    def span(self, sents: list[tuple[int, int]]) -> np.ndarray:
        return self.tokens[sents[0][0] : sents[-1][1]] if sents else self.tokens[:0]

    def pairs(self, d: int) -> Iterator[tuple[np.ndarray, np.ndarray, int]]:
        rng, cfg = self.rng, self.cfg
        max_tokens = self.room
        target = max_tokens if rng.random() >= cfg.short_seq_prob else int(rng.integers(2, max_tokens + 1))
        sents = self.sentences(d)
        chunk: list[tuple[int, int]] = []
        size, i = 0, 0
        while i < len(sents):
            chunk.append(sents[i])
            size += sents[i][1] - sents[i][0]
            if i == len(sents) - 1 or size >= target:
                a_end = 1 if len(chunk) < 2 else int(rng.integers(1, len(chunk)))
                a = self.span(chunk[:a_end])
                if self.n_docs > 1 and (len(chunk) == 1 or rng.random() < cfg.random_next_prob):
                    b, is_random = self._random_b(d, target - a.size), 1
                    i -= len(chunk) - a_end  # put the unused sentences back
                else:
                    b, is_random = self.span(chunk[a_end:]), 0
                a, b = self._trim(a, b, max_tokens)
                if a.size and b.size:
                    yield a, b, is_random
                else:
                    self.dropped["no_pair"] = self.dropped.get("no_pair", 0) + 1
                chunk, size = [], 0
            i += 1

    def _random_b(self, d: int, want: int) -> np.ndarray:
        r = int(self.rng.integers(0, self.n_docs - 1))
        r += r >= d  # any document but d
        sents = self.sentences(r)
        start = int(self.rng.integers(0, len(sents)))
        out, n = [], 0
        for s in sents[start:]:
            out.append(s)
            n += s[1] - s[0]
            if n >= want:
                break
        return self.span(out)

    def _trim(self, a: np.ndarray, b: np.ndarray, max_tokens: int) -> tuple[np.ndarray, np.ndarray]:
        a0, a1, b0, b1 = 0, a.size, 0, b.size
        while (a1 - a0) + (b1 - b0) > max_tokens:
            front = self.rng.random() < 0.5
            if a1 - a0 > b1 - b0:
                a0, a1 = (a0 + 1, a1) if front else (a0, a1 - 1)
            else:
                b0, b1 = (b0 + 1, b1) if front else (b0, b1 - 1)
        return a[a0:a1], b[b0:b1]


@dataclass(frozen=True, kw_only=True)
class MLMOptions:
    mask_prob: float = field(default=0.15, metadata={"help": "share of tokens to predict", "range": (0.0, 1.0)})
    short_seq_prob: float = field(
        default=0.1, metadata={"help": "share of pairs with a shorter target length", "range": (0.0, 1.0)}
    )
    random_next_prob: float = field(
        default=0.5, metadata={"help": "share of pairs whose B is a random segment (NSP 1)", "range": (0.0, 1.0)}
    )
    max_predictions: int | None = field(
        default=None,
        metadata={
            "help": "masked tokens per sequence at most (default round(max_len * mask_prob))",
            "range": (1, MAX_LEN_LIMIT),
        },
    )
    dupe_factor: int = field(
        default=1,
        metadata={"help": "passes over the corpus with new pairs and masks", "range": (1, MAX_DUPE_FACTOR)},
    )

    def __post_init__(self) -> None:
        MLMConfig(max_len=512, **dataclasses.asdict(self))  # the validation lives in MLMConfig


def build(source: Any, tokenizer: AnyTokenizer, config: PackSettings) -> Sequences:
    """The pre-training pairs of a token store's documents (`mlm_sequences`)."""
    store = open_store(source, tokenizer, config.task)
    mcfg = MLMConfig(max_len=config.max_len, seed=config.seed, **dataclasses.asdict(config.options))
    return count_empty(store, mlm_sequences(store, tokenizer, mcfg))


def bert(kind: str, size: str, vocab: int, manifest: Mapping[str, Any], extra: dict[str, Any]) -> tuple[Any, Any]:
    """seqpack's BERT with its pre-training heads (masked LM + next sentence)."""
    from seqpack.nn.models import BertConfig, BertForPreTraining

    mc = BertConfig.of_size(size, vocab_size=vocab, **extra)
    return BertForPreTraining(mc), mc


def forward(
    model: torch.nn.Module, batch: Mapping[str, torch.Tensor], *, reduction: str, objective: Any = None
) -> PackedOutput:
    """BERT pre-training's forward pass: the masked-LM loss and, with its labels, next sentence's."""
    return model(
        batch["input_ids"],
        batch["segment_ids"],
        reduction=reduction,
        position_ids=batch["position_ids"],
        labels=batch.get("labels"),
        token_type_ids=batch.get("token_type_ids"),
        next_sentence_label=batch.get("next_sentence_label"),
    )


def masked_lm(config: PretrainedConfig, model_type: str, manifest: Mapping[str, Any], kind: str) -> torch.nn.Module:
    """transformers' BERT pre-training model for rows with next-sentence labels, else a masked LM."""
    import transformers

    if (
        "next_sentence_label" in manifest["columns"]
        and model_type == "bert"
        and isinstance(config, transformers.BertConfig)
    ):
        return transformers.BertForPreTraining(config)
    return transformers.AutoModelForMaskedLM.from_config(config)


def hf_batch(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The batch without next-sentence labels for a model with no next-sentence head."""
    if type(model).__name__ != "BertForPreTraining":
        batch.pop("next_sentence_label", None)
    return batch


def loss_units(batch: Mapping[str, torch.Tensor], reduction: str) -> torch.Tensor:
    """``[lm units, next-sentence slots, 0]``, ``(3,)`` float64."""
    import torch

    nsp = batch.get("next_sentence_label")
    return torch.tensor(
        [lm_units(batch, reduction), slot_units(nsp) if nsp is not None else 0.0, 0.0], dtype=torch.float64
    )


def component_means(out: PackedOutput) -> list[torch.Tensor | None]:
    """The masked-LM and next-sentence means (the model's loss when it has no parts)."""
    return [out.extra.get("mlm_loss", out.loss), out.extra.get("nsp_loss"), None]


def update_eval(totals: Totals, out: PackedOutput, batch: Mapping[str, torch.Tensor]) -> None:
    """LM metrics at the masked tokens (unshifted), next-sentence loss and accuracy."""
    add_lm_metrics(totals, out, batch, shift=False)
    add_slot_metrics(
        totals, "nsp", out.extra.get("nsp_per_sequence"), batch.get("next_sentence_label"), out.slot_logits
    )


TASK = Task(
    name="mlm",
    summary="BERT pre-training (masked LM + next sentence) on a token store",
    options_type=MLMOptions,
    rows=Rows(token_labels=True),
    packing=Packing(
        reads="store",
        build=build,
        stream=None,
        unstreamed="its next-sentence pairs draw segments from the whole corpus; pack it with seqpack pack "
        "(or stream task='clm')",
    ),
    training=Training(loss_units=loss_units, component_means=component_means, update_eval=update_eval),
    models=OwnModels(kinds=("bert",), build=bert, forward=forward),
    hf=HFModels(build=masked_lm, batch=hf_batch),
)
