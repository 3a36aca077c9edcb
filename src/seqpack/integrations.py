"""Every entry point for Hugging Face transformers, datasets and TRL, in one place.

The code lives in the layer it belongs to (a tokenizer beside the tokenizers, a model adapter beside
the models, a trainer beside the train loop), and each name loads on first use, so importing this
module costs nothing until a name is used::

    from seqpack.integrations import PackedSFTTrainer, hf_dataset, open_tokenizer, packed_forward

| name | what it is | its home |
|---|---|---|
| `open_tokenizer`, `HFTokenizer` | a tokenizer directory (seqpack's or a transformers one) | `seqpack.tokenizer` |
| `pack_dataset` | the drop-in for TRL's `pack_dataset`, packed by seqpack's plan | `seqpack.hf` |
| `hf_dataset` | a packed directory as a `datasets.Dataset`, every column | `seqpack.data` |
| `trl_examples` | a packed directory as TRL's padding-free examples | `seqpack.data.trl` |
| `packed_forward` | a transformers model on packed rows (masks, or seqpack's attention) | `seqpack.nn.hf_adapter` |
| `attach_packed_attention`, `register_packed_attention` | the `seqpack_packed` attention | `seqpack.nn.hf_attention` |
| `PackedCollator` | `transformers.Trainer`'s collator for packed rows | `seqpack.nn.hf_collator` |
| `PackedSFTTrainer`, `PackedDPOTrainer`, `PackedGRPOTrainer` | TRL's trainers on packed rows | `seqpack.train` |
| `TRL_RANGE` | the TRL versions those trainers are made for | `seqpack.train.trl_support` |
"""

from __future__ import annotations

from seqpack._lazy import keep, listing

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from types import ModuleType
    from typing import Any

    from seqpack.data.hf_rows import hf_dataset
    from seqpack.data.trl import trl_examples
    from seqpack.hf import pack_dataset
    from seqpack.nn.hf_adapter import packed_forward
    from seqpack.nn.hf_attention import attach_packed_attention, register_packed_attention
    from seqpack.nn.hf_collator import PackedCollator
    from seqpack.tokenizer.hf_tokenizer import HFTokenizer, open_tokenizer
    from seqpack.train.trl_dpo import PackedDPOTrainer
    from seqpack.train.trl_grpo import PackedGRPOTrainer
    from seqpack.train.trl_sft import PackedSFTTrainer
    from seqpack.train.trl_support import TRL_RANGE

__all__ = [
    "open_tokenizer",
    "HFTokenizer",
    "pack_dataset",
    "hf_dataset",
    "trl_examples",
    "packed_forward",
    "attach_packed_attention",
    "register_packed_attention",
    "PackedCollator",
    "PackedSFTTrainer",
    "PackedDPOTrainer",
    "PackedGRPOTrainer",
    "TRL_RANGE",
]


def __getattr__(name: str) -> Any:
    module: ModuleType
    if name in ("open_tokenizer", "HFTokenizer"):
        from seqpack.tokenizer import hf_tokenizer as module
    elif name == "pack_dataset":
        from seqpack import hf as module
    elif name == "hf_dataset":
        from seqpack.data import hf_rows as module
    elif name == "trl_examples":
        from seqpack.data import trl as module
    elif name == "packed_forward":
        from seqpack.nn import hf_adapter as module
    elif name in ("attach_packed_attention", "register_packed_attention"):
        from seqpack.nn import hf_attention as module
    elif name == "PackedCollator":
        from seqpack.nn import hf_collator as module
    elif name == "PackedSFTTrainer":
        from seqpack.train import trl_sft as module
    elif name == "PackedDPOTrainer":
        from seqpack.train import trl_dpo as module
    elif name == "PackedGRPOTrainer":
        from seqpack.train import trl_grpo as module
    elif name == "TRL_RANGE":
        from seqpack.train import trl_support as module
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return keep(globals(), module, name)


def __dir__() -> list[str]:
    return listing(globals(), __all__)
