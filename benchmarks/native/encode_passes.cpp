// Per-document encoding with no Python in the way: seqpack's compiled encoder (csrc/encode.h) run
// over a set of documents one call each, a pass with the word cache cleared first (cold) and passes
// with it kept (warm). Built and run by benchmarks/encode_budget.py.
//
//   encode_passes TOKENIZER DOCS PASSES IDS
//   TOKENIZER: four arrays (byte ids, left, right, merged), each a uint32 count then uint32s, then
//     the special tokens: a uint32 count, then each one's uint32 byte count, bytes and uint32 id
//   DOCS: per document a uint32 byte count then its UTF-8 bytes
//   IDS (written): per document a uint32 id count then its ids, for the caller to check
// Prints JSON: the median cold and warm pass in seconds.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "encode.h"

namespace {

std::vector<uint32_t> read_array(std::ifstream& f) {
  uint32_t n = 0;
  f.read(reinterpret_cast<char*>(&n), 4);
  std::vector<uint32_t> v(n);
  f.read(reinterpret_cast<char*>(v.data()), 4 * static_cast<std::streamsize>(n));
  return v;
}


}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: encode_passes TOKENIZER DOCS PASSES IDS\n");
    return 2;
  }
  std::ifstream t(argv[1], std::ios::binary);
  const auto byte_ids = read_array(t), left = read_array(t), right = read_array(t), merged = read_array(t);
  std::vector<std::string> specials;
  std::vector<uint32_t> special_ids;
  uint32_t count = 0;
  t.read(reinterpret_cast<char*>(&count), 4);
  for (uint32_t k = 0; k < count; ++k) {
    uint32_t n = 0, id = 0;
    t.read(reinterpret_cast<char*>(&n), 4);
    std::string s(n, '\0');
    t.read(s.data(), n);
    t.read(reinterpret_cast<char*>(&id), 4);
    specials.push_back(std::move(s));
    special_ids.push_back(id);
  }
  const seqpack::EncoderCore core(byte_ids, left, right, merged, specials, special_ids);
  std::ifstream f(argv[2], std::ios::binary);
  std::vector<std::string> docs;
  for (uint32_t n; f.read(reinterpret_cast<char*>(&n), 4);) {
    std::string s(n, '\0');
    f.read(s.data(), n);
    docs.push_back(std::move(s));
  }
  const int passes = std::atoi(argv[3]);
  seqpack::WordCache cache;
  seqpack::Ids out;
  std::vector<uint32_t> scratch;
  std::ofstream ids(argv[4], std::ios::binary);
  std::vector<double> cold, warm;
  auto pass = [&](bool written) {
    const auto t0 = std::chrono::steady_clock::now();
    for (const std::string& d : docs) {
      out.clear();
      core.encode(reinterpret_cast<const uint8_t*>(d.data()), d.size(), cache, out, scratch);
      if (written) {
        const auto n = static_cast<uint32_t>(out.size());
        ids.write(reinterpret_cast<const char*>(&n), 4);
        ids.write(reinterpret_cast<const char*>(out.data()), 4 * static_cast<std::streamsize>(n));
      }
    }
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  pass(true);  // the ids, and the token table's checks (kept by the tokenizer, as in Python)
  ids.close();
  for (int p = 0; p < passes; ++p) {
    cache.clear();
    cold.push_back(pass(false));
    warm.push_back(pass(false));
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
  };
  std::printf("{\"cold_s\": %.9f, \"warm_s\": %.9f, \"passes\": %d}\n", median(cold), median(warm), passes);
  return 0;
}
