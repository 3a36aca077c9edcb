from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from seqpack.tokenizer import BPEConfig, Tokenizer, train_bpe_corpus

EOT = "<|endoftext|>"
TEXTS = ["Hello world! don't stop", f"a{EOT}b", "tabs\tand\n\nnewlines  ", "héllo 123 ümlaut", ""]


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    docs = ["the cat sat on the mat. " * 20, "héllo wörld 123 don't stop"] * 5
    r = train_bpe_corpus(documents=docs, config=BPEConfig(vocab_size=285, special_tokens=(EOT,), workers=1))
    return Tokenizer(r.vocab, r.merges, [EOT])


def test_save_load_round_trip(tok, tmp_path):
    tok.save(tmp_path / "t")
    assert sorted(p.name for p in (tmp_path / "t").iterdir()) == [
        "merges.txt",
        "meta.json",
        "tokenizer.json",
        "vocab.json",
    ]
    back = Tokenizer.load(tmp_path / "t")
    assert back.vocab == tok.vocab and back.merges == tok.merges
    assert back.special_tokens == [EOT]
    assert back.fingerprint() == tok.fingerprint()
    meta = json.loads((tmp_path / "t" / "meta.json").read_text())
    assert meta["format_version"] == 1 and meta["vocab_size"] == tok.vocab_size
    again = Tokenizer.from_files(tmp_path / "t" / "vocab.json", tmp_path / "t" / "merges.txt", [EOT])
    assert again.vocab == tok.vocab


def test_tokenizer_json_loads_in_hf_tokenizers(tok, tmp_path):
    tokenizers = pytest.importorskip("tokenizers")
    tok.save(tmp_path / "t")
    hf = tokenizers.Tokenizer.from_file(str(tmp_path / "t" / "tokenizer.json"))
    for text in TEXTS:
        assert hf.encode(text).ids == tok.encode(text)
        assert hf.decode(tok.encode(text), skip_special_tokens=False) == text


def test_tokenizer_json_loads_in_transformers(tok, tmp_path):
    transformers = pytest.importorskip("transformers")
    tok.save(tmp_path / "t")
    fast = transformers.PreTrainedTokenizerFast(tokenizer_file=str(tmp_path / "t" / "tokenizer.json"))
    for text in TEXTS:
        assert fast(text)["input_ids"] == tok.encode(text)


def test_gpt2_files_export_identically(cs336, tmp_path):
    gpt2 = Tokenizer.from_files(cs336 / "gpt2_vocab.json", cs336 / "gpt2_merges.txt", [EOT])
    gpt2.save(tmp_path / "g")
    tokenizers = pytest.importorskip("tokenizers")
    hf = tokenizers.Tokenizer.from_file(str(tmp_path / "g" / "tokenizer.json"))
    text = (cs336 / "tinystories_sample.txt").read_text(encoding="utf-8")
    assert hf.encode(text).ids == gpt2.encode(text)
    assert json.loads((tmp_path / "g" / "vocab.json").read_text(encoding="utf-8")) == json.loads(
        (cs336 / "gpt2_vocab.json").read_text(encoding="utf-8")
    )


def test_refuses_non_empty_out_unless_overwrite(tok, tmp_path):
    out = tmp_path / "t"
    out.mkdir()
    (out / "x").write_text("keep")
    for overwrite in (False, True):  # not a tokenizer: never replaced
        with pytest.raises(FileExistsError, match="did not make"):
            tok.save(out, overwrite=overwrite)
    assert (out / "x").read_text() == "keep"
    (out / "x").unlink()
    tok.save(out)
    with pytest.raises(FileExistsError, match="holds a tokenizer; pass --overwrite"):
        tok.save(out)
    tok.save(out, overwrite=True)  # a tokenizer: replaced
    assert Tokenizer.load(out).vocab == tok.vocab
    assert [p.name for p in tmp_path.iterdir()] == ["t"]  # no temp dirs left behind


@pytest.mark.parametrize(
    ("name", "content", "match"),
    [
        ("vocab.json", '{"a": 0,\n "b": ', r"vocab.json: line 2: not valid JSON"),
        ("vocab.json", '["a"]', r"vocab.json: expected a non-empty JSON object"),
        ("vocab.json", '{"a": "x"}', r"vocab.json: token 'a' has id 'x'"),
        ("merges.txt", "#version: 0.2\nĠ t\nbroken\n", r"merges.txt: line 3: expected two tokens"),
        ("merges.txt", "a b c\n", r"merges.txt: line 1: expected two tokens"),
        ("vocab.json", '{"a": 0, "b": 0}', r"vocab.json: id 0 is used twice"),
        ("vocab.json", '{"a": 0, "b": -1}', r"vocab.json: token 'b' has id -1"),
        ("vocab.json", '{"a": 0, "b c": 1}', r"vocab.json: token: 'b c' holds ' '"),
        ("merges.txt", "#version: 0.2\nĠ t\n\nt h\nĠt Ġx\nĠx\u20ac y\n", r"merges.txt: line 6: 'Ġx€' holds '€'"),
    ],
)
def test_corrupt_files_name_file_and_line(tok, tmp_path, name, content, match):
    """Both files are converted in one pass of the codec; an error still names the token, its
    character and (merges.txt) its line, blank lines counted."""
    tok.save(tmp_path / "t")
    (tmp_path / "t" / name).write_text(content, encoding="utf-8")
    with pytest.raises(ValueError, match=match):
        Tokenizer.load(tmp_path / "t")


def test_truncated_merges_fail_the_fingerprint(tok, tmp_path):
    tok.save(tmp_path / "t")
    path = tmp_path / "t" / "merges.txt"
    path.write_text("\n".join(path.read_text(encoding="utf-8").splitlines()[:-5]) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match="fingerprint"):
        Tokenizer.load(tmp_path / "t")


def test_missing_directory(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such tokenizer directory"):
        Tokenizer.load(tmp_path / "nope")


def test_tokenizer_json_is_what_the_tokenizers_library_writes(tok):
    """hf_tokenizer_json writes the JSON itself: byte for byte what building the tokenizer through the
    tokenizers API and serializing it gives, special tokens of any text (quotes, controls, non-ASCII) included."""
    pytest.importorskip("tokenizers")
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from seqpack.tokenizer.hf_export import build_hf_tokenizer, hf_tokenizer_json, hf_vocab

    assert hf_tokenizer_json(tok) == build_hf_tokenizer(tok).to_str()
    taken = set(hf_vocab(tok))  # a special token written as an existing token's string is refused either way

    @settings(max_examples=40, deadline=None)
    @given(
        st.lists(
            st.text(min_size=1, max_size=6).filter(lambda t: t.encode() not in tok.vocab.values() and t not in taken),
            max_size=3,
            unique=True,
        )
    )
    def check(specials: list[str]) -> None:
        other = Tokenizer(tok.vocab, tok.merges, specials)
        assert hf_tokenizer_json(other) == build_hf_tokenizer(other).to_str()

    check()


def test_tokenizer_json_ids_equal_ours_on_any_text(tok):
    """tokenizer.json is built through the tokenizers API; its ids equal seqpack's on arbitrary
    Unicode (specials included) and its vocab/merges are ours, in order."""
    tokenizers = pytest.importorskip("tokenizers")
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from seqpack.tokenizer.hf_export import build_hf_tokenizer, hf_vocab

    hf = build_hf_tokenizer(tok)
    model = json.loads(hf.to_str())["model"]
    assert model["vocab"] == hf_vocab(tok) and len(model["merges"]) == len(tok.merges)
    assert isinstance(hf, tokenizers.Tokenizer)

    @settings(max_examples=60, deadline=None)
    @given(st.lists(st.one_of(st.text(max_size=40), st.just(EOT)), max_size=4))
    def check(parts: list[str]) -> None:
        text = "".join(parts)
        assert hf.encode(text).ids == tok.encode(text)

    check()


@given(st.dictionaries(st.text(max_size=8), st.integers(0, 10**6), max_size=12))
def test_vocab_json_text_is_json_dumps_with_indent_0(obj: dict[str, int]):
    from seqpack.tokenizer.files import _json_lines

    assert _json_lines(obj) == json.dumps(obj, ensure_ascii=False, indent=0)


def test_a_vocab_with_one_token_twice_is_refused(tok, tmp_path):
    twice = Tokenizer({**tok.vocab, len(tok.vocab): b"the"}, tok.merges, [EOT])
    with pytest.raises(ValueError, match=r"token b'the' appears twice in the vocab \(ids \d+ and \d+\); vocab.json"):
        twice.save(tmp_path / "t")
    assert not (tmp_path / "t").exists()


def test_merges_read_skip_blank_lines_and_the_version(tmp_path):
    from seqpack.tokenizer.files import read_merges

    path = tmp_path / "merges.txt"
    path.write_text("#version: 0.2\r\nĠ t\r\n\nt h\n", encoding="utf-8")
    assert read_merges(path) == [(b" ", b"t"), (b"t", b"h")]


def _random_vocab_tokenizer(data: st.DataObject) -> Tokenizer:
    """Bytes, merges of random tokens (quotes, backslashes, controls and high bytes among them), and
    special tokens of any text: some new, some an existing token, some another token's GPT-2 string."""
    from seqpack.tokenizer.byte_unicode import bytes_to_str

    vocab = {i: bytes([i]) for i in range(256)}
    merges = []
    for _ in range(data.draw(st.integers(0, 40))):
        a, b = data.draw(st.sampled_from(sorted(vocab))), data.draw(st.sampled_from(sorted(vocab)))
        made = vocab[a] + vocab[b]
        if made not in vocab.values():
            vocab[len(vocab)] = made
            merges.append((vocab[a], vocab[b]))
    tokens = list(vocab.values())
    specials = data.draw(
        st.lists(
            st.one_of(
                st.text(min_size=1, max_size=6),
                st.sampled_from(tokens).filter(lambda t: t.isascii()).map(lambda t: t.decode()),
                st.sampled_from(tokens).map(bytes_to_str),
            ),
            max_size=3,
            unique=True,
        )
    )
    return Tokenizer(vocab, merges, specials)


@given(data=st.data())
def test_the_compiled_file_writer_writes_the_references_bytes(data):
    """``tokenizer_file_texts`` (C++: ``tokenizer_files.h``) gives byte for byte what the Python reference
    (GPT-2's strings, ``json.dumps``) gives, or the reference's error: a special token written in
    ``tokenizer.json`` as another token's string is refused by both."""
    from seqpack.tokenizer.files import _file_texts_oracle, tokenizer_file_texts

    tok = _random_vocab_tokenizer(data)
    try:
        want = _file_texts_oracle(tok)
    except ValueError as e:
        with pytest.raises(ValueError, match="appears twice"):
            tokenizer_file_texts(tok)
        assert "appears twice" in str(e)
        return
    assert tokenizer_file_texts(tok) == want


def test_the_compiled_file_writer_on_gpt2(cs336):
    """GPT-2's own vocabulary (50,257 tokens, every byte among them) through both writers."""
    from seqpack.tokenizer.files import _file_texts_oracle, tokenizer_file_texts

    gpt2 = Tokenizer.from_files(cs336 / "gpt2_vocab.json", cs336 / "gpt2_merges.txt", [EOT])
    got = tokenizer_file_texts(gpt2)
    assert got == _file_texts_oracle(gpt2)
    assert json.loads(got["vocab.json"]) == json.loads((cs336 / "gpt2_vocab.json").read_text(encoding="utf-8"))


def test_two_ids_with_one_token_are_refused_by_the_writer(tok, tmp_path):
    twice = Tokenizer({**tok.vocab, len(tok.vocab): tok.vocab[270]}, tok.merges, [EOT])
    with pytest.raises(ValueError, match="appears twice in the vocab"):
        twice.save(tmp_path / "t")
