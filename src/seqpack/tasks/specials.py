"""The special tokens an encoder task writes around its texts, from the tokenizer that packs them.

A **pretrained** tokenizer (a Hugging Face tokenizer directory, `HFTokenizer`) brings its own:
its post-processor's template (``tokenizers``' ``TemplateProcessing``, ``BertProcessing``,
``RobertaProcessing``) places its specials and token types around one text or a pair, exactly as
``tokenizer(text)`` / ``tokenizer(a, b)`` would (BERT: ``[CLS] A [SEP] B [SEP]``; RoBERTa:
``<s> A </s></s> B </s>``). Without a post-processor that adds specials, the ``cls_token`` (or
``bos_token``) and ``sep_token`` (or ``eos_token``) its config declares go in BERT's places. Its mask
token is its ``mask_token``. A pretrained tokenizer is never given new ids: a special a task needs
that it lacks is refused in one line naming the token and how to declare it.

seqpack's **own** tokenizers keep their specials from training: ``[CLS]``, ``[SEP]`` and ``[MASK]``
are theirs where they hold them, else new ids after the vocabulary (the model embeds them).

    >>> from seqpack.tokenizer.tokenizer import Tokenizer
    >>> s = task_specials(Tokenizer({i: bytes([i]) for i in range(256)}, []), "classification")
    >>> s.single.build([7, 8])
    ([256, 7, 8, 257], [0, 0, 0, 0], (1,))
    >>> s.pair.build([7], [9])
    ([256, 7, 257, 9, 257], [0, 0, 0, 1, 1], (1, 3))
    >>> s.vocab_size, s.mask
    (259, 258)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from seqpack.errors import UserError
from seqpack.tokenizer.hf_tokenizer import HFTokenizer

if TYPE_CHECKING:
    from seqpack.tokenizer.types import AnyTokenizer

#: what seqpack's own tokenizers write (BERT's names), in the order new ids are given
BERT_SPECIALS = ("[CLS]", "[SEP]", "[MASK]")
#: a text whose tokens show where a post-processor puts the texts among its specials
_PROBES = ("a", "the", "x", "0", ".")


@dataclass(frozen=True, kw_only=True)
class Template:
    """Where one text (``"A"``) or two (``"A"``, ``"B"``) go among special token ids: ``parts``
    are ``(id or "A"/"B", token type)``, in order."""

    parts: tuple[tuple[int | str, int], ...]

    def build(self, a: list[int], b: list[int] | None = None) -> tuple[list[int], list[int], tuple[int, ...]]:
        """``(ids, token types, where A (and B) start)``."""
        ids: list[int] = []
        types: list[int] = []
        starts: dict[str, int] = {}
        for what, kind in self.parts:
            if isinstance(what, int):
                ids.append(what)
                types.append(kind)
                continue
            text = a if what == "A" else b
            if text is None:
                raise UserError("this template takes a pair of texts")
            starts[what] = len(ids)
            ids.extend(text)
            types.extend([kind] * len(text))
        return ids, types, tuple(starts[k] for k in sorted(starts))

    @property
    def added(self) -> int:
        """Special tokens the template adds."""
        return sum(isinstance(w, int) for w, _ in self.parts)

    def pieces(self) -> tuple[list[tuple[list[int], list[int]]], list[int]]:
        """The specials around the texts, ``(ids, types)`` before A, (between A and B,) after the
        last; and each text's token type.

        >>> Template(parts=((0, 0), ("A", 0), (2, 0), (2, 0), ("B", 0), (2, 0))).pieces()
        ([([0], [0]), ([2, 2], [0, 0]), ([2], [0])], [0, 0])
        """
        out: list[tuple[list[int], list[int]]] = [([], [])]
        kinds: list[int] = []
        for what, kind in self.parts:
            if isinstance(what, int):
                out[-1][0].append(what)
                out[-1][1].append(kind)
            else:
                kinds.append(kind)
                out.append(([], []))
        return out, kinds


def _bert(cls: int, sep: int) -> tuple[Template, Template]:
    single = Template(parts=((cls, 0), ("A", 0), (sep, 0)))
    pair = Template(parts=((cls, 0), ("A", 0), (sep, 0), ("B", 1), (sep, 1)))
    return single, pair


@dataclass(frozen=True, kw_only=True)
class Specials:
    """A task's special tokens: the templates of one text and of a pair, the ids by role (``None``
    where the tokenizer has none), every special written by its token (``ids``, recorded in the
    manifest's ``task_info["special_ids"]``) and the vocabulary a model needs to embed them."""

    single: Template
    pair: Template
    cls: int | None
    sep: int | None
    mask: int | None
    pad: int | None
    ids: dict[str, int]
    vocab_size: int

    def info(self) -> dict[str, Any]:
        """What the manifest records of them (``task_info``)."""
        out: dict[str, Any] = {"special_ids": dict(self.ids), "vocab_size": self.vocab_size}
        if self.pad is not None:
            out["pad_token_id"] = self.pad
        return out


def task_specials(tokenizer: AnyTokenizer, task: str, *, mask: bool = False) -> Specials:
    """The specials task ``task`` writes with ``tokenizer`` (``mask``: the task needs a mask token);
    a pretrained tokenizer lacking one is refused in one line."""
    if isinstance(tokenizer, HFTokenizer):
        return _pretrained(tokenizer, task, mask=mask)
    ids: dict[str, int] = {}
    nxt = tokenizer.vocab_size
    for name in BERT_SPECIALS:
        i = tokenizer.token_to_id(name)
        if i is None:
            i, nxt = nxt, nxt + 1
        ids[name] = i
    single, pair = _bert(ids["[CLS]"], ids["[SEP]"])
    return Specials(
        single=single, pair=pair, cls=ids["[CLS]"], sep=ids["[SEP]"], mask=ids["[MASK]"], pad=None, ids=ids,
        vocab_size=nxt,
    )  # fmt: skip


def _where(tok: HFTokenizer) -> str:
    return f"{tok.name}/tokenizer_config.json" if tok.name else "its tokenizer_config.json"


def _declared(tok: HFTokenizer, keys: tuple[str, ...]) -> tuple[str, int] | None:
    """``(token, id)`` of the first of ``keys`` (``cls_token``, ``bos_token``...) the tokenizer
    declares; a declared token missing from its vocabulary is refused."""
    for key in keys:
        token = tok.special_map.get(key)
        if token is None:
            continue
        i = tok.token_to_id(token)
        if i is None:
            raise UserError(
                f"the tokenizer's {key} {token!r} is not in its vocabulary; name a token it holds in {_where(tok)}"
            )
        return token, i
    return None


def _missing(tok: HFTokenizer, task: str, keys: tuple[str, ...], example: str, why: str) -> UserError:
    named = keys[0] + (f" (nor a {' or '.join(keys[1:])})" if keys[1:] else "")
    return UserError(
        f'task {task}: the tokenizer declares no {named}, which {why}; add "{keys[0]}": "{example}" (a token of '
        f"its vocabulary) to {_where(tok)} (a pretrained tokenizer is never given new ids)"
    )


def post_processor_templates(tok: HFTokenizer) -> tuple[Template, Template] | None:
    """The templates of the tokenizer's post-processor, read from what it does to a probe text (its
    specials and token types around one text and a pair); ``None`` when it adds no special to a text."""
    hf = tok.hf
    if getattr(hf, "post_processor", None) is None:
        return None
    probe = next((e for p in _PROBES if len((e := hf.encode(p, add_special_tokens=False)).ids)), None)
    if probe is None:
        return None
    templates = []
    for second in (None, probe):
        enc = hf.post_process(probe, second, add_special_tokens=True)
        parts: list[tuple[int | str, int]] = []
        for i, seq, kind in zip(enc.ids, enc.sequence_ids, enc.type_ids):
            if seq is None:
                parts.append((int(i), int(kind)))
            elif not parts or parts[-1][0] != "AB"[seq]:
                parts.append(("AB"[seq], int(kind)))
        templates.append(Template(parts=tuple(parts)))
    single, pair = templates
    if not single.added or [w for w, _ in pair.parts if isinstance(w, str)] != ["A", "B"]:
        return None
    return single, pair


def _pretrained(tok: HFTokenizer, task: str, *, mask: bool) -> Specials:
    cls = _declared(tok, ("cls_token", "bos_token"))
    sep = _declared(tok, ("sep_token", "eos_token"))
    msk = _declared(tok, ("mask_token",))
    pad = _declared(tok, ("pad_token",))
    templates = post_processor_templates(tok)
    if templates is None:
        if cls is None:
            raise _missing(tok, task, ("cls_token", "bos_token"), "[CLS]", "starts each sequence")
        if sep is None:
            raise _missing(tok, task, ("sep_token", "eos_token"), "[SEP]", "ends each text")
        templates = _bert(cls[1], sep[1])
    if mask and msk is None:
        raise _missing(tok, task, ("mask_token",), "[MASK]", "masked tokens are replaced with")
    single, pair = templates
    ids = {r[0]: r[1] for r in (cls, sep, msk, pad) if r is not None}
    named = set(ids.values())
    for w, _ in single.parts + pair.parts:  # a template's specials that no role names
        if isinstance(w, int) and w not in named:
            token = tok.hf.id_to_token(w)
            ids[str(token)] = w
            named.add(w)
    return Specials(
        single=single, pair=pair, cls=cls[1] if cls else None, sep=sep[1] if sep else None,
        mask=msk[1] if msk else None, pad=pad[1] if pad else None, ids=ids, vocab_size=tok.vocab_size,
    )  # fmt: skip


__all__ = ["BERT_SPECIALS", "Specials", "Template", "post_processor_templates", "task_specials"]
