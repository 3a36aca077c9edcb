"""Chat templates: generation blocks and incremental rendering locate the same assistant turns,
and both agree with transformers' ``return_assistant_tokens_mask``."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqpack.tasks.chat.template import (
    CHATML,
    ChatTemplate,
    check_message,
    resolve_template,
)
from seqpack.tokenizer import Tokenizer
from tests.hf_tokenizers import PLAIN_CHATML

words = st.text(alphabet=st.sampled_from(list("ab é\n")), min_size=0, max_size=8)
message = st.fixed_dictionaries({"role": st.sampled_from(["system", "user", "assistant", "tool"]), "content": words})


def test_chatml_golden() -> None:
    msgs = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "a1"},
        {"role": "user", "content": "q2"},
        {"role": "assistant", "content": "a2"},
    ]
    text, spans = ChatTemplate(CHATML).render_with_spans(msgs)
    assert text == (
        "<|im_start|>system\ns<|im_end|>\n<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\na1<|im_end|>\n"
        "<|im_start|>user\nq2<|im_end|>\n<|im_start|>assistant\na2<|im_end|>\n"
    )
    assert [text[a:b] for a, b in spans] == ["a1<|im_end|>", "a2<|im_end|>"]
    assert ChatTemplate(CHATML).render(msgs[:2], add_generation_prompt=True).endswith("<|im_start|>assistant\n")


@settings(max_examples=60, deadline=None)
@given(msgs=st.lists(message, min_size=1, max_size=6))
def test_generation_blocks_and_incremental_rendering_agree(msgs: list[dict[str, str]]) -> None:
    """ChatML with generation blocks and the same template without them: the same text and, after
    the turn's trailing whitespace is left out, the same spans (content + <|im_end|>)."""
    tagged, plain = ChatTemplate(CHATML).render_with_spans(msgs), ChatTemplate(PLAIN_CHATML).render_with_spans(msgs)
    assert tagged[0] == plain[0]
    assert tagged[1] == plain[1]
    assert [tagged[0][a:b] for a, b in tagged[1]] == [
        m["content"] + "<|im_end|>" for m in msgs if m["role"] == "assistant"
    ]


def test_same_mask_as_transformers(tmp_path) -> None:
    """Our target tokens == transformers' ``assistant_masks`` for a template with generation blocks."""
    pytest.importorskip("transformers")
    from seqpack.tasks.chat.sequences import target_mask
    from seqpack.tokenizer import open_tokenizer
    from tests.hf_tokenizers import bpe_tokenizer_dir, conversations

    d = bpe_tokenizer_dir(tmp_path / "tok")
    import transformers

    theirs = transformers.AutoTokenizer.from_pretrained(str(d))
    ours = open_tokenizer(d)
    for rec in conversations(20, seed=4):
        out = theirs.apply_chat_template(
            rec["messages"], chat_template=CHATML, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
        )
        text, spans = ChatTemplate(CHATML).render_with_spans(rec["messages"])
        ((ids, tok_spans),) = ours.encode_with_offsets([text])
        assert ids.tolist() == list(out["input_ids"])  # type: ignore[call-overload,index]  # return_dict=True: a mapping
        assert target_mask(tok_spans, spans).astype(int).tolist() == list(out["assistant_masks"])  # type: ignore[call-overload,index]  # return_dict=True: a mapping


def test_template_that_rewrites_turns_is_refused() -> None:
    last_only = "{% for m in messages %}{% if loop.last %}{{ m.content }}{% endif %}{% endfor %}"
    msgs = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}, {"role": "user", "content": "r"}]
    with pytest.raises(ValueError, match=r"rewrites earlier turns.*generation"):
        ChatTemplate(last_only).render_with_spans(msgs)
    with pytest.raises(ValueError, match="line 1"):
        ChatTemplate("{% for m in messages %}")


@pytest.mark.parametrize(
    "messages, match",
    [
        ([], "non-empty list"),
        ("hi", "non-empty list"),
        ([{"role": "bot", "content": "x"}], "message 0 has role 'bot'; roles: system|user|assistant|tool"),
        ([{"role": "user"}], r"message 0 \(user\) has no content"),
        ([{"role": "user", "content": 3}], "content of type int"),
        (["hi"], "message 0 is str"),
    ],
)
def test_check_message(messages: object, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        check_message(messages, 7)


def test_resolve_template(tmp_path) -> None:
    ours = Tokenizer({i: bytes([i]) for i in range(256)}, [])
    assert resolve_template(None, ours) == (CHATML, "chatml")
    assert resolve_template("chatml", ours) == (CHATML, "chatml")
    f = tmp_path / "t.jinja"
    f.write_text("{{ messages[0].content }}")
    assert resolve_template(str(f), ours)[0] == "{{ messages[0].content }}"
    with pytest.raises(ValueError, match="no such file"):
        resolve_template(str(tmp_path / "nope.jinja"), ours)
