// Byte-level BPE encoding with a per-worker word cache.
//
// Within a pre-token the lowest-ranked adjacent pair is merged, every occurrence, left to
// right, until no adjacent pair is a merge (minbpe's rule; the Python Tokenizer._bpe).
//   merges (a,b)->256, (256,c)->257:  "abc" -> [97 98 99] -> [256 99] -> [257]
#pragma once
#include <algorithm>
#include <cstdint>
#include <memory>
#include <mutex>
#include <queue>
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

// Ids of pre-tokens already encoded: word bytes -> span of ids.
class WordCache {
 public:
  static constexpr size_t kMaxWords = 1 << 20;
  static constexpr size_t kMaxIds = 1 << 24;

  const uint32_t* find(const uint8_t* p, size_t n, uint64_t h, size_t* len) const {
    int64_t i = words_.find(p, n, h);
    if (i < 0) return nullptr;
    *len = spans_[2 * i + 1];
    return ids_.data() + spans_[2 * i];
  }
  void insert(const uint8_t* p, size_t n, uint64_t h, const uint32_t* ids, size_t len) {
    if (words_.size() >= kMaxWords || ids_.size() + len > kMaxIds) clear();
    if (!words_.insert(p, n, h).second) return;
    spans_.push_back(static_cast<uint32_t>(ids_.size()));
    spans_.push_back(static_cast<uint32_t>(len));
    ids_.insert(ids_.end(), ids, ids + len);
  }
  void clear() {
    words_.reset();
    spans_.clear();
    ids_.clear();
  }

 private:
  StringTable words_;
  std::vector<uint32_t> spans_;  // (start, length) per word
  std::vector<uint32_t> ids_;
};

// The immutable part of a tokenizer: byte ids, merge ranks, special tokens.
class EncoderCore {
 public:
  EncoderCore(std::vector<uint32_t> byte_ids, const std::vector<uint32_t>& left,
              const std::vector<uint32_t>& right, const std::vector<uint32_t>& merged,
              std::vector<std::string> specials, std::vector<uint32_t> special_ids)
      : byte_ids_(std::move(byte_ids)),
        ranks_(left.size()),
        splitter_(specials),
        special_ids_(std::move(special_ids)) {
    for (size_t r = 0; r < left.size(); ++r) {
      bool inserted;
      int32_t& slot = ranks_.get(pair_key(left[r], right[r]), &inserted);
      if (inserted) {  // the first merge of a pair wins, as in Tokenizer._ranks
        slot = static_cast<int32_t>(merge_.size());
        merge_.push_back(Merge{static_cast<uint32_t>(r), merged[r]});
      }
    }
  }

  const std::vector<uint32_t>& byte_ids() const { return byte_ids_; }
  const std::vector<uint32_t>& special_ids() const { return special_ids_; }

  // Append the ids of `text` (valid UTF-8; special tokens split it) to `out`.
  void encode(const uint8_t* s, size_t n, WordCache& cache, std::vector<uint32_t>& out,
              std::vector<uint32_t>& scratch) const {
    splitter_.split(
        s, n,
        [&](size_t a, size_t b) { encode_ordinary(s + a, b - a, cache, out, scratch); },
        [&](size_t k) { out.push_back(special_ids_[k]); });
  }

  void encode_ordinary(const uint8_t* s, size_t n, WordCache& cache, std::vector<uint32_t>& out,
                       std::vector<uint32_t>& scratch) const {
    split_words(s, n, [&](size_t a, size_t b) {
      const uint8_t* w = s + a;
      const size_t len = b - a;
      if (len == 1) {
        out.push_back(byte_ids_[w[0]]);
        return;
      }
      const uint64_t h = hash_bytes(w, len);
      size_t got;
      if (const uint32_t* ids = cache.find(w, len, h, &got)) {
        out.insert(out.end(), ids, ids + got);
        return;
      }
      bpe(w, len, scratch);
      cache.insert(w, len, h, scratch.data(), scratch.size());
      out.insert(out.end(), scratch.begin(), scratch.end());
    });
  }

  // BPE of one pre-token into `parts`.
  void bpe(const uint8_t* w, size_t n, std::vector<uint32_t>& parts) const {
    byte_ids_into(w, n, parts);
    if (n <= 64) {
      bpe_scan(parts);
    } else {
      bpe_heap(parts);
    }
  }

  void byte_ids_into(const uint8_t* w, size_t n, std::vector<uint32_t>& parts) const {
    parts.resize(n);
    for (size_t i = 0; i < n; ++i) parts[i] = byte_ids_[w[i]];
  }

  const Merge* lookup(uint32_t a, uint32_t b) const {
    const int32_t* i = ranks_.find(pair_key(a, b));
    return i ? &merge_[*i] : nullptr;
  }

  // The reference rule, literally: find the lowest rank, merge all its occurrences, repeat.
  void bpe_scan(std::vector<uint32_t>& parts) const {
    while (parts.size() > 1) {
      const Merge* best = nullptr;
      uint32_t a = 0, b = 0;
      for (size_t i = 0; i + 1 < parts.size(); ++i) {
        const Merge* m = lookup(parts[i], parts[i + 1]);
        if (m && (!best || m->rank < best->rank)) {
          best = m;
          a = parts[i];
          b = parts[i + 1];
        }
      }
      if (!best) return;
      size_t j = 0;
      for (size_t i = 0; i < parts.size();) {
        if (i + 1 < parts.size() && parts[i] == a && parts[i + 1] == b) {
          parts[j++] = best->id;
          i += 2;
        } else {
          parts[j++] = parts[i++];
        }
      }
      parts.resize(j);
    }
  }

  // The same rule in O(n log n) for long pre-tokens: a min-heap of (rank, position) over a
  // linked list. Entries of one rank pop in position order (= left to right); pairs formed
  // while a rank is being applied wait until that rank is done, as in the scan.
  void bpe_heap(std::vector<uint32_t>& parts) const {
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
      if (const Merge* m = lookup(parts[i], parts[i + 1])) heap.push({m->rank, i});
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
  std::vector<uint32_t> byte_ids_;
  U64Map ranks_;  // pair -> index into merge_
  std::vector<Merge> merge_;
  SpecialSplitter splitter_;
  std::vector<uint32_t> special_ids_;
};

// A pool of word caches, one per concurrently encoding thread.
class CachePool {
 public:
  std::unique_ptr<WordCache> take() {
    std::lock_guard<std::mutex> lock(mu_);
    if (free_.empty()) return std::make_unique<WordCache>();
    auto c = std::move(free_.back());
    free_.pop_back();
    return c;
  }
  void give(std::unique_ptr<WordCache> c) {
    std::lock_guard<std::mutex> lock(mu_);
    free_.push_back(std::move(c));
  }
  void clear() {
    std::lock_guard<std::mutex> lock(mu_);
    free_.clear();
  }

 private:
  std::mutex mu_;
  std::vector<std::unique_ptr<WordCache>> free_;
};

}  // namespace seqpack
