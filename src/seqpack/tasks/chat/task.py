"""``chat``: fine-tuning a causal LM on conversations, with the loss only where ``train_on`` says.

Records hold ``messages`` (``[{"role", "content"}]``, the transformers/TRL convention) in
``.jsonl``, ``.parquet`` or an HF dataset. They are rendered with a chat template (``--chat-template
FILE``, else the tokenizer's own, else ChatML for a seqpack tokenizer) and trained like ``clm``:
per-sequence loss is the mean over each conversation's target tokens (``--reduction token`` for the
per-token mean of transformers/TRL).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from seqpack.data.sequences import check_overflow
from seqpack.errors import UserError
from seqpack.tasks._lm import LM_TRAINING
from seqpack.tasks.base import check_examples
from seqpack.tasks.chat.sequences import CHAT_OVERFLOW, TRAIN_ON, chat_sequences
from seqpack.tasks.chat.template import (
    CHATML,
    CHATML_SPECIALS,
    ChatTemplate,
    resolve_template,
)
from seqpack.tasks.clm import GPT_MODELS, HF_CAUSAL_LMS
from seqpack.tasks.spec import Packing, PackSettings, Rows, Task

if TYPE_CHECKING:
    from seqpack.data.sequences import Sequences
    from seqpack.tokenizer.types import AnyTokenizer


@dataclass(frozen=True, kw_only=True)
class ChatOptions:
    messages_field: str = field(default="messages", metadata={"help": "the column holding the list of messages"})
    chat_template: str | None = field(
        default=None,
        metadata={
            "help": "a Jinja chat template file, or 'chatml' (default: the tokenizer's own; ChatML for a seqpack tokenizer)"
        },
    )
    train_on: str = field(
        default="assistant",
        metadata={
            "help": "tokens that carry loss: assistant (every assistant turn and its end token) | last (the final one) | all"
        },
    )
    overflow: str = field(
        default="truncate",
        metadata={
            "help": "conversations longer than max_len: truncate (after the last assistant turn that fits) | "
            "truncate-tokens (the first max_len tokens, as TRL does: a turn may be cut) | drop | error"
        },
    )

    def __post_init__(self) -> None:
        check_overflow(self.overflow, allowed=CHAT_OVERFLOW)
        if self.train_on not in TRAIN_ON:
            raise UserError(f"train_on must be one of {'|'.join(TRAIN_ON)}, got {self.train_on!r}")


def chat_template(tokenizer: AnyTokenizer, options: ChatOptions) -> ChatTemplate:
    """The compiled chat template, its special tokens checked against ``tokenizer``."""
    source, name = resolve_template(options.chat_template, tokenizer)
    if source == CHATML:
        missing = [s for s in CHATML_SPECIALS if s not in tokenizer.special_tokens]
        if missing:
            raise UserError(
                f"the chatml template writes {' and '.join(missing)}, which the tokenizer lacks as special tokens; "
                "train it with --special-token '<|im_start|>' --special-token '<|im_end|>', or pass --chat-template FILE"
            )
    return ChatTemplate(source, name=name, variables=dict(getattr(tokenizer, "special_map", {})))


def pack_summary(manifest: Mapping[str, Any]) -> str:
    """How the conversations fared against max_len (one sequence per conversation kept)."""
    info, dropped = manifest.get("task_info", {}), manifest.get("dropped", {})
    cut = int(info.get("truncated", 0))
    return (
        f"conversations: {int(manifest['num_sequences']) - cut:,} whole, {cut:,} cut "
        f"(--overflow {info.get('overflow', 'truncate')}), {int(dropped.get('too_long', 0)):,} dropped as too long"
    )


def pack_warnings(manifest: Mapping[str, Any]) -> list[str]:
    """Conversations dropped for having nothing to learn from."""
    dropped, train_on = manifest.get("dropped", {}), manifest.get("task_info", {}).get("train_on", "assistant")
    out = []
    if dropped.get("no_assistant"):
        out.append(
            f"dropped {dropped['no_assistant']:,} conversation(s) with no assistant turn "
            f"(--train-on {train_on} has nothing to learn from them)"
        )
    if dropped.get("no_target"):
        out.append(f"dropped {dropped['no_target']:,} conversation(s) whose targets tokenized to nothing")
    return out


def build(source: Any, tokenizer: AnyTokenizer, config: PackSettings) -> Sequences:
    """One sequence per conversation, rendered by its chat template (`chat_sequences`)."""
    check_examples(source, config.task)
    o: ChatOptions = config.options
    return chat_sequences(
        source,
        tokenizer,
        template=chat_template(tokenizer, o),
        max_len=config.max_len,
        messages_field=o.messages_field,
        train_on=o.train_on,
        overflow=o.overflow,
    )


TASK = Task(
    name="chat",
    summary="conversations (messages) for a causal LM, loss on assistant turns",
    options_type=ChatOptions,
    rows=Rows(token_labels=True, causal_lm=True),  # the labels mark targets: written, not derived
    packing=Packing(reads="examples", build=build, summary=pack_summary, warnings=pack_warnings),
    training=LM_TRAINING,
    models=GPT_MODELS,
    hf=HF_CAUSAL_LMS,
)
