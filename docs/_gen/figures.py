"""The README's picture, made from the stored results: ``python docs/_gen/figures.py``.

Writes ``docs/assets/speedup.svg`` and ``docs/assets/speedup.json`` (the numbers it plotted, each
with the result file it came from); ``tests/docs/test_docs.py`` checks that the JSON still equals
what the results say, so the picture cannot drift from its evidence.
"""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
ASSETS = ROOT / "docs" / "assets"


def _jsonl(name: str) -> list[dict]:
    return [json.loads(ln) for ln in (RESULTS / name).read_text(encoding="utf-8").splitlines() if ln.strip()]


def _one(records: list[dict], **match: object) -> dict:
    found = [r for r in records if all(r.get(k) == v for k, v in match.items())]
    assert len(found) == 1, f"{len(found)} records match {match}"
    return found[0]


def figure_data() -> list[dict]:
    """One bar per comparison: the measured speed-up, and where packing sets it, the padding removed
    (the packing factor, the most that removing padding can give)."""
    bert = _one(_jsonl("gpu_h200_bert.jsonl"), size="base", attention="varlen")
    gpt = _one(
        _jsonl("gpu_h100_varlen.jsonl"),
        stage="3 + fused cross-entropy (Triton)",
        model="gpt",
        head="all",
        attention="varlen",
    )
    dpo = json.loads((RESULTS / "preference_h200.json").read_text(encoding="utf-8"))["by_max_len"]["4096"]["ratios"]
    sft = json.loads((RESULTS / "trl_sft_h200_1b.json").read_text(encoding="utf-8"))["speedup_over_trl"]
    r = lambda x: round(float(x), 3)  # noqa: E731
    return [
        {
            "label": "BERT-base, Wikipedia lengths at 512 (H200)\npacked vs padded",
            "speedup": r(bert["realized_speedup"]),
            "factor": r(bert["packing_factor"]),
            "source": "gpu_h200_bert.jsonl",
        },
        {
            "label": "GPT (768/12), 2048, ~8 documents a row (H100)\npacked vs padded",
            "speedup": r(gpt["realized_speedup"]),
            "factor": r(gpt["packing_factor"]),
            "source": "gpu_h100_varlen.jsonl",
        },
        {
            "label": "DPO, ~1B Llama, 4096 (H200)\nshared prompt vs TRL DPOTrainer",
            "speedup": r(dpo["llama/shared-prefix"]["speedup"]),
            "factor": None,
            "source": "preference_h200.json",
        },
        {
            "label": "Chat SFT, ~1B Llama, 2048 (H200)\nPackedSFTTrainer vs TRL's own packing",
            "speedup": r(sft["seqpack_compiled"]["tokens_per_s"]),
            "factor": None,
            "source": "trl_sft_h200_1b.json",
        },
    ]


def draw(data: list[dict], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["svg.hashsalt"] = "seqpack"  # stable ids: the file changes only with its numbers
    matplotlib.rcParams["svg.fonttype"] = "none"  # text as text: smaller, and the numbers can be read back
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 3.6))
    ys = list(range(len(data)))[::-1]
    ax.barh(ys, [d["speedup"] for d in data], color="#3b6ea8", height=0.55, label="measured speed-up")
    for y, d in zip(ys, data):
        if d["factor"]:
            ax.plot([d["factor"]], [y], marker="|", markersize=22, color="#d2691e", mew=2.5)
        ax.text(max(d["speedup"], d["factor"] or 0) + 0.1, y, f"{d['speedup']:.2f}x", va="center", fontsize=9)
    ax.plot(
        [], [], marker="|", markersize=12, color="#d2691e", mew=2.5, ls="", label="padding removed (packing factor)"
    )
    ax.set_yticks(ys, [d["label"] for d in data], fontsize=8)
    ax.axvline(1.0, color="#888", lw=0.8)
    ax.set_xlabel("times as fast (1 = the baseline)")
    ax.set_xlim(0, max(max(d["speedup"], d["factor"] or 0) for d in data) * 1.12)
    ax.legend(loc="lower right", fontsize=8, frameon=False)
    ax.spines[["top", "right"]].set_visible(False)
    fig.tight_layout()
    fig.savefig(out, format="svg", metadata={"Date": None})
    plt.close(fig)


def main() -> None:
    ASSETS.mkdir(parents=True, exist_ok=True)
    data = figure_data()
    (ASSETS / "speedup.json").write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    draw(data, ASSETS / "speedup.svg")


if __name__ == "__main__":
    main()
