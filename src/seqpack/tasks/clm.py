"""``clm``: causal language modelling on a token store (GPT; transformers causal LMs).

Documents are cut into sequences of at most ``max_len`` (``overflow``); labels follow the HF
convention (the model shifts) with -100 on each sequence's first token.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from seqpack.data.sequences import OVERFLOW, check_overflow
from seqpack.tasks._lm import add_lm_metrics, count_empty, lm_units
from seqpack.tasks.base import Task

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True, kw_only=True)
class CLMOptions:
    overflow: str = field(default="split", metadata={"help": "documents longer than max_len: split|truncate|drop|error"})
    eos_token: str = field(default="<|endoftext|>", metadata={"help": "appended to each document ('' for none)"})

    def __post_init__(self) -> None:
        check_overflow(self.overflow, allowed=OVERFLOW)


@dataclass(frozen=True, kw_only=True)
class CLMTask(Task):
    options_type: ClassVar[type] = CLMOptions

    def build_sequences(self, source: Any, tokenizer: Any, config: Any) -> Any:
        from seqpack.data.clm import clm_sequences

        o: CLMOptions = config.options
        store = self.open_store(source, tokenizer)
        eos = None
        if o.eos_token:
            eos = tokenizer.token_to_id(o.eos_token)
            if eos is None:
                raise ValueError(f"tokenizer has no token {o.eos_token!r}; pass --eos-token TOKEN, or --eos-token '' for none")
        seqs = clm_sequences(store.tokens, store.offsets, max_len=config.max_len, eos_id=eos,
                             overflow=o.overflow, vocab_size=tokenizer.vocab_size)
        return count_empty(store, seqs)

    def seqpack_model(self, kind: str, size: str, vocab: int, manifest: Mapping[str, Any], extra: dict[str, Any]) -> tuple[Any, Any]:
        from seqpack.nn.models import GPT, GPTConfig

        mc = GPTConfig.of_size(size, vocab_size=vocab, **extra)
        return GPT(mc), mc

    def hf_model(self, config: Any, model_type: str, manifest: Mapping[str, Any]) -> Any:
        import transformers

        return transformers.AutoModelForCausalLM.from_config(config)

    def forward(self, model: Any, batch: Mapping[str, torch.Tensor], *, reduction: str) -> Any:
        return model(batch["input_ids"], batch["segment_ids"], reduction=reduction, position_ids=batch["position_ids"],
                     labels=batch.get("labels"))

    def loss_units(self, batch: Mapping[str, torch.Tensor], reduction: str) -> torch.Tensor:
        """
        >>> import torch
        >>> b = {"labels": torch.tensor([[-100, 5, 6, -100, 7]]), "segment_ids": torch.tensor([[1, 1, 1, 2, 2]])}
        >>> TASK.loss_units(b, "sequence").tolist(), TASK.loss_units(b, "token").tolist()
        ([2.0, 0.0, 0.0], [3.0, 0.0, 0.0])
        """
        import torch

        return torch.tensor([lm_units(batch, reduction), 0.0, 0.0], dtype=torch.float64)

    def component_means(self, out: Any) -> list[Any]:
        return [out.loss, None, None]

    def update_eval(self, totals: Any, out: Any, batch: Mapping[str, torch.Tensor]) -> None:
        add_lm_metrics(totals, out, batch, shift=True)


TASK = CLMTask(name="clm", summary="causal language modelling on a token store", reads="store", models=("gpt",),
               token_labels=True)
