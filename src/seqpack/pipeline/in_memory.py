"""The pack job in memory: a task's sequences, packed into columns, and what the manifest says of them.

seqs = build_sequences(records, tokenizer, PackConfig.for_task("qa", max_len=384))
columns, extra = pack_task(records, tokenizer, PackConfig.for_task("qa", max_len=384))
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from seqpack.data.columns import pack_sequences
from seqpack.tasks import get_task

if TYPE_CHECKING:
    from seqpack.data.columns import PackedColumns
    from seqpack.data.sequences import Sequences
    from seqpack.pipeline.config import PackConfig
    from seqpack.tasks.spec import PackTokenizer


def build_sequences(source: Any, tokenizer: PackTokenizer, config: PackConfig) -> Sequences:
    """The task's sequences (not yet packed); see `seqpack.pipeline.PackConfig`.

    Args:
        source: what the task reads: a token store, records, or a path to them.
        tokenizer: the tokenizer the task encodes with.
        config: the task and its options.

    Returns:
        The `Sequences`.
    """
    return get_task(config.task).packs().build(source, tokenizer, config)


def manifest_extra(
    config: PackConfig,
    tokenizer: PackTokenizer,
    *,
    num_examples: int,
    dropped: Mapping[str, int],
    position_fields: list[str],
    info: dict[str, Any],
) -> dict[str, Any]:
    """The manifest fields that say where packed columns came from, and the task's facts that
    readers of the format need (per-token labels, float labels, causal LM) without the task registry."""
    return {
        "tokenizer_hash": tokenizer.fingerprint(),
        "num_examples": num_examples,
        "dropped": dict(sorted(dropped.items())),
        "position_fields": list(position_fields),
        "task_info": info,
        "vocab_size": int(info.get("vocab_size", tokenizer.vocab_size)),
        "config": config.to_dict(),
        **get_task(config.task).facts(),
    }


def pack_task(source: Any, tokenizer: PackTokenizer, config: PackConfig) -> tuple[PackedColumns, dict[str, Any]]:
    """Sequences packed into columns, and the manifest fields that describe where they came from.

    Args:
        source: what the task reads: a token store, records, or a path to them.
        tokenizer: the tokenizer the task encodes with.
        config: the task and how to pack.

    Returns:
        `(columns, manifest fields)`.
    """
    seqs = build_sequences(source, tokenizer, config)
    pc = pack_sequences(
        seqs,
        config.max_len,
        algorithm=config.algorithm,
        max_depth=config.max_depth,
        seed=config.seed,
        position_offset=config.position_offset,
        round_to=config.round_to,
    )
    extra = manifest_extra(
        config,
        tokenizer,
        num_examples=seqs.num_examples,
        dropped=seqs.dropped,
        position_fields=list(seqs.position_fields),
        info=seqs.info,
    )
    return pc, {**extra, **config.cp_summary(pc.packing)}
