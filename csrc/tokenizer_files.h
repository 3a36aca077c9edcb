// The text of a tokenizer's files: GPT-2's vocab.json and merges.txt, and the vocab and merges of
// Hugging Face's tokenizer.json. seqpack.tokenizer.files makes the same bytes in Python (the
// reference: json.dumps of GPT-2's strings, tested against this).
//
// A token is written as GPT-2's string of its bytes: a byte that is a printable character other
// than space is itself, the others (spaces, controls, bytes 127-160 and 173) the characters from
// U+0100 on, in byte order. In JSON, of those characters only " and \ need an escape.
//   tokens {0: b" a", 1: b"\"b"}, merges [(b" ", b"a")] ->
//   vocab.json  {\n"Ġa": 0,\n"\"b": 1\n}     merges.txt  #version: 0.2\nĠ a\n
//   tokenizer.json's vocab {"Ġa":0,"\"b":1}  and merges [["Ġ","a"]]
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace seqpack {

// byte -> the UTF-8 bytes of its GPT-2 character (1 or 2)
struct ByteChars {
  char utf8[256][2] = {};
  uint8_t size[256] = {};
  ByteChars() {
    uint32_t next = 256;  // the characters given to the bytes that are not printable, in byte order
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      const uint32_t c = printable ? b : next++;
      if (c < 0x80) {
        utf8[b][0] = static_cast<char>(c);
        size[b] = 1;
      } else {  // c < 0x800
        utf8[b][0] = static_cast<char>(0xC0 | (c >> 6));
        utf8[b][1] = static_cast<char>(0x80 | (c & 0x3F));
        size[b] = 2;
      }
    }
  }
};

inline const ByteChars& byte_chars() {
  static const ByteChars table;
  return table;
}

// GPT-2's string of `token`, escaped for a JSON string where `json` (at most 3 bytes a byte, written
// in place: appending character by character was most of the time).
inline void append_gpt2(std::string& out, std::string_view token, bool json) {
  const ByteChars& t = byte_chars();
  const size_t at = out.size();
  out.resize(at + 3 * token.size());
  char* p = &out[at];
  for (unsigned char b : token) {
    if (json && (b == '"' || b == '\\')) *p++ = '\\';
    p[0] = t.utf8[b][0];
    p[1] = t.utf8[b][1];
    p += t.size[b];
  }
  out.resize(static_cast<size_t>(p - out.data()));
}

struct TokenizerTexts {
  std::string vocab_json, merges_txt, hf_vocab, hf_merges;
};

// ids ascending, tokens[i] the bytes of ids[i]; merges in rank order; special: (index into ids,
// its JSON string literal) for the tokens tokenizer.json writes as their own text.
inline TokenizerTexts tokenizer_texts(const std::vector<uint64_t>& ids, const std::vector<std::string_view>& tokens,
                                      const std::vector<std::pair<std::string_view, std::string_view>>& merges,
                                      const std::vector<std::pair<size_t, std::string>>& special) {
  TokenizerTexts out;
  size_t bytes = 0;
  for (std::string_view t : tokens) bytes += t.size();
  out.vocab_json = tokens.empty() ? "{" : "{\n";
  out.hf_vocab = "{";
  out.vocab_json.reserve(3 * bytes + 28 * tokens.size() + 4);
  out.hf_vocab.reserve(3 * bytes + 24 * tokens.size() + 2);
  size_t next_special = 0;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const std::string id = std::to_string(ids[i]);
    if (i) {
      out.vocab_json += ",\n";
      out.hf_vocab += ',';
    }
    out.vocab_json += '"';
    append_gpt2(out.vocab_json, tokens[i], true);
    out.vocab_json += "\": ";
    out.vocab_json += id;
    if (next_special < special.size() && special[next_special].first == i) {
      out.hf_vocab += special[next_special++].second;
    } else {
      out.hf_vocab += '"';
      append_gpt2(out.hf_vocab, tokens[i], true);
      out.hf_vocab += '"';
    }
    out.hf_vocab += ':';
    out.hf_vocab += id;
  }
  out.vocab_json += tokens.empty() ? "}" : "\n}";
  out.hf_vocab += '}';
  size_t merged = 0;
  for (const auto& m : merges) merged += m.first.size() + m.second.size();
  out.merges_txt = "#version: 0.2\n";
  out.hf_merges = "[";
  out.merges_txt.reserve(3 * merged + 2 * merges.size() + 16);
  out.hf_merges.reserve(3 * merged + 8 * merges.size() + 2);
  for (size_t k = 0; k < merges.size(); ++k) {
    append_gpt2(out.merges_txt, merges[k].first, false);
    out.merges_txt += ' ';
    append_gpt2(out.merges_txt, merges[k].second, false);
    out.merges_txt += '\n';
    out.hf_merges += k ? ",[\"" : "[\"";
    append_gpt2(out.hf_merges, merges[k].first, true);
    out.hf_merges += "\",\"";
    append_gpt2(out.hf_merges, merges[k].second, true);
    out.hf_merges += "\"]";
  }
  out.hf_merges += ']';
  return out;
}

}  // namespace seqpack
