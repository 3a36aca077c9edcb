"""Regenerates the packed-dataset goldens in ``tests/golden/packed/`` (never edit them by hand).

    python tests/golden/make_packed.py

Every task is packed from small, fixed inputs: from a plain and from a sharded token store
(clm, mlm), from records in memory and from a ``.jsonl`` file read in shards (classification,
multilabel, qa, chat), with ``.bin`` columns for one case. ``tests/pipeline/test_golden.py``
packs the same cases again and compares every file byte for byte, so a change of layout or
code that alters what is written cannot pass unnoticed.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
GOLDEN = HERE / "packed"
SPECIALS = ["<|endoftext|>", "[CLS]", "[SEP]", "[MASK]", "<|im_start|>", "<|im_end|>"]


def _api() -> tuple[Any, Any]:
    from seqpack.pipeline import PackConfig, build_packed_dataset

    return PackConfig, build_packed_dataset


def tokenizer() -> Any:
    from seqpack.tokenizer import Tokenizer

    return Tokenizer({i: bytes([i]) for i in range(256)}, [], special_tokens=SPECIALS)


def text_docs(n: int = 40, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    words = ["alpha", "beta", "gamma", "delta", "eps", "zeta"]
    docs = []
    for _ in range(n):
        sents = [
            " ".join(rng.choice(words, rng.integers(1, 12))).capitalize() + str(rng.choice([".", "!", "?"]))
            for _ in range(rng.integers(1, 6))
        ]
        docs.append(" ".join(sents))
    docs[3] = ""  # an empty document is counted, not packed
    return docs


def records(task: str) -> list[dict[str, Any]]:
    rng = np.random.default_rng(1)
    words = ["red", "green", "blue", "black", "white"]

    def text(lo: int, hi: int) -> str:
        return " ".join(rng.choice(words, int(rng.integers(lo, hi))))

    if task == "classification":
        return [{"text": text(1, 8), "text_pair": text(1, 4), "label": ["neg", "pos", "mid"][i % 3]} for i in range(30)]
    if task == "multilabel":
        return [
            {"text": text(1, 6), "label": sorted({str(w) for w in rng.choice(words, int(rng.integers(0, 3)))})}
            for i in range(30)
        ]
    out: list[dict[str, Any]] = []
    if task == "qa":
        for i in range(20):
            ctx = text(3, 16) + f" answer{i} end."
            out.append(
                {
                    "question": f"where is {i}?",
                    "context": ctx,
                    "answers": {"text": [f"answer{i}"], "answer_start": [ctx.index(f"answer{i}")]},
                }
            )
        return out
    if task == "chat":
        for _ in range(25):
            turns = int(rng.integers(1, 4))
            msgs = []
            for _ in range(turns):
                msgs += [{"role": "user", "content": text(1, 10)}, {"role": "assistant", "content": text(1, 15)}]
            out.append({"messages": msgs})
        return out
    raise KeyError(task)


#: case name -> (task, source kind, PackConfig fields, build options)
CASES: dict[str, tuple[str, str, dict[str, Any], dict[str, Any]]] = {
    "clm-store": ("clm", "store", {"max_len": 64}, {"shard_packs": 20}),
    "clm-sharded": ("clm", "sharded", {"max_len": 64}, {"shard_packs": 20}),
    "clm-sharded-bin": (
        "clm",
        "sharded",
        {"max_len": 48, "algorithm": "lpfhp"},
        {"shard_packs": 30, "export_bin": True},
    ),
    "mlm-store": ("mlm", "store", {"max_len": 64, "seed": 3}, {}),
    "mlm-sharded": ("mlm", "sharded", {"max_len": 64, "seed": 3}, {"shard_packs": 30}),
    "classification-records": ("classification", "records", {"max_len": 48, "text_pair_field": "text_pair"}, {}),
    "classification-jsonl": (
        "classification",
        "jsonl",
        {"max_len": 48, "text_pair_field": "text_pair"},
        {"shard_examples": 7, "shard_packs": 4},
    ),
    "multilabel-jsonl": ("multilabel", "jsonl", {"max_len": 24}, {"shard_examples": 9}),
    "qa-records": ("qa", "records", {"max_len": 128, "doc_stride": 32}, {}),
    "qa-jsonl": ("qa", "jsonl", {"max_len": 128, "doc_stride": 32}, {"shard_examples": 6}),
    "chat-records": ("chat", "records", {"max_len": 160, "chat_template": "chatml"}, {}),
    "chat-jsonl": (
        "chat",
        "jsonl",
        {"max_len": 112, "chat_template": "chatml", "overflow": "truncate"},
        {"shard_examples": 8, "shard_packs": 3},
    ),
}


def source_of(kind: str, task: str, work: Path, tok: Any) -> Any:
    from seqpack.pipeline import build_sharded_store
    from seqpack.store import build_store

    if kind == "store":
        return build_store(text_docs(), tok, work / "store").path
    if kind == "sharded":
        return build_sharded_store(text_docs(), tok, work / "sharded", shard_chars=600).path
    rows = records(task)
    if kind == "records":
        return rows
    p = work / f"{task}.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return p


def build(case: str, out: Path, work: Path, *, engine: Any = None, **more: Any) -> dict[str, Any]:
    """Pack ``case`` into ``out`` (``work``: a scratch directory for its inputs); ``more``: other
    options of ``build_packed_dataset``."""
    PackConfig, build_packed_dataset = _api()
    task, kind, fields, options = CASES[case]
    tok = tokenizer()
    work.mkdir(parents=True, exist_ok=True)
    src = source_of(kind, task, work, tok)
    if engine is not None:
        options = {**options, "engine": engine}
    options = {**options, **more}
    from seqpack.pipeline import OutputOptions

    names = set(OutputOptions.__dataclass_fields__)  # the output options go in one OutputOptions
    output = OutputOptions(**{k: options.pop(k) for k in list(options) if k in names})
    return build_packed_dataset(src, tok, out, PackConfig.for_task(task, **fields), output=output, **options)


def files_of(d: Path) -> list[str]:
    return sorted(p.relative_to(d).as_posix() for p in d.rglob("*") if p.is_file())


def main() -> None:
    import tempfile

    if GOLDEN.exists():
        shutil.rmtree(GOLDEN)
    with tempfile.TemporaryDirectory() as tmp:
        for case in CASES:
            build(case, GOLDEN / case, Path(tmp) / case)
            print(f"{case}: {len(files_of(GOLDEN / case))} files")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
