"""TRL's ``DPOTrainer`` on seqpack's packed preference rows: ``PackedDPOTrainer``.

    from seqpack.train.trl_dpo import PackedDPOTrainer
    trainer = PackedDPOTrainer(model, "packed_prefs/", ref_model=ref, args=trl.DPOConfig(output_dir="out", beta=0.1),
                               processing_class=tokenizer)
    trainer.train()

TRL 1.16 has no hook for packed pairs: ``DPOTrainer`` tokenizes text records itself and its loss
reads one response per padded row (``padding_free`` is disabled in DPO). This subclass keeps
everything else of TRL (the ``Trainer`` loop, accelerate, logging, checkpoints, callbacks) and
replaces three things:

* the dataset: the packed rows (`seqpack.data.hf_dataset`), left as they are (``_prepare_dataset``
  returns them; ``remove_unused_columns=False`` keeps every column, ``example_ids`` too,
  so `seqpack.tasks.preference.pair_outputs` names each pair of a batch by its record);
* the reference: the reference model's log-probabilities computed once, packed, at start (the
  ``ref_model``'s, or the initial weights' when none is given), held as columns; the reference
  model is then released, so training keeps one model in memory;
* ``compute_loss``: `seqpack.tasks.preference.forward.preference_forward` on the packed
  batch (exact against ``DPOTrainer``'s own loss on padded rows; tests/tasks/preference), with
  TRL's metrics (``rewards/chosen``, ``rewards/accuracies``, ``logps/chosen``, ...).

``loss_type`` ``sigmoid`` (with ``label_smoothing``, the cDPO form) and ``ipo`` are supported.
It overrides one TRL internal (``_prepare_dataset``) besides ``compute_loss``, so it is
made for the TRL versions of `seqpack.train.trl_support` and refuses another; ``seqpack train``
needs no TRL at all.
"""

from __future__ import annotations

import copy
import os
from typing import Any

import numpy as np
import torch
import trl

from seqpack.data.format import read_manifest
from seqpack.data.hf_rows import hf_dataset
from seqpack.data.torch_dataset import to_tensors
from seqpack.errors import UserError
from seqpack.nn.hf_support import prepare_packed
from seqpack.nn.preference import PreferenceLoss
from seqpack.tasks import get_task
from seqpack.tasks.preference import TASK as PREFERENCE
from seqpack.tasks.preference.forward import preference_forward
from seqpack.train.reference import packed_reference
from seqpack.train.trl_support import check_trl

SUPPORTED_LOSSES = ("sigmoid", "ipo")


def collate_rows(rows: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
    """Packed rows -> batch tensors (``to_tensors``: ints as int64, the reference log-probabilities as float32)."""
    return to_tensors({k: np.asarray([r[k] for r in rows]) for k in rows[0]})


class PackedDPOTrainer(trl.DPOTrainer):
    """``trl.DPOTrainer`` over a packed ``preference`` dataset directory; see the module docstring."""

    def __init__(
        self,
        model: Any,
        packed: str | os.PathLike[str],
        *,
        args: Any,
        ref_model: Any = None,
        processing_class: Any = None,
        **kwargs: Any,
    ) -> None:
        check_trl()  # a TRL whose methods these overrides do not know: refused before any work
        if isinstance(model, torch.nn.Module):
            prepare_packed(model)  # a layer packed rows would make wrong: refused before any work
        m = read_manifest(packed)
        if get_task(m["task"]) is not PREFERENCE:
            raise UserError(
                f"{packed} holds a {m['task']} dataset; pack preference pairs with seqpack pack --task preference"
            )
        kinds = list(args.loss_type)
        if len(kinds) != 1 or kinds[0] not in SUPPORTED_LOSSES:
            raise UserError(f"PackedDPOTrainer supports loss_type {'|'.join(SUPPORTED_LOSSES)} (one), got {kinds}")
        if args.precompute_ref_log_probs:
            raise UserError(
                "PackedDPOTrainer computes the reference log-probabilities itself (packed, once); "
                "leave precompute_ref_log_probs=False"
            )
        self.objective: PreferenceLoss = PreferenceLoss(
            kind=kinds[0], beta=args.beta, label_smoothing=args.label_smoothing
        )
        rows = hf_dataset(packed)  # example_ids kept: pair_outputs names each pair by its record
        reference = copy.deepcopy(model) if ref_model is None else ref_model
        rows = self._with_reference(rows, reference, int(m["max_depth"]), args.per_device_eval_batch_size)
        args = copy.copy(args)  # the caller's arguments stay as they were
        args.remove_unused_columns = False  # the packed columns are the model's inputs, named or not
        super().__init__(
            model,
            ref_model=reference,
            args=args,
            train_dataset=rows,
            data_collator=collate_rows,
            processing_class=processing_class,
            **kwargs,
        )
        self.ref_model = None  # its log-probabilities are columns now: one model in memory

    @staticmethod
    def _with_reference(rows: Any, reference: Any, depth: int, batch_size: int) -> Any:
        ref = packed_reference(
            reference, lambda packs: rows[packs.tolist()], num_packs=len(rows), depth=depth, batch_size=batch_size
        ).astype(np.float32)
        rows = rows.add_column("ref_chosen_logps", list(ref[:, :, 0]))
        return rows.add_column("ref_rejected_logps", list(ref[:, :, 1]))

    def _prepare_dataset(self, dataset: Any, *args: Any, **kwargs: Any) -> Any:
        return dataset  # packed and tokenized already

    def compute_loss(
        self, model: Any, inputs: dict[str, torch.Tensor], return_outputs: bool = False, num_items_in_batch: Any = None
    ) -> Any:
        """The preference loss of one packed batch (`Trainer.compute_loss`), its metrics recorded.

        Args:
            model: the policy being trained.
            inputs: the packed batch's tensors.
            return_outputs: also return the outputs.
            num_items_in_batch: unused (the loss is a mean over pairs).

        Returns:
            The loss (with the outputs when `return_outputs`).
        """
        mode = "train" if self.model is not None and self.model.training else "eval"
        out = preference_forward(model, inputs, self.objective)
        with torch.no_grad():
            present = out.present
            e = out.extra
            cr, rr = e["chosen_rewards"][present], e["rejected_rewards"][present]
            gather = self.accelerator.gather_for_metrics
            self._metrics[mode]["rewards/chosen"].append(gather(cr).mean().item())
            self._metrics[mode]["rewards/rejected"].append(gather(rr).mean().item())
            self._metrics[mode]["rewards/accuracies"].append(gather((cr > rr).float()).mean().item())
            self._metrics[mode]["rewards/margins"].append(gather(cr - rr).mean().item())
            self._metrics[mode]["logps/chosen"].append(gather(e["chosen_logps"][present]).mean().item())
            self._metrics[mode]["logps/rejected"].append(gather(e["rejected_logps"][present]).mean().item())
        return (out.loss, out) if return_outputs else out.loss


__all__ = ["PackedDPOTrainer", "collate_rows"]
