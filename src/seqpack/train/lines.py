"""What a training run says about itself before its first step: one line, at once.

>>> start_line("packed", "GPT", attention="auto", first=1, total=10, rows=8, eval_every=0,
...            eval_packs=12, eval_tokens=9876, metrics="run/metrics.jsonl")
'packed GPT, attention auto: steps 1-10 of 8 rows; eval at the end on 12 held-out packs (9,876 tokens); metrics in run/metrics.jsonl'
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from seqpack.train.data import Units
    from seqpack.train.init_from import Loaded
    from seqpack.train.plan import RunPlan

#: transformers implementations that give a packed row a dense ``T x T`` mask
DENSE = ("sdpa", "eager")


def attention_text(attention: str, *, transformers: bool) -> str:
    """The attention a run uses, with what it means for a packed row when it is a dense mask.

    >>> attention_text("sdpa", transformers=True)
    'attention sdpa (a dense T x T mask per row, as the config names or its attention dropout needs; seqpack_packed runs without one)'
    """
    if transformers and attention in DENSE:
        return (
            f"attention {attention} (a dense T x T mask per row, as the config names or its attention dropout needs; "
            "seqpack_packed runs without one)"
        )
    return f"attention {attention}"


def start_line(
    desc: str,
    model: str,
    *,
    attention: str,
    first: int,
    total: int,
    rows: int,
    eval_every: int,
    eval_packs: int,
    eval_tokens: int,
    metrics: str,
    transformers: bool = False,
    train_tokens: int = 0,
    init: str = "",
) -> str:
    """The run's first line: model, attention, steps, rows, its evaluations (and what one costs
    beside the ~``train_tokens`` the run trains on) and where the metrics go; ``init``: what
    ``--init-from`` loaded (`seqpack.train.init_from.Loaded.text`)."""
    when = f"every {eval_every} steps and at the end" if eval_every else "at the end"
    share = f", {eval_tokens / train_tokens:.0%} of the ~{train_tokens:,} tokens trained on" if train_tokens else ""
    return (
        f"{desc} {model}{f', {init}' if init else ''}, {attention_text(attention, transformers=transformers)}: steps {first}-{total} of {rows} rows; "
        f"eval {when} on {eval_packs:,} held-out pack{'s' if eval_packs != 1 else ''} ({eval_tokens:,} tokens{share}); "
        f"metrics in {metrics}"
    )


def run_start_line(desc: str, plan: RunPlan, data: Units, *, first: int, loaded: Loaded | None) -> str:
    """`start_line` of a run of ``plan`` on ``data`` whose first step is ``first`` (``desc``: packed
    or padded; ``loaded``: what --init-from gave)."""
    model = plan.model["class"]
    if plan.cfg.hf_model:  # a checkpoint's weights, or a model initialised from its config
        from seqpack.train.pretrained import describe

        model = f"{model} ({describe(plan.model)})"
    return start_line(
        desc,
        model,
        attention=plan.attention,
        first=first,
        total=plan.total,
        rows=plan.rows,
        eval_every=plan.eval_every,
        eval_packs=len(data.eval_packs),
        eval_tokens=data.eval_tokens,
        train_tokens=plan.train_tokens,
        metrics=f"{plan.final}/metrics.jsonl",
        transformers=plan.model["library"] == "transformers",
        init="" if loaded is None else loaded.text(),
    )


def ran_text(counts: dict[str, int]) -> str:
    """The backends the run's attention plans used, by share of plans.

    >>> ran_text({"per_document": 30, "sdpa": 10})
    'per_document 75%, sdpa 25% of 40 batches'
    >>> ran_text({})
    ''
    """
    n = sum(counts.values())
    if not n:
        return ""
    parts = ", ".join(f"{k} {v / n:.0%}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1]))
    return f"{parts} of {n:,} batches"
