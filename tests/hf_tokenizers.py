"""Hugging Face tokenizer directories built locally (no download), as ``save_pretrained`` writes them."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

WORDS = (
    "the a cat dog sat on mat why how what is are you I we they can help with code python élan naïve café über straße"
).split()
#: ChatML as most chat tokenizers ship it: no generation blocks
PLAIN_CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
    "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def texts(n: int = 200, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choices(WORDS, k=rng.randint(3, 25))) for _ in range(n)]


def conversations(n: int, seed: int = 0, *, max_turns: int = 4, max_words: int = 40) -> list[dict[str, Any]]:
    """Records ``{"messages": [...]}``: an optional system prompt, then user/assistant exchanges."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        msgs = [{"role": "system", "content": "be brief"}] if rng.random() < 0.3 else []
        for _ in range(rng.randint(1, max_turns)):
            msgs.append({"role": "user", "content": " ".join(rng.choices(WORDS, k=rng.randint(1, max_words)))})
            msgs.append({"role": "assistant", "content": " ".join(rng.choices(WORDS, k=rng.randint(1, max_words)))})
        out.append({"messages": msgs})
    return out


def write_jsonl(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def bpe_tokenizer_dir(path: Path, *, chat_template: str | None = PLAIN_CHATML, vocab_size: int = 400) -> Path:
    """A byte-level BPE chat tokenizer (GPT-2/Qwen style) trained here, saved with transformers."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(texts(), trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>", chat_template=chat_template
    )
    fast.save_pretrained(str(path))
    return path


def wordpiece_tokenizer_dir(path: Path) -> Path:
    """A lower-casing, accent-stripping WordPiece tokenizer (BERT style): ids do not spell the text back."""
    from tokenizers import (
        Tokenizer,
        decoders,
        models,
        normalizers,
        pre_tokenizers,
        trainers,
    )
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True, strip_accents=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    tok.train_from_iterator(
        [t.upper() for t in texts()],
        trainers.WordPieceTrainer(vocab_size=300, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]),
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
    )
    fast.save_pretrained(str(path))
    return path


LLAMA: dict[str, Any] = {
    "model_type": "llama",
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 1024,
}


def llama_config(path: Path) -> Path:
    """A tiny Llama ``config.json`` (built from scratch by ``seqpack train --hf-model``; no download)."""
    path.write_text(json.dumps(LLAMA), encoding="utf-8")
    return path


def chat_dataset(root: Path, *, n: int = 120, max_len: int = 256, seed: int = 0) -> tuple[Path, Path]:
    """``(packed chat dataset, HF tokenizer dir)``: conversations packed with the tokenizer's own template."""
    from seqpack.pipeline import PackConfig, build_packed_dataset
    from seqpack.tokenizer import open_tokenizer

    tok_dir = bpe_tokenizer_dir(root / "tok")
    records = conversations(n, seed=seed)
    build_packed_dataset(records, open_tokenizer(tok_dir), root / "sft", PackConfig.for_task("chat", max_len=max_len))
    return root / "sft", tok_dir


def preference_records(
    n: int, seed: int = 0, *, prompt_words: tuple[int, int] = (3, 20), response_words: tuple[int, int] = (1, 15)
) -> list[dict[str, Any]]:
    """String pairs ``{"prompt", "chosen", "rejected"}`` (chosen != rejected)."""
    rng = random.Random(seed)
    say = lambda lo_hi: " ".join(rng.choices(WORDS, k=rng.randint(*lo_hi)))  # noqa: E731
    out: list[dict[str, Any]] = []
    while len(out) < n:
        c, r = " " + say(response_words), " " + say(response_words)
        if c != r:
            out.append({"prompt": "Q: " + say(prompt_words), "chosen": c, "rejected": r})
    return out


ENCODER_WORDS = (
    "the a cat dog sat on mat Paris London Alice Bob went to lives in visited yesterday "
    "unbelievable reorganisation naïve café"
).split()


def _encoder_texts(n: int = 200, seed: int = 1) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choices(ENCODER_WORDS, k=rng.randint(3, 15))) for _ in range(n)]


def bert_tokenizer_dir(path: Path, *, vocab_size: int = 120) -> Path:
    """A WordPiece tokenizer with BERT's post-processor (``[CLS] A [SEP] B [SEP]``, B of type 1) and
    specials, saved with transformers: ``tokenizer(text)`` adds ``[CLS]``/``[SEP]`` itself."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok.train_from_iterator(_encoder_texts(), trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=specials))
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls), ("[SEP]", sep)]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
    )
    fast.save_pretrained(str(path))
    return path


def roberta_tokenizer_dir(path: Path, *, vocab_size: int = 400, mask: bool = True) -> Path:
    """A byte-level BPE with RoBERTa's post-processor (``<s> A </s></s> B </s>``) and specials
    ``<s>``, ``<pad>``, ``</s>``, ``<unk>``, ``<mask>`` (ids 0..4), saved with transformers;
    ``mask=False`` declares no mask token."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(_encoder_texts(), trainer)
    tok.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
    named = {
        "bos_token": "<s>",
        "eos_token": "</s>",
        "cls_token": "<s>",
        "sep_token": "</s>",
        "unk_token": "<unk>",
        "pad_token": "<pad>",
        **({"mask_token": "<mask>"} if mask else {}),
    }
    PreTrainedTokenizerFast(tokenizer_object=tok, **named).save_pretrained(str(path))
    return path
