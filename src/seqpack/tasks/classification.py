"""``classification``: one label per text (or text pair), read from labelled examples."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from seqpack.data.sequences import check_overflow
from seqpack.tasks.base import Task, add_slot_metrics, num_labels, slot_units

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True, kw_only=True)
class ClassificationOptions:
    text_field: str = field(default="text", metadata={"help": "the text column"})
    text_pair_field: str | None = field(default=None, metadata={"help": "a second text column (pairs)"})
    label_field: str = field(default="label", metadata={"help": "the label column (int or string)"})
    num_labels: int | None = field(default=None, metadata={"help": "labels in all (default: from the data)"})
    overflow: str = field(default="truncate", metadata={"help": "examples longer than max_len: truncate|drop|error"})

    def __post_init__(self) -> None:
        check_overflow(self.overflow, allowed=("truncate", "drop", "error"))
        if self.num_labels is not None and self.num_labels < 1:
            raise ValueError(f"num_labels must be >= 1, got {self.num_labels}")


@dataclass(frozen=True, kw_only=True)
class ClassificationTask(Task):
    options_type: ClassVar[type] = ClassificationOptions
    multilabel: bool = False

    def build_sequences(self, source: Any, tokenizer: Any, config: Any) -> Any:
        from seqpack.data.labelled import classification_sequences

        self.check_examples(source)
        o: ClassificationOptions = config.options
        return classification_sequences(
            source, tokenizer, max_len=config.max_len, text_field=o.text_field, text_pair_field=o.text_pair_field,
            label_field=o.label_field, multilabel=self.multilabel, num_labels=o.num_labels, overflow=o.overflow,
        )

    def shard_context(self, source: Any, config: Any) -> dict[str, Any]:
        """The label set of all examples, so that every shard maps labels the same way."""
        from seqpack.data.labelled import label_space

        o: ClassificationOptions = config.options
        names, count = label_space(source, o.label_field, multilabel=self.multilabel, num_labels=o.num_labels)
        return {"label_names": names, "num_labels": count}

    def build_shard(self, records: list[dict[str, Any]], tokenizer: Any, config: Any, context: dict[str, Any]) -> Any:
        from seqpack.data.labelled import classification_sequences

        o: ClassificationOptions = config.options
        return classification_sequences(
            records, tokenizer, max_len=config.max_len, text_field=o.text_field, text_pair_field=o.text_pair_field,
            label_field=o.label_field, multilabel=self.multilabel, num_labels=context["num_labels"],
            overflow=o.overflow, label_names=context["label_names"],
        )

    def seqpack_model(self, kind: str, size: str, vocab: int, manifest: Mapping[str, Any], extra: dict[str, Any]) -> tuple[Any, Any]:
        from seqpack.nn.models import BertConfig, BertForSequenceClassification

        mc = BertConfig.of_size(size, vocab_size=vocab, num_labels=num_labels(manifest), multilabel=self.multilabel, **extra)
        return BertForSequenceClassification(mc), mc

    def hf_config(self, d: dict[str, Any], manifest: Mapping[str, Any]) -> None:
        d["num_labels"] = num_labels(manifest)
        if self.multilabel:
            d["problem_type"] = "multi_label_classification"

    def hf_model(self, config: Any, model_type: str, manifest: Mapping[str, Any]) -> Any:
        import transformers

        return transformers.AutoModelForSequenceClassification.from_config(config)

    def forward(self, model: Any, batch: Mapping[str, torch.Tensor], *, reduction: str) -> Any:
        return model(batch["input_ids"], batch["segment_ids"], position_ids=batch["position_ids"],
                     labels=batch.get("labels"), token_type_ids=batch.get("token_type_ids"))

    def loss_units(self, batch: Mapping[str, torch.Tensor], reduction: str) -> torch.Tensor:
        import torch

        labels = batch.get("labels")
        return torch.tensor([0.0, 0.0, slot_units(labels) if labels is not None else 0.0], dtype=torch.float64)

    def update_eval(self, totals: Any, out: Any, batch: Mapping[str, torch.Tensor]) -> None:
        add_slot_metrics(totals, "cls", out.per_sequence, batch.get("labels"), out.slot_logits)


TASK = ClassificationTask(name="classification", summary="one label per text or text pair", reads="examples",
                          models=("bert",))
