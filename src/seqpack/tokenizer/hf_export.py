"""Export to Hugging Face: the same BPE as a ``tokenizer.json``, and a complete tokenizer directory.

The file uses the ByteLevel pre-tokenizer (the GPT-2 regex, no prefix space),
the BPE model with our vocab and merges in order (``ignore_merges`` off, so
merge order decides, as in `Tokenizer.encode`), and every special token
as an added token. ``tokenizers.Tokenizer.from_file`` and
``transformers.PreTrainedTokenizerFast(tokenizer_file=...)`` load it.
"""

from __future__ import annotations

import json

from seqpack.errors import UserError
from seqpack.tokenizer.byte_unicode import gpt2_strings, string_ids

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (a cost in every start-up)
if TYPE_CHECKING:
    from typing import Any

    import tokenizers

    from seqpack.tokenizer.tokenizer import Tokenizer


#: every token's string (id -> string) and every merge's strings: `seqpack.tokenizer.byte_unicode.gpt2_strings`
Strings = tuple[dict[int, str], list[tuple[str, str]]]


def hf_vocab(tok: Tokenizer, strings: dict[int, str] | None = None) -> dict[str, int]:
    """Token strings (GPT-2's byte-to-unicode form; special tokens as themselves) -> ids.
    ``strings``: the tokens' GPT-2 strings, where the caller has them."""
    if strings is None:
        strings = gpt2_strings(tok.vocab, [])[0]
    strings = strings | {i: tok.vocab[i].decode("utf-8") for i in tok.special_ids.values()}
    return string_ids(strings, tok.vocab, "tokenizer.json")


def build_hf_tokenizer(tok: Tokenizer) -> tokenizers.Tokenizer:
    """A ``tokenizers.Tokenizer`` equivalent to ``tok``, built through the ``tokenizers`` API."""
    from tokenizers import AddedToken, decoders, models, pre_tokenizers
    from tokenizers import Tokenizer as HFTokenizer

    strings, merges = gpt2_strings(tok.vocab, tok.merges)
    bpe = models.BPE(
        vocab=hf_vocab(tok, strings),
        merges=merges,
        dropout=None,
        unk_token=None,
        fuse_unk=False,
        byte_fallback=False,
        ignore_merges=False,
    )
    hf = HFTokenizer(bpe)
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)
    hf.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)  # type: ignore[call-arg]  # tokenizers' stub omits these keywords
    hf.add_special_tokens(
        [
            AddedToken(s, single_word=False, lstrip=False, rstrip=False, normalized=False, special=True)
            for s in tok.special_tokens
        ]
    )
    return hf


def hf_tokenizer_json(tok: Tokenizer, *, strings: Strings | None = None) -> str:
    """``tokenizer.json``'s text, written directly: the bytes ``build_hf_tokenizer(tok).to_str()`` gives
    (tested against it), without building the tokenizer or importing ``tokenizers``.

        >>> from seqpack.tokenizer import Tokenizer
        >>> tok = Tokenizer({**{i: bytes([i]) for i in range(256)}, 256: b" a"}, [(b" ", b"a")], [])
        >>> hf_tokenizer_json(tok)[-32:]
        '"Ġa":256},"merges":[["Ġ","a"]]}}'

    ``strings``: `gpt2_strings` of ``tok``, where the caller has it.
    """
    vocab, merges = strings if strings is not None else gpt2_strings(tok.vocab, tok.merges)
    return json.dumps(_document(tok, hf_vocab(tok, vocab), merges), ensure_ascii=False, separators=(",", ":"))


#: how the text of a document with an empty vocab and merges ends (they close the model, which closes it)
_TAIL = ',"vocab":{},"merges":[]}}'


def hf_tokenizer_json_from(tok: Tokenizer, vocab: bytes, merges: bytes) -> bytes:
    """`hf_tokenizer_json`'s text as UTF-8, its model's vocab and merges given as JSON text (what
    ``CoreBPE.tokenizer_texts`` writes): the rest is a few hundred bytes of ``json.dumps``.

        >>> from seqpack.tokenizer import Tokenizer
        >>> tok = Tokenizer({i: bytes([i]) for i in range(256)}, [], [])
        >>> hf_tokenizer_json_from(tok, b'{"a":97}', b"[]")[-30:]
        b'"vocab":{"a":97},"merges":[]}}'
    """
    text = json.dumps(_document(tok, {}, []), ensure_ascii=False, separators=(",", ":"))
    assert text.endswith(_TAIL), "vocab and merges close the document"
    return text[: -len(_TAIL)].encode("utf-8") + b',"vocab":' + vocab + b',"merges":' + merges + b"}}"


def _document(tok: Tokenizer, vocab: dict[str, int], merges: list[tuple[str, str]]) -> dict[str, Any]:
    """``tokenizer.json`` as a dict (its keys in the order ``tokenizers`` writes them)."""
    added = [
        {
            "id": i,
            "content": s,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": True,
        }
        for s, i in sorted(tok.special_ids.items(), key=lambda item: item[1])
    ]
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    model = {
        "type": "BPE",
        "dropout": None,
        "unk_token": None,
        "continuing_subword_prefix": None,
        "end_of_word_suffix": None,
        "fuse_unk": False,
        "byte_fallback": False,
        "ignore_merges": False,
        "vocab": vocab,
        "merges": merges,
    }
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": byte_level,
        "post_processor": None,
        "decoder": {
            **byte_level,
            "add_prefix_space": True,
        },  # what tokenizers writes for this decoder (it ignores the flag)
        "model": model,
    }


#: ChatML's special tokens: the default chat template of an exported directory writes them
CHATML_TOKENS = ("<|im_start|>", "<|im_end|>")
#: ChatML with a generation block around each assistant turn's content and end token (what
#: ``apply_chat_template(..., return_assistant_tokens_mask=True)`` and TRL's ``assistant_only_loss`` read)
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' }}"
    "{% if message['role'] == 'assistant' %}"
    "{% generation %}{{ message['content'] + '<|im_end|>' }}{% endgeneration %}{{ '\\n' }}"
    "{% else %}{{ message['content'] + '<|im_end|>\\n' }}{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def hf_special_tokens(special_tokens: list[str]) -> dict[str, str]:
    """``bos_token``, ``eos_token`` and ``pad_token`` of an exported directory, from the special tokens.

    ``<|endoftext|>`` (GPT-2's one token) is bos and pad; eos is ``<|im_end|>`` when there is one (a chat
    model stops at the end of its turn), else ``<|endoftext|>``, else the first special token. BERT's
    ``[CLS]``, ``[SEP]`` and ``[MASK]``, when trained in, are its cls, sep and mask tokens (the encoder
    tasks write them: `seqpack.tasks.specials`).

    >>> hf_special_tokens(["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    {'bos_token': '<|endoftext|>', 'eos_token': '<|im_end|>', 'pad_token': '<|endoftext|>'}
    >>> hf_special_tokens(["<|endoftext|>", "[CLS]", "[SEP]"])["cls_token"]
    '[CLS]'
    """
    if not special_tokens:
        raise UserError(
            "a Hugging Face tokenizer directory needs a special token for eos/pad; pass --special-token '<|endoftext|>'"
        )
    text = "<|endoftext|>" if "<|endoftext|>" in special_tokens else special_tokens[0]
    eos = "<|im_end|>" if "<|im_end|>" in special_tokens else text
    bert = {
        k: t
        for k, t in (("cls_token", "[CLS]"), ("sep_token", "[SEP]"), ("mask_token", "[MASK]"))
        if t in special_tokens
    }
    return {"bos_token": text, "eos_token": eos, "pad_token": text, **bert}


def hf_directory_files(tok: Tokenizer, *, chat_template: str | None) -> dict[str, str]:
    """``tokenizer_config.json`` and ``special_tokens_map.json`` that make a directory holding
    ``tokenizer.json`` load completely with ``transformers.AutoTokenizer.from_pretrained``."""
    specials = hf_special_tokens(list(tok.special_tokens))
    config: dict[str, Any] = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        **specials,
        "model_max_length": 1_000_000_000_000_000_019_884_624_838_656,  # transformers' "no limit"
        "clean_up_tokenization_spaces": False,
        "added_tokens_decoder": {
            str(tok.special_ids[s]): {
                "content": s,
                "special": True,
                "normalized": False,
                "lstrip": False,
                "rstrip": False,
                "single_word": False,
            }
            for s in tok.special_tokens
        },
    }
    if chat_template is not None:
        config["chat_template"] = chat_template
    return {
        "tokenizer_config.json": json.dumps(config, indent=2, ensure_ascii=False) + "\n",
        "special_tokens_map.json": json.dumps(specials, indent=2) + "\n",
    }
