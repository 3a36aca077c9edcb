"""Export to Hugging Face ``tokenizers``: the same BPE as a ``tokenizer.json``.

The file uses the ByteLevel pre-tokenizer (the GPT-2 regex, no prefix space),
the BPE model with our vocab and merges in order (``ignore_merges`` off, so
merge order decides, as in :meth:`Tokenizer.encode`), and every special token
as an added token. ``tokenizers.Tokenizer.from_file`` and
``transformers.PreTrainedTokenizerFast(tokenizer_file=...)`` load it.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from seqpack.tokenizer.byte_unicode import bytes_to_str

if TYPE_CHECKING:
    from seqpack.tokenizer.tokenizer import Tokenizer


def hf_tokenizer_dict(tok: Tokenizer) -> dict[str, Any]:
    special_ids = set(tok.special_ids.values())
    vocab: dict[str, int] = {}
    for i in sorted(tok.vocab):
        key = tok.vocab[i].decode("utf-8") if i in special_ids else bytes_to_str(tok.vocab[i])
        if key in vocab:
            raise ValueError(
                f"token {key!r} appears twice in the vocab (ids {vocab[key]} and {i}); "
                "tokenizer.json cannot hold duplicates"
            )
        vocab[key] = i
    byte_level = {"add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {
                "id": tok.special_ids[s], "content": s, "single_word": False, "lstrip": False,
                "rstrip": False, "normalized": False, "special": True,
            }
            for s in tok.special_tokens
        ],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", **byte_level},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", **byte_level},
        "model": {
            "type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
            "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
            "ignore_merges": False, "vocab": vocab,
            "merges": [[bytes_to_str(a), bytes_to_str(b)] for a, b in tok.merges],
        },
    }


def hf_tokenizer_json(tok: Tokenizer) -> str:
    return json.dumps(hf_tokenizer_dict(tok), ensure_ascii=False)


def build_hf_tokenizer(tok: Tokenizer) -> Any:
    """A ``tokenizers.Tokenizer`` equivalent to ``tok``."""
    from tokenizers import Tokenizer as HFTokenizer

    return HFTokenizer.from_str(hf_tokenizer_json(tok))
