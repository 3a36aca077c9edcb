"""Chat templates (Jinja, the transformers convention) and where each assistant turn lies in the text.

A template renders ``messages`` (a list of ``{"role", "content"}``) to one string. Which characters
the model should learn comes from one of two sources:

* ``{% generation %}...{% endgeneration %}`` blocks (the transformers/TRL convention for
  ``assistant_only_loss``): exactly the text written inside them;
* otherwise, incremental rendering: assistant turn ``k`` is the text that ``messages[:k + 1]`` adds
  to ``messages[:k]`` rendered with ``add_generation_prompt=True`` (its content and end token;
  trailing whitespace after the turn is left out). A template that rewrites earlier turns cannot be
  read this way and gets an error that says to add generation blocks.

The shipped default, ``chatml`` (`CHATML`), is ChatML (``<|im_start|>role\\n...<|im_end|>``)
with generation blocks around each assistant turn's content and its ``<|im_end|>``.

    >>> t = ChatTemplate(CHATML)
    >>> text, spans = t.render_with_spans([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}])
    >>> text
    '<|im_start|>user\\nHi<|im_end|>\\n<|im_start|>assistant\\nYo<|im_end|>\\n'
    >>> [text[a:b] for a, b in spans]
    ['Yo<|im_end|>']
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

from seqpack.errors import UserError
from seqpack.tokenizer.hf_export import CHATML_TEMPLATE, CHATML_TOKENS

ROLES = ("system", "user", "assistant", "tool")
DEFAULT = "chatml"
#: ChatML, with a generation block around each assistant turn's content and end token (one
#: definition, beside the tokenizer export that writes it into tokenizer_config.json)
CHATML = CHATML_TEMPLATE
CHATML_SPECIALS = CHATML_TOKENS
_OPEN, _CLOSE = "\ufdd0", "\ufdd1"  # Unicode noncharacters: mark generation blocks in the rendered text


def _environment() -> Any:
    from jinja2 import nodes
    from jinja2.ext import Extension
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Generation(Extension):
        """``{% generation %}body{% endgeneration %}``: the body, between two markers."""

        tags = {"generation"}  # noqa: RUF012 - jinja2 declares it a set

        def parse(self, parser: Any) -> Any:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return nodes.CallBlock(self.call_method("_mark"), [], [], body).set_lineno(lineno)

        def _mark(self, caller: Any) -> str:
            return _OPEN + str(caller()) + _CLOSE

    def raise_exception(message: str) -> None:
        from jinja2.exceptions import TemplateError

        raise TemplateError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[Generation])
    env.filters["tojson"] = lambda x, indent=None: json.dumps(x, ensure_ascii=False, indent=indent)
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env


class ChatTemplate:
    """A compiled template; ``variables`` (``bos_token``, ``eos_token``...) are passed to every render."""

    def __init__(self, source: str, *, name: str = "", variables: dict[str, Any] | None = None) -> None:
        from jinja2.exceptions import TemplateSyntaxError

        self.source = source
        self.name = name or "template"
        self.variables = dict(variables or {})
        try:
            self._template = _environment().from_string(source)
        except TemplateSyntaxError as e:
            raise UserError(f"chat template {self.name}: line {e.lineno}: {e.message}") from e
        self.has_generation = "generation" in source and "endgeneration" in source

    def render(self, messages: list[dict[str, Any]], *, add_generation_prompt: bool = False) -> str:
        """The text of ``messages`` (generation markers removed)."""
        return self._render(messages, add_generation_prompt).replace(_OPEN, "").replace(_CLOSE, "")

    def _render(self, messages: list[dict[str, Any]], add_generation_prompt: bool) -> str:
        return str(
            self._template.render(messages=messages, add_generation_prompt=add_generation_prompt, **self.variables)
        )

    def render_with_spans(self, messages: list[dict[str, Any]]) -> tuple[str, list[tuple[int, int]]]:
        """The text and each assistant turn's character span ``[start, end)``, in order."""
        if self.has_generation:
            return _marked_spans(self._render(messages, False))
        text = self.render(messages)
        spans = []
        for k, m in enumerate(messages):
            if m.get("role") != "assistant":
                continue
            before = self.render(messages[:k], add_generation_prompt=True)
            through = self.render(messages[: k + 1]).rstrip()
            if not (text.startswith(before) and text.startswith(through) and len(through) >= len(before)):
                raise UserError(
                    f"chat template {self.name} rewrites earlier turns, so assistant turn {k} cannot be located; "
                    "wrap each assistant turn in {% generation %}...{% endgeneration %} (the transformers convention)"
                )
            spans.append((len(before), len(through)))
        return text, spans


def _marked_spans(marked: str) -> tuple[str, list[tuple[int, int]]]:
    """Strip the generation markers from ``marked``; the spans they enclosed.

    >>> _marked_spans("a" + _OPEN + "bc" + _CLOSE + "d")
    ('abcd', [(1, 3)])
    """
    out: list[str] = []
    spans: list[tuple[int, int]] = []
    n = 0
    start = -1
    for part in _split_markers(marked):
        if part == _OPEN:
            start = n
        elif part == _CLOSE:
            if start < n:
                spans.append((start, n))
        else:
            out.append(part)
            n += len(part)
    return "".join(out), spans


def _split_markers(s: str) -> list[str]:
    parts: list[str] = []
    last = 0
    for i, ch in enumerate(s):
        if ch in (_OPEN, _CLOSE):
            parts += [s[last:i], ch]
            last = i + 1
    parts.append(s[last:])
    return [p for p in parts if p]


def resolve_template(option: str | None, tokenizer: Any) -> tuple[str, str]:
    """``(source, name)`` of the template a chat dataset uses: ``--chat-template`` (a file, or
    ``chatml``), else the tokenizer's own, else ChatML for a seqpack tokenizer; a pretrained
    tokenizer without a template is an error."""
    from seqpack.tokenizer.hf_tokenizer import HFTokenizer

    if option == DEFAULT:
        return CHATML, DEFAULT
    if option:
        p = Path(option)
        if not p.is_file():
            raise UserError(f"--chat-template {option}: no such file (give a Jinja file, or 'chatml' for the default)")
        return p.read_text(encoding="utf-8"), str(p)
    if tokenizer.chat_template:
        return tokenizer.chat_template, "the tokenizer's chat_template"
    if isinstance(tokenizer, HFTokenizer):
        raise UserError(
            f"tokenizer {tokenizer.name} has no chat_template; pass --chat-template FILE "
            "(or --chat-template chatml for seqpack's default)"
        )
    return CHATML, DEFAULT


def check_message(messages: Any, i: int) -> list[dict[str, Any]]:
    """``messages`` of example ``i``, checked: a non-empty list of ``{"role", "content": str}``."""
    if not isinstance(messages, list) or not messages:
        raise UserError(f"example {i}: messages must be a non-empty list of {{'role', 'content'}} objects")
    for j, m in enumerate(messages):
        if not isinstance(m, dict):
            raise UserError(f"example {i}: message {j} is {type(m).__name__}, expected an object with role and content")
        role = m.get("role")
        if role not in ROLES:
            raise UserError(f"example {i}: message {j} has role {role!r}; roles: {'|'.join(ROLES)}")
        content = m.get("content")
        if not isinstance(content, str):
            what = "no content" if content is None else f"content of type {type(content).__name__}"
            raise UserError(f"example {i}: message {j} ({role}) has {what}; content must be a string")
        if _OPEN in content or _CLOSE in content:
            raise UserError(f"example {i}: message {j} holds U+FDD0/U+FDD1, which seqpack reserves; remove them")
    return messages


__all__ = ["CHATML", "CHATML_SPECIALS", "DEFAULT", "ROLES", "ChatTemplate", "check_message", "resolve_template"]
