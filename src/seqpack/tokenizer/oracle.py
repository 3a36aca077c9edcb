"""The slow, obviously correct BPE trainer. The fast one is tested against it.

Every merge recounts every pair from scratch, picks the most frequent pair
(ties: the lexicographically greater pair of byte strings) and rewrites every
word left to right. minbpe-style, O(merges x corpus).

    >>> vocab, merges = train_bpe_oracle_from_counts({"low": 5, "lower": 2, "newest": 6}, 259)
    >>> merges
    [(b'w', b'e'), (b'l', b'o'), (b'we', b's')]
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from seqpack.tokenizer.pretokenize import count_words


def merge_word(word: list[bytes], pair: tuple[bytes, bytes]) -> list[bytes]:
    """Replace each occurrence of ``pair`` in ``word``, left to right.

    >>> merge_word([b"a", b"a", b"a"], (b"a", b"a"))
    [b'aa', b'a']
    """
    out: list[bytes] = []
    i = 0
    while i < len(word):
        if i + 1 < len(word) and (word[i], word[i + 1]) == pair:
            out.append(word[i] + word[i + 1])
            i += 2
        else:
            out.append(word[i])
            i += 1
    return out


def train_bpe_oracle_from_counts(
    word_counts: Mapping[str, int],
    vocab_size: int,
    special_tokens: Sequence[str] = (),
) -> tuple[dict[int, bytes], list[tuple[bytes, bytes]]]:
    """Train from ``{word: count}``; ids: bytes 0..255, specials, then merges."""
    vocab: dict[int, bytes] = {i: bytes([i]) for i in range(256)}
    for s in special_tokens:
        vocab[len(vocab)] = s.encode("utf-8")
    words = [([bytes([c]) for c in w.encode("utf-8")], n) for w, n in word_counts.items()]
    merges: list[tuple[bytes, bytes]] = []
    while len(vocab) < vocab_size:
        pairs: Counter[tuple[bytes, bytes]] = Counter()
        for toks, n in words:
            for pair in itertools.pairwise(toks):
                pairs[pair] += n
        if not pairs:
            break
        best = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))[0]
        merges.append(best)
        vocab[len(vocab)] = best[0] + best[1]
        words = [(merge_word(toks, best), n) for toks, n in words]
    return vocab, merges


def train_bpe_oracle(
    documents: Iterable[str], vocab_size: int, special_tokens: Sequence[str] = ()
) -> tuple[dict[int, bytes], list[tuple[bytes, bytes]]]:
    """Oracle trainer over in-memory documents (single process)."""
    counts = count_words(documents, special_tokens=special_tokens)
    return train_bpe_oracle_from_counts(counts, vocab_size, special_tokens)
