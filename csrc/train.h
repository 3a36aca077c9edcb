// BPE training: count pre-tokens (the map step), then the merge loop.
#pragma once
#include <algorithm>
#include <cstdint>
#include <queue>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common.h"
#include "pretokenize.h"

namespace seqpack {

// {pre-token bytes: count}. Counters of different chunks merge (the reduce step).
class WordCounter {
 public:
  explicit WordCounter(std::vector<std::string> specials) : splitter_(std::move(specials)) {}

  // Count the pre-tokens of s[0, n) (valid UTF-8); special tokens split it and are not counted.
  void add(const uint8_t* s, size_t n) {
    splitter_.split(
        s, n,
        [&](size_t a, size_t b) {
          split_words(s + a, b - a, [&](size_t x, size_t y) { add_word(s + a + x, y - x, 1); });
        },
        [](size_t) {});
  }

  void add_word(const uint8_t* w, size_t n, int64_t count) {
    auto [i, inserted] = words_.insert(w, n, hash_bytes(w, n));
    if (inserted) {
      counts_.push_back(count);
    } else {
      counts_[i] += count;
    }
    total_ += count;
  }

  void merge(const WordCounter& other) {
    for (size_t i = 0; i < other.size(); ++i) {
      std::string_view k = other.words_.key(i);
      add_word(reinterpret_cast<const uint8_t*>(k.data()), k.size(), other.counts_[i]);
    }
  }

  size_t size() const { return counts_.size(); }
  int64_t total() const { return total_; }
  std::string_view word(size_t i) const { return words_.key(i); }
  int64_t count(size_t i) const { return counts_[i]; }
  size_t key_bytes() const { return words_.pool_bytes(); }

 private:
  SpecialSplitter splitter_;
  StringTable words_;
  std::vector<int64_t> counts_;
  int64_t total_ = 0;
};

// The merge loop over distinct words.
//
// words: flat symbols per word (spans shrink in place as pairs merge), a count per word.
// pairs: pair -> index; per pair its count and the words it was seen in (may hold stale
// entries and repeats; a stamp per word skips repeats). The winner comes from a lazy
// max-heap of (count, pair): a pair gets an entry when its count rises; a popped entry
// above the pair's current count is re-queued at the current count, one below it is
// dropped (a newer entry exists), one equal to it wins. Ties between counts go to the
// lexicographically greater pair of byte strings (the CS336 rule).
//   words {"ab": 3, "abc": 1}, 2 merges -> (a,b) [count 4], then (ab,c) [count 1]
class MergeLoop {
 public:
  MergeLoop(const uint8_t* blob, const int64_t* offsets, const int64_t* counts, size_t n_words)
      : pair_index_(1 << 16) {
    tokens_.reserve(256);
    for (int i = 0; i < 256; ++i) {
      tokens_.push_back(std::string(1, static_cast<char>(i)));
      heads_.push_back(head_of(tokens_.back()));
    }
    start_.resize(n_words);
    len_.resize(n_words);
    weight_.assign(counts, counts + n_words);
    stamp_.assign(n_words, -1);
    sym_.resize(static_cast<size_t>(offsets[n_words]));
    for (size_t w = 0; w < n_words; ++w) {
      start_[w] = offsets[w];
      len_[w] = static_cast<uint32_t>(offsets[w + 1] - offsets[w]);
      for (int64_t k = offsets[w]; k < offsets[w + 1]; ++k) sym_[k] = blob[k];
    }
    for (size_t w = 0; w < n_words; ++w) {
      const uint32_t* s = sym_.data() + start_[w];
      for (uint32_t k = 0; k + 1 < len_[w]; ++k) {
        const int32_t p = pair_of(s[k], s[k + 1]);
        count_[p] += weight_[w];
        where_[p].push_back(static_cast<uint32_t>(w));
      }
    }
    for (size_t p = 0; p < count_.size(); ++p) {
      if (count_[p] > 0) heap_.push(entry(static_cast<int32_t>(p)));
    }
  }

  // Run up to `num_merges` merges; appends (left, right) token ids per merge (ids: 0..255
  // the bytes, 256 + k the k-th merge). Stops early when no pair is left.
  void run(size_t num_merges, std::vector<int32_t>& left, std::vector<int32_t>& right) {
    for (size_t k = 0; k < num_merges; ++k) {
      const int32_t best = pop_best();
      if (best < 0) return;
      left.push_back(static_cast<int32_t>(pa_[best]));
      right.push_back(static_cast<int32_t>(pb_[best]));
      apply(best, static_cast<int64_t>(k));
    }
  }

  // Every token's bytes: 0..255 the bytes, 256 + k the k-th merge's (the loop is spent after).
  std::vector<std::string> take_tokens() { return std::move(tokens_); }

 private:
  // A heap entry carries its left token's first 8 bytes (big-endian, zero-padded: their order is
  // the bytes' order), which settle most ties between equal counts without reading the tokens.
  struct Entry {
    int64_t count;
    uint64_t head;
    int32_t pair;
  };
  struct Less {
    const MergeLoop* loop;
    bool operator()(const Entry& x, const Entry& y) const {  // true: x ranks below y
      if (x.count != y.count) return x.count < y.count;
      if (x.head != y.head) return x.head < y.head;
      const std::string& xa = loop->tokens_[loop->pa_[x.pair]];
      const std::string& ya = loop->tokens_[loop->pa_[y.pair]];
      if (xa != ya) return xa < ya;  // unsigned bytes: std::string compares as char_traits
      return loop->tokens_[loop->pb_[x.pair]] < loop->tokens_[loop->pb_[y.pair]];
    }
  };
  static uint64_t head_of(const std::string& t) {
    uint64_t h = 0;
    for (size_t i = 0; i < 8; ++i) h = (h << 8) | (i < t.size() ? static_cast<uint8_t>(t[i]) : 0);
    return h;
  }
  Entry entry(int32_t p) const { return Entry{count_[p], heads_[pa_[p]], p}; }

  int32_t pair_of(uint32_t a, uint32_t b) {
    bool inserted;
    int32_t& slot = pair_index_.get(pair_key(a, b), &inserted);
    if (inserted) {
      slot = static_cast<int32_t>(count_.size());
      pa_.push_back(a);
      pb_.push_back(b);
      count_.push_back(0);
      where_.emplace_back();
      rose_.push_back(0);
    }
    return slot;
  }

  int32_t pop_best() {
    while (!heap_.empty()) {
      const Entry e = heap_.top();
      heap_.pop();
      const int64_t cur = count_[e.pair];
      if (cur <= 0 || e.count < cur) continue;
      if (e.count > cur) {
        heap_.push(Entry{cur, e.head, e.pair});
        continue;
      }
      return e.pair;
    }
    return -1;
  }

  void change(uint32_t a, uint32_t b, int64_t delta, uint32_t w) {
    const int32_t p = pair_of(a, b);
    count_[p] += delta;
    if (delta > 0) {
      where_[p].push_back(w);
      if (!rose_[p]) {
        rose_[p] = 1;
        touched_.push_back(p);
      }
    }
  }

  void apply(int32_t best, int64_t k) {
    const uint32_t a = pa_[best], b = pb_[best];
    const uint32_t c = static_cast<uint32_t>(tokens_.size());
    tokens_.push_back(tokens_[a] + tokens_[b]);
    heads_.push_back(head_of(tokens_.back()));
    std::vector<uint32_t> words;
    words.swap(where_[best]);
    for (const uint32_t w : words) {
      if (stamp_[w] == k) continue;
      stamp_[w] = k;
      uint32_t* s = sym_.data() + start_[w];
      const uint32_t n = len_[w];
      const int64_t x = weight_[w];
      uint32_t j = 0;
      for (uint32_t i = 0; i < n;) {
        if (i + 1 < n && s[i] == a && s[i + 1] == b) {
          if (j > 0) {
            change(s[j - 1], a, -x, w);
            change(s[j - 1], c, x, w);
          }
          if (i + 2 < n) {
            change(b, s[i + 2], -x, w);
            change(c, s[i + 2], x, w);
          }
          count_[best] -= x;
          s[j++] = c;
          i += 2;
        } else {
          s[j++] = s[i++];
        }
      }
      len_[w] = j;
    }
    assert_zero(best);
    for (const int32_t p : touched_) {
      rose_[p] = 0;
      if (count_[p] > 0) heap_.push(entry(p));
    }
    touched_.clear();
  }

  void assert_zero(int32_t best) {
    // every occurrence was found through where_: the winner's count is now exactly 0
    if (count_[best] != 0) throw std::logic_error("BPE merge loop: pair count out of sync");
  }

  std::vector<std::string> tokens_;
  std::vector<uint64_t> heads_;  // each token's head_of
  std::vector<uint32_t> sym_;
  std::vector<int64_t> start_;
  std::vector<uint32_t> len_;
  std::vector<int64_t> weight_;
  std::vector<int64_t> stamp_;
  U64Map<int32_t> pair_index_;
  std::vector<uint32_t> pa_, pb_;
  std::vector<int64_t> count_;
  std::vector<std::vector<uint32_t>> where_;
  std::vector<char> rose_;
  std::vector<int32_t> touched_;
  std::priority_queue<Entry, std::vector<Entry>, Less> heap_{Less{this}};
};

}  // namespace seqpack
