"""Fine-tuning a released transformers checkpoint (``--hf-model DIR`` with weights): its weights
loaded, checked against the packed data's tokenizer, optionally wrapped in LoRA adapters (peft),
and the run's model written back as a transformers directory (``RUN/model/``).

    if has_weights(Path("llama/")): model, parts = load_weights(Path("llama/"), config, build)
    check_vocabulary(model, manifest, source="llama/")      # refused before any step
    write_model_dir(model, run_dir, tokenizer=Path("llama/"), merge=False)
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from seqpack._atomic import OutputKind, remove_leftovers, replace_directory
from seqpack.errors import UserError

#: files that hold a transformers checkpoint's weights (one of them, or a sharded index)
WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
#: files of a Hugging Face tokenizer or processor directory copied into ``RUN/model/``
TOKENIZER_FILES = (
    "processor_config.json",
    "preprocessor_config.json",
    "video_preprocessor_config.json",
    "chat_template.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
    "tokenizer.model",
    "vocab.txt",
    "vocab.json",
    "merges.txt",
    "added_tokens.json",
)
#: the run's transformers model directory, inside the run directory
MODEL_DIR = "model"
#: ``RUN/model/`` is replaced only inside a run directory (its ``config.json`` beside it)
MODEL_KIND = OutputKind("run's transformers model", inside="config.json")
#: the attribute of a LoRA-wrapped transformers model that holds its ``peft.PeftModel`` (kept out of
#: the module tree: the peft model holds the transformers model, not the other way round)
PEFT = "_seqpack_peft"


def has_weights(source: str | None) -> bool:
    """Whether ``source`` is a directory holding a checkpoint's weights (not a config alone)."""
    if not source:
        return False
    p = Path(source)
    return p.is_dir() and any((p / f).is_file() for f in WEIGHT_FILES)


@contextlib.contextmanager
def _quiet() -> Any:
    """transformers' progress bars ("Loading weights", "Writing model shards") and load report off:
    the run's own lines say what happens (`loaded_parts`)."""
    from transformers.utils import logging

    was, level = logging.is_progress_bar_enabled(), logging.get_verbosity()
    logging.disable_progress_bar()
    logging.set_verbosity_error()
    try:
        yield
    finally:
        logging.set_verbosity(level)
        if was:
            logging.enable_progress_bar()


def load_weights(
    source: Path, config: Any, build: Callable[[Any], Any], *, resize: bool = False
) -> tuple[Any, dict[str, list[str]]]:
    """The checkpoint in ``source`` (local files only), in float32 (the run's weights; ``--dtype
    bf16`` autocasts over them), as the class ``build(config)`` makes for the task, and what the
    loading did by module (`loaded_parts`). The class is found on the meta device (nothing is
    allocated); weights the checkpoint lacks (a new task head) are initialised by transformers,
    seeded by the caller. A weight whose shape differs from the checkpoint's (a classifier of
    another label count) is refused unless ``resize`` (``--ignore-mismatched-sizes``) starts it anew.

        model, parts = load_weights(Path("bert-mlm/"), config, build)  # BertForSequenceClassification
        parts  # {"new": ["classifier"], "unused": ["cls.predictions", "cls.seq_relationship"], "resized": []}
    """
    with torch.device("meta"):
        shell = build(config)
    cls = type(shell)
    del shell
    try:
        with _quiet():
            model, info = cls.from_pretrained(
                str(source),
                config=config,
                local_files_only=True,
                dtype=torch.float32,
                ignore_mismatched_sizes=True,
                output_loading_info=True,
            )
    except (OSError, RuntimeError, ValueError, KeyError) as e:
        why = " ".join(str(e).split())[:300]
        raise UserError(f"--hf-model {source}: transformers cannot load its weights as {cls.__name__} ({why})") from e
    mismatched = sorted(info.get("mismatched_keys") or ())
    if mismatched and not resize:
        key, have, want = mismatched[0]
        raise UserError(
            f"--hf-model {source}: {key} is {tuple(have)} in the checkpoint but {tuple(want)} for this data "
            f"({cls.__name__}, {len(mismatched)} such weight(s)); pass --ignore-mismatched-sizes to start them anew"
        )
    parts = loaded_parts(info.get("missing_keys") or (), info.get("unexpected_keys") or (), [k for k, *_ in mismatched])
    return model, parts


def loaded_parts(missing: Any, unexpected: Any, resized: Any) -> dict[str, list[str]]:
    """Weight names grouped by module (their first two name parts, parameter name dropped), sorted:
    what a loading made ``new``, left ``unused`` and ``resized``.

    >>> loaded_parts(["classifier.weight", "classifier.bias"], ["cls.predictions.bias",
    ...              "cls.predictions.transform.dense.weight"], [])
    {'new': ['classifier'], 'unused': ['cls.predictions'], 'resized': []}
    """

    def modules(keys: Any) -> list[str]:
        return sorted({".".join(str(k).split(".")[:-1][:2]) or str(k) for k in keys})

    return {"new": modules(missing), "unused": modules(unexpected), "resized": modules(resized)}


def task_ids(manifest: Mapping[str, Any]) -> dict[str, int]:
    """The token ids a packed dataset's task writes itself (pad, eos, [CLS]/[SEP]/[MASK]...), by name."""
    info = manifest.get("task_info") or {}
    out: dict[str, int] = {}
    for k, v in info.items():
        if k.endswith("_id") and isinstance(v, int) and not isinstance(v, bool):
            out[k] = v
    for name, i in (info.get("special_ids") or {}).items():
        if isinstance(i, int):
            out[str(name)] = i
    for k in ("pad_id", "eos_id"):
        v = manifest.get(k)
        if isinstance(v, int) and not isinstance(v, bool):
            out.setdefault(k, v)
    return out


def tokenizer_of(source: Path, opener: Callable[[Path], Any] | None = None) -> Any | None:
    """The tokenizer saved beside a checkpoint (seqpack's or Hugging Face's), opened by ``opener``
    (the task's: image-text opens the processor; default `seqpack.tokenizer.open_tokenizer`), or None."""
    if not source.is_dir() or not ((source / "tokenizer.json").is_file() or (source / "meta.json").is_file()):
        return None
    from seqpack.tokenizer import open_tokenizer

    try:
        return (opener or open_tokenizer)(source)
    except (ValueError, OSError):
        return None


def check_vocabulary(
    model: Any,
    manifest: Mapping[str, Any],
    *,
    source: str,
    data: str,
    vocab: int,
    opener: Callable[[Path], Any] | None = None,
    stream: bool = False,
) -> None:
    """Refuse, before any step, packed data the loaded model cannot read: a tokenizer vocabulary
    larger than the model's embeddings, a task token id (pad, eos, [CLS]...) past them, or (when the
    checkpoint's directory holds a tokenizer, opened by the task's ``opener``) data packed with
    another tokenizer. A loaded model's embeddings are never resized."""
    rows = int(model.get_input_embeddings().num_embeddings)
    fix = (
        f"pass --tokenizer {source} (the model's tokenizer)"
        if stream  # examples read as a stream are tokenized by --tokenizer as they come
        else f"re-pack {data} with --tokenizer {source} (the model's tokenizer)"
    )
    if vocab > rows:
        raise UserError(
            f"--hf-model {source}: its embeddings hold {rows:,} tokens, fewer than the {vocab:,} of the tokenizer "
            f"{data} was packed with; {fix}"
        )
    bad = {k: i for k, i in task_ids(manifest).items() if not 0 <= i < rows}
    if bad:
        k, i = next(iter(bad.items()))
        raise UserError(f"--hf-model {source}: the data's {k} {i} is past the model's {rows:,} embeddings; {fix}")
    tok = tokenizer_of(Path(source), opener)
    have = manifest.get("tokenizer_hash")
    if tok is not None and have and tok.fingerprint() != have:
        how = "is read with" if stream else "was packed with"
        raise UserError(f"--hf-model {source}: {data} {how} another tokenizer than the model's; {fix}")


def add_lora(
    model: Any, task_type: str | None, *, rank: int, targets: str | None, train_whole: Sequence[str] = ()
) -> Any:
    """``model`` with LoRA adapters of ``rank`` on the modules named ``targets`` (comma-separated;
    None: peft's default for the architecture, its attention projections), every other weight frozen
    but the modules ``train_whole`` names and a classifier (a task head new to the checkpoint trains whole). Returns the transformers
    model itself (its layers now hold the adapters), so seqpack's packed forward reads its class and
    config as before; the ``peft.PeftModel`` that saves the adapter is kept on it (`PEFT`)."""
    try:
        import peft
    except ImportError as e:
        raise UserError("--lora-rank needs peft: pip install 'seqpack[hf]' (or pip install peft)") from e
    import warnings

    # peft reads transformers' renamed is_gradient_checkpointing at every step; the run's lines say the rest
    warnings.filterwarnings("ignore", message="`is_gradient_checkpointing` is deprecated", category=FutureWarning)
    names = [t.strip() for t in targets.split(",") if t.strip()] if targets else None
    config = peft.LoraConfig(
        r=rank,
        lora_alpha=2 * rank,
        lora_dropout=0.0,
        target_modules=names,
        task_type=task_type,
        modules_to_save=list(train_whole) or None,
    )
    try:
        wrapped = peft.get_peft_model(model, config)
    except ValueError as e:
        why = " ".join(str(e).split())[:300]
        raise UserError(
            f"--lora-targets: peft cannot place adapters on {type(model).__name__} ({why}); name its modules, "
            "e.g. --lora-targets q_proj,v_proj"
        ) from e
    base = wrapped.get_base_model()
    base.__dict__[PEFT] = wrapped  # not a submodule: state_dict and .to() go through the base model
    return base


def peft_of(model: Any) -> Any | None:
    """The ``peft.PeftModel`` of a LoRA-wrapped model, or None."""
    return getattr(model, "__dict__", {}).get(PEFT)


def tokenizer_files(source: Path | None) -> dict[str, bytes]:
    """The tokenizer files ``RUN/model/`` gets: a Hugging Face tokenizer directory's, or seqpack's
    tokenizer exported (``tokenizer.json`` and its configs); none when ``source`` holds neither."""
    if source is None or not source.is_dir():
        return {}
    out = {n: (source / n).read_bytes() for n in TOKENIZER_FILES if (source / n).is_file()}
    tok = tokenizer_of(source)
    if tok is not None and hasattr(tok, "merges") and "tokenizer_config.json" not in out:  # seqpack's own
        from seqpack.tokenizer.hf_export import hf_directory_files, hf_tokenizer_json

        files = {"tokenizer.json": hf_tokenizer_json(tok), **hf_directory_files(tok, chat_template=None)}
        out = {n: t.encode("utf-8") for n, t in files.items()}
    return out if "tokenizer.json" in out else {}


@contextlib.contextmanager
def _portable_attention(model: Any) -> Any:
    """While saving: the config names ``sdpa`` in place of seqpack's own attention implementations,
    which a process without seqpack does not know (the weights are the same)."""
    configs = [m.config for m in model.modules() if hasattr(m, "config") and hasattr(m.config, "_attn_implementation")]
    saved = [(c, c._attn_implementation) for c in configs]
    try:
        for c, impl in saved:
            if isinstance(impl, str) and impl.startswith("seqpack"):
                c._attn_implementation = "sdpa"
        yield
    finally:
        for c, impl in saved:
            c._attn_implementation = impl


def run_tokenizer_files(hf_model: str, tokenizer: str | None, data: str) -> dict[str, bytes]:
    """What ``RUN/model/`` gets of the tokenizer: the --hf-model directory's (checked against the
    data when the weights were loaded), else a stream's --tokenizer (seqpack's exported), else the
    processor saved beside image-text rows (in ``data``)."""
    from seqpack.tasks.vision.packed import PROCESSOR

    hf = Path(hf_model)
    files = tokenizer_files(hf) if hf.is_dir() else {}
    if not files and tokenizer:
        files = tokenizer_files(Path(tokenizer))
    if not files:  # image-text rows keep the processor they were made with
        files = tokenizer_files(Path(data) / PROCESSOR)
    return files


def write_model_dir(model: Any, run_dir: Path, *, tokenizer: dict[str, bytes], merge: bool) -> Path:
    """``run_dir/model/``: the model (``save_pretrained``, safetensors) or, LoRA-wrapped, its adapter
    (and with ``merge`` the merged model in ``model/merged/``), plus the tokenizer files; written
    aside and put in place in one rename, like the rest of the run."""
    out = run_dir / MODEL_DIR
    remove_leftovers(run_dir, f".{MODEL_DIR}.tmp-*")
    remove_leftovers(run_dir, f".{MODEL_DIR}.old-*")
    tmp = Path(tempfile.mkdtemp(prefix=f".{MODEL_DIR}.tmp-", dir=run_dir))
    try:
        wrapped = peft_of(model)
        with _portable_attention(model), _quiet():
            if wrapped is None:
                model.save_pretrained(tmp, safe_serialization=True)
            else:
                wrapped.save_pretrained(tmp, safe_serialization=True)
                if merge:
                    import copy

                    merged = copy.deepcopy(wrapped).merge_and_unload()
                    merged.save_pretrained(tmp / "merged", safe_serialization=True)
                    del merged
        for d in [tmp] + ([tmp / "merged"] if (tmp / "merged").is_dir() else []):
            for name, data in tokenizer.items():
                (d / name).write_bytes(data)
        replace_directory(tmp, out, kind=MODEL_KIND)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def describe(spec: Mapping[str, Any]) -> str:
    """How a run's transformers model began, for its first line.

    >>> describe({"weights": "pretrained", "new": ["classifier"], "unused": ["cls.predictions"]})
    'loaded weights; new: classifier; unused: cls.predictions'
    """
    if spec.get("weights") != "pretrained":
        return "initialised from the config"
    lora = spec.get("lora")
    out = "loaded weights" + (f", LoRA rank {lora['rank']}" if lora else "")
    for k, say in (("new", "new"), ("resized", "started anew (size)"), ("unused", "unused")):
        names = list(spec.get(k) or ())
        if names:
            out += f"; {say}: " + ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
    return out
