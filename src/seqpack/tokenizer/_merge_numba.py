"""The fast BPE merge loop, compiled with numba (``cache=True``).

Data layout (all flat arrays, no Python objects in the loop)::

    words  "ab", "aab" (counts 3, 1)
    tok    [a b | a a b]      token id per position; -1 once a position is merged away
    nxt    [1 -1| 3 4 -1]     next live position in the same word, -1 at the end
    prv    [-1 0| -1 2 3]     previous live position, -1 at the start
    wgt    [3 3 | 1 1 1]      count of the word that owns the position

    pair table   open-addressing hash (a << 32 | b) -> pair index
    pair index   pa, pb (tokens), pc (current count), head (occurrence list)
    occurrences  singly linked lists of positions: (occ_pos, occ_next); stale
                 entries are skipped when read (position no longer holds (a, b))
    heap         max-heap of (count, pair) ordered by count, then by the byte
                 strings of (a, b) lexicographically. A pair gets an entry when
                 its count rises; a popped entry above the current count is
                 re-queued with the current count, one below it is dropped (a
                 newer entry exists), one equal to it is the winner

Each merge visits only the occurrences of the winning pair and updates the counts
of the at most four neighbouring pairs per occurrence (the inverted index with
incremental updates), so the loop costs O(changes log pairs), not O(corpus).
"""

from __future__ import annotations

import numpy as np
from numba import njit

_EMPTY = np.int64(-1)


@njit(cache=True, inline="always")
def _hash(key: np.int64, mask: np.int64) -> np.int64:
    h = np.uint64(key) * np.uint64(11400714819323198485)
    return np.int64(h >> np.uint64(40)) & mask


@njit(cache=True)
def _rehash(keys, vals, new_cap):
    nk = np.full(new_cap, -1, dtype=np.int64)
    nv = np.empty(new_cap, dtype=np.int32)
    mask = np.int64(new_cap - 1)
    for i in range(keys.shape[0]):
        k = keys[i]
        if k != -1:
            h = _hash(k, mask)
            while nk[h] != -1:
                h = (h + 1) & mask
            nk[h] = k
            nv[h] = vals[i]
    return nk, nv


@njit(cache=True)
def _grow_i32(a):
    b = np.empty(a.shape[0] * 2, dtype=np.int32)
    b[: a.shape[0]] = a
    return b


@njit(cache=True)
def _grow_i64(a):
    b = np.empty(a.shape[0] * 2, dtype=np.int64)
    b[: a.shape[0]] = a
    return b


@njit(cache=True)
def _grow_u8(a, need):
    n = a.shape[0] * 2
    while n < need:
        n *= 2
    b = np.empty(n, dtype=np.uint8)
    b[: a.shape[0]] = a
    return b


@njit(cache=True, inline="always")
def _cmp_tokens(x, y, tb, toff, tlen) -> int:
    """Compare the byte strings of tokens x and y: -1, 0 or 1."""
    if x == y:
        return 0
    ox, oy, lx, ly = toff[x], toff[y], tlen[x], tlen[y]
    n = min(lx, ly)
    for i in range(n):
        bx, by = tb[ox + i], tb[oy + i]
        if bx != by:
            return -1 if bx < by else 1
    if lx == ly:
        return 0
    return -1 if lx < ly else 1


@njit(cache=True, inline="always")
def _entry_gt(c1, p1, c2, p2, pa, pb, tb, toff, tlen) -> bool:
    """(count, bytes(a), bytes(b)) of entry 1 > that of entry 2."""
    if c1 != c2:
        return c1 > c2
    r = _cmp_tokens(pa[p1], pa[p2], tb, toff, tlen)
    if r != 0:
        return r > 0
    return _cmp_tokens(pb[p1], pb[p2], tb, toff, tlen) > 0


@njit(cache=True)
def _heap_push(hc, hp, n, c, p, pa, pb, tb, toff, tlen):
    if n == hc.shape[0]:
        hc = _grow_i64(hc)
        hp = _grow_i32(hp)
    i = n
    while i > 0:
        parent = (i - 1) >> 1
        if _entry_gt(c, p, hc[parent], hp[parent], pa, pb, tb, toff, tlen):
            hc[i] = hc[parent]
            hp[i] = hp[parent]
            i = parent
        else:
            break
    hc[i] = c
    hp[i] = p
    return hc, hp, n + 1


@njit(cache=True)
def _heap_pop(hc, hp, n, pa, pb, tb, toff, tlen):
    """Remove the top; returns the new size (top must be read before)."""
    n -= 1
    c, p = hc[n], hp[n]
    i = 0
    while True:
        left = 2 * i + 1
        if left >= n:
            break
        best = left
        right = left + 1
        if right < n and _entry_gt(hc[right], hp[right], hc[left], hp[left], pa, pb, tb, toff, tlen):
            best = right
        if _entry_gt(hc[best], hp[best], c, p, pa, pb, tb, toff, tlen):
            hc[i] = hc[best]
            hp[i] = hp[best]
            i = best
        else:
            break
    if n > 0:
        hc[i] = c
        hp[i] = p
    return n


@njit(cache=True)
def _init_positions(wbytes, woff, wcount):
    """Per-position token, links and weight for the words laid out in ``wbytes``."""
    P = wbytes.shape[0]
    tok = np.empty(P, dtype=np.int32)
    nxt = np.empty(P, dtype=np.int32)
    prv = np.empty(P, dtype=np.int32)
    wgt = np.empty(P, dtype=np.int64)
    for w in range(wcount.shape[0]):
        s, e = woff[w], woff[w + 1]
        for i in range(s, e):
            tok[i] = wbytes[i]
            nxt[i] = i + 1 if i + 1 < e else -1
            prv[i] = i - 1 if i > s else -1
            wgt[i] = wcount[w]
    return tok, nxt, prv, wgt


@njit(cache=True)
def _pop_best(hc, hp, n_heap, pc, pa, pb, tb, toff, tlen):
    """Pop entries until one holds its pair's current count; -1 if none is left."""
    while n_heap > 0:
        c, p = hc[0], hp[0]
        n_heap = _heap_pop(hc, hp, n_heap, pa, pb, tb, toff, tlen)
        if c == pc[p] and c > 0:
            return p, hc, hp, n_heap
        if c > pc[p] and pc[p] > 0:  # decreased since pushed: re-queue
            hc, hp, n_heap = _heap_push(hc, hp, n_heap, pc[p], p, pa, pb, tb, toff, tlen)
    return np.int32(-1), hc, hp, n_heap


@njit(cache=True)
def _append_token(tb, tb_used, toff, tlen, a, b, new):
    """Store the bytes of token ``new`` = bytes(a) + bytes(b)."""
    la, lb = tlen[a], tlen[b]
    if tb_used + la + lb > tb.shape[0]:
        tb = _grow_u8(tb, tb_used + la + lb)
    tb[tb_used : tb_used + la] = tb[toff[a] : toff[a] + la]
    tb[tb_used + la : tb_used + la + lb] = tb[toff[b] : toff[b] + lb]
    toff[new] = tb_used
    tlen[new] = la + lb
    return tb, tb_used + la + lb


@njit(cache=True)
def _collect_sites(first, occ_pos, occ_next, in_order):
    """Positions on one occurrence list (sorted when ``in_order``: left to right
    matters for pairs (a, a))."""
    k = 0
    o = first
    while o != -1:
        k += 1
        o = occ_next[o]
    sites = np.empty(k, dtype=np.int32)
    k = 0
    o = first
    while o != -1:
        sites[k] = occ_pos[o]
        k += 1
        o = occ_next[o]
    if in_order:
        sites.sort()
    return sites


@njit(cache=True)
def bpe_merge_loop(wbytes, woff, wcount, num_merges):  # noqa: C901 - one tight kernel
    # Deliberately one long function (~190 lines): numba compiles it into one loop nest whose
    # heap and pair-count arrays stay in registers/locals; splitting it into helper calls
    # costs speed in the hottest loop of training.
    """Run up to ``num_merges`` BPE merges over words given as flat UTF-8 bytes.

    wbytes: uint8 (P,) bytes of all distinct words, concatenated
    woff:   int64 (W+1,) word offsets into wbytes
    wcount: int64 (W,) occurrences of each word
    Returns (left, right) int32 arrays of the merged token ids, in order; token
    ids are 0..255 for bytes and 256 + k for the token created by merge k.
    """
    P = wbytes.shape[0]
    tok, nxt, prv, wgt = _init_positions(wbytes, woff, wcount)

    # token byte strings
    max_tokens = 256 + num_merges
    toff = np.zeros(max_tokens, dtype=np.int64)
    tlen = np.zeros(max_tokens, dtype=np.int64)
    tb = np.empty(max(1024, 4 * max_tokens), dtype=np.uint8)
    for t in range(256):
        tb[t] = t
        toff[t] = t
        tlen[t] = 1
    tb_used = 256

    # pair table
    cap = 1024
    while cap < 4 * P:
        cap *= 2
    keys = np.full(cap, -1, dtype=np.int64)
    vals = np.empty(cap, dtype=np.int32)
    n_keys = 0
    pa = np.empty(1024, dtype=np.int32)
    pb = np.empty(1024, dtype=np.int32)
    pc = np.empty(1024, dtype=np.int64)
    head = np.empty(1024, dtype=np.int32)
    touched = np.empty(1024, dtype=np.int32)  # last merge round that raised the count
    n_pairs = 0
    occ_pos = np.empty(max(1024, P), dtype=np.int32)
    occ_next = np.empty(max(1024, P), dtype=np.int32)
    n_occ = 0
    hc = np.empty(1024, dtype=np.int64)
    hp = np.empty(1024, dtype=np.int32)
    n_heap = 0
    changed = np.empty(1024, dtype=np.int32)

    left = np.empty(num_merges, dtype=np.int32)
    right = np.empty(num_merges, dtype=np.int32)
    best = np.int32(-1)

    for rnd in range(-1, num_merges):
        # ---- round -1 indexes the initial pairs; round m >= 0 performs merge m
        n_changed = 0
        if rnd >= 0:
            # pop the best live pair
            best, hc, hp, n_heap = _pop_best(hc, hp, n_heap, pc, pa, pb, tb, toff, tlen)
            if best < 0:
                return left[:rnd], right[:rnd]
            a, b = pa[best], pb[best]
            new = 256 + rnd
            left[rnd] = a
            right[rnd] = b
            tb, tb_used = _append_token(tb, tb_used, toff, tlen, a, b, new)
            sites = _collect_sites(head[best], occ_pos, occ_next, a == b)
            head[best] = -1
            n_sites = sites.shape[0]
        else:
            n_sites = P
            sites = np.empty(0, dtype=np.int32)
            a = b = new = -1

        for si in range(n_sites):
            # each site yields up to 2 pair decrements and 2 increments: (key, delta, pos)
            if rnd < 0:
                i = si
                j = nxt[i]
                if j == -1:
                    continue
                ops_n = 1
                k0 = (np.int64(tok[i]) << 32) | tok[j]
                d0 = wgt[i]
                q0 = i
                k1 = k2 = k3 = np.int64(0)
                d1 = d2 = d3 = np.int64(0)
                q1 = q2 = q3 = -1
            else:
                i = sites[si]
                if tok[i] != a:
                    continue
                j = nxt[i]
                if j == -1 or tok[j] != b:
                    continue
                w = wgt[i]
                pc[best] -= w
                ops_n = 0
                k0 = k1 = k2 = k3 = np.int64(0)
                d0 = d1 = d2 = d3 = np.int64(0)
                q0 = q1 = q2 = q3 = -1
                pi = prv[i]
                nj = nxt[j]
                if pi != -1:
                    x = np.int64(tok[pi])
                    k0 = (x << 32) | a
                    d0 = -w
                    k1 = (x << 32) | new
                    d1 = w
                    q1 = pi
                    ops_n = 2
                if nj != -1:
                    y = np.int64(tok[nj])
                    if ops_n == 0:
                        k0 = (np.int64(b) << 32) | y
                        d0 = -w
                        k1 = (np.int64(new) << 32) | y
                        d1 = w
                        q1 = i
                        ops_n = 2
                    else:
                        k2 = (np.int64(b) << 32) | y
                        d2 = -w
                        k3 = (np.int64(new) << 32) | y
                        d3 = w
                        q3 = i
                        ops_n = 4
                tok[i] = new
                nxt[i] = nj
                if nj != -1:
                    prv[nj] = i
                tok[j] = -1
            for op in range(ops_n):
                if op == 0:
                    key, delta, pos = k0, d0, q0
                elif op == 1:
                    key, delta, pos = k1, d1, q1
                elif op == 2:
                    key, delta, pos = k2, d2, q2
                else:
                    key, delta, pos = k3, d3, q3
                # find or insert the pair
                mask = np.int64(keys.shape[0] - 1)
                h = _hash(key, mask)
                while keys[h] != -1 and keys[h] != key:
                    h = (h + 1) & mask
                if keys[h] == key:
                    p = vals[h]
                else:
                    if delta < 0:  # pragma: no cover - a live pair always exists
                        continue
                    if n_pairs == pa.shape[0]:
                        pa = _grow_i32(pa)
                        pb = _grow_i32(pb)
                        pc = _grow_i64(pc)
                        head = _grow_i32(head)
                        touched = _grow_i32(touched)
                    p = n_pairs
                    n_pairs += 1
                    pa[p] = np.int32(key >> 32)
                    pb[p] = np.int32(key & 0xFFFFFFFF)
                    pc[p] = 0
                    head[p] = -1
                    touched[p] = -2
                    keys[h] = key
                    vals[h] = p
                    n_keys += 1
                    if 2 * n_keys > keys.shape[0]:
                        keys, vals = _rehash(keys, vals, keys.shape[0] * 2)
                pc[p] += delta
                if pos >= 0:
                    if n_occ == occ_pos.shape[0]:
                        occ_pos = _grow_i32(occ_pos)
                        occ_next = _grow_i32(occ_next)
                    occ_pos[n_occ] = pos
                    occ_next[n_occ] = head[p]
                    head[p] = n_occ
                    n_occ += 1
                if delta > 0 and touched[p] != rnd:
                    touched[p] = rnd
                    if n_changed == changed.shape[0]:
                        changed = _grow_i32(changed)
                    changed[n_changed] = p
                    n_changed += 1
        # one heap entry per pair whose count rose in this round; a pair whose
        # count fell keeps its old (too high) entry, re-queued when it is popped
        for ci in range(n_changed):
            p = changed[ci]
            if pc[p] > 0 and (rnd < 0 or p != best):
                hc, hp, n_heap = _heap_push(hc, hp, n_heap, pc[p], p, pa, pb, tb, toff, tlen)
    return left, right
