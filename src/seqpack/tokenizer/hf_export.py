"""Export to Hugging Face ``tokenizers``: the same BPE as a ``tokenizer.json``.

The file uses the ByteLevel pre-tokenizer (the GPT-2 regex, no prefix space),
the BPE model with our vocab and merges in order (``ignore_merges`` off, so
merge order decides, as in :meth:`Tokenizer.encode`), and every special token
as an added token. ``tokenizers.Tokenizer.from_file`` and
``transformers.PreTrainedTokenizerFast(tokenizer_file=...)`` load it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from seqpack.tokenizer.byte_unicode import bytes_to_str

if TYPE_CHECKING:
    from seqpack.tokenizer.tokenizer import Tokenizer


def hf_vocab(tok: Tokenizer) -> dict[str, int]:
    """Token strings (GPT-2's byte-to-unicode form; special tokens as themselves) -> ids."""
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
    return vocab


def build_hf_tokenizer(tok: Tokenizer) -> Any:
    """A ``tokenizers.Tokenizer`` equivalent to ``tok``, built through the ``tokenizers`` API."""
    from tokenizers import AddedToken, decoders, models, pre_tokenizers
    from tokenizers import Tokenizer as HFTokenizer

    merges = [(bytes_to_str(a), bytes_to_str(b)) for a, b in tok.merges]
    bpe = models.BPE(vocab=hf_vocab(tok), merges=merges, dropout=None, unk_token=None, fuse_unk=False,
                     byte_fallback=False, ignore_merges=False)
    hf = HFTokenizer(bpe)
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)
    hf.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)
    hf.add_special_tokens([AddedToken(s, single_word=False, lstrip=False, rstrip=False, normalized=False, special=True)
                           for s in tok.special_tokens])
    return hf


def hf_tokenizer_json(tok: Tokenizer) -> str:
    return build_hf_tokenizer(tok).to_str()  # type: ignore[no-any-return]
