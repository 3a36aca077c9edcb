"""The stage records' helpers: the file checksum, read a buffer at a time, and the documents' digest."""

import zlib

from hypothesis import given, settings
from hypothesis import strategies as st

from seqpack._stages import corpus_hash, file_checksum


@settings(max_examples=60, deadline=None)
@given(data=st.binary(max_size=200), chunk=st.integers(1, 17))
def test_checksum_equals_one_crc_of_the_whole_file(tmp_path_factory, data, chunk):
    # a file across many reads (1-17 byte buffers), or none when empty: the same size and CRC as one pass
    p = tmp_path_factory.mktemp("c") / "f"
    p.write_bytes(data)
    assert file_checksum(p, chunk=chunk) == f"{len(data)}:{zlib.crc32(data):08x}"


M64 = (1 << 64) - 1


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & M64


def _fmix(h: int) -> int:
    h ^= h >> 33
    h = (h * 0xFF51AFD7ED558CCD) & M64
    h ^= h >> 33
    h = (h * 0xC4CEB9FE1A85EC53) & M64
    return h ^ (h >> 33)


def digest_reference(texts: list[str]) -> str:
    """csrc/common.h's Digest128, word by word in Python: each text's UTF-8 through MurmurHash3's
    x64 128-bit steps, seeded with the digest so far."""
    c1, c2 = 0x87C37B91114253D5, 0x4CF5AD432745937F
    a, b = 0x6A09E667F3BCC908, 0xBB67AE8584CAA73B
    for t in texts:
        p = t.encode("utf-8")
        h1, h2 = a, b
        full = len(p) // 16 * 16
        blocks = [p[i : i + 16] for i in range(0, full, 16)]
        tail = p[full:].ljust(16, b"\x00")
        for blk in blocks:
            k1, k2 = int.from_bytes(blk[:8], "little"), int.from_bytes(blk[8:], "little")
            h1 ^= (_rotl((k1 * c1) & M64, 31) * c2) & M64
            h1 = (_rotl(h1, 27) + h2) & M64
            h1 = (h1 * 5 + 0x52DCE729) & M64
            h2 ^= (_rotl((k2 * c2) & M64, 33) * c1) & M64
            h2 = (_rotl(h2, 31) + h1) & M64
            h2 = (h2 * 5 + 0x38495AB5) & M64
        k1, k2 = int.from_bytes(tail[:8], "little"), int.from_bytes(tail[8:], "little")
        h1 ^= (_rotl((k1 * c1) & M64, 31) * c2) & M64
        h2 ^= (_rotl((k2 * c2) & M64, 33) * c1) & M64
        h1 ^= len(p)
        h2 ^= len(p)
        h1 = (h1 + h2) & M64
        h2 = (h2 + h1) & M64
        h1, h2 = _fmix(h1), _fmix(h2)
        a = (h1 + h2) & M64
        b = (h2 + a) & M64
    return f"{a:016x}{b:016x}"


@settings(max_examples=100, deadline=None)
@given(texts=st.lists(st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=40), max_size=6))
def test_corpus_hash_is_the_reference_digest(texts):
    # every block length and tail (0-15 bytes), 1-4 byte characters, empty texts and no text
    assert corpus_hash(texts) == digest_reference(texts) == corpus_hash(tuple(texts)) == corpus_hash(iter(texts))


def test_corpus_hash_tells_order_boundaries_and_content():
    base = corpus_hash(["ab", "cd"])
    assert (
        len(
            {
                base,
                corpus_hash(["cd", "ab"]),
                corpus_hash(["a", "bcd"]),
                corpus_hash(["abcd"]),
                corpus_hash(["ab", "cd", ""]),
                corpus_hash(["ab", "ce"]),
            }
        )
        == 6
    )
    # pinned: the keys of work a run left stay valid across seqpack versions as long as this holds
    assert corpus_hash([]) == "6a09e667f3bcc908bb67ae8584caa73b"
    assert corpus_hash(["ab"]) == "269e183d940b078c5b8e0faad1cb816b"


def test_corpus_hash_of_text_utf8_cannot_hold_is_sha256():
    assert len(corpus_hash(["a\ud800b"])) == 64 and corpus_hash(["a\ud800b"]) != corpus_hash(["a\ud801b"])
