"""``--init-from RUN``: a new run's seqpack model starts from an earlier run's weights.

    loaded = init_from("runs/mlm", model, spec, data_identity)   # before the run writes anything
    loaded.text()   # '31 tensors from runs/mlm (head new: classifier)'

Every tensor whose name and shape match is copied (an MLM run's encoder under a classification,
multi-label or QA head: the embeddings, the layers, the final norm, the pooler); the rest (the
new head) keeps its fresh initialisation. Refused in one line when the earlier model is another
architecture or size, was trained on another vocabulary, or would leave an encoder tensor new.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from seqpack.errors import UserError
from seqpack.train.checkpoint import CHECKPOINT, RUN, read_checkpoint

#: the fields of a seqpack model's config that fix the encoder's tensors (vocab_size is said apart)
SHAPE_FIELDS = ("hidden", "layers", "heads", "intermediate", "max_position", "type_vocab")


@dataclass(frozen=True)
class Loaded:
    """What `init_from` copied: ``tensors`` from ``run``; ``new``: the top-level modules left new."""

    run: str
    tensors: int
    new: tuple[str, ...]

    def text(self) -> str:
        head = f"head new: {', '.join(self.new)}" if self.new else "every tensor"
        return f"{self.tensors} tensors from {self.run} ({head})"

    def to_dict(self) -> dict[str, Any]:
        return {"run": self.run, "tensors": self.tensors, "new": list(self.new)}


def family(cls: str) -> str:
    """A seqpack model class's architecture: ``BertForSequenceClassification`` -> ``BERT``."""
    for prefix, name in (("Bert", "BERT"), ("GPT", "GPT")):
        if cls.startswith(prefix):
            return name
    return cls


def _named(cls: str) -> str:
    return cls if family(cls) == cls else f"{family(cls)} ({cls})"


def encoder_prefix(model: torch.nn.Module) -> str:
    """The top-level module holding the model's token embeddings (``bert.``, ``gpt.``)."""
    for name, m in model.named_modules():
        if isinstance(m, torch.nn.Embedding):
            return name.split(".")[0] + "."
    raise UserError(f"{type(model).__name__} holds no embeddings")


def init_from(run: str, model: torch.nn.Module, spec: Mapping[str, Any], data: Mapping[str, Any]) -> Loaded:
    """Copy ``run``'s weights into ``model`` (built from ``spec``, for data whose identity is
    ``data``, `seqpack.train.checkpoint.data_identity`) where names and shapes match."""
    p = Path(run)
    if not RUN.made(p):
        raise UserError(f"--init-from {run}: not a seqpack training run (no run's config.json there)")
    if not (p / CHECKPOINT).is_file():
        raise UserError(f"--init-from {run}: the run holds no {CHECKPOINT} (it has not finished a step)")
    try:
        ck = read_checkpoint(p / CHECKPOINT)
    except ValueError as e:
        raise UserError(f"--init-from {run}: {e}") from e
    theirs, mine = ck["model"], dict(spec)
    if theirs.get("library") != "seqpack" or mine.get("library") != "seqpack":
        raise UserError(f"--init-from starts seqpack's BERT/GPT from an earlier seqpack run; {run} trained another")
    a, b = family(theirs["class"]), family(mine["class"])
    if a != b:
        raise UserError(
            f"--init-from {run}: its model is {_named(theirs['class'])}, this run builds {_named(mine['class'])}; "
            f"start a {b} run from a {b} run"
        )
    tc, mc = theirs.get("config", {}), mine.get("config", {})
    sized = [f"{k} {tc.get(k)} vs {mc.get(k)}" for k in SHAPE_FIELDS if tc.get(k) != mc.get(k)]
    if sized:
        raise UserError(
            f"--init-from {run}: its model is another size ({', '.join(sized)}); train with its --size "
            "(and --max-position)"
        )
    earlier = ck.get("data", {}).get("tokenizer_hash")
    now = data.get("tokenizer_hash")
    if tc.get("vocab_size") != mc.get("vocab_size") or (earlier and now and earlier != now):
        what = (
            f"{tc.get('vocab_size')} vs {mc.get('vocab_size')} tokens"
            if tc.get("vocab_size") != mc.get("vocab_size")
            else "another tokenizer"
        )
        raise UserError(f"--init-from {run}: its vocabulary differs ({what}); re-pack with the earlier run's tokenizer")
    state = model.state_dict()
    copied = {
        k: v
        for k, v in ck["model_state"].items()
        if k in state and isinstance(v, torch.Tensor) and v.shape == state[k].shape
    }
    prefix = encoder_prefix(model)
    missing = [k for k in state if k.startswith(prefix) and k not in copied]
    if not copied or missing:
        raise UserError(
            f"--init-from {run}: {len(missing) or 'none'} of this model's encoder tensors have no match there"
            + (f" (first: {missing[0]})" if missing else "")
            + "; nothing but a head would be left to copy"
        )
    model.load_state_dict(copied, strict=False)
    new = tuple(sorted({k.split(".")[0] for k in state if k not in copied}))
    return Loaded(run=str(run), tensors=len(copied), new=new)
