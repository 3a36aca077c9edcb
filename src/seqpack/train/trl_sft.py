"""TRL's ``SFTTrainer`` with seqpack's step: ``PackedSFTTrainer``.

    from seqpack.hf import pack_dataset
    from seqpack.train.trl_sft import PackedSFTTrainer
    packed = pack_dataset(dataset, seq_length=2048)                # one global plan (TRL: bfd per batch)
    args = trl.SFTConfig(output_dir="out", padding_free=True, max_length=None, bf16=True,
                         dataset_kwargs={"skip_prepare_dataset": True})
    trainer = PackedSFTTrainer(model, args=args, train_dataset=packed, processing_class=tokenizer)
    trainer.train()

    # or seqpack's packed directory (seqpack pack --task chat|clm), as PackedDPOTrainer takes one:
    trainer = PackedSFTTrainer(model, packed="sft/", args=trl.SFTConfig(output_dir="out"), processing_class=tokenizer)

Everything of TRL stays (the ``Trainer`` loop, the padding-free collator, accelerate, logging,
checkpoints, callbacks, evaluation). What changes is the step:

* **the loss** is `seqpack.nn.hf_causal_lm.causal_lm_loss`: the vocabulary head only at the
  targets, fused with the cross-entropy, three matrix products (TRL 1.16's fused head recomputes
  each logits tile in backward: four) and never the (N, V) logits whole; the same token-mean
  loss, through the model's ``forward`` (so DDP sees the pass);
* **no device sync per step** for metrics: ``mean_token_accuracy`` (from the loss kernel's top-1
  test, free) and ``num_tokens`` accumulate on the device and are read when the trainer logs.
  TRL's per-step ``entropy`` metric is not computed;
* ``compile_blocks=True`` (the default on CUDA) hands each layer's norms and MLP to
  ``torch.compile`` (`seqpack.nn.hf_causal_lm.compile_blocks`): a one-off compile at the
  first step, then fused kernels.

Models: those of `seqpack.nn.hf_causal_lm.HEAD_AT_TARGETS` (Llama, Qwen2/3, Mistral, GPT-2;
``compile_blocks`` needs Llama-style layers). It overrides TRL's ``compute_loss`` and ``log``, so it
is made for the TRL versions of `seqpack.train.trl_support` and refuses another.
"""

from __future__ import annotations

import copy
import os
from typing import Any

import torch
import trl

from seqpack.data.trl import trl_examples
from seqpack.errors import UserError
from seqpack.nn.hf_attention import PACKED_IMPL
from seqpack.nn.hf_causal_lm import add_target_head
from seqpack.nn.hf_causal_lm import compile_blocks as compile_layers
from seqpack.nn.hf_padding_free import VARLEN_IMPL
from seqpack.nn.hf_support import prepare_packed
from seqpack.train.trl_support import check_trl


def _packed_directory(packed: str | os.PathLike[str], args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` with the packed directory's rows as TRL's padding-free examples (`trl_examples`),
    and a copy of the ``SFTConfig`` that reads them as they are (padding-free, no truncation, the
    dataset not prepared again)."""
    if "train_dataset" in kwargs:
        raise UserError("PackedSFTTrainer: pass packed= (a packed directory) or train_dataset=, not both")
    if len(args) > 1 or "args" not in kwargs:
        raise UserError("PackedSFTTrainer(model, packed=DIR, args=trl.SFTConfig(...)): pass args by name")
    cfg = copy.copy(kwargs["args"])  # the caller's config stays as it was
    cfg.padding_free, cfg.max_length = True, None
    cfg.dataset_kwargs = {**(cfg.dataset_kwargs or {}), "skip_prepare_dataset": True}
    return {**kwargs, "args": cfg, "train_dataset": trl_examples(packed)}


class PackedSFTTrainer(trl.SFTTrainer):
    """``trl.SFTTrainer`` with the head-at-targets loss and no per-step sync (see the module)."""

    def __init__(
        self,
        *args: Any,
        packed: str | os.PathLike[str] | None = None,
        compile_blocks: bool | None = None,
        **kwargs: Any,
    ) -> None:
        check_trl()  # a TRL whose methods these overrides do not know: refused before any work
        if packed is not None:  # a packed directory, as PackedDPOTrainer takes one
            kwargs = _packed_directory(packed, args, kwargs)
        super().__init__(*args, **kwargs)
        hf: Any = self.model  # a transformers model (or a PEFT wrapper of one): read by name
        model = hf.get_base_model() if hasattr(hf, "get_base_model") else hf
        needs = prepare_packed(model).needs  # a layer packed rows would make wrong: refused before any step
        impl = getattr(model.config, "_attn_implementation", None)
        if "sinks" in needs and impl not in (PACKED_IMPL, VARLEN_IMPL):
            raise UserError(
                f"{type(model).__name__} has attention sinks, which transformers' {impl} masks do not keep "
                "inside each packed document; load it with attn_implementation='seqpack_varlen'"
            )
        add_target_head(model)
        on_cuda = next(model.parameters()).is_cuda or torch.cuda.is_available()
        self.compiled_blocks = compile_layers(model) if (on_cuda if compile_blocks is None else compile_blocks) else 0
        self._counts: dict[str, list[Any]] = {}  # mode -> [targets, correct] on the device

    def compute_loss(
        self, model: Any, inputs: dict[str, Any], return_outputs: bool = False, num_items_in_batch: Any = None
    ) -> Any:
        """The loss of one packed batch, the head applied only at the target positions (`Trainer.compute_loss`).

        Args:
            model: the model being trained.
            inputs: the packed batch's tensors.
            return_outputs: also return the outputs (evaluation: TRL's own path).
            num_items_in_batch: the target tokens of the whole step (`Trainer`'s).

        Returns:
            The loss (with the outputs when `return_outputs`).
        """
        if return_outputs:  # evaluation asking for logits: TRL's own path
            return super().compute_loss(model, inputs, return_outputs=True, num_items_in_batch=num_items_in_batch)
        mode = "train" if self._training() else "eval"
        inputs = {k: v for k, v in inputs.items() if k != "use_cache"}
        out = model(**inputs, target_head=True, num_items_in_batch=num_items_in_batch)
        loss = out.loss
        if self.args.average_tokens_across_devices and num_items_in_batch is not None:
            loss = loss * self.accelerator.num_processes  # as Trainer: DDP averages the gradients across ranks
        counts = self._counts.setdefault(mode, [0, 0])
        counts[0] = counts[0] + out.num_targets
        counts[1] = counts[1] + out.num_correct
        if mode == "train":  # a shape, or a sum left on the device: no sync
            tokens = (
                inputs["position_ids"].size(1)
                if "position_ids" in inputs and "attention_mask" not in inputs
                else inputs["attention_mask"].sum()
            )
            self._pending_tokens = getattr(self, "_pending_tokens", 0) + tokens
        return loss

    def _training(self) -> bool:
        return self.model is not None and self.model.training

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        """``Trainer.log``, with the token accuracy counted since the last log.

        Args:
            logs: the figures to log.
            start_time: when the run started (`Trainer`'s).
        """
        mode = "train" if self._training() else "eval"
        counts = self._counts.pop(mode, None)
        if counts is not None:
            n, c = (
                self.accelerator.gather_for_metrics(torch.as_tensor(x, device=self.accelerator.device).reshape(1)).sum()
                for x in counts
            )
            self._metrics[mode]["mean_token_accuracy"].append(float(c) / max(float(n), 1.0))
        pending = getattr(self, "_pending_tokens", 0)
        if mode == "train" and (torch.is_tensor(pending) or pending):
            total = self.accelerator.gather_for_metrics(
                torch.as_tensor(pending, device=self.accelerator.device).reshape(1)
            )
            self._total_train_tokens += int(total.sum()) // self._tp_size
            self._pending_tokens = 0
        if mode == "train":
            self._metrics[mode]["num_tokens"] = [self._total_train_tokens]
        super().log(logs, start_time)


__all__ = ["PackedSFTTrainer"]
