// Byte-level BPE encoding with a per-worker word cache.
//
// Within a pre-token the lowest-ranked adjacent pair is merged, every occurrence, left to
// right, until no adjacent pair is a merge (minbpe's rule; the Python Tokenizer._bpe).
//   merges (a,b)->256, (256,c)->257:  "abc" -> [97 98 99] -> [256 99] -> [257]
#pragma once
#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <queue>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "common.h"
#include "pretokenize.h"

namespace seqpack {

struct Merge {
  uint32_t rank;
  uint32_t id;
};

// kLaneMasks.m[n]: which bytes of each 64-bit lane belong to a word of n <= 24 bytes.
struct LaneMask {
  uint64_t mask[3];
};
struct LaneMasks {
  LaneMask m[25];
  constexpr LaneMasks() : m() {
    for (size_t n = 0; n <= 24; ++n) {
      for (size_t i = 0; i < 3; ++i) {
        const size_t k = n > 8 * i ? (n - 8 * i < 8 ? n - 8 * i : 8) : 0;
        m[n].mask[i] = k == 8 ? ~0ULL : (1ULL << (8 * k)) - 1;
      }
    }
  }
};
inline constexpr LaneMasks kLaneMasks{};

// A pre-token as the word cache sees it: its bytes, and for words up to 24 bytes the same bytes
// zero-padded in three 64-bit lanes, which hash and compare without a branch on the length.
struct WordKey {
  static constexpr size_t kLanes = 3, kShort = 8 * kLanes;
  const uint8_t* p;
  size_t n;
  uint64_t lane[kLanes];
  uint64_t h;

  // `end`: where the readable bytes after p stop (a short word far from it is read in whole lanes)
  void set(const uint8_t* word, size_t len, const uint8_t* end) {
    p = word;
    n = len;
    if (n > kShort) {
      h = hash_bytes(p, n);
      return;
    }
    const size_t room = static_cast<size_t>(end - p);
    if (n <= 8 && room >= 8) {  // most words: one lane, one product
      lane[0] = load64(p) & kLaneMasks.m[n].mask[0];
      lane[1] = lane[2] = 0;
    } else if (room >= kShort) {
      const LaneMask& m = kLaneMasks.m[n];
      for (size_t i = 0; i < kLanes; ++i) lane[i] = load64(p + 8 * i) & m.mask[i];
    } else {
      uint8_t tmp[kShort] = {};
      std::memcpy(tmp, p, n);
      for (size_t i = 0; i < kLanes; ++i) lane[i] = load64(tmp + 8 * i);
    }
    // the hash depends on the bytes and n alone, whichever way the lanes were read
    h = n <= 8 ? fold(lane[0] ^ 0x9E3779B97F4A7C15ULL, n ^ 0x589965cc75374cc3ULL)
               : fold(lane[0] ^ 0x9E3779B97F4A7C15ULL, lane[1] ^ 0xe7037ed1a0b428dbULL) ^
                     fold(lane[2] ^ 0x8ebc6af09c88c6e3ULL, n ^ 0x589965cc75374cc3ULL);
  }

 private:
  // the high and low halves of a 128-bit product, xored (wyhash's mixing step)
  static uint64_t fold(uint64_t a, uint64_t b) {
    const unsigned __int128 r = static_cast<unsigned __int128>(a) * b;
    return static_cast<uint64_t>(r) ^ static_cast<uint64_t>(r >> 64);
  }
  static_assert(kLanes == 3 && kShort == 24, "kLaneMasks' shape");
};

// Ids of pre-tokens already encoded: word -> ids. One 64-byte entry (one cache line) per word,
// with the word and its ids inline when they fit (up to 24 bytes and 6 ids: almost every word), so
// a hit reads one line; longer ones live in a pool. Open addressing, linear probing, at most half
// full; once kMaxWords words are in, the cache starts again empty.
// Emptying it writes nothing: each entry's key carries the generation it was made in, and clear()
// starts a new one (entries of older generations are empty slots, to find and to insert). Only
// once every 2^16 - 1 clears is the table zeroed (a full one is 64 MB).
//   insert(key("hello"), {31373}); find(key("hello")) -> {31373}
class WordCache {
 public:
  static constexpr size_t kMaxWords = 1 << 19;  // at most 2^20 entries: 64 MB
  static constexpr size_t kMaxPool = 1 << 26;   // bytes of long words and long id lists
  static constexpr size_t kIdsInline = 6;

  WordCache() { clear(); }
  size_t size() const { return count_; }

  // The ids of the word (*len of them), or nullptr. Up to kIdsInline ids, the pointer may be read
  // kIdsInline ids long (copy them whole, keep *len).
  const uint32_t* find(const WordKey& k, size_t* len) const {
    const Entry& e = table_[slot(k)];
    if (!live(e)) return nullptr;
    *len = e.nids;
    return e.nids <= kIdsInline ? e.ids : long_ids(e);
  }

  void prefetch(const WordKey& k) const { prefetch_read(&table_[k.h & mask_]); }

  // The caller has just found the word missing.
  void insert(const WordKey& k, const uint32_t* ids, size_t len) {
    if (count_ >= kMaxWords || pool_.size() + k.n + 4 * (len + 1) > kMaxPool) clear();
    if (2 * (count_ + 1) > table_.size()) grow();
    Entry& e = table_[slot(k)];
    if (live(e)) return;
    e.key = tag(k.h);
    e.len = static_cast<uint32_t>(k.n);
    e.nids = static_cast<uint32_t>(len);
    if (k.n <= WordKey::kShort) {
      std::memcpy(e.lane, k.lane, sizeof e.lane);
    } else {
      e.lane[0] = pool_.size();
      pool_.append(reinterpret_cast<const char*>(k.p), k.n);
    }
    if (len <= kIdsInline) {
      std::memcpy(e.ids, ids, len * sizeof(uint32_t));
    } else {
      pool_.resize((pool_.size() + 3) & ~size_t{3});  // ids 4-byte aligned
      e.ids[0] = static_cast<uint32_t>(pool_.size());
      pool_.append(reinterpret_cast<const char*>(ids), len * sizeof(uint32_t));
    }
    ++count_;
  }

  // Empty, at the size it had grown to (growing again costs more than clearing).
  void clear() {
    if (table_.empty()) table_.resize(1024);
    if (++generation_ > kLastGeneration) {
      std::fill(table_.begin(), table_.end(), Entry{});
      generation_ = 1;
    }
    mask_ = table_.size() - 1;
    count_ = 0;
    pool_.clear();
  }

 private:
  // a key: the generation (1 .. kLastGeneration) in its top 16 bits, the word's hash below; an
  // entry whose generation is not the current one (0: never written) is empty
  static constexpr int kHashBits = 48;
  static constexpr uint64_t kHashMask = (uint64_t{1} << kHashBits) - 1, kLastGeneration = (1 << 16) - 1;
  struct Entry {  // 64 bytes
    uint64_t key = 0;  // generation << kHashBits | hash & kHashMask
    uint32_t len = 0, nids = 0;
    uint64_t lane[WordKey::kLanes] = {};  // the word's lanes, or lane[0]: its offset in pool_
    uint32_t ids[kIdsInline] = {};        // the ids, or ids[0]: their offset in pool_
  };
  static_assert(sizeof(Entry) == 64, "one cache line per word");
  static_assert(kMaxPool < (1ULL << 32), "pool offsets fit in an id slot");

  uint64_t tag(uint64_t h) const { return (generation_ << kHashBits) | (h & kHashMask); }
  bool live(const Entry& e) const { return (e.key >> kHashBits) == generation_; }

  // The entry holding the word, or the empty one where it would go.
  size_t slot(const WordKey& k) const {
    const uint64_t key = tag(k.h);
    for (size_t s = k.h & mask_;; s = (s + 1) & mask_) {
      const Entry& e = table_[s];
      if (!live(e)) return s;
      if (e.key != key || e.len != k.n) continue;
      if (k.n <= WordKey::kShort) {
        if (((e.lane[0] ^ k.lane[0]) | (e.lane[1] ^ k.lane[1]) | (e.lane[2] ^ k.lane[2])) == 0) return s;
      } else if (bytes_equal(reinterpret_cast<const uint8_t*>(pool_.data()) + e.lane[0], k.p, k.n)) {
        return s;
      }
    }
  }
  void grow() {
    std::vector<Entry, HugePageAllocator<Entry>> old(2 * table_.size());
    old.swap(table_);
    mask_ = table_.size() - 1;
    for (const Entry& e : old) {  // the live ones, into a zeroed table
      if (!live(e)) continue;
      size_t s = e.key & mask_;
      while (table_[s].key != 0) s = (s + 1) & mask_;
      table_[s] = e;
    }
  }
  const uint32_t* long_ids(const Entry& e) const {
    return reinterpret_cast<const uint32_t*>(pool_.data() + e.ids[0]);
  }

  std::vector<Entry, HugePageAllocator<Entry>> table_;
  size_t mask_ = 0;
  size_t count_ = 0;
  uint64_t generation_ = 0;  // clear() makes it 1 at the start
  std::string pool_;  // long words and long id lists
};

// The immutable part of a tokenizer: byte ids, merge ranks, special tokens.
class EncoderCore {
 public:
  EncoderCore(std::vector<uint32_t> byte_ids, const std::vector<uint32_t>& left,
              const std::vector<uint32_t>& right, const std::vector<uint32_t>& merged,
              std::vector<std::string> specials, std::vector<uint32_t> special_ids)
      : byte_ids_(std::move(byte_ids)),
        merges_(left.size()),
        splitter_(specials),
        special_ids_(std::move(special_ids)) {
    if (byte_ids_.size() != 256) throw std::invalid_argument("byte_ids must give an id to each of the 256 bytes");
    for (size_t r = 0; r < left.size(); ++r) {  // the first merge of a pair wins, as in Tokenizer._ranks
      bool inserted;
      Merge& m = merges_.get(pair_key(left[r], right[r]), &inserted);
      if (inserted) m = Merge{static_cast<uint32_t>(r), merged[r]};
    }
    // the filter: 16 bits a merge (a power of two), one set per pair
    int bits = 10;
    while ((size_t{1} << bits) < 16 * left.size()) ++bits;
    filter_shift_ = 64 - bits;
    filter_.assign((size_t{1} << bits) / 64, 0);
    for (size_t r = 0; r < left.size(); ++r) {
      const uint64_t b = mix64(pair_key(left[r], right[r])) >> filter_shift_;
      filter_[b >> 6] |= uint64_t{1} << (b & 63);
    }
    build_tokens(left, right, merged);
    // every pair of bytes' merge, by the bytes: BPE's first lookups in a word, without hashing
    byte_pairs_.resize(1 << 16);
    for (size_t x = 0; x < 256; ++x) {
      for (size_t y = 0; y < 256; ++y) {
        const Merge* g = lookup(byte_ids_[x], byte_ids_[y]);
        byte_pairs_[x << 8 | y] = g ? *g : Merge{kNone, 0};
      }
    }
  }

  const std::vector<uint32_t>& byte_ids() const { return byte_ids_; }
  const std::vector<uint32_t>& special_ids() const { return special_ids_; }

  // Append the ids of `text` (valid UTF-8; special tokens split it) to `out`.
  void encode(const uint8_t* s, size_t n, WordCache& cache, Ids& out,
              std::vector<uint32_t>& scratch) const {
    splitter_.split(
        s, n,
        [&](size_t a, size_t b) { encode_ordinary(s + a, b - a, cache, out, scratch); },
        [&](size_t k) { out.push_back(special_ids_[k]); });
  }

  // A cut of s[0, n) in [lo, hi] after which encoding the two sides gives the same ids as the
  // whole (see safe_cut; never inside a special token), or 0.
  size_t cut_point(const uint8_t* s, size_t n, size_t lo, size_t hi) const {
    return safe_cut(s, n, lo, hi, [&](size_t c) { return !splitter_.straddles(s, n, c); });
  }

  // Words go through in batches of kBatch: the cache entries of a batch are fetched from memory
  // together (prefetched as the words are found), not one miss after another.
  static constexpr size_t kBatch = 16;
  void encode_ordinary(const uint8_t* s, size_t n, WordCache& cache, Ids& out,
                       std::vector<uint32_t>& scratch) const {
    WordKey batch[kBatch];
    size_t k = 0, bytes = 0;
    auto flush = [&] {
      // room for the batch (a word has at most one id per byte; whole inline id lists are copied),
      // then the vector is cut to what came
      const size_t start = out.size();
      out.resize(start + bytes + WordCache::kIdsInline);
      uint32_t* const first = out.data() + start;
      // 1. look every word up; the token-table entries of those missing are fetched together
      const uint32_t* hit[kBatch];
      size_t got[kBatch];
      for (size_t i = 0; i < k; ++i) {
        hit[i] = cache.find(batch[i], &got[i]);
        if (!hit[i] && maybe_token(batch[i])) tokens_.prefetch(batch[i]);
      }
      // 2. write the ids: a cached word's, a token's (no BPE), else BPE's
      uint32_t* dst = first;
      for (size_t i = 0; i < k; ++i) {
        const uint32_t* ids = hit[i];
        if (!ids) ids = uncached(batch[i], scratch, &got[i]);
        if (ids != scratch.data() && got[i] <= WordCache::kIdsInline) {
          std::memcpy(dst, ids, WordCache::kIdsInline * sizeof(uint32_t));  // whole: see find
        } else {
          std::memcpy(dst, ids, got[i] * sizeof(uint32_t));
        }
        dst += got[i];
      }
      // 3. cache the missing words (only now: an insert may move the entries that hit[] points at)
      const uint32_t* ids = first;
      for (size_t i = 0; i < k; ++i) {
        if (!hit[i]) cache.insert(batch[i], ids, got[i]);
        ids += got[i];
      }
      out.resize(static_cast<size_t>(dst - out.data()));
      k = bytes = 0;
    };
    const uint8_t* end = s + n;
    split_words(s, n, [&](size_t a, size_t b) {
      WordKey& w = batch[k++];
      w.set(s + a, b - a, end);
      cache.prefetch(w);
      bytes += w.n;
      if (k == kBatch) flush();
    });
    flush();
  }

  // The ids of a word the cache lacks (*got of them): its token's id when the word is a token whose
  // own bytes BPE-encode to it (learned the first time the token is met, by that BPE run: it was
  // needed anyway), else BPE's, in `scratch`. A token table entry may be read kIdsInline ids long.
  const uint32_t* uncached(const WordKey& w, std::vector<uint32_t>& scratch, size_t* got) const {
    size_t one;
    const uint32_t* token = maybe_token(w) ? tokens_.find(w, &one) : nullptr;
    uint8_t state = kUnchecked;
    if (token) {
      state = checked_[token[0]].load(std::memory_order_relaxed);
      if (state == kItself) {
        *got = 1;
        return token;
      }
    }
    bpe(w.p, w.n, scratch);
    if (token && state == kUnchecked) {  // two threads may both check it: they find the same answer
      const bool itself = scratch.size() == 1 && scratch[0] == token[0];
      checked_[token[0]].store(itself ? kItself : kNotItself, std::memory_order_relaxed);
    }
    *got = scratch.size();
    return scratch.data();
  }

  // BPE of one pre-token into `parts`.
  void bpe(const uint8_t* w, size_t n, std::vector<uint32_t>& parts) const {
    byte_ids_into(w, n, parts);
    if (n <= kScanMax) {
      bpe_scan(parts, w);
    } else {
      bpe_heap(parts, w);
    }
  }

  void byte_ids_into(const uint8_t* w, size_t n, std::vector<uint32_t>& parts) const {
    parts.resize(n);
    for (size_t i = 0; i < n; ++i) parts[i] = byte_ids_[w[i]];
  }

  // Most pairs BPE looks up have no merge: a bit filter (1/16 of the table's size, so it stays in
  // the core's cache) answers most of those without touching the table.
  const Merge* lookup(uint32_t a, uint32_t b) const {
    const uint64_t k = pair_key(a, b), h = mix64(k), bit = h >> filter_shift_;
    if (!((filter_[bit >> 6] >> (bit & 63)) & 1)) return nullptr;
    return merges_.find(k, h);
  }

  // The reference rule: find the lowest rank, merge all its occurrences left to right, repeat.
  // Each pair's merge is kept beside it, so a round looks up only the pairs it formed.
  //   merges (a,b)->X, (X,c)->Y:  [a b c a b] -> [X c X] -> [Y X]
  static constexpr size_t kScanMax = 64;
  static constexpr uint32_t kNone = ~0u;
  // parts: the ids of the bytes w (byte_ids_into).
  void bpe_scan(std::vector<uint32_t>& parts, const uint8_t* w) const {
    size_t m = parts.size();
    if (m < 2) return;
    uint32_t* p = parts.data();
    // pair (p[i], p[i + 1]): its rank (kNone: no merge) and new id; fresh[i]: p[i] formed in the
    // last round. On the stack for words up to kScanMax bytes (bpe() sends longer ones to the heap)
    uint32_t rank_buf[kScanMax], id_buf[kScanMax];
    uint8_t fresh_buf[kScanMax];
    std::vector<uint32_t> big;
    std::vector<uint8_t> big_fresh;
    uint32_t *rank = rank_buf, *id = id_buf;
    uint8_t* fresh = fresh_buf;
    if (m > kScanMax) {
      big.resize(2 * m);
      big_fresh.resize(m);
      rank = big.data();
      id = rank + m;
      fresh = big_fresh.data();
    }
    auto look = [&](size_t i) {
      const Merge* g = lookup(p[i], p[i + 1]);
      rank[i] = g ? g->rank : kNone;
      id[i] = g ? g->id : 0;
    };
    for (size_t i = 0; i + 1 < m; ++i) {
      const Merge& g = byte_pair(w[i], w[i + 1]);
      rank[i] = g.rank;
      id[i] = g.id;
    }
    while (true) {
      uint32_t r = kNone;
      for (size_t i = 0; i + 1 < m; ++i) r = std::min(r, rank[i]);
      if (r == kNone) break;
      size_t j = 0;
      for (size_t i = 0; i < m; ++j) {  // j <= i: rank, id and fresh are rewritten in place
        if (i + 1 < m && rank[i] == r) {
          p[j] = id[i];
          fresh[j] = 1;
          i += 2;
        } else {  // kept: so is its pair's merge, unless the next one is fresh (looked up below)
          p[j] = p[i];
          rank[j] = rank[i];
          id[j] = id[i];
          fresh[j] = 0;
          i += 1;
        }
      }
      m = j;
      for (size_t i = 0; i + 1 < m; ++i) {
        if (fresh[i] || fresh[i + 1]) look(i);
      }
    }
    parts.resize(m);
  }

  // The same rule in O(n log n) for long pre-tokens: a min-heap of (rank, position) over a
  // linked list. Entries of one rank pop in position order (= left to right); pairs formed
  // while a rank is being applied wait until that rank is done, as in the scan.
  void bpe_heap(std::vector<uint32_t>& parts, const uint8_t* w) const {
    const int64_t n = static_cast<int64_t>(parts.size());
    if (n < 2) return;
    std::vector<int64_t> nxt(n), prv(n);
    for (int64_t i = 0; i < n; ++i) {
      nxt[i] = i + 1 < n ? i + 1 : -1;
      prv[i] = i - 1;
    }
    std::vector<char> alive(n, 1);
    using Entry = std::pair<uint32_t, int64_t>;  // (rank, position)
    std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap;
    for (int64_t i = 0; i + 1 < n; ++i) {
      const Merge& m = byte_pair(w[i], w[i + 1]);
      if (m.rank != kNone) heap.push({m.rank, i});
    }
    std::vector<Entry> pending;
    while (!heap.empty()) {
      const uint32_t rank = heap.top().first;
      while (!heap.empty() && heap.top().first == rank) {
        const int64_t p = heap.top().second;
        heap.pop();
        if (!alive[p] || nxt[p] < 0) continue;
        const int64_t q = nxt[p];
        const Merge* m = lookup(parts[p], parts[q]);
        if (!m || m->rank != rank) continue;
        parts[p] = m->id;
        alive[q] = 0;
        nxt[p] = nxt[q];
        if (nxt[q] >= 0) prv[nxt[q]] = p;
        if (prv[p] >= 0) {
          if (const Merge* l = lookup(parts[prv[p]], parts[p])) pending.push_back({l->rank, prv[p]});
        }
        if (nxt[p] >= 0) {
          if (const Merge* r = lookup(parts[p], parts[nxt[p]])) pending.push_back({r->rank, p});
        }
      }
      for (const Entry& e : pending) heap.push(e);
      pending.clear();
    }
    size_t j = 0;
    for (int64_t i = 0; i >= 0; i = nxt[i]) parts[j++] = parts[i];
    parts.resize(j);
  }

 private:
  // tokens_: every token of at most 24 bytes made by a merge, its bytes -> its id, so that a word
  // the cache lacks that is a token whose own bytes BPE-encode to it (most tokens) needs no BPE run.
  // Whether it does is learned the first time the token is met (checked_, shared by the threads);
  // checking all 50K of GPT-2's here took 26-35 ms of every tokenizer's first encode.
  //   merges (a,b)->256: tokens_ = {"ab": [256]}; "ab" met: BPE gives [256], checked_[256] = kItself
  static constexpr uint8_t kUnchecked = 0, kItself = 1, kNotItself = 2;
  void build_tokens(const std::vector<uint32_t>& left, const std::vector<uint32_t>& right,
                    const std::vector<uint32_t>& merged) {
    uint32_t top = 0;
    for (uint32_t b : byte_ids_) top = std::max(top, b);
    for (size_t r = 0; r < left.size(); ++r) top = std::max({top, left[r], right[r], merged[r]});
    checked_.reset(new std::atomic<uint8_t>[static_cast<size_t>(top) + 1]);
    for (size_t id = 0; id <= top; ++id) checked_[id].store(kUnchecked, std::memory_order_relaxed);
    std::vector<std::string> bytes(static_cast<size_t>(top) + 1);  // id -> its bytes, where the merges tell them
    for (size_t b = 0; b < byte_ids_.size(); ++b) bytes[byte_ids_[b]] = std::string(1, static_cast<char>(b));
    // the filter: kTokenBits bits a merge (a power of two; a token per merge at most), two set a token
    int bits = 10;
    while ((size_t{1} << bits) < kTokenBits * left.size()) ++bits;
    token_shift_ = 64 - bits;
    token_filter_.assign((size_t{1} << bits) / 64, 0);
    for (size_t r = 0; r < left.size() && tokens_.size() + 1 < WordCache::kMaxWords; ++r) {
      const std::string &a = bytes[left[r]], &b = bytes[right[r]];
      std::string& t = bytes[merged[r]];
      if (a.empty() || b.empty() || !t.empty()) continue;
      t = a + b;
      if (t.size() > WordKey::kShort) continue;
      const auto* p = reinterpret_cast<const uint8_t*>(t.data());
      WordKey key;
      key.set(p, t.size(), p + t.size());
      size_t got;
      if (tokens_.find(key, &got)) continue;
      tokens_.insert(key, &merged[r], 1);
      for (uint64_t bit : token_bits(key)) token_filter_[bit >> 6] |= uint64_t{1} << (bit & 63);
    }
  }

  const Merge& byte_pair(uint8_t x, uint8_t y) const { return byte_pairs_[size_t{x} << 8 | y]; }

  // Whether the word may be in tokens_: a bit filter (16 bits a token, two set: 128 KB for GPT-2's,
  // so it stays in the core's cache) turns most words that are not tokens away without a lookup in
  // tokens_, an 8 MB table (mixed set, compiled first pass 36.2 -> 34.6 ms; encode_cold_profile.txt).
  static constexpr size_t kTokenBits = 16;
  std::array<uint64_t, 2> token_bits(const WordKey& w) const {
    const uint64_t g = w.h * 0x9E3779B97F4A7C15ULL;
    return {w.h >> token_shift_, g >> token_shift_};
  }
  bool maybe_token(const WordKey& w) const {
    if (w.n > WordKey::kShort) return false;
    const auto b = token_bits(w);
    return ((token_filter_[b[0] >> 6] >> (b[0] & 63)) & (token_filter_[b[1] >> 6] >> (b[1] & 63)) & 1) != 0;
  }

  std::vector<uint32_t> byte_ids_;
  U64Map<Merge> merges_;  // pair -> its merge (rank, new id)
  std::vector<Merge> byte_pairs_;  // bytes x, y -> the merge of their ids' pair (rank kNone: none); 512 KB
  std::vector<uint64_t> filter_;  // bit mix64(pair) >> filter_shift_: set for every pair with a merge
  int filter_shift_ = 64;
  WordCache tokens_;
  std::vector<uint64_t> token_filter_;  // bits token_bits(word) of every word in tokens_
  int token_shift_ = 64;
  std::unique_ptr<std::atomic<uint8_t>[]> checked_;  // per token id: kUnchecked, kItself, kNotItself
  SpecialSplitter splitter_;
  std::vector<uint32_t> special_ids_;
};

// What one encoding thread works with: its word cache and buffers, kept between calls (a long
// text's ids then reuse the buffer's pages instead of faulting in new ones each call).
struct Worker {
  static constexpr size_t kKeepIds = 1 << 22;  // a buffer above this (16 MB) is freed after use
  WordCache cache;
  Ids out;
  std::vector<uint32_t> scratch;
  void trim() {
    if (out.capacity() > kKeepIds) Ids().swap(out);
  }
};

// A pool of workers, one per concurrently encoding thread.
class WorkerPool {
 public:
  std::unique_ptr<Worker> take() {
    std::lock_guard<std::mutex> lock(mu_);
    if (free_.empty()) return std::make_unique<Worker>();
    auto w = std::move(free_.back());
    free_.pop_back();
    return w;
  }
  void give(std::unique_ptr<Worker> w) {
    w->trim();
    std::lock_guard<std::mutex> lock(mu_);
    free_.push_back(std::move(w));
  }
  // Empties every cache, keeping its memory (see WordCache::clear).
  void clear() {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& w : free_) w->cache.clear();
  }

 private:
  std::mutex mu_;
  std::vector<std::unique_ptr<Worker>> free_;
};

}  // namespace seqpack
