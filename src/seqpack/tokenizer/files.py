"""Tokenizer files: GPT-2 ``vocab.json`` + ``merges.txt``, HF ``tokenizer.json``, ``meta.json``.

Both GPT-2 files write bytes through GPT-2's byte-to-unicode map, so a merge
line is two space-free strings: ``"Ġ t"`` is the merge ``(b" ", b"t")``.
Corrupt input raises ``ValueError`` naming the file (and line or key).
"""

from __future__ import annotations

import json
import os
from bisect import bisect_left
from collections.abc import Callable
from pathlib import Path

from seqpack._atomic import OutputKind, atomic_directory
from seqpack._resources import collector_paused
from seqpack.errors import UserError
from seqpack.tokenizer.byte_unicode import (
    gpt2_strings,
    str_to_bytes,
    string_ids,
    strs_to_bytes,
)

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (a cost in every start-up)
if TYPE_CHECKING:
    from seqpack.tokenizer.tokenizer import Tokenizer

FORMAT_VERSION = 1
FILES = ("vocab.json", "merges.txt", "tokenizer.json", "meta.json")
FORMAT = "seqpack-tokenizer"
#: what a tokenizer directory is: `--overwrite` replaces only these
OUTPUT = OutputKind("tokenizer", ("meta.json", "format", FORMAT))


def _read_text(path: str | os.PathLike[str]) -> str:
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{p}: no such file")
    try:
        return p.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise UserError(f"{p}: invalid UTF-8 at byte offset {e.start}") from e


def _decode_token(text: str, where: str) -> bytes:
    try:
        return str_to_bytes(text)
    except KeyError as e:
        raise UserError(f"{where}: {text!r} holds {e.args[0]!r}, which is not in GPT-2's byte-to-unicode map") from e


def _decode_tokens(texts: list[str], where: Callable[[int], str]) -> list[bytes]:
    """`_decode_token` of each text, in one pass of the codec; ``where(k)`` names text k in an error."""
    try:
        return strs_to_bytes(texts)
    except KeyError:  # the first text that fails, named
        for k, t in enumerate(texts):
            _decode_token(t, where(k))
        raise


@collector_paused()  # tens of thousands of new containers, no cycle among them
def read_vocab(path: str | os.PathLike[str]) -> dict[int, bytes]:
    """``{id: bytes}`` from a GPT-2 ``vocab.json`` (``{token string: id}``)."""
    text = _read_text(path)
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as e:
        raise UserError(f"{path}: line {e.lineno}: not valid JSON ({e.msg})") from e
    if not isinstance(raw, dict) or not raw:
        raise UserError(f"{path}: expected a non-empty JSON object {{token: id}}")
    ids = list(raw.values())
    if not all(type(i) is int and i >= 0 for i in ids):
        tok, idx = next((t, i) for t, i in raw.items() if type(i) is not int or i < 0)
        raise UserError(f"{path}: token {tok!r} has id {idx!r}; ids must be ints >= 0")
    tokens = list(raw)
    vocab = dict(zip(ids, _decode_tokens(tokens, lambda k: f"{path}: token")))
    if len(vocab) < len(ids):
        seen: set[int] = set()
        idx = next(i for i in ids if i in seen or seen.add(i))  # type: ignore[func-returns-value]  # set.add returns None: the idiom finds the first repeat
        raise UserError(f"{path}: id {idx} is used twice")
    return vocab


@collector_paused()
def read_merges(path: str | os.PathLike[str]) -> list[tuple[bytes, bytes]]:
    """Merges from a GPT-2 ``merges.txt`` (optional ``#version`` first line)."""
    lines = _read_text(path).split("\n")
    first = 1 if lines and lines[0].startswith("#version") else 0
    numbers = [n for n in range(first, len(lines)) if lines[n].rstrip("\r")]  # (0-based) lines that hold a merge
    pairs = [lines[n].rstrip("\r").split(" ") for n in numbers]
    for n, parts in zip(numbers, pairs):
        if len(parts) != 2 or not parts[0] or not parts[1]:
            raise UserError(
                f"{path}: line {n + 1}: expected two tokens separated by one space, got {lines[n].rstrip(chr(13))!r}"
            )
    halves = _decode_tokens([h for parts in pairs for h in parts], lambda k: f"{path}: line {numbers[k // 2] + 1}")
    return list(zip(halves[::2], halves[1::2]))


def _json_lines(obj: dict[str, int]) -> str:
    """``json.dumps(obj, ensure_ascii=False, indent=0)`` (one entry a line: GPT-2's ``vocab.json``), through
    json's C encoder, which an ``indent`` turns off.

    >>> _json_lines({"a": 0, '"': 1})
    '{\\n"a": 0,\\n"\\\\"": 1\\n}'
    """
    if not obj:
        return "{}"
    return "{\n" + json.dumps(obj, ensure_ascii=False, separators=(",\n", ": "))[1:-1] + "\n}"


def tokenizer_file_texts(tok: Tokenizer) -> dict[str, bytes]:
    """``vocab.json``, ``merges.txt`` and ``tokenizer.json`` as UTF-8 bytes, from the compiled writer
    (``CoreBPE.tokenizer_texts``; `_file_texts_oracle`, slower,
    makes the same bytes and is tested against it). A vocabulary that a file cannot hold (two ids
    with one token; a special token whose text is another token's GPT-2 string, in ``tokenizer.json``)
    goes to the oracle, which says what is wrong."""
    from seqpack.tokenizer.core import CoreBPE
    from seqpack.tokenizer.hf_export import hf_tokenizer_json_from

    ids = sorted(tok.vocab)
    tokens = [tok.vocab[i] for i in ids]
    specials = {i: tok.vocab[i].decode("utf-8") for i in tok.special_ids.values()}  # written as their text
    if len(set(tokens)) < len(tokens) or any(_is_gpt2_string_of_another(tok, i, text) for i, text in specials.items()):
        return _file_texts_oracle(tok)
    special = [(bisect_left(ids, i), json.dumps(text, ensure_ascii=False)) for i, text in specials.items()]
    vocab, merges, hf_vocab, hf_merges = CoreBPE.tokenizer_texts(ids, tokens, tok.merges, special)
    return {
        "vocab.json": vocab,
        "merges.txt": merges,
        "tokenizer.json": hf_tokenizer_json_from(tok, hf_vocab, hf_merges),
    }


def _is_gpt2_string_of_another(tok: Tokenizer, special_id: int, text: str) -> bool:
    try:
        raw = str_to_bytes(text)
    except KeyError:  # a character outside GPT-2's map: no token's string
        return False
    other = tok.token_to_id(raw)
    return other is not None and other != special_id


def _file_texts_oracle(tok: Tokenizer) -> dict[str, bytes]:
    """`tokenizer_file_texts` in Python: each token's GPT-2 string, then ``json.dumps``."""
    from seqpack.tokenizer.hf_export import hf_tokenizer_json

    strings, merges = gpt2_strings(tok.vocab, tok.merges)  # every token made a string once, for all three files
    vocab = string_ids(strings, tok.vocab, "vocab.json")
    lines = ["#version: 0.2"] + [f"{a} {b}" for a, b in merges]
    return {
        "vocab.json": _json_lines(vocab).encode("utf-8"),
        "merges.txt": ("\n".join(lines) + "\n").encode("utf-8"),
        "tokenizer.json": hf_tokenizer_json(tok, strings=(strings, merges)).encode("utf-8"),
    }


@collector_paused()
def save_tokenizer(
    tok: Tokenizer,
    directory: str | os.PathLike[str],
    *,
    overwrite: bool = False,
    hf: bool = False,
    chat_template: str | None = None,
) -> None:
    """Write the four files into ``directory`` atomically (meta.json last); with ``hf`` also
    ``tokenizer_config.json`` (bos/eos/pad, ``chat_template``) and ``special_tokens_map.json``, so that
    ``transformers.AutoTokenizer.from_pretrained(directory)`` loads it complete."""
    from seqpack.tokenizer.hf_export import hf_directory_files

    texts = tokenizer_file_texts(tok)
    with atomic_directory(directory, kind=OUTPUT, overwrite=overwrite) as tmp:
        if hf:
            for name, text in hf_directory_files(tok, chat_template=chat_template).items():
                (tmp / name).write_text(text, encoding="utf-8")
        for name, data in texts.items():
            (tmp / name).write_bytes(data)
        meta = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "vocab_size": tok.vocab_size,
            "num_merges": len(tok.merges),
            "special_tokens": tok.special_tokens,
            "fingerprint": tok.fingerprint(),
        }
        (tmp / "meta.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")


def read_tokenizer_dir(
    directory: str | os.PathLike[str],
) -> tuple[dict[int, bytes], list[tuple[bytes, bytes]], list[str], str | None]:
    """``(vocab, merges, special_tokens, fingerprint or None)`` of a directory written by
    `save_tokenizer` (`seqpack.tokenizer.Tokenizer.load` builds and checks the tokenizer)."""
    d = Path(directory)
    if not d.is_dir():
        raise FileNotFoundError(f"{d}: no such tokenizer directory")
    meta_path = d / "meta.json"
    specials: list[str] = []
    expected = None
    if meta_path.exists():
        try:
            meta = json.loads(_read_text(meta_path))
            specials = list(meta["special_tokens"])
            expected = meta.get("fingerprint")
            version = int(meta["format_version"])
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
            raise UserError(f"{meta_path}: malformed ({e})") from e
        if version > FORMAT_VERSION:
            raise UserError(f"{meta_path}: format_version {version} is newer than this seqpack reads")
    return read_vocab(d / "vocab.json"), read_merges(d / "merges.txt"), specials, expected
