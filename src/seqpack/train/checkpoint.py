"""Checkpoints (``RUN/checkpoint.pt``, written atomically) and the run's JSON-lines metrics.

A checkpoint holds the model and optimiser state, the step counters, the torch RNG state and
what the run was: the model description, the dataset's identity and the training options
that decide the result. ``--resume`` refuses a checkpoint whose model or data differ, and
continues bit for bit where it stopped (the batch order is a function of the step).
"""

from __future__ import annotations

import json
import os
import zlib
from pathlib import Path
from typing import Any

import torch

from seqpack._atomic import OutputKind, atomic_file
from seqpack.errors import UserError

KIND = "seqpack.checkpoint"
FORMAT_VERSION = 1
CHECKPOINT = "checkpoint.pt"
METRICS = "metrics.jsonl"
SUMMARY = "summary.json"
CONFIG = "config.json"
RUN_KIND = "seqpack.run"
#: what a run directory is, as its ``config.json`` says: `--overwrite` replaces only these
RUN = OutputKind("training run", (CONFIG, "kind", RUN_KIND))
# options that may change between a run and its resumption without changing its result
FREE_OPTIONS = (
    "out",
    "data",
    "progress",
    "threads",
    "eval_every",
    "evals",
    "eval_batch_size",
    "eval_tokens",
    "checkpoint_every",
    "gradient_checkpointing",  # recomputing activations gives the same gradients
    "lora_merge",  # what RUN/model/ holds beside the adapter
    "init_from",  # where the first weights came from: a resume continues from its own checkpoint's
)
# options newer than some checkpoints: a checkpoint without one was trained with this value
ADDED_OPTIONS: dict[str, Any] = {
    "dtype": "fp32",
    "lora_rank": 0,
    "lora_targets": None,
    "lora_merge": False,
    "ignore_mismatched_sizes": False,
}


def data_identity(manifest: dict[str, Any], padded: bool) -> dict[str, Any]:
    """What a resumed run must train on: the dataset's shape and, where its manifest records them,
    its parts' checksums (a re-pack of changed tokens into the same shape differs there)."""
    keys = ("task", "max_len", "num_packs", "num_sequences", "num_tokens", "tokenizer_hash", "seed", "algorithm")
    out = {**{k: manifest.get(k) for k in keys}, "padded": padded}
    sums = [s.get("checksum") for s in manifest.get("shards", [])]
    if any(sums):  # a dataset without checksums is known by its shape alone
        out["content"] = zlib.crc32(json.dumps(sums).encode())
    return out


def state_digest(state: Any) -> str:
    """CRC-32 over every tensor's bytes (with its place, dtype and shape) and every other value of
    a nested state: what a checkpoint's weights are checked against when it is loaded (a damaged
    file that still unpickles would otherwise resume on wrong weights).

    >>> a = {"w": torch.ones(2), "step": 3}
    >>> state_digest(a) == state_digest({"w": torch.ones(2), "step": 3}) != state_digest({"w": torch.zeros(2), "step": 3})
    True
    """
    crc = 0

    def walk(x: Any, where: str) -> None:
        nonlocal crc
        if isinstance(x, torch.Tensor):
            t = x.detach().cpu().contiguous().reshape(-1)
            crc = zlib.crc32(f"{where}:{t.dtype}:{tuple(x.shape)};".encode(), crc)
            crc = zlib.crc32(t.view(torch.uint8).numpy().data if t.numel() else b"", crc)
        elif isinstance(x, dict):
            for k in sorted(x, key=str):
                walk(x[k], f"{where}/{k}")
        elif isinstance(x, (list, tuple)):
            for i, v in enumerate(x):
                walk(v, f"{where}/{i}")
        else:
            crc = zlib.crc32(f"{where}={x!r};".encode(), crc)

    walk(state, "")
    return f"{crc:08x}"


def _digested(payload: dict[str, Any]) -> Any:
    return {k: payload[k] for k in ("model_state", "optimizer_state", "state", "data_state") if k in payload}


def save_checkpoint(run: Path, payload: dict[str, Any]) -> Path:
    """Write ``run/checkpoint.pt`` via a temp file and one rename, with the digest of its state
    (`state_digest`), checked when it is loaded."""
    path = run / CHECKPOINT
    try:
        with atomic_file(path) as tmp:
            torch.save(
                {"kind": KIND, "format_version": FORMAT_VERSION, **payload, "digest": state_digest(_digested(payload))},
                tmp,
            )
    except RuntimeError as e:  # torch's writer reports a full disk as "PytorchStreamWriter failed writing file ..."
        if "writ" not in str(e):
            raise
        raise OSError(
            f"{path}: writing the checkpoint failed ({' '.join(str(e).split())[:200]}); the previous "
            "checkpoint is intact: free space on its disk and continue with --resume"
        ) from e
    return path


def load_checkpoint(
    run: Path, *, model: dict[str, Any], data: dict[str, Any], options: dict[str, Any]
) -> dict[str, Any]:
    """The checkpoint in ``run``, checked against what this run builds."""
    path = run / CHECKPOINT
    if not path.is_file():
        raise UserError(
            f"--resume: no checkpoint in {run} (nothing to resume); run without --resume to start a new run"
        )
    ck = read_checkpoint(path)
    if ck["model"] != model:
        diff = (
            _diff(ck["model"].get("config", {}), model.get("config", {}))
            or f"{ck['model']['class']} vs {model['class']}"
        )
        raise UserError(
            f"{path} was saved from another model config ({diff}); resume with the same --model/--size/--hf-model, "
            "or use a new --out"
        )
    if ck["data"] != data:
        raise UserError(
            f"{path} was trained on other data ({_diff(ck['data'], data)}); resume with the same --data and --padded"
        )
    mine = {k: v for k, v in options.items() if k not in FREE_OPTIONS}
    theirs = {k: v for k, v in {**ADDED_OPTIONS, **ck["options"]}.items() if k not in FREE_OPTIONS}
    if mine != theirs:
        raise UserError(f"{path} was trained with other options ({_diff(theirs, mine)}); resume with the same options")
    return ck


def read_checkpoint(path: Path, *, remedy: str | None = None) -> dict[str, Any]:
    """``path`` (a ``checkpoint.pt``) loaded without running any of its code, checked: a seqpack
    checkpoint, its state matching its digest, every weight finite. ``remedy``: what a refusal
    tells the user to do (default: a resume's)."""
    try:
        ck = torch.load(path, map_location="cpu", weights_only=True)  # loading never runs the file's code
    except Exception as e:  # torch raises many types for a damaged file
        raise UserError(f"{path}: not a readable checkpoint ({e})") from e
    if not isinstance(ck, dict) or ck.get("kind") != KIND or ck.get("format_version") != FORMAT_VERSION:
        raise UserError(f"{path}: not a seqpack checkpoint (format {FORMAT_VERSION})")
    if "digest" in ck and ck["digest"] != state_digest(_digested(ck)):  # checkpoints before digests carry none
        raise UserError(
            f"{path}: its weights or optimiser state do not match the digest saved with them (the file "
            "was damaged or edited); " + (remedy or "resume from an intact copy, or start again with --overwrite")
        )
    bad = [
        k
        for k, v in ck.get("model_state", {}).items()
        if isinstance(v, torch.Tensor) and v.is_floating_point() and not bool(torch.isfinite(v).all())
    ]
    if bad:
        raise UserError(
            f"{path}: {bad[0]} holds NaN or inf values; "
            + (remedy or "resume from an earlier checkpoint, or start again with --overwrite")
        )
    return ck


def _diff(a: dict[str, Any], b: dict[str, Any]) -> str:
    keys = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
    return ", ".join(f"{k}: {a.get(k)!r} vs {b.get(k)!r}" for k in keys[:4])


class MetricsLog:
    """``RUN/metrics.jsonl``: one JSON object per line. On resume, lines past the checkpoint's
    step (written after it by the interrupted run) are dropped."""

    def __init__(self, path: Path, *, keep_until: int | None) -> None:
        self.path = path
        if keep_until is None:
            path.write_text("", encoding="utf-8")
        elif path.is_file():
            lines = [ln for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()]
            kept = [ln for ln in lines if json.loads(ln).get("step", 0) <= keep_until]
            path.write_text("".join(ln + "\n" for ln in kept), encoding="utf-8")

    def write(self, record: dict[str, Any]) -> None:
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")


def read_metrics(run: str | os.PathLike[str]) -> list[dict[str, Any]]:
    p = Path(run) / METRICS
    if not p.is_file():
        raise UserError(f"{run}: no {METRICS} (not a seqpack training run)")
    return [json.loads(ln) for ln in p.read_text(encoding="utf-8").splitlines() if ln.strip()]
