"""Exactness against tiktoken that runs in any clone: no file from ``../shared`` is needed.

The GPT-2 conformance tests (``test_tokenizer.py``) need GPT-2's vocabulary, which is not ours to
ship. These tests make the evidence here instead: a byte-level BPE is trained on the built-in corpus
(the Python standard library's docstrings, extracted from this machine's Python), its merges are
handed to tiktoken as ``mergeable_ranks`` (rank = our token id, which is the merge order), and both
encoders must give identical ids on text neither was trained on: held-out documents, Python source,
twelve scripts, emoji, whitespace and special-token edge cases, and hypothesis' arbitrary Unicode.
tiktoken is an independent implementation (Rust, its own regex engine and merge loop), so an error in
our pre-tokenizer, merge loop or special-token split shows up as a difference.
"""

from __future__ import annotations

import inspect
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqpack.corpus.builtin import python_docs
from seqpack.tokenizer import BPEConfig, Tokenizer, train_bpe_corpus
from seqpack.tokenizer.pretokenize import GPT2_PATTERN

EOT = "<|endoftext|>"
TRAIN_DOCS = 400  # the first 400 built-in documents train; the rest are held out
SCRIPTS = [  # one line per script, written for this test
    "Die Straße führt über die Brücke nach Köln; Öl kostet 3,50 €.",
    "Η γρήγορη καφέ αλεπού πηδάει πάνω από τον τεμπέλη σκύλο.",
    "Съешь же ещё этих мягких французских булок, да выпей чаю.",
    "我们在北京的大学里学习中文和数学，今天天气很好。",
    "東京の空は青く、猫が窓辺で眠っている。カタカナもある。",
    "서울의 봄은 따뜻하고 꽃이 많이 핍니다.",
    "الكتاب على الطاولة والقلم في الحقيبة.",
    "עברית נכתבת מימין לשמאל.",
    "हिन्दी एक सुंदर भाषा है और इसे देवनागरी में लिखते हैं।",
    "ภาษาไทยไม่มีช่องว่างระหว่างคำ",
    "Tiếng Việt có nhiều dấu: ă, â, ê, ô, ơ, ư, đ.",
    "emoji 👩‍👩‍👧‍👦 🇫🇷 ✔️ and math ∑ᵢ xᵢ² ≤ ∞, ﬁ ligature, zero\u200bwidth",
]
EDGES = [
    "",
    " ",
    "  ",
    "\n",
    "\n\n\n",
    " \n ",
    "\t\t x",
    "a" * 5000,
    " " * 300 + "x",
    f"{EOT}",
    f"{EOT}{EOT}",
    f"\n\n{EOT}\n\nhello",
    f"text{EOT}",
    f"{EOT} trailing  \n\n",
    "<|endoftext",
    "|>",
    "<|end" + "oftext|> split?",
    "don't I'll we've they're you'd 'S 'LL",
    "123 4567 89012345 3.14159 1e-9 0x1F",
    "CamelCaseWords and snake_case_words",
]


@pytest.fixture(scope="module")
def pair():
    """Our tokenizer and tiktoken built from the same merges."""
    tiktoken = pytest.importorskip("tiktoken")  # a dev extra: `make test` installs it
    docs = python_docs()
    r = train_bpe_corpus(
        documents=docs[:TRAIN_DOCS], config=BPEConfig(vocab_size=3000, special_tokens=(EOT,), workers=1)
    )
    ours = Tokenizer(r.vocab, r.merges, [EOT])
    special = EOT.encode()
    ranks = {b: i for i, b in r.vocab.items() if b != special}
    theirs = tiktoken.Encoding(
        "seqpack-local", pat_str=GPT2_PATTERN, mergeable_ranks=ranks, special_tokens={EOT: ours.special_ids[EOT]}
    )
    return ours, theirs, docs[TRAIN_DOCS:]


def _same(pair, text: str) -> list[int]:
    ours, theirs, _ = pair
    ids = ours.encode(text)
    assert ids == theirs.encode(text, allowed_special={EOT}), text[:80]
    assert ours.decode(ids) == text
    return ids


def test_merges_are_used(pair):
    """The vocabulary is not trivially bytes: held-out text compresses (else the test proves little)."""
    held_out = "\n".join(pair[2][:50])
    assert len(_same(pair, held_out)) < 0.4 * len(held_out.encode())


def test_held_out_documents(pair):
    ours, _, held_out = pair
    assert len(held_out) >= 200
    for doc in held_out:
        _same(pair, doc)
    joined = EOT.join(held_out)
    ids = _same(pair, joined)
    assert list(ours.encode_iterable(iter(joined.splitlines(keepends=True)))) == ids
    assert ours.encode_batch(held_out) == [ours.encode(d) for d in held_out]


def test_python_source(pair):
    for module in (json, inspect, pytest):
        _same(pair, inspect.getsource(module))


@pytest.mark.parametrize("text", SCRIPTS + EDGES)
def test_scripts_and_edges(pair, text):
    _same(pair, text)
    _same(pair, f"{text}{EOT}{text}")


@settings(max_examples=300, deadline=None)
@given(
    text=st.text(max_size=200)
    | st.lists(st.sampled_from([EOT, "<|", " a", "\n", " ", "é", "'s", "1"]), max_size=12).map("".join)
)
def test_arbitrary_unicode(pair, text):
    _same(pair, text)
