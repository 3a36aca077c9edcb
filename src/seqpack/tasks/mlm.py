"""``mlm``: BERT pre-training on a token store: sentence pairs with NSP and 15% masking (80/10/10)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from seqpack.tasks._lm import add_lm_metrics, count_empty, lm_units
from seqpack.tasks.base import Task, add_slot_metrics

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True, kw_only=True)
class MLMOptions:
    mask_prob: float = field(default=0.15, metadata={"help": "share of tokens to predict"})
    short_seq_prob: float = field(default=0.1, metadata={"help": "share of pairs with a shorter target length"})
    random_next_prob: float = field(default=0.5, metadata={"help": "share of pairs whose B is a random segment (NSP 1)"})
    max_predictions: int | None = field(default=None, metadata={"help": "masked tokens per sequence at most "
                                                                         "(default round(max_len * mask_prob))"})
    dupe_factor: int = field(default=1, metadata={"help": "passes over the corpus with new pairs and masks"})

    def __post_init__(self) -> None:
        from seqpack.data.mlm import MLMConfig

        MLMConfig(max_len=512, **dataclasses.asdict(self))  # the validation lives in MLMConfig


@dataclass(frozen=True, kw_only=True)
class MLMTask(Task):
    options_type: ClassVar[type] = MLMOptions

    def build_sequences(self, source: Any, tokenizer: Any, config: Any) -> Any:
        from seqpack.data.mlm import MLMConfig, mlm_sequences

        store = self.open_store(source, tokenizer)
        mcfg = MLMConfig(max_len=config.max_len, seed=config.seed, **dataclasses.asdict(config.options))
        return count_empty(store, mlm_sequences(store, tokenizer, mcfg))

    def seqpack_model(self, kind: str, size: str, vocab: int, manifest: Mapping[str, Any], extra: dict[str, Any]) -> tuple[Any, Any]:
        from seqpack.nn.models import BertConfig, BertForPreTraining

        mc = BertConfig.of_size(size, vocab_size=vocab, **extra)
        return BertForPreTraining(mc), mc

    def hf_model(self, config: Any, model_type: str, manifest: Mapping[str, Any]) -> Any:
        import transformers

        if "next_sentence_label" in manifest["columns"] and model_type == "bert":
            return transformers.BertForPreTraining(config)
        return transformers.AutoModelForMaskedLM.from_config(config)

    def hf_batch(self, model: Any, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        if type(model).__name__ != "BertForPreTraining":
            batch.pop("next_sentence_label", None)
        return batch

    def forward(self, model: Any, batch: Mapping[str, torch.Tensor], *, reduction: str) -> Any:
        return model(batch["input_ids"], batch["segment_ids"], reduction=reduction, position_ids=batch["position_ids"],
                     labels=batch.get("labels"), token_type_ids=batch.get("token_type_ids"),
                     next_sentence_label=batch.get("next_sentence_label"))

    def loss_units(self, batch: Mapping[str, torch.Tensor], reduction: str) -> torch.Tensor:
        import torch

        from seqpack.tasks.base import slot_units

        nsp = batch.get("next_sentence_label")
        return torch.tensor([lm_units(batch, reduction), slot_units(nsp) if nsp is not None else 0.0, 0.0], dtype=torch.float64)

    def component_means(self, out: Any) -> list[Any]:
        return [out.extra.get("mlm_loss", out.loss), out.extra.get("nsp_loss"), None]

    def update_eval(self, totals: Any, out: Any, batch: Mapping[str, torch.Tensor]) -> None:
        add_lm_metrics(totals, out, batch, shift=False)
        add_slot_metrics(totals, "nsp", out.extra.get("nsp_per_sequence"), batch.get("next_sentence_label"), out.slot_logits)


TASK = MLMTask(name="mlm", summary="BERT pre-training (masked LM + next sentence) on a token store", reads="store",
               models=("bert",), token_labels=True)
