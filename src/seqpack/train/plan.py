"""What a training run will do, decided before its first step: one frozen `RunPlan` built from the
options, the data, the ranks, the model's description and the run directory by `plan_run`,
recorded in the run's ``config.json`` and read by the loop (which sets none of it).

    plan = plan_run(cfg, data, world_size=2, model={"library": "seqpack", "class": "GPT", "config": {...}})
    plan.rows, plan.total, plan.dp    # rows per micro-batch (all ranks), steps, data-parallel groups
    plan.run_dir, plan.resume         # where the run writes, and whether it continues its checkpoint
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from seqpack.errors import UserError
from seqpack.nn.optim import adjust_betas
from seqpack.train.checkpoint import data_identity
from seqpack.train.config import TrainConfig, run_eval_tokens
from seqpack.train.context_parallel import dp_size
from seqpack.train.data import TrainData, Units
from seqpack.train.steps import rows_per_batch, total_steps

#: plan fields that config.json records under keys of their own ("train", "model", "attention", "data"),
#: or not at all (run_dir: a partial directory, renamed when the run finishes)
RECORDED_APART = ("cfg", "model", "attention", "identity", "options", "run_dir")


@dataclass(frozen=True, kw_only=True)
class RunPlan:
    """A run: its options and model, its sizes and schedule, what a resume must match, where it writes."""

    cfg: TrainConfig  # the options (a resumed run's: with its first run's --init-from, `resumed_from`)
    model: dict[str, Any]  # the model's description (library, class, config): what a resume must build again
    attention: str  # the attention the model runs (a transformers model's implementation)
    rows: int  # rows per micro-batch, all data-parallel ranks together
    dp: int  # data-parallel groups (of --context-parallel ranks each)
    total: int  # optimizer steps
    train_tokens: int  # about how many real tokens the run trains on (its first line says it)
    eval_every: int  # steps between evaluations (0: at the end only)
    betas: tuple[float, float]  # the optimizer's, adjusted to the packing factor if asked
    identity: dict[str, Any] = field(default_factory=dict)  # what a resumed run must train on
    options: dict[str, Any] = field(default_factory=dict)  # the options a resume must match
    balance: dict[str, Any] | None = None  # the balanced steps' report (None: not balanced)
    run_dir: Path  # where the run writes (``.RUN.partial/`` until it finishes), its checkpoint's place
    resume: bool  # continue from the checkpoint in run_dir (else start at step 0)

    @property
    def final(self) -> Path:
        """Where the finished run lies (``--out``)."""
        return Path(self.cfg.out)

    def record(self) -> dict[str, Any]:
        """What config.json's ``plan`` holds: every field it does not record under a key of its own."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in RECORDED_APART}

    def resumed_from(self, init_from: str) -> RunPlan:
        """This plan for a run resumed from a checkpoint whose first weights came from ``init_from``:
        the run's record keeps it (a resume never passes --init-from itself)."""
        cfg = self.cfg.replace(init_from=init_from)
        return dataclasses.replace(self, cfg=cfg, options={**self.options, "init_from": init_from})


def plan_run(
    cfg: TrainConfig,
    data: Units,
    *,
    world_size: int,
    model: Mapping[str, Any],
    attention: str | None = None,
    run_dir: Path | None = None,
    resume: bool = False,
) -> RunPlan:
    """The plan of ``cfg`` on ``data`` over ``world_size`` ranks, for the model ``model`` describes
    (its config's sizes give the FLOP cost of a balanced run), written to ``run_dir`` (default
    ``--out``). Refuses, in one line, a step larger than the data or a micro-batch the ranks cannot
    share; sizes the evaluation to the run and deals the balanced steps (both set on ``data``, which
    the loop then reads)."""
    rows = rows_per_batch(cfg, data)
    if rows * cfg.accumulation > data.num_units:
        unit = "sequences" if cfg.padded and not data.by_pack else "packs"
        raise UserError(
            f"{rows * cfg.accumulation:,} rows per step (--batch-size x --accumulation) is more than "
            f"the {data.num_units:,} training {unit} of {cfg.data}; pass --batch-size "
            f"{max(1, data.num_units // cfg.accumulation):,} or less"
        )
    dp = dp_size(world_size, cfg.context_parallel)
    if rows < dp:
        raise UserError(f"{rows} rows per micro-batch cannot be shared by {dp} data-parallel ranks; raise --batch-size")
    total = total_steps(cfg, data, rows)
    per_unit = float(data.unit_tokens.mean()) if data.unit_tokens.size else float(data.pack_fill.mean())
    train_tokens = int(total * rows * cfg.accumulation * per_unit)
    if cfg.eval_tokens is None:  # sized to the run: a tenth of what it trains on
        data.size_eval(run_eval_tokens(train_tokens))
    balance = _balance(cfg, data, dp=dp, rows=rows, model_config=model.get("config") or {})
    options = {
        **cfg.to_dict(),
        **({"balance_cost": balance["cost"]} if cfg.balance_cost and balance else {}),
        **({"schedule": data.manifest["schedule"]} if data.schedule_shape else {}),
    }
    return RunPlan(
        cfg=cfg,
        model=dict(model),
        attention=cfg.attention if attention is None else attention,
        rows=rows,
        dp=dp,
        total=total,
        train_tokens=train_tokens,
        eval_every=max(1, total // cfg.evals) if cfg.evals else cfg.eval_every,
        betas=adjust_betas(cfg.betas, data.packing_factor) if cfg.adjust_hparams else cfg.betas,
        identity=data_identity(data.manifest, cfg.padded),
        options=options,
        balance=balance,
        run_dir=Path(cfg.out) if run_dir is None else run_dir,
        resume=resume,
    )


def _balance(
    cfg: TrainConfig, data: Units, *, dp: int, rows: int, model_config: Mapping[str, Any]
) -> dict[str, Any] | None:
    """With ``balance="compute"``: packs dealt so every rank's step costs the same (a calibrated
    cost file, or the FLOP model of the model); the report."""
    if cfg.balance == "none":
        return None
    if not isinstance(data, TrainData):  # TrainConfig refuses it for a stream first
        raise UserError(f"--balance {cfg.balance} orders a packed dataset's packs; {cfg.data} is not one")
    if data.schedule_shape is not None:
        W, B = data.schedule_shape
        if (cfg.balance_world or dp) != W or rows != W * B:
            raise UserError(
                f"{cfg.data}: its schedule has steps of {W} ranks x {B} packs; train on {W} ranks "
                f"(or --balance-world {W}) with --batch-size {W * B} (rows per micro-batch, all ranks), "
                "or re-pack with this run's --world-size/--micro-batch"
            )
        return {**data.manifest["schedule"], "cost_source": "the dataset's schedule"}
    from seqpack.packing.balance import RowCost, load_row_cost

    if cfg.balance_cost:
        cost = load_row_cost(cfg.balance_cost)
    else:
        c = model_config
        hidden = c.get("hidden") or c.get("hidden_size") or c.get("n_embd")
        layers = c.get("layers") or c.get("num_hidden_layers") or c.get("n_layer") or 1
        ffn = c.get("intermediate_size") or c.get("n_inner") or c.get("intermediate") or None
        if hidden is None:
            raise UserError(
                "--balance compute: the model's config names no hidden size; pass --cost FILE (a calibration: seqpack bench --calibrate)"
            )
        cost = RowCost.from_flops(hidden=int(hidden), layers=int(layers), ffn=ffn)
    report = data.balance(cost, world=cfg.balance_world or dp, rows=rows)  # data-parallel ranks
    return {**report, "cost": cost.to_dict(), "cost_source": cfg.balance_cost or "flops"}


__all__ = ["RunPlan", "plan_run"]
