"""Train Hugging Face ``BertForMaskedLM`` on a seqpack MLM dataset with ``transformers.Trainer``.

    seqpack pack store/ --task mlm --max-len 128 --tokenizer tok/ --out packed_mlm/
    python examples/hf_trainer_mlm.py --data packed_mlm/ --out runs/hf-mlm --steps 200

Two pieces make the stock Trainer train on packed rows:

* the collator stacks packed rows as they are (``input_ids``, ``segment_ids``,
  ``position_ids``, ``token_type_ids``, ``labels``);
* ``compute_loss`` goes through :func:`seqpack.nn.hf_adapter.packed_forward`, which gives the model a
  4-D mask that keeps each row's sequences apart, positions that restart per sequence, and
  the per-sequence loss (``--reduction token`` for HF's per-token mean).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

COLUMNS = ["input_ids", "segment_ids", "position_ids", "token_type_ids", "labels"]


def packed_collator(items: list[dict[str, Any]]) -> dict[str, Any]:
    from seqpack.data import collate_packed

    return collate_packed(items)


def make_trainer(
    data: str, out: str, *, steps: int, batch_size: int, lr: float, reduction: str, hidden: int = 128
) -> Any:
    import transformers

    from seqpack.data import PackedDataset
    from seqpack.nn.hf_adapter import packed_forward
    from seqpack.train.models import dataset_vocab_size

    dataset = PackedDataset(data, columns=COLUMNS)
    if dataset.task != "mlm":
        raise SystemExit(f"{data} is a {dataset.task} dataset; this example trains masked-LM (seqpack pack --task mlm)")
    config = transformers.BertConfig(  # type: ignore[call-arg]  # attn_implementation: a keyword of every config, not in its typed signature
        vocab_size=dataset_vocab_size(dataset.manifest),
        hidden_size=hidden,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=4 * hidden,
        max_position_embeddings=dataset.manifest["max_len"],
        attn_implementation="sdpa",
    )
    model = transformers.BertForMaskedLM(config)

    class PackedTrainer(transformers.Trainer):
        def compute_loss(
            self, model: Any, inputs: dict[str, Any], return_outputs: bool = False, num_items_in_batch: Any = None
        ) -> Any:
            out = packed_forward(model, inputs, reduction=reduction)
            return (out.loss, {"logits": out.logits}) if return_outputs else out.loss

    args = transformers.TrainingArguments(
        output_dir=out,
        max_steps=steps,
        per_device_train_batch_size=batch_size,
        learning_rate=lr,
        warmup_steps=max(1, steps // 10),
        logging_steps=max(1, steps // 10),
        save_strategy="no",
        report_to=[],
        remove_unused_columns=False,
        use_cpu=True,
        dataloader_num_workers=0,
        seed=0,
    )
    return PackedTrainer(model=model, args=args, train_dataset=dataset, data_collator=packed_collator)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, help="a seqpack MLM dataset (seqpack pack --task mlm)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--lr", type=float, default=5e-4)
    ap.add_argument("--reduction", choices=("sequence", "token"), default="sequence")
    args = ap.parse_args(argv)
    trainer = make_trainer(
        args.data, args.out, steps=args.steps, batch_size=args.batch_size, lr=args.lr, reduction=args.reduction
    )
    result = trainer.train()
    summary = {
        "steps": result.global_step,
        "train_loss": result.training_loss,
        "log": [h for h in trainer.state.log_history if "loss" in h],
    }
    print(json.dumps(summary))
    return summary


if __name__ == "__main__":
    main()
