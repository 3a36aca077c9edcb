"""Inputs are read as the tools that wrote them read them: a tokenizer saved with truncation and
padding encodes documents whole, a ``config.json`` holding ``{"__float__": "Infinity"}`` loads, a
byte-order mark is not text, and the refusals about inputs name what to run instead."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pytest import CaptureFixture

from tests.cli.test_cli import run
from tests.hf_tokenizers import bpe_tokenizer_dir, texts, write_jsonl


def one_line(code: int, err: str) -> bool:
    return code == 2 and "Traceback" not in err and "internal error" not in err and err.count("\n") == 1


# ---- 1. a tokenizer saved with truncation and padding ---------------------------------------------------

PAD = "[PAD]"


def released_tokenizer(clean: Path, out: Path) -> Path:
    """``clean`` as released tokenizers often are: saved after a call with truncation (64 tokens) and
    padding set, and a post-processor that puts a BOS before every text."""
    import shutil

    from tokenizers import AddedToken, Tokenizer, processors

    shutil.copytree(clean, out)
    tok = Tokenizer.from_file(str(clean / "tokenizer.json"))
    tok.add_special_tokens([AddedToken(PAD, special=True)])
    pad_id = tok.token_to_id(PAD)
    tok.enable_truncation(max_length=64)
    tok.enable_padding(length=64, pad_id=pad_id, pad_token=PAD)
    tok.post_processor = processors.TemplateProcessing(
        single="<|endoftext|> $A", special_tokens=[("<|endoftext|>", tok.token_to_id("<|endoftext|>"))]
    )
    tok.save(str(out / "tokenizer.json"))
    return out


@pytest.fixture
def tokenizers(tmp_path: Path) -> dict[str, Path]:
    clean = bpe_tokenizer_dir(tmp_path / "clean")
    return {"clean": clean, "released": released_tokenizer(clean, tmp_path / "released")}


def documents() -> list[str]:
    return [" ".join(texts(60, seed=3)), *texts(30, seed=4)]  # one document of ~800 tokens, then short ones


def test_a_saved_truncation_and_padding_do_not_cut_or_pad_documents(
    tokenizers: dict[str, Path], tmp_path: Path, capsys: CaptureFixture[str]
) -> None:
    from tokenizers import Tokenizer

    from seqpack.store import open_store
    from seqpack.tokenizer import open_tokenizer

    corpus = write_jsonl(tmp_path / "docs.jsonl", [{"text": t} for t in documents()])
    clean = Tokenizer.from_file(str(tokenizers["clean"] / "tokenizer.json"))
    want = [clean.encode(t, add_special_tokens=False).ids for t in documents()]
    assert len(want[0]) > 700
    pad_id = open_tokenizer(tokenizers["released"]).token_to_id(PAD)
    summaries = {}
    for name, tok in tokenizers.items():
        code, _, err = run(
            capsys,
            "tokenize",
            str(corpus),
            "--tokenizer",
            str(tok),
            "--out",
            str(tmp_path / f"s-{name}"),
            "--workers",
            "1",
        )
        assert code == 0, err
        store = open_store(tmp_path / f"s-{name}")
        got = [store[i].tolist() for i in range(len(store))]
        assert got == want  # whole, no BOS from the post-processor, no padding
        assert pad_id not in {t for doc in got for t in doc}
        code, out, err = run(
            capsys,
            "pack",
            str(tmp_path / f"s-{name}"),
            "--task",
            "clm",
            "--max-len",
            "1024",
            "--tokenizer",
            str(tok),
            "--out",
            str(tmp_path / f"p-{name}"),
            "--json",
        )
        assert code == 0, err
        summaries[name] = json.loads(out)
    r, c = summaries["released"], summaries["clean"]
    assert (r["num_packs"], r["efficiency"]) == (c["num_packs"], c["efficiency"])
    assert r["num_packs"] < len(want)  # several documents a pack, as their true lengths allow


def test_the_fingerprint_names_the_tokenizer_as_it_encodes(tokenizers: dict[str, Path]) -> None:
    from tokenizers import Tokenizer

    from seqpack.tokenizer import HFTokenizer, open_tokenizer

    tok = open_tokenizer(tokenizers["released"])
    assert isinstance(tok, HFTokenizer)
    first = tok.fingerprint()
    tok.encode_batch(documents())
    assert HFTokenizer.from_dir(tokenizers["released"]).fingerprint() == first  # the same on every load
    assert first != open_tokenizer(tokenizers["clean"]).fingerprint()  # the added [PAD] and BOS template differ
    given = Tokenizer.from_file(str(tokenizers["released"] / "tokenizer.json"))
    HFTokenizer(given)
    assert given.truncation is not None and given.padding is not None  # the caller's tokenizer is left as it was


def test_a_processor_saved_with_truncation_is_read_without_it(tmp_path: Path) -> None:
    pytest.importorskip("PIL")
    from seqpack.experiments.tiny_vlm import tiny_processor
    from seqpack.tasks.vision.processor import ProcessorTokenizer, load_processor

    p = tiny_processor("llava")
    p.tokenizer.backend_tokenizer.enable_truncation(max_length=8)
    p.tokenizer.backend_tokenizer.enable_padding(length=8)
    p.save_pretrained(tmp_path / "processor")
    saved = json.loads((tmp_path / "processor" / "tokenizer.json").read_text())
    assert saved["truncation"] and saved["padding"]
    q = load_processor(tmp_path / "processor")
    tok = ProcessorTokenizer(q)
    first = tok.fingerprint()
    text = " ".join(texts(5))
    assert len(q.tokenizer(text, add_special_tokens=False)["input_ids"]) > 8
    assert ProcessorTokenizer(q).fingerprint() == first  # the same before and after a call


# ---- 2. a config.json as transformers reads it ------------------------------------------------------------

#: Nemotron-H as its released config.json writes it: ``time_step_limit``'s infinity as transformers encodes it
NEMOTRON_H = {
    "model_type": "nemotron_h",
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 16,
    "intermediate_size": 64,
    "max_position_embeddings": 128,
    "mamba_num_heads": 2,
    "mamba_head_dim": 16,
    "ssm_state_size": 8,
    "n_groups": 1,
    "hybrid_override_pattern": "M*",
    "time_step_limit": [0.0, {"__float__": "Infinity"}],
}


@pytest.fixture
def packed(tmp_path: Path, capsys: CaptureFixture[str]) -> Path:
    from seqpack.pipeline import build_sharded_store
    from tests.store.test_store import byte_tokenizer
    from tests.tasks.test_sequences import text_docs

    tok = byte_tokenizer()
    tok.save(tmp_path / "tok")
    build_sharded_store(text_docs(40), tok, tmp_path / "store", shard_chars=500)
    code, _, err = run(
        capsys,
        "pack",
        str(tmp_path / "store"),
        "--task",
        "clm",
        "--max-len",
        "64",
        "--tokenizer",
        str(tmp_path / "tok"),
        "--out",
        str(tmp_path / "packed"),
    )
    assert code == 0, err
    return tmp_path / "packed"


def test_a_config_holding_a_float_tag_is_read(tmp_path: Path) -> None:
    from seqpack.train.models import read_config

    f = tmp_path / "config.json"
    f.write_text(json.dumps({**NEMOTRON_H, "text_config": {"limit": {"__float__": "-Infinity"}}}))
    d = read_config(f)
    assert d["time_step_limit"] == [0.0, float("inf")] and d["text_config"]["limit"] == float("-inf")


@pytest.mark.parametrize("padded", [False, True])
def test_a_hybrid_config_with_infinity_is_read_and_trained(
    packed: Path, tmp_path: Path, capsys: CaptureFixture[str], padded: bool
) -> None:
    """Read (its infinite time-step limit), built, and trained, packed or padded: its Mamba layers run
    on each document."""
    (tmp_path / "nemotron").mkdir()
    (tmp_path / "nemotron" / "config.json").write_text(json.dumps(NEMOTRON_H))
    code, _, err = run(
        capsys,
        "train",
        "--data",
        str(packed),
        "--out",
        str(tmp_path / "run"),
        "--hf-model",
        str(tmp_path / "nemotron"),
        "--steps",
        "1",
        "--quiet",
        *(["--padded"] if padded else []),
    )
    assert code == 0, err
    assert (tmp_path / "run" / "checkpoint.pt").exists()


def test_a_value_transformers_refuses_is_one_line(packed: Path, tmp_path: Path, capsys: CaptureFixture[str]) -> None:
    f = tmp_path / "config.json"
    f.write_text(json.dumps({**NEMOTRON_H, "time_step_limit": "forever"}))
    code, _, err = run(
        capsys,
        "train",
        "--data",
        str(packed),
        "--out",
        str(tmp_path / "run"),
        "--hf-model",
        str(f),
        "--steps",
        "1",
        "--quiet",
    )
    assert one_line(code, err) and f"--hf-model {f}: transformers refuses this nemotron_h config" in err
    assert "time_step_limit" in err


# ---- 3. a byte-order mark ------------------------------------------------------------------------------

BOM = "\ufeff"


@pytest.mark.parametrize("kind", ["txt", "jsonl"])
def test_a_byte_order_mark_is_not_part_of_the_first_document(
    tmp_path: Path, capsys: CaptureFixture[str], kind: str
) -> None:
    from seqpack.store import open_store
    from seqpack.tokenizer import Tokenizer

    code, _, err = run(
        capsys, "train-tokenizer", "--vocab-size", "300", "--out", str(tmp_path / "tok"), "--workers", "1"
    )
    assert code == 0, err
    docs = ["first document", "second one"]
    f = tmp_path / f"in.{kind}"
    body = "<|endoftext|>".join(docs) if kind == "txt" else "".join(json.dumps({"text": d}) + "\n" for d in docs)
    f.write_text(BOM + body, encoding="utf-8")
    code, _, err = run(capsys, "tokenize", str(f), "--tokenizer", str(tmp_path / "tok"), "--out", str(tmp_path / "s"))
    assert code == 0, err
    tok, store = Tokenizer.load(tmp_path / "tok"), open_store(tmp_path / "s")
    assert [tok.decode(store[i].tolist()) for i in range(len(store))] == docs


@pytest.mark.parametrize("size", ["small", "chunked"])
def test_train_tokenizer_learns_no_token_of_a_byte_order_mark(
    tmp_path: Path, capsys: CaptureFixture[str], size: str
) -> None:
    from seqpack.tokenizer import Tokenizer
    from seqpack.tokenizer.pretokenize import file_chunks

    text = " ".join(texts(400 if size == "chunked" else 40, seed=1))
    with_bom, without = tmp_path / "bom.txt", tmp_path / "plain.txt"
    with_bom.write_text(BOM + text, encoding="utf-8")
    without.write_text(text, encoding="utf-8")
    target = 4096 if size == "chunked" else 1 << 20
    chunks = list(file_chunks(with_bom, target))
    assert chunks[0].start == 3 and chunks[-1].end == with_bom.stat().st_size
    assert (len(chunks) > 1) == (size == "chunked")
    made, counted = {}, {}
    for name, f in (("bom", with_bom), ("plain", without)):
        code, out, err = run(
            capsys,
            "train-tokenizer",
            str(f),
            "--vocab-size",
            "300",
            "--out",
            str(tmp_path / name),
            "--workers",
            "1",
            "--json",
        )
        assert code == 0, err
        made[name] = Tokenizer.load(tmp_path / name)
        counted[name] = {k: json.loads(out)[k] for k in ("num_words", "num_pretokens")}
    assert counted["bom"] == counted["plain"]  # the mark is no pre-token
    assert made["bom"].vocab == made["plain"].vocab
    assert not any(BOM.encode("utf-8") in v for v in made["bom"].vocab.values())


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="reads a pipe by its /proc/self/fd path")
def test_a_byte_order_mark_on_a_pipe_is_not_text(tmp_path: Path, capsys: CaptureFixture[str]) -> None:
    """The stream path of train-tokenizer (standard input, a FIFO): the pipe is read as a file is."""
    import os

    from seqpack.tokenizer import Tokenizer

    text = " ".join(texts(40, seed=1))
    (tmp_path / "plain.txt").write_text(text, encoding="utf-8")
    code, plain, _ = run(
        capsys,
        "train-tokenizer",
        str(tmp_path / "plain.txt"),
        "--vocab-size",
        "300",
        "--out",
        str(tmp_path / "plain"),
        "--workers",
        "1",
        "--json",
    )
    assert code == 0
    data = (BOM + text).encode("utf-8")
    assert len(data) < 16_384  # within a pipe's buffer: written whole before it is read
    r, w = os.pipe()
    try:
        os.write(w, data)
        os.close(w)
        code, piped, err = run(
            capsys,
            "train-tokenizer",
            f"/proc/self/fd/{r}",
            "--vocab-size",
            "300",
            "--out",
            str(tmp_path / "piped"),
            "--workers",
            "1",
            "--json",
        )
    finally:
        os.close(r)
    assert code == 0, err
    assert json.loads(piped)["num_pretokens"] == json.loads(plain)["num_pretokens"]  # the mark is no pre-token
    assert Tokenizer.load(tmp_path / "piped").vocab == Tokenizer.load(tmp_path / "plain").vocab


# ---- 4. a folder of files without the suffixes looked for -----------------------------------------------


@pytest.mark.parametrize("command", ["tokenize", "train-tokenizer"])
def test_a_folder_without_text_suffixes_names_glob(tmp_path: Path, capsys: CaptureFixture[str], command: str) -> None:
    folder = tmp_path / "corpus"
    folder.mkdir()
    for i in range(3):
        (folder / f"doc{i}.data").write_text(f"document number {i}", encoding="utf-8")
    tok = tmp_path / "tok"
    assert run(capsys, "train-tokenizer", "--vocab-size", "270", "--out", str(tok), "--workers", "1")[0] == 0
    extra = ["--tokenizer", str(tok)] if command == "tokenize" else ["--vocab-size", "270"]
    code, _, err = run(capsys, command, str(folder), *extra, "--out", str(tmp_path / "out"))
    assert one_line(code, err) and "no input files in it (looked for .txt" in err and "--glob '*'" in err, err
    code, _, err = run(capsys, command, str(folder), *extra, "--out", str(tmp_path / "out"), "--glob", "*")
    assert code == 0, err  # what the message says to run works
