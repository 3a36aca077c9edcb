"""One call from a token store or labelled examples to a packed dataset on disk.

    cfg = PackConfig(task="clm", max_len=512)
    manifest = build_packed_dataset("store/", tokenizer, "packed/", cfg)

``clm`` and ``mlm`` read a token store (``seqpack tokenize``); ``classification``,
``multilabel`` and ``qa`` read labelled examples (``.jsonl``, ``.parquet`` or an HF dataset).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from seqpack.data.sequences import OVERFLOW, Sequences, check_overflow
from seqpack.packing.histogram import check_max_len
from seqpack.packing.plan import ALGORITHMS, check_max_depth

if TYPE_CHECKING:
    from seqpack.data.pack import PackedColumns
    from seqpack.store import TokenStore
    from seqpack.tokenizer.tokenizer import Tokenizer

TASKS = ("clm", "mlm", "classification", "multilabel", "qa")
STORE_TASKS = ("clm", "mlm")
DEFAULT_OVERFLOW = {"clm": "split", "classification": "truncate", "multilabel": "truncate"}


@dataclass(frozen=True, kw_only=True)
class PackConfig:
    """Task, packing and per-task options (each task reads only its own)."""

    task: str
    max_len: int
    algorithm: str = "best"
    max_depth: int | None = None
    seed: int = 0
    position_offset: int = 0
    overflow: str | None = None  # clm: split; classification/multilabel: truncate
    eos_token: str = "<|endoftext|>"  # clm; "" for none
    text_field: str = "text"
    text_pair_field: str | None = None
    label_field: str = "label"
    num_labels: int | None = None
    question_field: str = "question"
    context_field: str = "context"
    answers_field: str = "answers"
    doc_stride: int = 128
    max_question_len: int = 64
    mask_prob: float = 0.15
    short_seq_prob: float = 0.1
    random_next_prob: float = 0.5
    max_predictions: int | None = None
    dupe_factor: int = 1

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise ValueError(f"task must be one of {'|'.join(TASKS)}, got {self.task!r}")
        check_max_len(self.max_len)
        if self.algorithm not in ALGORITHMS:
            raise ValueError(f"algorithm must be one of {'|'.join(ALGORITHMS)}, got {self.algorithm!r}")
        check_max_depth(self.max_depth)
        if self.position_offset < 0:
            raise ValueError(f"position_offset must be >= 0, got {self.position_offset}")
        if self.overflow is not None:
            if self.task not in DEFAULT_OVERFLOW:
                raise ValueError(f"--overflow does not apply to task {self.task} (mlm pairs fit by construction; qa uses --doc-stride windows)")
            allowed = OVERFLOW if self.task == "clm" else ("truncate", "drop", "error")
            check_overflow(self.overflow, allowed=allowed)
        if self.doc_stride < 0 or self.max_question_len < 1:
            raise ValueError("doc_stride must be >= 0 and max_question_len >= 1")
        if self.num_labels is not None and self.num_labels < 1:
            raise ValueError(f"num_labels must be >= 1, got {self.num_labels}")

    @property
    def overflow_policy(self) -> str | None:
        return self.overflow or DEFAULT_OVERFLOW.get(self.task)


def open_store(source: Any, tokenizer: Tokenizer, task: str) -> TokenStore:
    from seqpack.store import TokenStore

    if isinstance(source, TokenStore):
        store = source
    elif isinstance(source, (str, os.PathLike)) and Path(source).is_dir():
        store = TokenStore(source)
    else:
        raise ValueError(f"task {task} reads a token store directory, got {source!r}; make one with seqpack tokenize")
    store.check_tokenizer(tokenizer.fingerprint())
    return store


def build_sequences(source: Any, tokenizer: Tokenizer, config: PackConfig) -> Sequences:
    """The task's sequences (not yet packed); see :class:`PackConfig`."""
    c = config
    if c.task in STORE_TASKS:
        store = open_store(source, tokenizer, c.task)
        if c.task == "clm":
            from seqpack.data.clm import clm_sequences

            eos = None
            if c.eos_token:
                eos = tokenizer.token_to_id(c.eos_token)
                if eos is None:
                    raise ValueError(f"tokenizer has no token {c.eos_token!r}; pass --eos-token TOKEN, or --eos-token '' for none")
            seqs = clm_sequences(store.tokens, store.offsets, max_len=c.max_len, eos_id=eos,
                                 overflow=c.overflow_policy or "split", vocab_size=tokenizer.vocab_size)
        else:
            from seqpack.data.mlm import MLMConfig, mlm_sequences

            mcfg = MLMConfig(max_len=c.max_len, mask_prob=c.mask_prob, short_seq_prob=c.short_seq_prob,
                             random_next_prob=c.random_next_prob, max_predictions=c.max_predictions,
                             dupe_factor=c.dupe_factor, seed=c.seed)
            seqs = mlm_sequences(store, tokenizer, mcfg)
        empty = int(store.meta.get("empty_documents", 0))
        if empty:
            seqs.dropped["empty"] = seqs.dropped.get("empty", 0) + empty
        return seqs
    if isinstance(source, (str, os.PathLike)) and Path(source).is_dir():
        raise ValueError(f"task {c.task} reads labelled examples (.jsonl or .parquet), not the directory {source}")
    if c.task == "qa":
        from seqpack.data.qa import qa_sequences

        return qa_sequences(source, tokenizer, max_len=c.max_len, question_field=c.question_field,
                            context_field=c.context_field, answers_field=c.answers_field,
                            doc_stride=c.doc_stride, max_question_len=c.max_question_len)
    from seqpack.data.labelled import classification_sequences

    return classification_sequences(
        source, tokenizer, max_len=c.max_len, text_field=c.text_field, text_pair_field=c.text_pair_field,
        label_field=c.label_field, multilabel=c.task == "multilabel", num_labels=c.num_labels,
        overflow=c.overflow_policy or "truncate",
    )


def pack_task(source: Any, tokenizer: Tokenizer, config: PackConfig) -> tuple[PackedColumns, dict[str, Any]]:
    """Sequences packed into columns, and the manifest fields that describe where they came from."""
    from seqpack.data.pack import pack_sequences

    seqs = build_sequences(source, tokenizer, config)
    pc = pack_sequences(seqs, config.max_len, algorithm=config.algorithm, max_depth=config.max_depth,
                        seed=config.seed, position_offset=config.position_offset)
    extra = {
        "tokenizer_hash": tokenizer.fingerprint(),
        "num_examples": seqs.num_examples,
        "dropped": dict(sorted(seqs.dropped.items())),
        "position_fields": list(seqs.position_fields),
        "task_info": seqs.info,
        "vocab_size": int(seqs.info.get("vocab_size", tokenizer.vocab_size)),
        "config": asdict(config),
    }
    return pc, extra


def build_packed_dataset(
    source: str | os.PathLike[str] | Iterable[Any] | TokenStore,
    tokenizer: Tokenizer,
    out: str | os.PathLike[str],
    config: PackConfig,
    *,
    overwrite: bool = False,
    export_bin: bool = False,
    compression: str = "zstd",
    shard_packs: int = 50_000,
) -> dict[str, Any]:
    """Build, pack and write; returns the manifest (also in ``out/manifest.json``)."""
    from seqpack._atomic import check_output_dir
    from seqpack.data.io import write_packed

    check_output_dir(out, overwrite=overwrite)
    pc, extra = pack_task(source, tokenizer, config)
    return write_packed(pc, out, overwrite=overwrite, export_bin=export_bin, compression=compression,
                        shard_packs=shard_packs, extra=extra)
