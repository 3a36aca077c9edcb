// The GPT-2 pre-tokenizer as a hand-written scanner over UTF-8 bytes.
//
// Pattern: '(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// At each position the first alternative that matches wins, as in the regex engine:
//   "Hello, world!  " -> "Hello" "," " world" "!" "  "
//   "a  b"            -> "a" " " " b"      (\s+(?!\S) gives the run minus its last char)
// Classes (L, N, \s) come from unicode_tables.h, generated from the regex module.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "common.h"
#include "unicode_tables.h"

namespace seqpack {

enum : uint8_t { kOther = 0, kLetter = 1, kNumber = 2, kSpace = 3 };

constexpr uint8_t class_of(uint32_t cp) {
  return kStage2[static_cast<size_t>(kStage1[cp >> 8]) * 256 + (cp & 255)];
}

// The classes of the 128 ASCII characters, one load each (the hot path: most text is ASCII).
struct AsciiClasses {
  uint8_t cls[128];
  constexpr AsciiClasses() : cls() {
    for (uint32_t c = 0; c < 128; ++c) cls[c] = class_of(c);
  }
};
inline constexpr AsciiClasses kAscii{};

// Decode the code point at s[i] (valid UTF-8); returns its byte length.
inline int decode_at(const uint8_t* s, size_t i, uint32_t* cp) {
  uint8_t c = s[i];
  if (c < 0x80) {
    *cp = c;
    return 1;
  }
  if (c < 0xE0) {
    *cp = ((c & 0x1Fu) << 6) | (s[i + 1] & 0x3Fu);
    return 2;
  }
  if (c < 0xF0) {
    *cp = ((c & 0x0Fu) << 12) | ((s[i + 1] & 0x3Fu) << 6) | (s[i + 2] & 0x3Fu);
    return 3;
  }
  *cp = ((c & 0x07u) << 18) | ((s[i + 1] & 0x3Fu) << 12) | ((s[i + 2] & 0x3Fu) << 6) |
        (s[i + 3] & 0x3Fu);
  return 4;
}

// Class and byte length of the character at s[i].
inline uint8_t class_at(const uint8_t* s, size_t i, int* len) {
  if (s[i] < 0x80) {
    *len = 1;
    return kAscii.cls[s[i]];
  }
  uint32_t cp;
  *len = decode_at(s, i, &cp);
  return class_of(cp);
}

// Offset of the first byte that starts an invalid UTF-8 sequence (as Python's strict
// decoder reports it), or -1 when all of s[0, n) is valid.
inline int64_t utf8_error(const uint8_t* s, size_t n) {
  size_t i = 0;
  while (i < n) {
    // 8 ASCII bytes at a time
    while (i + 8 <= n) {
      uint64_t v;
      std::memcpy(&v, s + i, 8);
      if (v & 0x8080808080808080ULL) break;
      i += 8;
    }
    if (i >= n) break;
    uint8_t c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    uint8_t lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;  // no surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      return static_cast<int64_t>(i);
    }
    if (i + 1 >= n || s[i + 1] < lo || s[i + 1] > hi) return static_cast<int64_t>(i);
    for (size_t k = 2; k < len; ++k) {
      if (i + k >= n || (s[i + k] & 0xC0) != 0x80) return static_cast<int64_t>(i);
    }
    i += len;
  }
  return -1;
}

// How many of the 8 bytes at p, from the first, are ASCII letters (SWAR: per byte, the high bit of
// `letter` is set iff the byte is below 0x80 and, case folded, in 'a'..'z'; no carry crosses a byte).
//   "Hello, w" -> 5
inline size_t ascii_letters8(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  const uint64_t t = (v | 0x2020202020202020ULL) & 0x7f7f7f7f7f7f7f7fULL;
  const uint64_t high = 0x8080808080808080ULL;
  const uint64_t letter = (t + 0x1f1f1f1f1f1f1f1fULL) & ~(t + 0x0505050505050505ULL) & ~v & high;
  if (letter == high) return 8;
  return static_cast<size_t>(count_trailing_zeros64(~letter & high)) / 8;  // little-endian: the first byte is the lowest
}

// End of the run of class `cls` that starts at s[i].
inline size_t run_end(const uint8_t* s, size_t n, size_t i, uint8_t cls) {
  while (i < n) {
    if (cls == kLetter) {  // ASCII letters 8 at a time (most of a text's bytes)
      while (i + 8 <= n) {
        const size_t k = ascii_letters8(s + i);
        i += k;
        if (k < 8) break;
      }
    }
    while (i < n && s[i] < 0x80) {  // ASCII: one byte, one load
      if (kAscii.cls[s[i]] != cls) return i;
      ++i;
    }
    if (i >= n) break;
    int len;
    if (class_at(s, i, &len) != cls) break;
    i += len;
  }
  return i;
}

// The longest pre-token BPE is given (1 MiB): a longer one (a run of one letter, of spaces, of NUL
// bytes, as no text holds) goes out in pieces of at most this many bytes, cut between characters,
// so that encoding and training need memory in proportion to it, not to the run.
// seqpack.tokenizer.pretokenize.MAX_PIECE_BYTES is the same limit in the Python reference.
constexpr size_t kMaxPiece = size_t{1} << 20;

// emit(a, b), or [a, b) in pieces of at most kMaxPiece bytes (never inside a character).
template <class Emit>
inline void emit_pieces(const uint8_t* s, size_t a, size_t b, Emit& emit) {
  while (b - a > kMaxPiece) {
    size_t cut = a + kMaxPiece;
    while ((s[cut] & 0xC0) == 0x80) --cut;  // a continuation byte: back to its character's first byte
    emit(a, cut);
    a = cut;
  }
  emit(a, b);
}

// Call emit(start, end) for each GPT-2 pre-token of s[0, n) (valid UTF-8), a pre-token longer than
// kMaxPiece bytes in pieces (emit_pieces).
template <class Emit>
void split_words(const uint8_t* s, size_t n, Emit&& emit0) {
  auto emit = [&](size_t a, size_t b) {
    if (b - a > kMaxPiece) [[unlikely]] {
      emit_pieces(s, a, b, emit0);
    } else {
      emit0(a, b);
    }
  };
  size_t i = 0;
  while (i < n) {
    const uint8_t c = s[i];
    // '(?:[sdmt]|ll|ve|re)
    if (c == '\'' && i + 1 < n) {
      const uint8_t d = s[i + 1];
      if (d == 's' || d == 'd' || d == 'm' || d == 't') {
        emit(i, i + 2);
        i += 2;
        continue;
      }
      if (i + 2 < n) {
        const uint8_t e = s[i + 2];
        if ((d == 'l' && e == 'l') || (d == 'v' && e == 'e') || (d == 'r' && e == 'e')) {
          emit(i, i + 3);
          i += 3;
          continue;
        }
      }
    }
    int len;
    // " ?X+" for X in L, N, [^\s\p{L}\p{N}]: the optional space, then a run of one class
    if (c == ' ' && i + 1 < n) {
      const uint8_t next = class_at(s, i + 1, &len);
      if (next != kSpace) {
        const size_t end = run_end(s, n, i + 1 + len, next);
        emit(i, end);
        i = end;
        continue;
      }
    } else {
      const uint8_t cls = class_at(s, i, &len);
      if (cls != kSpace) {
        const size_t end = run_end(s, n, i + len, cls);
        emit(i, end);
        i = end;
        continue;
      }
    }
    // \s+(?!\S) | \s+ : the whitespace run, less its last character when a non-space follows
    size_t end = i, last = i;
    while (end < n) {
      if (class_at(s, end, &len) != kSpace) break;
      last = end;
      end += len;
    }
    if (end < n && last > i) end = last;
    emit(i, end);
    i = end;
  }
}

// Splits text at special tokens: the leftmost occurrence wins, the longest at one position.
//   specials {"<a>", "<ab>"}: "x<ab>y" -> text "x", special 1, text "y"
class SpecialSplitter {
 public:
  explicit SpecialSplitter(std::vector<std::string> specials) : specials_(std::move(specials)) {}
  bool empty() const { return specials_.empty(); }

  // on_text(start, end) for the text between specials; on_special(index) for each special.
  template <class OnText, class OnSpecial>
  void split(const uint8_t* s, size_t n, OnText&& on_text, OnSpecial&& on_special) const {
    if (specials_.empty()) {
      if (n) on_text(size_t{0}, n);
      return;
    }
    std::string_view text(reinterpret_cast<const char*>(s), n);
    // where each special occurs next (on the stack for up to 8: no allocation per text)
    size_t next_buf[8];
    std::vector<size_t> next_big;
    size_t* next = next_buf;
    if (specials_.size() > 8) {
      next_big.resize(specials_.size());
      next = next_big.data();
    }
    for (size_t k = 0; k < specials_.size(); ++k) next[k] = text.find(specials_[k]);
    size_t pos = 0;
    while (true) {
      size_t best = std::string_view::npos, which = 0;
      for (size_t k = 0; k < specials_.size(); ++k) {
        if (next[k] < pos) next[k] = text.find(specials_[k], pos);
        if (next[k] < best || (next[k] == best && next[k] != std::string_view::npos &&
                               specials_[k].size() > specials_[which].size())) {
          best = next[k];
          which = k;
        }
      }
      if (best == std::string_view::npos) break;
      if (best > pos) on_text(pos, best);
      on_special(which);
      pos = best + specials_[which].size();
    }
    if (pos < n) on_text(pos, n);
  }

  // Whether an occurrence of a special token starts before `cut` and ends after it.
  //   specials {"<|x|>"}: straddles("a<|x|>b", 7, 3) -> true; straddles(.., 1) -> false
  bool straddles(const uint8_t* s, size_t n, size_t cut) const {
    for (const std::string& sp : specials_) {
      const size_t len = sp.size();
      for (size_t p = cut >= len ? cut - len + 1 : 0; p < cut && p + len <= n; ++p) {
        if (std::memcmp(s + p, sp.data(), len) == 0) return true;
      }
    }
    return false;
  }

 private:
  std::vector<std::string> specials_;
};

// The last cut in [lo, hi] (0 < lo <= hi < n) that cannot change GPT-2's pre-tokenization, or 0:
// after the newline of "x\ny" (printable ASCII around it), else before the space of "a b" (ASCII
// letters around it). The rule of tokenizer.py's _safe_cut, on UTF-8 bytes; `ok(cut)` may veto one
// (a special token straddling it).
//   safe_cut("ab cd ef", 8, 1, 7, any) -> 5;  safe_cut("x\ny z", 5, 1, 4, any) -> 2
template <class Ok>
size_t safe_cut(const uint8_t* s, size_t n, size_t lo, size_t hi, Ok&& ok) {
  auto printable = [](uint8_t c) { return c >= '!' && c <= '~'; };
  auto letter = [](uint8_t c) { return static_cast<uint8_t>((c | 0x20) - 'a') < 26; };
  for (size_t c = hi; c >= lo && c >= 2; --c) {  // newline at c - 1
    if (c < n && s[c - 1] == '\n' && printable(s[c - 2]) && printable(s[c]) && ok(c)) return c;
  }
  for (size_t c = hi; c >= lo && c >= 1; --c) {  // space at c
    if (c + 1 < n && s[c] == ' ' && letter(s[c - 1]) && letter(s[c + 1]) && ok(c)) return c;
  }
  return 0;
}

}  // namespace seqpack
