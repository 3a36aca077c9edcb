"""What one training run does: `TrainConfig` (frozen, validated on creation).

cfg = TrainConfig(data="packed_mlm/", out="runs/packed", model="bert", size="tiny", steps=200)
cfg_padded = cfg.replace(padded=True, out="runs/padded")
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from dataclasses import dataclass
from typing import Any

from seqpack._parallel import default_workers
from seqpack.errors import UserError
from seqpack.nn.attention import BACKENDS
from seqpack.nn.losses import REDUCTIONS
from seqpack.nn.models.common import SIZES
from seqpack.nn.preference import PreferenceLoss

MODELS = ("bert", "gpt", "reward")
OPTIMIZERS = ("adamw", "lamb")
SCHEDULES = ("linear", "cosine", "constant")
MATCH = ("none", "sequences", "packs")
BALANCE = ("none", "compute", "schedule")
DTYPES = ("fp32", "bf16")  # bf16: autocast over fp32 weights (fp16 would need a loss scaler)


def _check_type(name: str, value: Any, annotation: str) -> None:
    """``value`` of the type a field's annotation names (``int``, ``float``, ``bool``, ``str``, with
    ``| None``, and ``tuple[float, float]``): a ``TypeError`` naming the field, not a wrong run.

    >>> _check_type("steps", 10, "int | None"); _check_type("lr", 1, "float")
    >>> _check_type("steps", 10.5, "int | None")
    Traceback (most recent call last):
    ...
    TypeError: steps must be an int or None, got 10.5
    """
    kinds = [k.strip() for k in annotation.split("|")]
    if value is None:
        if "None" in kinds:
            return
    elif isinstance(value, tuple) and any(k.startswith("tuple[") for k in kinds):
        k = next(k for k in kinds if k.startswith("tuple["))
        parts = [p.strip() for p in k[len("tuple[") : -1].split(",")]
        if len(value) == len(parts):
            for i, (x, p) in enumerate(zip(value, parts)):
                _check_type(f"{name}[{i}]", x, p)
            return
    elif isinstance(value, bool):
        if "bool" in kinds:
            return
    elif (
        ("int" in kinds and isinstance(value, numbers.Integral))
        or ("float" in kinds and isinstance(value, numbers.Real))
        or ("str" in kinds and isinstance(value, str))
    ):  # numpy's ints and floats are numbers too
        return
    names = {"int": "an int", "float": "a number", "bool": "True or False", "str": "a string", "None": "None"}
    want = " or ".join(names.get(k, k) for k in kinds)
    raise TypeError(f"{name} must be {want}, got {value!r}")


#: the most held-out tokens a run-sized evaluation reads (`TrainConfig.eval_tokens` None)
EVAL_TOKENS_CAP = 262_144
#: the most examples a stream holds out by default (`TrainConfig.eval_examples` None)
EVAL_EXAMPLES_CAP = 1_000


def run_eval_tokens(train_tokens: int) -> int:
    """A run-sized evaluation: a tenth of the tokens the run trains on, at most `EVAL_TOKENS_CAP`
    (at least one token: `seqpack.train.data.eval_sample` then reads one pack).

        >>> run_eval_tokens(10 * 32 * 512), run_eval_tokens(10**9)
        (16384, 262144)
    """
    return max(1, min(EVAL_TOKENS_CAP, train_tokens // 10))


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """A training run over a packed dataset (or, with ``padded``, its one-sequence-per-row baseline).

    Budget: ``steps`` optimiser steps, or ``sequences`` (the steps that see about that many
    training sequences), or neither for one epoch. ``batch_size`` is rows per micro-batch
    (over all ranks); a step is ``accumulation`` micro-batches. ``match="sequences"`` divides
    the packed run's rows by the packing factor so a step sees as many sequences as the padded
    run's on average (paper §4.2, first setup); ``adjust_hparams`` keeps the rows and raises
    the optimiser's betas to the power ``p`` instead (its second setup). ``match="packs"`` (padded
    runs) reads the packed run's ``batch_size`` packs per micro-batch, their sequences one per row:
    both runs take the same optimiser steps on the same sequences, so they learn the same thing
    (up to float rounding) and differ only in time.
    """

    data: str
    out: str
    # stream: ``data`` names examples (.jsonl/.parquet, or a folder of them) packed as they are read
    stream: bool = False
    task: str | None = None  # stream: the task that builds the sequences (default clm)
    tokenizer: str | None = None  # stream: the tokenizer directory (seqpack or transformers)
    max_len: int | None = None  # stream: tokens per packed row
    buffer_size: int = 10_000  # stream: sequences planned at once
    # stream: its first examples, held out and packed once for evaluation; None: eval_fraction of the stream's
    # first EVAL_EXAMPLES_CAP / eval_fraction examples (a 60-record file holds out 3), at most EVAL_EXAMPLES_CAP
    eval_examples: int | None = None
    model: str | None = None  # None: from the task (mlm/classification -> bert, clm -> gpt)
    size: str = "tiny"
    hf_model: str | None = None  # a transformers config.json, or a directory holding one (its weights, if any, loaded)
    # LoRA adapters (peft) on an --hf-model: their rank (0: none, every weight trains), the modules they go on
    # (comma-separated names; None: peft's default for the architecture, its attention projections), and whether
    # RUN/model/merged/ also gets the model with the adapters merged in
    # --hf-model checkpoint weights whose shape differs from the task's (a classifier of another label count):
    # started anew rather than refused
    ignore_mismatched_sizes: bool = False
    lora_rank: int = 0
    lora_targets: str | None = None
    lora_merge: bool = False
    init_from: str | None = None  # an earlier run (RUN): its weights wherever name and shape match; the head new
    padded: bool = False
    optimizer: str = "adamw"
    lr: float = 1e-3
    weight_decay: float = 0.01
    betas: tuple[float, float] = (0.9, 0.999)
    warmup: float = 0.06  # < 1: a fraction of the steps; >= 1: a number of steps
    schedule: str = "linear"
    clip: float = 1.0  # 0: no clipping
    batch_size: int = 32
    accumulation: int = 1
    steps: int | None = None
    sequences: int | None = None
    eval_every: int = 0  # 0: only at the end
    evals: int | None = None  # instead of eval_every: this many evaluations spread over the run
    eval_fraction: float = 0.05
    # an evaluation reads at most this many held-out tokens (0: every held-out pack); None: sized to the run,
    # a tenth of the tokens it trains on, at most EVAL_TOKENS_CAP (a 10-step run does not evaluate for minutes)
    eval_tokens: int | None = None
    eval_at_start: bool = False  # evaluate the initial weights too (a loss curve that starts at 0 sequences)
    eval_batch_size: int = 64
    checkpoint_every: int = 0  # 0: at the end (and on SIGINT)
    seed: int = 0
    reduction: str = "sequence"
    match: str = "none"
    adjust_hparams: bool = False
    attention: str = "auto"
    dtype: str = "fp32"
    gradient_checkpointing: bool = False  # keep each block's input only; recompute its activations in backward
    dropout: float | None = None
    max_position: int | None = None
    threads: int | None = None
    progress: bool = True
    balance: str = "none"  # compute: each micro-batch's packs dealt so every rank's attention + MLP work is even;
    # schedule: the balanced steps the dataset was packed with (seqpack pack --world-size W --micro-batch B)
    balance_cost: str | None = (
        None  # a row cost file (seqpack bench --calibrate --out FILE); default: the model's FLOPs
    )
    context_parallel: int = (
        1  # C > 1: every row split per document across C ranks (data packed with --context-parallel C)
    )
    balance_world: int | None = (
        None  # ranks to balance for (default: the ranks running); 2 lets one process replay a 2-rank order
    )
    # preference data (the preference task): the loss and its knobs, defaults from PreferenceLoss
    preference_loss: str = PreferenceLoss.kind
    beta: float = PreferenceLoss.beta
    label_smoothing: float = PreferenceLoss.label_smoothing
    simpo_gamma: float = PreferenceLoss.gamma

    def __post_init__(self) -> None:
        def one_of(name: str, allowed: tuple[str, ...]) -> None:
            if getattr(self, name) not in allowed:
                raise UserError(f"{name} must be one of {'|'.join(allowed)}, got {getattr(self, name)!r}")

        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            _check_type(f.name, v, str(f.type))
            for x in v if isinstance(v, tuple) else (v,):  # every number an option takes: finite (nan/inf train to NaN)
                if isinstance(x, float) and not math.isfinite(x):
                    raise UserError(f"{f.name} must be a finite number, got {x}")
        if self.model is not None:
            one_of("model", MODELS)
        for name, allowed in (
            ("size", tuple(SIZES)),
            ("optimizer", OPTIMIZERS),
            ("schedule", SCHEDULES),
            ("reduction", REDUCTIONS),
            ("match", MATCH),
            ("attention", BACKENDS),
            ("balance", BALANCE),
            ("dtype", DTYPES),
        ):
            one_of(name, allowed)
        for name in ("batch_size", "accumulation", "eval_batch_size"):
            if getattr(self, name) < 1:
                raise UserError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("steps", "sequences", "threads", "max_position", "balance_world"):
            v = getattr(self, name)
            if v is not None and v < 1:
                raise UserError(f"{name} must be >= 1, got {v}")
        if self.balance_cost is not None and self.balance != "compute":
            raise UserError(
                "--cost is what --balance compute balances by; pass --balance compute too "
                "(--balance schedule trains the steps the dataset was packed with)"
            )
        if self.threads is not None and self.threads > default_workers():  # torch's pool of 10^5 threads crashes
            raise UserError(f"threads must be at most this machine's {default_workers()} cores, got {self.threads}")
        if self.steps is not None and self.sequences is not None:
            raise UserError("give --steps or --sequences, not both")
        if not (self.lr > 0 and math.isfinite(self.lr)):
            raise UserError(f"lr must be > 0, got {self.lr}")
        if self.weight_decay < 0 or self.clip < 0 or self.warmup < 0:
            raise UserError("weight_decay, clip and warmup must be >= 0")
        if not 0.0 < self.eval_fraction < 0.5:
            raise UserError(f"eval_fraction must be in (0, 0.5), got {self.eval_fraction}")
        if self.evals is not None and (self.evals < 1 or self.eval_every):
            raise UserError("evals must be >= 1, and is given instead of eval_every, not with it")
        if self.eval_tokens is not None and self.eval_tokens < 0:
            raise UserError(f"eval_tokens must be >= 0 (0: every held-out pack), got {self.eval_tokens}")
        if self.eval_every < 0 or self.checkpoint_every < 0:
            raise UserError("eval_every and checkpoint_every must be >= 0 (0: at the end only)")
        if self.match != "none" and self.adjust_hparams:
            raise UserError("--match sequences and --adjust-hparams are two alternatives; pick one")
        if self.padded and (self.match == "sequences" or self.adjust_hparams):
            raise UserError(
                "--match sequences / --adjust-hparams adjust the packed run; the padded run is the baseline "
                "(--match packs pairs a padded run with the packed run step by step)"
            )
        if self.match == "packs" and not self.padded:
            raise UserError(
                "--match packs is for the padded run: it reads the packed run's packs, one sequence per row"
            )
        if self.dropout is not None and not 0.0 <= self.dropout < 1.0:
            raise UserError(f"dropout must be in [0, 1), got {self.dropout}")
        if any(not 0.0 <= b < 1.0 for b in self.betas):
            raise UserError(f"betas must be in [0, 1), got {self.betas}")
        self._check_stream()
        self._check_init_from()
        if self.context_parallel < 1:
            raise UserError(f"context_parallel must be >= 1, got {self.context_parallel}")
        if self.context_parallel > 1 and (self.padded or self.stream or self.match != "none"):
            raise UserError("--context-parallel trains on packed rows: drop --padded, --stream and --match")
        if self.context_parallel > 1 and self.attention not in ("auto", "context_parallel"):
            raise UserError(
                f"--context-parallel runs its own attention (keys and values gathered over the ranks); "
                f"drop --attention {self.attention}"
            )
        self._check_lora()
        self.preference()  # validates the preference loss's settings

    def _check_lora(self) -> None:
        if self.lora_rank < 0:
            raise UserError(f"lora_rank must be >= 0 (0: no adapters), got {self.lora_rank}")
        if self.ignore_mismatched_sizes and not self.hf_model:
            raise UserError("--ignore-mismatched-sizes concerns a checkpoint's weights: pass --hf-model DIR too")
        if self.lora_rank and not self.hf_model:
            raise UserError("--lora-rank puts adapters on a transformers model: pass --hf-model DIR too")
        if not self.lora_rank and (self.lora_targets is not None or self.lora_merge):
            raise UserError("--lora-targets and --lora-merge describe LoRA adapters: pass --lora-rank R too")
        if self.lora_targets is not None and not [t for t in self.lora_targets.split(",") if t.strip()]:
            raise UserError(f"--lora-targets takes module names like q_proj,v_proj, got {self.lora_targets!r}")

    def _check_init_from(self) -> None:
        if self.init_from is None:
            return
        if not self.init_from.strip():
            raise UserError("--init-from names an earlier run's directory (RUN), got an empty string")
        if self.hf_model is not None:
            raise UserError(
                "--init-from starts seqpack's BERT/GPT from an earlier seqpack run; --hf-model builds a "
                "transformers model: drop one of them"
            )

    def _check_stream(self) -> None:
        given = [f"--{k.replace('_', '-')}" for k in ("task", "tokenizer", "max_len") if getattr(self, k) is not None]
        if not self.stream:
            if given:
                raise UserError(
                    f"{', '.join(given)} describe examples read as a stream; pass --stream too (a packed "
                    "dataset records its own task, tokenizer and max_len)"
                )
            return
        if self.max_len is None or self.max_len < 2:
            raise UserError("--stream packs rows as it reads: pass --max-len L (tokens per row, 2 or more)")
        if self.steps is None:
            raise UserError("--stream: a stream's length is not known before it is read; pass --steps N")
        if self.buffer_size < 1 or (self.eval_examples is not None and self.eval_examples < 1):
            raise UserError("--buffer-size and --eval-examples must be >= 1")
        if self.padded or self.match != "none" or self.adjust_hparams or self.balance != "none":
            raise UserError(
                "--stream trains the rows as they are packed; drop --padded, --match, --adjust-hparams and "
                "--balance (they need the whole packed dataset)"
            )

    def preference(self) -> PreferenceLoss:
        """The preference loss these options describe (used by the preference task).

        Returns:
            The `PreferenceLoss`.
        """
        return PreferenceLoss(
            kind=self.preference_loss, beta=self.beta, label_smoothing=self.label_smoothing, gamma=self.simpo_gamma
        )

    def replace(self, **changes: Any) -> TrainConfig:
        """A copy with ``changes`` (checked again).

        Args:
            **changes: fields to set, by name.

        Returns:
            The new `TrainConfig`.

        Raises:
            UserError: a value or combination the checks refuse.
        """
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """The config as a run records it (JSON-ready).

        Returns:
            The fields, by name.
        """
        d = dataclasses.asdict(self)
        d["betas"] = list(self.betas)
        return d
