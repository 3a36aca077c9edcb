// Packing kernels: knapsack pricing for the LP (column generation) and the pack-row layout.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

namespace seqpack {

// ----------------------------------------------------------------------------- pricing
// Best packs (multisets of item lengths, sum <= cap, at most `depth` items; depth <= 0:
// unlimited) by total value, overall (row n) and containing each item i at least once
// (row i). lengths ascending. patterns: (n + 1, n) multiplicities; row_values: (n + 1).
//   lengths {2, 3}, values {1, 1.6}, cap 5, depth 2 -> overall {2, 3} worth 2.6
struct Pricing {
  std::vector<double> row_values;
  std::vector<int64_t> patterns;
};

inline Pricing price_packs(const int64_t* lengths, const double* values, int64_t n, int64_t cap,
                           int64_t depth) {
  Pricing out;
  out.row_values.assign(n + 1, 0.0);
  out.patterns.assign((n + 1) * n, 0);
  auto pat = [&](int64_t r) { return out.patterns.data() + r * n; };
  const int64_t W = cap + 1;
  if (depth > 0) {
    // f[k][c]: best value with at most k items and total length <= c; choice: -2 = (k-1, c),
    // -1 = (k, c-1), i >= 0 = item i on top of (k-1, c - lengths[i])
    std::vector<double> f((depth + 1) * W, 0.0);
    std::vector<int32_t> choice((depth + 1) * W, -2);
    for (int64_t k = 1; k <= depth; ++k) {
      for (int64_t c = 0; c <= cap; ++c) {
        double best = f[(k - 1) * W + c];
        int32_t arg = -2;
        if (c > 0 && f[k * W + c - 1] > best) {
          best = f[k * W + c - 1];
          arg = -1;
        }
        for (int64_t i = 0; i < n; ++i) {
          const int64_t li = lengths[i];
          if (li > c) break;
          const double v = f[(k - 1) * W + c - li] + values[i];
          if (v > best + 1e-12) {
            best = v;
            arg = static_cast<int32_t>(i);
          }
        }
        f[k * W + c] = best;
        choice[k * W + c] = arg;
      }
    }
    auto walk = [&](int64_t k, int64_t c, int64_t* into) {
      while (k > 0 && c >= 0) {
        const int32_t a = choice[k * W + c];
        if (a == -2) {
          --k;
        } else if (a == -1) {
          --c;
        } else {
          into[a] += 1;
          c -= lengths[a];
          --k;
        }
      }
    };
    walk(depth, cap, pat(n));
    out.row_values[n] = f[depth * W + cap];
    for (int64_t i = 0; i < n; ++i) {
      if (lengths[i] > cap) continue;
      pat(i)[i] += 1;
      walk(depth - 1, cap - lengths[i], pat(i));
      out.row_values[i] = values[i] + f[(depth - 1) * W + cap - lengths[i]];
    }
    return out;
  }
  std::vector<double> g(W, 0.0);
  std::vector<int32_t> pick(W, -1);
  for (int64_t c = 1; c <= cap; ++c) {
    double best = g[c - 1];
    int32_t arg = -1;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t li = lengths[i];
      if (li > c) break;
      const double v = g[c - li] + values[i];
      if (v > best + 1e-12) {
        best = v;
        arg = static_cast<int32_t>(i);
      }
    }
    g[c] = best;
    pick[c] = arg;
  }
  for (int64_t r = 0; r <= n; ++r) {
    int64_t c = cap;
    if (r < n) {
      if (lengths[r] > cap) continue;
      pat(r)[r] += 1;
      c = cap - lengths[r];
      out.row_values[r] = values[r] + g[c];
    } else {
      out.row_values[r] = g[cap];
    }
    while (c > 0) {
      const int32_t a = pick[c];
      if (a < 0) {
        --c;
      } else {
        pat(r)[a] += 1;
        c -= lengths[a];
      }
    }
  }
  return out;
}

// ----------------------------------------------------------------------------- layout
// Run fn(first, last) over [0, n) split into `threads` contiguous parts.
template <class Fn>
void parallel_ranges(int64_t n, int threads, Fn&& fn) {
  threads = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, n / 256 + 1)));
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(fn, n * t / threads, n * (t + 1) / threads);
  fn(int64_t{0}, n / threads);
  for (auto& th : pool) th.join();
}

// out[p] = concat(src[seq_off[s]:seq_off[s + 1]] for s in pack p), then `pad` to the width.
// Any dtype: items are `itemsize` bytes; out is (packs, width), C order.
inline void scatter_rows(const uint8_t* src, const int64_t* seq_off, const int64_t* order,
                         const int64_t* pack_off, int64_t packs, int64_t width, size_t itemsize,
                         const uint8_t* pad, uint8_t* out, int threads) {
  parallel_ranges(packs, threads, [&](int64_t first, int64_t last) {
    for (int64_t p = first; p < last; ++p) {
      uint8_t* row = out + p * width * itemsize;
      int64_t col = 0;
      for (int64_t j = pack_off[p]; j < pack_off[p + 1]; ++j) {
        const int64_t a = seq_off[order[j]];
        const int64_t n = seq_off[order[j] + 1] - a;
        std::memcpy(row + col * itemsize, src + a * itemsize, n * itemsize);
        col += n;
      }
      for (; col < width; ++col) std::memcpy(row + col * itemsize, pad, itemsize);
    }
  });
}

// seg[p]: 1..k per sequence, 0 in padding; pos[p]: offset + 0..n-1 per sequence, 0 in padding.
template <class S, class P>
void segments_positions(const int64_t* lengths, const int64_t* order, const int64_t* pack_off,
                        int64_t packs, int64_t width, int64_t offset, S* seg, P* pos,
                        int threads) {
  parallel_ranges(packs, threads, [&](int64_t first, int64_t last) {
    for (int64_t p = first; p < last; ++p) {
      S* srow = seg + p * width;
      P* prow = pos + p * width;
      int64_t col = 0;
      S k = 1;
      for (int64_t j = pack_off[p]; j < pack_off[p + 1]; ++j, ++k) {
        const int64_t n = lengths[order[j]];
        for (int64_t i = 0; i < n; ++i) {
          srow[col + i] = k;
          prow[col + i] = static_cast<P>(offset + i);
        }
        col += n;
      }
      std::fill(srow + col, srow + width, S{0});
      std::fill(prow + col, prow + width, P{0});
    }
  });
}

}  // namespace seqpack
