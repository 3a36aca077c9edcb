"""``preference``: pairs of responses to one prompt, the chosen and the rejected, for DPO-style
training (``sigmoid``, ``ipo``, ``simpo``, ``orpo``) and Bradley-Terry reward models (``bt``).

Records hold ``prompt`` / ``chosen`` / ``rejected`` (strings, message lists, or the implicit-prompt
form; `.records`) and optionally a ``margin``, in ``.jsonl``, ``.parquet`` or an HF dataset.
Each pair is one packing unit (`.sequences`): the plan places whole pairs, never half of one.
Labels sit only on response tokens. Training reads each response's summed log-probability off
the packed rows (`seqpack.nn.preference`); the reference model's come from one packed pass
with the initial weights before training, so no second model is kept in memory.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from seqpack.data.sequences import check_overflow
from seqpack.errors import UserError
from seqpack.tasks._lm import slot_mean
from seqpack.tasks.base import check_examples
from seqpack.tasks.preference.records import read_pairs
from seqpack.tasks.preference.sequences import (
    LAYOUTS,
    PREFERENCE_OVERFLOW,
    preference_sequences,
)
from seqpack.tasks.spec import HFModels, OwnModels, Packing, PackSettings, Rows, Task, Totals, Training

if TYPE_CHECKING:
    import torch
    from transformers import PretrainedConfig

    from seqpack.data.sequences import Sequences
    from seqpack.nn.models.common import PackedOutput
    from seqpack.tokenizer.types import AnyTokenizer


@dataclass(frozen=True, kw_only=True)
class PreferenceOptions:
    layout: str = field(
        default="shared-prefix",
        metadata={
            "help": "shared-prefix: prompt once, both responses attend to it (not to each other) | "
            "pairs: prompt+chosen and prompt+rejected, always in one row"
        },
    )
    prompt_field: str = field(
        default="prompt", metadata={"help": "the prompt column (absent: the common prefix of chosen and rejected)"}
    )
    chosen_field: str = field(default="chosen", metadata={"help": "the preferred response column"})
    rejected_field: str = field(default="rejected", metadata={"help": "the other response column"})
    margin_field: str = field(
        default="margin", metadata={"help": "an optional reward-margin column (the bt loss subtracts it)"}
    )
    chat_template: str | None = field(
        default=None,
        metadata={"help": "for message lists: a Jinja chat template file or 'chatml' (default: the tokenizer's own)"},
    )
    eos_token: str | None = field(
        default=None,
        metadata={
            "help": "appended to string responses (default: the tokenizer's eos_token, else <|endoftext|>; '' for none)"
        },
    )
    overflow: str = field(
        default="truncate",
        metadata={
            "help": "pairs longer than max_len: truncate (the responses, longer first; the prompt is kept) | drop | error"
        },
    )

    def __post_init__(self) -> None:
        check_overflow(self.overflow, allowed=PREFERENCE_OVERFLOW)
        if self.layout not in LAYOUTS:
            raise UserError(f"layout must be one of {'|'.join(LAYOUTS)}, got {self.layout!r}")


def _eos(tokenizer: Any, option: str | None) -> str | None:
    if option is not None:
        if option and tokenizer.token_to_id(option) is None:
            raise UserError(f"tokenizer has no token {option!r}; pass --eos-token TOKEN, or --eos-token '' for none")
        return option or None
    own = getattr(tokenizer, "special_map", {}).get("eos_token")
    if own:
        return str(own)
    return "<|endoftext|>" if tokenizer.token_to_id("<|endoftext|>") is not None else None


def _template(tokenizer: Any, option: str | None) -> Any:
    """The chat template for conversational pairs, or None when none can be had (string pairs need none)."""
    from seqpack.tasks.chat.task import ChatOptions, chat_template

    try:
        return chat_template(tokenizer, ChatOptions(chat_template=option))
    except ValueError:
        if option:
            raise
        return None


def pair_units(batch: Mapping[str, torch.Tensor]) -> int:
    """Pairs in a batch: the sequences of its rows."""
    return int(batch["segment_ids"].amax(dim=1).sum())


def build(source: Any, tokenizer: AnyTokenizer, config: PackSettings) -> Sequences:
    """One packing unit per pair (`preference_sequences`), its responses rendered and labelled."""
    check_examples(source, config.task)
    o: PreferenceOptions = config.options
    pairs = read_pairs(
        source,
        tokenizer,
        fields=(o.prompt_field, o.chosen_field, o.rejected_field),
        margin_field=o.margin_field,
        template=_template(tokenizer, o.chat_template),
        eos=_eos(tokenizer, o.eos_token),
    )
    return preference_sequences(
        pairs, layout=o.layout, max_len=config.max_len, overflow=o.overflow, vocab_size=tokenizer.vocab_size
    )


def pack_summary(manifest: Mapping[str, Any]) -> str:
    """How the pairs fared against max_len."""
    info, dropped = manifest.get("task_info", {}), manifest.get("dropped", {})
    cut = int(info.get("truncated", 0))
    return (
        f"pairs ({info.get('layout')}): {int(manifest['num_sequences']) - cut:,} whole, {cut:,} with responses cut "
        f"(--overflow {info.get('overflow', 'truncate')}), {int(dropped.get('too_long', 0)):,} dropped as too long"
    )


def gpt(kind: str, size: str, vocab: int, manifest: Mapping[str, Any], extra: dict[str, Any]) -> tuple[Any, Any]:
    """seqpack's GPT, or with ``kind="reward"`` its reward model (a scalar head)."""
    from seqpack.nn.models import GPT, GPTConfig, GPTReward

    mc = GPTConfig.of_size(size, vocab_size=vocab, **extra)
    return (GPTReward(mc) if kind == "reward" else GPT(mc)), mc


def hf_model(config: PretrainedConfig, model_type: str, manifest: Mapping[str, Any], kind: str) -> torch.nn.Module:
    """A transformers causal LM, or with ``kind="reward"`` a one-label sequence classifier."""
    import transformers

    if kind == "reward":
        config.num_labels = 1
        return transformers.AutoModelForSequenceClassification.from_config(config)
    return transformers.AutoModelForCausalLM.from_config(config)


def forward(
    model: torch.nn.Module, batch: Mapping[str, torch.Tensor], *, reduction: str, objective: Any = None
) -> PackedOutput:
    """Each response's summed log-probability (or reward), then the pair loss (`preference_forward`)."""
    from seqpack.tasks.preference.forward import preference_forward

    return preference_forward(model, batch, objective)


def objective(options: Any, kind: str) -> Any:
    """``options.preference()`` (a `PreferenceLoss`), checked against the model kind."""
    loss = options.preference()
    if loss.reward_model and kind != "reward":
        raise UserError(f"--preference-loss {loss.kind} trains a reward model; pass --model reward")
    if kind == "reward" and not loss.reward_model:
        raise UserError(f"--model reward is trained with --preference-loss bt, not {loss.kind}")
    return loss


def loss_units(batch: Mapping[str, torch.Tensor], reduction: str) -> torch.Tensor:
    """``[0, 0, pairs]``, ``(3,)`` float64."""
    import torch

    return torch.tensor([0.0, 0.0, float(pair_units(batch))], dtype=torch.float64)


def update_eval(totals: Totals, out: PackedOutput, batch: Mapping[str, torch.Tensor]) -> None:
    """The pair loss, reward accuracy and margin, and the responses' log-probabilities."""
    assert out.present is not None and out.per_sequence is not None
    present = out.present
    n = float(present.sum())
    e = out.extra
    totals.add("cls_loss", float(out.per_sequence[present].sum()), n)
    margin = (e["chosen_rewards"] - e["rejected_rewards"])[present]
    totals.add("reward_accuracy", float((margin > 0).sum()), n)
    totals.add("reward_margin", float(margin.sum()), n)
    if "chosen_logps" in e:
        totals.add("chosen_logps", float(e["chosen_logps"][present].sum()), n)
        totals.add("rejected_logps", float(e["rejected_logps"][present].sum()), n)


TASK = Task(
    name="preference",
    summary="preference pairs (prompt, chosen, rejected) for DPO/IPO/SimPO/ORPO and reward models",
    options_type=PreferenceOptions,
    rows=Rows(token_labels=True, causal_lm=True, derived_columns=()),  # its positions do not restart per sequence
    packing=Packing(reads="examples", build=build, summary=pack_summary),
    training=Training(loss_units=loss_units, component_means=slot_mean, update_eval=update_eval, objective=objective),
    models=OwnModels(kinds=("gpt", "reward"), build=gpt, forward=forward),
    hf=HFModels(build=hf_model, forward=forward),
)
