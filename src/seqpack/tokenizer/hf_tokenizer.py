"""Pretrained tokenizers: a Hugging Face tokenizer directory used wherever seqpack takes ``--tokenizer``.

A directory written by ``transformers`` ``save_pretrained`` (or by hand) holds ``tokenizer.json``
(the ``tokenizers`` pipeline) and ``tokenizer_config.json`` (special tokens, ``chat_template``;
transformers 5 may keep the template in ``chat_template.jinja`` beside it). `HFTokenizer`
gives it the interface seqpack's own `Tokenizer` has (``encode_batch``,
``encode_with_offsets``, ``token_to_id``, ``vocab_size``, ``fingerprint``...), so every task packs
with either. Texts are encoded **without** the tokenizer's own post-processing (no automatic
BOS/[CLS]): seqpack's tasks add their special tokens themselves, and a chat template writes its
own (the transformers convention for ``apply_chat_template``). A ``tokenizer.json`` saved with
``truncation`` or ``padding`` set is read with both turned off: a document is never cut or padded by
the tokenizer (``--overflow`` decides what happens to a long one), and the fingerprint names the
tokenizer as it encodes.

    tok = open_tokenizer("llama_tok/")       # HFTokenizer (tokenizer.json) or Tokenizer (seqpack's)
    tok.encode("Hello")                      # [15043]
    tok.chat_template                        # the Jinja source, or None
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Iterator
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from seqpack.errors import UserError

if TYPE_CHECKING:  # numpy is imported where arrays are made: `seqpack encode` needs none
    import numpy as np
    import tokenizers

    from seqpack.tokenizer.tokenizer import Tokenizer

SPECIAL_KEYS = ("bos_token", "eos_token", "unk_token", "pad_token", "cls_token", "sep_token", "mask_token")


def _content(v: Any) -> str | None:
    """A special token as saved by transformers: a string or ``{"content": ...}``."""
    if isinstance(v, dict):
        v = v.get("content")
    return v if isinstance(v, str) and v else None


def _read_json(path: Path) -> dict[str, Any]:
    try:
        d = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise UserError(f"{path}: not valid JSON ({e})") from e
    if not isinstance(d, dict):
        raise UserError(f"{path}: expected a JSON object")
    return d


def without_truncation_or_padding(hf: tokenizers.Tokenizer) -> tokenizers.Tokenizer:
    """``hf`` (a ``tokenizers.Tokenizer``), or a copy of it with truncation and padding turned off
    when it has either set; the tokenizer given is left as it was."""
    if getattr(hf, "truncation", None) is None and getattr(hf, "padding", None) is None:
        return hf
    hf = type(hf).from_str(hf.to_str())
    hf.no_truncation()
    hf.no_padding()
    return hf


class HFTokenizer:
    """A ``tokenizers.Tokenizer`` plus the special tokens and chat template of its directory.

    Args:
        hf: a `tokenizers.Tokenizer` (truncation and padding are turned off in a copy).
        config: the directory's `tokenizer_config.json` (special tokens, chat template).
        chat_template: a Jinja chat template (`None`: the config's).
        name: where it came from, for messages.
    """

    def __init__(
        self,
        hf: tokenizers.Tokenizer,
        config: dict[str, Any] | None = None,
        *,
        chat_template: str | None = None,
        name: str = "",
    ) -> None:
        self.hf = without_truncation_or_padding(hf)
        self.config = dict(config or {})
        self.name = name
        template = chat_template if chat_template is not None else self.config.get("chat_template")
        if isinstance(template, list):  # several named templates (transformers): take "default"
            named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
            template = named.get("default")
        self.chat_template: str | None = template if isinstance(template, str) and template.strip() else None
        self.special_map: dict[str, str] = {k: s for k in SPECIAL_KEYS if (s := _content(self.config.get(k)))}
        added = [t.content for t in hf.get_added_tokens_decoder().values() if t.special]
        self.special_tokens: list[str] = sorted(set(added) | set(self.special_map.values()))

    # ------------------------------------------------------------------ loading
    @classmethod
    def from_dir(cls, directory: str | os.PathLike[str]) -> HFTokenizer:
        """Load ``tokenizer.json`` (+ ``tokenizer_config.json``, ``special_tokens_map.json``,
        ``chat_template.jinja`` when present) from ``directory``.

        Args:
            directory: a Hugging Face tokenizer directory.

        Returns:
            The `HFTokenizer`.

        Raises:
            UserError: no `tokenizer.json`, or a malformed file.
        """
        from tokenizers import Tokenizer as RustTokenizer

        d = Path(directory)
        path = d / "tokenizer.json"
        if not path.is_file():
            raise UserError(
                f"{d}: no tokenizer.json; give a directory written by seqpack train-tokenizer or a "
                "Hugging Face tokenizer directory (tokenizer.save_pretrained(DIR))"
            )
        try:
            hf = RustTokenizer.from_file(str(path))
        except Exception as e:  # tokenizers raises plain Exception on a malformed file
            raise UserError(f"{path}: not a tokenizers file ({e})") from e
        config: dict[str, Any] = {}
        for name in ("special_tokens_map.json", "tokenizer_config.json"):  # the config wins
            if (d / name).is_file():
                config.update(_read_json(d / name))
        template = None
        if (d / "chat_template.jinja").is_file():
            template = (d / "chat_template.jinja").read_text(encoding="utf-8")
        return cls(hf, config, chat_template=template, name=str(d))

    # ------------------------------------------------------------------ encode / decode
    def encode(self, text: str) -> list[int]:
        """Ids of ``text`` (special tokens written in it are matched; nothing is added).

        Args:
            text: the text.

        Returns:
            Its ids.
        """
        return list(self.hf.encode(text, add_special_tokens=False).ids)

    def encode_batch(self, texts: Iterable[str], **_: Any) -> list[list[int]]:
        """``[encode(t) for t in texts]``, on the ``tokenizers`` thread pool.

        Args:
            texts: the texts.
            **_: ignored (the signature of `Tokenizer.encode_batch`).

        Returns:
            Each text's ids, in order.
        """
        return [e.ids for e in self.hf.encode_batch_fast(list(texts), add_special_tokens=False)]

    def encode_with_offsets(self, texts: Iterable[str]) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per text: ids ``(n,)`` and the character span of each token ``(n, 2)`` (start, end).

        Args:
            texts: the texts.

        Returns:
            Per text, `(ids, spans)`: `(n,)` and int `(n, 2)`.
        """
        import numpy as np

        out = []
        for e in self.hf.encode_batch(list(texts), add_special_tokens=False):
            ids = np.asarray(e.ids, dtype=np.int64)
            spans = np.asarray(e.offsets, dtype=np.int64).reshape(-1, 2)
            out.append((ids, spans))
        return out

    def encode_batch_flat(self, texts: Iterable[str], *, workers: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """`encode_batch` as flat ``uint32`` ids and ``int64`` offsets (the token store's layout):
        text ``i``'s ids are ``ids[offsets[i]:offsets[i + 1]]`` (``workers``: the ``tokenizers`` pool's).

        Args:
            texts: the texts.
            workers: unused: the `tokenizers` pool sizes itself.

        Returns:
            `(ids, offsets)`: uint32 `(total,)` and int64 `(len(texts) + 1,)`.
        """
        import numpy as np

        encs = self.encode_batch(texts)
        lengths = np.fromiter((len(e) for e in encs), dtype=np.int64, count=len(encs))
        offsets = np.zeros(len(encs) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        flat = np.fromiter((t for e in encs for t in e), dtype=np.uint32, count=int(offsets[-1]))
        return flat, offsets

    def encode_iterable(self, iterable: Iterable[str]) -> Iterator[int]:
        """Ids of the concatenated text (read whole: a cut could change a pretrained tokenizer's ids).

        Args:
            iterable: the pieces of one text, in order.

        Yields:
            The ids of their concatenation.
        """
        yield from self.encode("".join(iterable))

    def decode(self, ids: Iterable[int]) -> str:
        """Text of ``ids``, special tokens included.

        Args:
            ids: token ids, ints.

        Returns:
            The text.

        Raises:
            UserError: an id outside the vocabulary.
        """
        ids = list(ids)
        bad = [i for i in ids if not 0 <= i < self.vocab_size]
        if bad:
            raise UserError(f"unknown token id {bad[0]} (vocab has {self.vocab_size} ids)")
        return str(self.hf.decode(ids, skip_special_tokens=False))

    # ------------------------------------------------------------------ identity
    @property
    def vocab_size(self) -> int:
        """Ids ``0 .. vocab_size - 1`` (added tokens included)."""
        return int(self.hf.get_vocab_size(with_added_tokens=True))

    def token_to_id(self, token: bytes | str) -> int | None:
        """The id of one token, given as its text (or its UTF-8 bytes).

        Args:
            token: the token's text, or its bytes.

        Returns:
            Its id, or `None` where the vocabulary has no such token.
        """
        t = token.decode("utf-8") if isinstance(token, bytes) else token
        i = self.hf.token_to_id(t)
        return None if i is None else int(i)

    def fingerprint(self) -> str:
        """sha256 over the tokenizer pipeline and the special tokens: names this exact tokenizer (computed once).

        Returns:
            The hex digest.
        """
        return self._fingerprint

    @cached_property
    def _fingerprint(self) -> str:
        h = hashlib.sha256(b"hf-tokenizer\x00")
        h.update(json.dumps(json.loads(self.hf.to_str()), sort_keys=True).encode("utf-8"))
        h.update(json.dumps(self.special_map, sort_keys=True).encode("utf-8"))
        return h.hexdigest()

    @cached_property
    def vocab(self) -> dict[int, bytes]:
        """Each id's bytes as it reads in text (GPT-2 byte map, SentencePiece ``▁``/``<0xNN>``,
        WordPiece ``##``): what the sentence splitter of ``mlm`` looks at."""
        from seqpack.tokenizer.byte_unicode import str_to_bytes

        kinds = json.dumps(json.loads(self.hf.to_str()).get("decoder") or {})
        specials = set(self.special_tokens) | {t.content for t in self.hf.get_added_tokens_decoder().values()}
        out: dict[int, bytes] = {}
        for i in range(self.vocab_size):
            s = self.hf.id_to_token(i) or ""
            if s in specials:
                out[i] = s.encode("utf-8")
            elif '"ByteLevel"' in kinds:
                try:
                    out[i] = str_to_bytes(s)
                except KeyError:
                    out[i] = s.encode("utf-8")
            elif '"WordPiece"' in kinds:
                out[i] = s[2:].encode("utf-8") if s.startswith("##") else b" " + s.encode("utf-8")
            elif len(s) == 6 and s.startswith("<0x") and s.endswith(">"):
                out[i] = bytes([int(s[3:5], 16)])
            else:
                out[i] = s.replace("\u2581", " ").encode("utf-8")
        return out

    def __repr__(self) -> str:
        return f"HFTokenizer({self.name or 'in memory'}, vocab_size={self.vocab_size}, chat_template={self.chat_template is not None})"


def open_tokenizer(directory: str | os.PathLike[str]) -> Tokenizer | HFTokenizer:
    """seqpack's own tokenizer (``meta.json`` + ``vocab.json`` + ``merges.txt``), else a Hugging Face
    tokenizer directory (``tokenizer.json``).

    Args:
        directory: a tokenizer directory.

    Returns:
        A `Tokenizer` or an `HFTokenizer`.

    Raises:
        FileNotFoundError: no such directory.
        UserError: a directory that holds neither kind.
    """
    from seqpack.tokenizer.tokenizer import Tokenizer

    d = Path(directory)
    if not d.is_dir():
        raise FileNotFoundError(f"{d}: no such tokenizer directory")
    meta = d / "meta.json"
    if meta.is_file() and _read_json(meta).get("format") == "seqpack-tokenizer":
        return Tokenizer.load(d)
    if (d / "tokenizer.json").is_file():
        return HFTokenizer.from_dir(d)
    if (d / "vocab.json").is_file() and (d / "merges.txt").is_file():
        return Tokenizer.load(d)
    raise UserError(
        f"{d}: neither a seqpack tokenizer (meta.json, vocab.json, merges.txt) nor a Hugging Face one "
        "(tokenizer.json); make one with seqpack train-tokenizer or tokenizer.save_pretrained(DIR)"
    )


__all__ = ["HFTokenizer", "open_tokenizer"]
