"""``qa``: extractive question answering (SQuAD-style) in doc-stride windows; span loss per
window; evaluation reports the exact match of the predicted span at token level."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from seqpack.data.sequences import IGNORE_INDEX
from seqpack.tasks.base import Task, slot_units

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True, kw_only=True)
class QAOptions:
    question_field: str = field(default="question", metadata={"help": "the question column"})
    context_field: str = field(default="context", metadata={"help": "the context column"})
    answers_field: str = field(default="answers", metadata={"help": "SQuAD answers: {text: [...], answer_start: [...]}"})
    doc_stride: int = field(default=128, metadata={"help": "overlap of context windows, tokens"})
    max_question_len: int = field(default=64, metadata={"help": "question tokens kept at most"})

    def __post_init__(self) -> None:
        if self.doc_stride < 0 or self.max_question_len < 1:
            raise ValueError("doc_stride must be >= 0 and max_question_len >= 1")


@dataclass(frozen=True, kw_only=True)
class QATask(Task):
    options_type: ClassVar[type] = QAOptions

    def build_sequences(self, source: Any, tokenizer: Any, config: Any) -> Any:
        from seqpack.data.qa import qa_sequences

        self.check_examples(source)
        o: QAOptions = config.options
        return qa_sequences(source, tokenizer, max_len=config.max_len, question_field=o.question_field,
                            context_field=o.context_field, answers_field=o.answers_field,
                            doc_stride=o.doc_stride, max_question_len=o.max_question_len)

    def seqpack_model(self, kind: str, size: str, vocab: int, manifest: Mapping[str, Any], extra: dict[str, Any]) -> tuple[Any, Any]:
        from seqpack.nn.models import BertConfig, BertForQuestionAnswering

        mc = BertConfig.of_size(size, vocab_size=vocab, **extra)
        return BertForQuestionAnswering(mc), mc

    def hf_config(self, d: dict[str, Any], manifest: Mapping[str, Any]) -> None:
        d["num_labels"] = 2  # start, end

    def hf_model(self, config: Any, model_type: str, manifest: Mapping[str, Any]) -> Any:
        import transformers

        return transformers.AutoModelForQuestionAnswering.from_config(config)

    def forward(self, model: Any, batch: Mapping[str, torch.Tensor], *, reduction: str) -> Any:
        return model(batch["input_ids"], batch["segment_ids"], position_ids=batch["position_ids"],
                     token_type_ids=batch.get("token_type_ids"), start_positions=batch.get("start_positions"),
                     end_positions=batch.get("end_positions"))

    def loss_units(self, batch: Mapping[str, torch.Tensor], reduction: str) -> torch.Tensor:
        import torch

        start = batch.get("start_positions")
        return torch.tensor([0.0, 0.0, slot_units(start) if start is not None else 0.0], dtype=torch.float64)

    def update_eval(self, totals: Any, out: Any, batch: Mapping[str, torch.Tensor]) -> None:
        """``span_loss`` (per window) and ``exact_match``: argmax start and argmax end both right."""
        start, end = batch.get("start_positions"), batch.get("end_positions")
        if start is None or end is None or out.per_sequence is None:
            return
        present = start != IGNORE_INDEX  # (B, D)
        totals.add("span_loss", float(out.per_sequence[present].sum()), float(present.sum()))
        s_logits, e_logits = out.extra["start_logits"], out.extra["end_logits"]  # (B, D', T), -inf outside
        D = start.shape[1]
        hit = (s_logits[:, :D].argmax(-1) == start) & (e_logits[:, :D].argmax(-1) == end)
        totals.add("exact_match", float(hit[present].sum()), float(present.sum()))


TASK = QATask(name="qa", summary="extractive question answering in doc-stride windows", reads="examples", models=("bert",))
