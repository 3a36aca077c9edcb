"""``token-classification``: a tag per word (named entities, parts of speech), from labelled examples.

Each example holds a list of words (``--tokens-field``) and a tag per word (``--tags-field``: ints,
or strings numbered in sorted order; ``--tag-names`` names integer tags, as a Hugging Face dataset's
``ClassLabel`` feature does). Each word is encoded on its own as it reads in the text of the words
joined by spaces (Hugging Face's ``is_split_into_words``: the words after the first with their
leading space, which a byte-level BPE keeps), between the tokenizer's own specials (``[CLS] w1 .. wn
[SEP]``, or ``<s> .. </s>``: `seqpack.tasks.specials`). A word's tag goes on its first sub-token,
-100 everywhere else (``--label-all-subtokens``: on each of its sub-tokens, a ``B-`` tag becoming
its ``I-`` on the later ones).

    >>> from seqpack.tokenizer.tokenizer import Tokenizer
    >>> tok = Tokenizer({**{i: bytes([i]) for i in range(256)}, 256: b" c"}, [(b" ", b"c")])  # " c" is 256
    >>> s = token_classification_sequences([{"tokens": ["ab", "c"], "ner_tags": ["B-X", "O"]}], tok, max_len=8)
    >>> s.sequence(0)["input_ids"].tolist(), s.sequence(0)["labels"].tolist(), s.info["label_names"]
    ([257, 97, 98, 256, 258], [-100, 0, -100, 1, -100], ['B-X', 'O'])

Too long: ``truncate`` (default: the tokens past ``max_len`` are cut, with the tags of the words
they held), ``drop`` or ``error``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from seqpack.corpus.records import iter_records
from seqpack.data.sequences import IGNORE_INDEX, Sequences, check_overflow, id_dtype, label_dtype, offsets_of
from seqpack.data.sequences import overflow_error as _overflow_error
from seqpack.errors import UserError
from seqpack.packing.histogram import check_max_len
from seqpack.tasks._lm import lm_loss_units, lm_mean
from seqpack.tasks.base import auto_model, check_examples, num_labels
from seqpack.tasks.classification import check_label_count
from seqpack.tasks.examples import get_field
from seqpack.tasks.spec import HFModels, OwnModels, Packing, PackSettings, Rows, Streaming, Task, Totals, Training
from seqpack.tasks.specials import task_specials

if TYPE_CHECKING:
    import torch

    from seqpack.nn.models.common import PackedOutput
    from seqpack.tokenizer.types import AnyTokenizer

OVERFLOW = ("truncate", "drop", "error")
NAME = "token-classification"


def parse_names(text: str | None) -> list[str] | None:
    """``--tag-names O,B-PER,I-PER`` as a list (``None`` when not given).

    >>> parse_names("O, B-PER,I-PER")
    ['O', 'B-PER', 'I-PER']
    """
    if text is None:
        return None
    names = [n.strip() for n in text.split(",")]
    if not all(names) or len(set(names)) != len(names):
        raise UserError(f"--tag-names {text!r}: give distinct, non-empty names separated by commas")
    return names


def _read(
    examples: str | os.PathLike[str] | Iterable[Any], tokens_field: str, tags_field: str
) -> tuple[list[tuple[int, list[str], list[Any]]], int, dict[str, int]]:
    """``(record number, words, tags)`` of each example with words; the examples read; the dropped."""
    rows: list[tuple[int, list[str], list[Any]]] = []
    dropped: dict[str, int] = {}
    n = 0
    for i, row in enumerate(iter_records(examples)):
        n += 1
        words = get_field(row, tokens_field, i, "--tokens-field", list)
        tags = get_field(row, tags_field, i, "--tags-field", list)
        if not all(isinstance(w, str) for w in words):
            raise UserError(f"example {i}: field {tokens_field!r} must be a list of strings (the words)")
        blank = next((k for k, w in enumerate(words) if not w.strip()), None)
        if blank is not None:
            raise UserError(f"example {i}: word {blank} is blank; remove it and its tag")
        if len(tags) != len(words):
            raise UserError(
                f"example {i}: {len(words)} words in {tokens_field!r} but {len(tags)} tags in {tags_field!r}"
            )
        if any(isinstance(t, bool) or not isinstance(t, (int, str)) for t in tags):
            raise UserError(f"example {i}: field {tags_field!r} must be a list of ints or strings")
        if not words:
            dropped["empty"] = dropped.get("empty", 0) + 1
            continue
        rows.append((i, words, tags))
    return rows, n, dropped


def tag_ids(
    rows: list[tuple[int, list[str], list[Any]]], field: str, names: list[str] | None
) -> tuple[list[list[int]], list[str] | None]:
    """Each example's tag ids, and the tag names: ``names`` when given (string tags are looked up in
    it; integer tags must be below its length), else string tags' sorted set (integer tags: none)."""
    kinds = {type(t) for _, _, tags in rows for t in tags}
    if len(kinds) > 1:
        raise UserError(f"tags in field {field!r} mix int and str; use all ints or all strings")
    if kinds == {str}:
        names = names if names is not None else sorted({t for _, _, tags in rows for t in tags})
        index = {n: k for k, n in enumerate(names)}
        for i, _, tags in rows:
            unknown = next((t for t in tags if t not in index), None)
            if unknown is not None:
                raise UserError(f"example {i}: tag {unknown!r} is not one of --tag-names")
        return [[index[t] for t in tags] for _, _, tags in rows], names
    for i, _, tags in rows:
        bad = next((t for t in tags if t < 0 or (names is not None and t >= len(names))), None)
        if bad is not None:
            have = f"below the {len(names)} --tag-names" if names is not None else ">= 0"
            raise UserError(f"example {i}: tag {bad} in field {field!r}; integer tags must be {have}")
    return [list(tags) for _, _, tags in rows], names


def word_pieces(words: list[list[str]], tokenizer: AnyTokenizer) -> list[list[list[int]]]:
    """Each word's tokens as it reads in its words joined by spaces (every word after the first
    with its leading space), encoded in one batch."""
    flat = [w if k == 0 else " " + w for ws in words for k, w in enumerate(ws)]
    enc = tokenizer.encode_batch(flat)
    out, at = [], 0
    for ws in words:
        out.append(enc[at : at + len(ws)])
        at += len(ws)
    return out


def _later_tags(names: list[str] | None, count: int) -> list[int]:
    """The tag of a word's later sub-tokens, by its first's (``--label-all-subtokens``): the same,
    but a ``B-X`` tag's ``I-X`` when there is one.

    >>> _later_tags(["B-X", "I-X", "O"], 3), _later_tags(None, 2)
    ([1, 1, 2], [0, 1])
    """
    if names is None:
        return list(range(count))
    index = {n: k for k, n in enumerate(names)}
    return [index.get("I-" + n[2:], k) if n.startswith("B-") else k for k, n in enumerate(names)]


def _tagged(pieces: list[list[int]], tags: list[int], later: list[int] | None) -> tuple[list[int], list[int]]:
    """A sequence's word tokens and their labels: each word's tag on its first token (and, with
    ``later``, its later tag on the others), -100 elsewhere."""
    flat = [t for w in pieces for t in w]
    labels = [IGNORE_INDEX] * len(flat)
    at = 0
    for w, tag in zip(pieces, tags):
        labels[at] = tag
        if later is not None:
            labels[at + 1 : at + len(w)] = [later[tag]] * (len(w) - 1)
        at += len(w)
    return flat, labels


def _count(names: list[str] | None, ids: list[list[int]], field: str) -> int:
    """Tags in all: the names', else one past the largest integer tag."""
    top = max((max(t, default=-1) for t in ids), default=-1)
    return check_label_count(len(names) if names is not None else top + 1, field)


def token_classification_sequences(
    examples: str | os.PathLike[str] | Iterable[Any],
    tokenizer: AnyTokenizer,
    *,
    max_len: int,
    tokens_field: str = "tokens",
    tags_field: str = "ner_tags",
    tag_names: list[str] | None = None,
    label_all_subtokens: bool = False,
    overflow: str = "truncate",
    num_labels: int | None = None,
) -> Sequences:
    """Tagged words -> one sequence per example with per-token ``labels`` (-100 where untagged).

    ``tag_names``: the tags' names in id order (string tags are numbered by it); ``num_labels``: the
    tag count of a whole sharded job (integer tags), at least this batch's."""
    check_max_len(max_len)
    check_overflow(overflow, allowed=OVERFLOW)
    specials = task_specials(tokenizer, NAME)
    budget = max_len - specials.single.added
    if budget < 1:
        raise UserError(f"max_len={max_len} leaves no room for words after the special tokens; raise --max-len")
    rows, n_examples, dropped = _read(examples, tokens_field, tags_field)
    given = tag_names if tag_names is not None else _features_names(examples, tags_field)
    ids_of_tags, names = tag_ids(rows, tags_field, given)
    count = max(_count(names, ids_of_tags, tags_field), num_labels or 0)
    later = _later_tags(names, count) if label_all_subtokens else None
    pieces = word_pieces([w for _, w, _ in rows], tokenizer)
    lengths = [sum(map(len, p)) for p in pieces]
    too_long = sum(n > budget for n in lengths)
    if too_long and overflow == "error":
        raise _overflow_error(too_long, max_len, OVERFLOW)
    seqs: list[list[int]] = []
    labels: list[list[int]] = []
    types: list[list[int]] = []
    keep: list[int] = []
    for (i, words, _), p, tags, n in zip(rows, pieces, ids_of_tags, lengths):
        empty = next((j for j, w in enumerate(p) if not w), None)
        if empty is not None:
            raise UserError(f"example {i}: word {empty} ({words[empty]!r}) has no token; remove it and its tag")
        if n > budget and overflow == "drop":
            continue
        flat, tagged = _tagged(p, tags, later)
        ids, kinds, (start,) = specials.single.build(flat[:budget])
        lab = [IGNORE_INDEX] * len(ids)
        lab[start : start + min(n, budget)] = tagged[:budget]
        seqs.append(ids)
        labels.append(lab)
        types.append(kinds)
        keep.append(i)
    if too_long and overflow == "drop":
        dropped["too_long"] = too_long
    n_tok = np.array([len(s) for s in seqs], dtype=np.int64)
    total = int(n_tok.sum())
    return Sequences(
        task=NAME,
        offsets=offsets_of(n_tok),
        example_ids=np.asarray(keep, dtype=np.int64),
        token_fields={
            "input_ids": np.fromiter((t for s in seqs for t in s), np.int64, total).astype(
                id_dtype(specials.vocab_size - 1)
            ),
            "token_type_ids": np.fromiter((t for s in types for t in s), np.uint8, total),
            "labels": np.fromiter((t for s in labels for t in s), np.int64, total).astype(
                label_dtype(max(count - 1, 0))
            ),
        },
        seq_fields={},
        num_examples=n_examples,
        dropped=dropped,
        info={
            **specials.info(),
            "label_names": names,
            "num_labels": count,
            "label_all_subtokens": label_all_subtokens,
            "overflow": overflow,
            "truncated": too_long if overflow == "truncate" else 0,
        },
    )


def _features_names(examples: Any, field: str) -> list[str] | None:
    """The names of a Hugging Face dataset's ``Sequence(ClassLabel)`` tags (``None`` otherwise)."""
    feature = getattr(getattr(examples, "features", None), "get", lambda _k: None)(field)
    names = getattr(getattr(feature, "feature", None), "names", None)
    return list(names) if isinstance(names, list) and names else None


def tag_space(
    examples: str | os.PathLike[str] | Iterable[Any], tokens_field: str, tags_field: str, names: list[str] | None
) -> tuple[list[str] | None, int]:
    """The tag names and count of all ``examples`` (one pass): what every shard numbers tags by."""
    strings: set[str] = set()
    top = -1
    for i, row in enumerate(iter_records(examples)):
        for t in get_field(row, tags_field, i, "--tags-field", list):
            if isinstance(t, str):
                strings.add(t)
            elif isinstance(t, int) and not isinstance(t, bool):
                top = max(top, t)
    if strings and top >= 0:
        raise UserError(f"tags in field {tags_field!r} mix int and str; use all ints or all strings")
    if names is None and strings:
        names = sorted(strings)
    return names, check_label_count(len(names) if names is not None else top + 1, tags_field)


@dataclass(frozen=True, kw_only=True)
class TokenClassificationOptions:
    tokens_field: str = field(default="tokens", metadata={"help": "the column of words (a list of strings)"})
    tags_field: str = field(default="ner_tags", metadata={"help": "the column of tags, one per word (ints or strings)"})
    tag_names: str | None = field(
        default=None, metadata={"help": "the tags' names in id order, comma-separated (e.g. O,B-PER,I-PER)"}
    )
    label_all_subtokens: bool = field(
        default=False, metadata={"help": "tag every sub-token of a word, not only its first"}
    )
    overflow: str = field(default="truncate", metadata={"help": "examples longer than max_len: truncate|drop|error"})

    def __post_init__(self) -> None:
        check_overflow(self.overflow, allowed=OVERFLOW)
        names = parse_names(self.tag_names)
        if names is not None:
            check_label_count(len(names), self.tags_field)


#: the attribute of seqpack's token classifier that holds its tag names (for the entity metrics)
TAG_NAMES = "tag_names"


def _sequences(source: Any, tokenizer: AnyTokenizer, config: PackSettings, context: Mapping[str, Any]) -> Sequences:
    o: TokenClassificationOptions = config.options
    return token_classification_sequences(
        source,
        tokenizer,
        max_len=config.max_len,
        tokens_field=o.tokens_field,
        tags_field=o.tags_field,
        tag_names=context.get("tag_names", parse_names(o.tag_names)),
        label_all_subtokens=o.label_all_subtokens,
        overflow=o.overflow,
        num_labels=context.get("num_labels"),
    )


def build(source: Any, tokenizer: AnyTokenizer, config: PackSettings) -> Sequences:
    """The tagged sequences of word-tagged examples, their tag set read from them."""
    check_examples(source, config.task)
    return _sequences(source, tokenizer, config, {})


def build_shard(
    records: list[dict[str, Any]], tokenizer: AnyTokenizer, config: PackSettings, context: dict[str, Any]
) -> Sequences:
    """One shard's sequences, its tags numbered by the whole job's tag set (``context``)."""
    return _sequences(records, tokenizer, config, context)


def shard_context(source: Any, config: PackSettings) -> dict[str, Any]:
    """The tag set of all examples, so that every shard numbers the tags the same way."""
    o: TokenClassificationOptions = config.options
    given = parse_names(o.tag_names) or _features_names(source, o.tags_field)
    names, count = tag_space(source, o.tokens_field, o.tags_field, given)
    return {"tag_names": names, "num_labels": count}


def stream_context(config: PackSettings) -> dict[str, Any]:
    """A stream cannot be read ahead for its tag set: ``tag_names`` names it."""
    names = parse_names(config.options.tag_names)
    if names is None:
        raise UserError(
            f"a stream of {config.task} examples needs tag_names: its tag set cannot be read ahead; "
            "pass options={'tag_names': 'O,B-PER,I-PER,...'}"
        )
    return {"tag_names": names, "num_labels": len(names)}


def bert(kind: str, size: str, vocab: int, manifest: Mapping[str, Any], extra: dict[str, Any]) -> tuple[Any, Any]:
    """seqpack's BERT with a tag head, its tag names kept for the entity metrics."""
    from seqpack.nn.models import BertConfig, BertForTokenClassification

    mc = BertConfig.of_size(size, vocab_size=vocab, num_labels=num_labels(manifest), **extra)
    model = BertForTokenClassification(mc)
    setattr(model, TAG_NAMES, manifest.get("task_info", {}).get("label_names"))  # read by forward
    return model, mc


def hf_config(d: dict[str, Any], manifest: Mapping[str, Any]) -> None:
    """The tag count and the data's tag names."""
    d["num_labels"] = num_labels(manifest)
    names = manifest.get("task_info", {}).get("label_names")
    if names:
        d["id2label"] = dict(enumerate(names))
        d["label2id"] = {n: i for i, n in enumerate(names)}


def forward(
    model: torch.nn.Module, batch: Mapping[str, torch.Tensor], *, reduction: str, objective: Any = None
) -> PackedOutput:
    """The tagger's forward pass, its output carrying the tag scheme for the entity metrics."""
    from seqpack.tasks.token_forward import with_tag_scheme

    out = model(
        batch["input_ids"],
        batch["segment_ids"],
        position_ids=batch["position_ids"],
        token_type_ids=batch.get("token_type_ids"),
        labels=batch.get("labels"),
        reduction=reduction,
    )
    return with_tag_scheme(out, getattr(getattr(model, "module", model), TAG_NAMES, None))


def hf_forward(
    model: torch.nn.Module, batch: Mapping[str, torch.Tensor], *, reduction: str, objective: Any = None
) -> PackedOutput:
    """A transformers token classifier's forward pass (`seqpack.tasks.token_forward`)."""
    from seqpack.tasks.token_forward import hf_token_forward

    return hf_token_forward(model, batch, reduction=reduction)


def update_eval(totals: Totals, out: PackedOutput, batch: Mapping[str, torch.Tensor]) -> None:
    """Token accuracy and, for IOB tags, entity precision, recall and F1."""
    from seqpack.tasks.token_forward import add_token_metrics

    add_token_metrics(totals, out, batch)


TASK = Task(
    name=NAME,
    summary="a tag per word (named entities, parts of speech)",
    options_type=TokenClassificationOptions,
    rows=Rows(token_labels=True),
    packing=Packing(
        reads="examples",
        build=build,
        shard=build_shard,
        context=shard_context,
        stream=Streaming(context=stream_context),
    ),
    training=Training(loss_units=lm_loss_units, component_means=lm_mean, update_eval=update_eval),
    models=OwnModels(kinds=("bert",), build=bert, forward=forward),
    hf=HFModels(
        build=auto_model("AutoModelForTokenClassification"),
        config=hf_config,
        forward=hf_forward,
        lora_task_type="TOKEN_CLS",
    ),
)
