"""``seqpack train --data DIR --out RUN [--padded] ...``: train on a packed dataset (or its padded baseline)."""

from __future__ import annotations

import argparse
import json
import os
from typing import TYPE_CHECKING, Any

from seqpack.cli.args import default_of, from_args
from seqpack.cli.numbers import COUNT_LIMIT, TOKENS_PER_ROW, WORKERS_LIMIT, integer, max_len, number, seed
from seqpack.cli.paths import declare_paths

if TYPE_CHECKING:
    from collections.abc import Callable

    from seqpack.train.config import TrainConfig

NAME = "train"
HELP = "train BERT/GPT on a packed dataset (or its padded baseline)"
EXAMPLE = "seqpack train --data packed/ --out runs/gpt --size small --steps 1000"
DOCS = "docs/guides/training.md"


def pos(name: str, maximum: int = COUNT_LIMIT) -> Callable[[str], int]:
    """An argparse type: an int in ``1..maximum``, refused in a line naming ``name``."""
    return integer(name, 1, maximum)


#: a count of rows, sequences or examples one batch or buffer holds at most
ROWS_LIMIT = 2**31 - 1


def _betas(text: str) -> tuple[float, float]:
    parts = text.split(",")
    if len(parts) != 2:
        raise argparse.ArgumentTypeError(f"--betas takes two numbers like 0.9,0.999, got {text!r}")
    beta = number("--betas", 0.0, 1.0, below=True)
    b1, b2 = (beta(x.strip()) for x in parts)
    return b1, b2


def add_training_options(p: argparse.ArgumentParser) -> None:
    """Options shared by ``train`` and ``compare``."""
    from seqpack.nn.attention import BACKENDS
    from seqpack.nn.losses import REDUCTIONS
    from seqpack.nn.models.common import SIZES
    from seqpack.train.config import BALANCE, DTYPES, MODELS, OPTIMIZERS, SCHEDULES, TrainConfig

    p.add_argument(
        "--data",
        required=True,
        help="packed dataset directory (seqpack pack); with --stream, examples (.jsonl/.parquet, or a folder of them)",
    )
    p.add_argument(
        "--model", choices=MODELS, default=default_of(TrainConfig, "model"), help="default: gpt for clm, bert otherwise"
    )
    p.add_argument(
        "--size", choices=tuple(SIZES), default=default_of(TrainConfig, "size"), help="seqpack's compact model size"
    )
    p.add_argument(
        "--hf-model",
        default=default_of(TrainConfig, "hf_model"),
        metavar="CONFIG",
        help="a transformers config.json (trained from scratch), or a checkpoint directory (its weights "
        "fine-tuned); the run writes RUN/model/ for from_pretrained",
    )
    p.add_argument(
        "--ignore-mismatched-sizes",
        action="store_true",
        help="start anew the checkpoint's weights whose shape differs from the task's (a classifier of "
        "another label count) instead of refusing",
    )
    p.add_argument("--optimizer", choices=OPTIMIZERS, default=default_of(TrainConfig, "optimizer"))
    p.add_argument("--lr", type=number("--lr", 0.0, 1e30, above=True), default=default_of(TrainConfig, "lr"))
    p.add_argument(
        "--weight-decay", type=number("--weight-decay", 0.0, 1e3), default=default_of(TrainConfig, "weight_decay")
    )
    p.add_argument("--betas", type=_betas, default=default_of(TrainConfig, "betas"))
    p.add_argument(
        "--warmup",
        type=number("--warmup", 0.0, 2.0**53),
        default=default_of(TrainConfig, "warmup"),
        help="warm-up: a fraction of the steps (<1) or steps (>=1)",
    )
    p.add_argument(
        "--schedule", choices=SCHEDULES, default=default_of(TrainConfig, "schedule"), help="decay after warm-up"
    )
    p.add_argument(
        "--clip",
        type=number("--clip", 0.0, 1e30),
        default=default_of(TrainConfig, "clip"),
        help="gradient norm clipping (0: none)",
    )
    p.add_argument(
        "--batch-size",
        type=pos("--batch-size", ROWS_LIMIT),
        default=default_of(TrainConfig, "batch_size"),
        help="rows per micro-batch, all ranks together",
    )
    p.add_argument(
        "--accumulation",
        type=pos("--accumulation", ROWS_LIMIT),
        default=default_of(TrainConfig, "accumulation"),
        help="micro-batches per optimiser step",
    )
    p.add_argument(
        "--steps",
        type=pos("--steps"),
        default=default_of(TrainConfig, "steps"),
        help="optimiser steps (default: one epoch)",
    )
    p.add_argument(
        "--sequences",
        type=pos("--sequences"),
        default=default_of(TrainConfig, "sequences"),
        help="train until about this many sequences",
    )
    p.add_argument(
        "--eval-every",
        type=integer("--eval-every", 0),
        default=default_of(TrainConfig, "eval_every"),
        help="steps (0: at the end)",
    )
    p.add_argument(
        "--eval-at-start",
        action="store_true",
        default=default_of(TrainConfig, "eval_at_start"),
        help="evaluate the initial weights too, before the first step (a loss curve from 0 sequences)",
    )
    p.add_argument(
        "--eval-fraction",
        type=number("--eval-fraction", 0.0, 0.5, above=True, below=True),
        default=default_of(TrainConfig, "eval_fraction"),
        help="share of packs held out for evaluation",
    )
    p.add_argument(
        "--eval-tokens",
        type=integer("--eval-tokens", 0),
        default=default_of(TrainConfig, "eval_tokens"),
        help="an evaluation reads at most this many held-out tokens, a fixed sample (0: every held-out pack; "
        "default: a tenth of the tokens the run trains on, at most 262,144)",
    )
    p.add_argument(
        "--eval-batch-size",
        type=pos("--eval-batch-size", ROWS_LIMIT),
        default=default_of(TrainConfig, "eval_batch_size"),
    )
    p.add_argument("--seed", type=seed(), default=default_of(TrainConfig, "seed"))
    p.add_argument(
        "--reduction",
        choices=REDUCTIONS,
        default=default_of(TrainConfig, "reduction"),
        help="loss mean per sequence (paper) or per token (HF)",
    )
    p.add_argument(
        "--attention", choices=BACKENDS, default=default_of(TrainConfig, "attention"), help="packed attention backend"
    )
    p.add_argument(
        "--dtype",
        choices=DTYPES,
        default=default_of(TrainConfig, "dtype"),
        help="bf16: forward and loss under bf16 autocast over fp32 weights and optimiser state",
    )
    p.add_argument(
        "--gradient-checkpointing",
        action="store_true",
        default=default_of(TrainConfig, "gradient_checkpointing"),
        help="keep only each transformer block's input and recompute its activations in the backward pass "
        "(less memory, about a third more compute; the same gradients)",
    )
    p.add_argument(
        "--dropout",
        type=number("--dropout", 0.0, 1.0, below=True),
        default=default_of(TrainConfig, "dropout"),
        help="override the model's dropout",
    )
    p.add_argument(
        "--max-position",
        type=pos("--max-position", TOKENS_PER_ROW),
        default=default_of(TrainConfig, "max_position"),
        help="the model's position table size",
    )
    p.add_argument(
        "--threads",
        type=pos("--threads", WORKERS_LIMIT),
        default=default_of(TrainConfig, "threads"),
        help="torch CPU threads",
    )
    from seqpack.nn.preference import LOSSES

    p.add_argument(
        "--preference-loss",
        choices=LOSSES,
        default=default_of(TrainConfig, "preference_loss"),
        help="preference data: sigmoid (DPO) | ipo | simpo | orpo | bt (a reward model: --model reward)",
    )
    p.add_argument(
        "--beta",
        type=number("--beta", 0.0, 1e3, above=True),
        default=default_of(TrainConfig, "beta"),
        help="preference data: the loss's beta",
    )
    p.add_argument(
        "--label-smoothing",
        type=number("--label-smoothing", 0.0, 0.5, below=True),
        default=default_of(TrainConfig, "label_smoothing"),
        help="preference data: the share of pairs taken as mislabelled (sigmoid, simpo)",
    )
    p.add_argument(
        "--simpo-gamma",
        type=number("--simpo-gamma", -1e3, 1e3),
        default=default_of(TrainConfig, "simpo_gamma"),
        help="SimPO's target reward margin",
    )
    p.add_argument(
        "--balance",
        choices=BALANCE,
        default=default_of(TrainConfig, "balance"),
        help="compute: deal each micro-batch's packs so every data-parallel rank has the same work "
        "(tokens and sum of squared lengths; FLOP model of the model, or --cost); schedule: train the "
        "balanced steps the dataset was packed with (seqpack pack --world-size W --micro-batch B)",
    )
    p.add_argument(
        "--balance-world",
        type=pos("--balance-world", 2**20),
        default=default_of(TrainConfig, "balance_world"),
        help="ranks to balance for (default: those running)",
    )
    p.add_argument(
        "--context-parallel",
        type=pos("--context-parallel", 2**20),
        default=default_of(TrainConfig, "context_parallel"),
        metavar="C",
        help="split every row per document across C ranks (under torchrun: ranks = data-parallel "
        "groups x C); the data must be packed with seqpack pack --context-parallel C",
    )
    p.add_argument(
        "--cost",
        dest="balance_cost",
        default=default_of(TrainConfig, "balance_cost"),
        help="with --balance compute: measured row costs (seqpack bench --calibrate --out FILE) instead of FLOPs",
    )
    p.add_argument(
        "--init-from",
        default=default_of(TrainConfig, "init_from"),
        metavar="RUN",
        help="start from an earlier run's weights (RUN/checkpoint.pt) wherever name and shape match: an MLM run's "
        "encoder under a new classification or QA head",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from seqpack.train.config import MATCH, TrainConfig

    p = sub.add_parser(
        NAME,
        help=HELP,
        description="Train on a packed dataset; --padded trains on the same sequences one per row. Writes "
        "RUN/config.json, metrics.jsonl, checkpoint.pt and summary.json. Ctrl-C saves a checkpoint; "
        "--resume continues it exactly. Under torchrun each rank takes a share of every batch.",
    )
    add_training_options(p)
    p.add_argument("--out", required=True, metavar="RUN", help="run directory")
    p.add_argument("--padded", action="store_true", help="the baseline: one sequence per row, padded to max_len")
    p.add_argument(
        "--match",
        choices=MATCH,
        default=default_of(TrainConfig, "match"),
        help="sequences: packed rows = batch / packing factor, as many sequences per step as padded; "
        "packs (with --padded): the packed run's packs, one sequence per row: the same steps on the same sequences",
    )
    p.add_argument(
        "--adjust-hparams", action="store_true", help="raise the optimiser's betas to the power p (paper §4.2)"
    )
    p.add_argument(
        "--checkpoint-every",
        type=integer("--checkpoint-every", 0),
        default=default_of(TrainConfig, "checkpoint_every"),
    )
    p.add_argument("--resume", action="store_true", help="continue RUN from its checkpoint")
    from seqpack.tasks import TASKS

    g = p.add_argument_group(
        "streaming (--data names examples, packed as they are read; the stream's position is "
        "saved in every checkpoint and --resume continues it exactly)"
    )
    g.add_argument(
        "--stream",
        action="store_true",
        default=default_of(TrainConfig, "stream"),
        help="read --data as a stream of examples instead of a packed dataset (needs --tokenizer, --max-len, --steps)",
    )
    g.add_argument(
        "--task",
        choices=TASKS,
        default=default_of(TrainConfig, "task"),
        help="the task that builds the stream's sequences (default clm: records with text)",
    )
    g.add_argument(
        "--tokenizer",
        default=default_of(TrainConfig, "tokenizer"),
        help="tokenizer directory (seqpack or transformers)",
    )
    g.add_argument("--max-len", type=max_len, default=default_of(TrainConfig, "max_len"), help="tokens per packed row")
    g.add_argument(
        "--buffer-size",
        type=pos("--buffer-size", ROWS_LIMIT),
        default=default_of(TrainConfig, "buffer_size"),
        help="sequences planned at once (fill within 0.1%% of a global plan at 10,000)",
    )
    g.add_argument(
        "--eval-examples",
        type=pos("--eval-examples"),
        default=default_of(TrainConfig, "eval_examples"),
        help="the stream's first examples, held out and packed once for evaluation (default: "
        "--eval-fraction of them, at most 1,000)",
    )
    g = p.add_argument_group("LoRA adapters on an --hf-model (peft); RUN/model/ holds the adapter")
    g.add_argument(
        "--lora-rank",
        type=integer("--lora-rank", 0, 65_536),
        default=default_of(TrainConfig, "lora_rank"),
        metavar="R",
        help="train rank-R adapters instead of every weight (0: none)",
    )
    g.add_argument(
        "--lora-targets",
        default=default_of(TrainConfig, "lora_targets"),
        metavar="NAMES",
        help="comma-separated module names the adapters go on (default: the architecture's attention "
        "projections, as peft names them, e.g. q_proj,v_proj)",
    )
    g.add_argument(
        "--lora-merge", action="store_true", help="also write the model with the adapters merged, in RUN/model/merged/"
    )
    p.add_argument("--overwrite", action="store_true", help="start again in a RUN that already holds a run")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(handler=run)
    declare_paths(p, reads=("data", "hf_model", "tokenizer", "balance_cost", "init_from"), dirs=("out",))


def config_from_args(args: argparse.Namespace, **changes: Any) -> TrainConfig:
    from seqpack.train.config import TrainConfig

    progress = not (args.quiet or getattr(args, "json", False))
    config: TrainConfig = from_args(TrainConfig, args, **{"progress": progress, **changes})
    return config


def run(args: argparse.Namespace) -> int:
    from seqpack.train import train
    from seqpack.train.lines import ran_text

    cfg = config_from_args(args)
    s = train(cfg, resume=args.resume, overwrite=args.overwrite)
    if os.environ.get("RANK", "0") != "0":  # under torchrun, rank 0 reports
        return 0
    if args.json:
        print(json.dumps(s))
        return 0
    ev = s["eval"]
    parts = [f"{k} {v:.4f}" for k, v in ev.items()]
    print(
        f"{'padded' if s['padded'] else 'packed'} {s['model']}: {s['steps']} steps, {s['sequences']:,} sequences, "
        f"{s['tokens']:,} tokens in {s['train_seconds']:.1f} s ({s['tokens_per_s']:,.0f} tokens/s)"
    )
    print("eval: " + ", ".join(parts))
    ran = ran_text(s["attention"]["plans"])
    print(f"attention: {s['attention']['implementation']}" + (f" ({ran})" if ran else ""))
    print(f"run: {s['run']}")
    return 0
