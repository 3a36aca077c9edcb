// Packing kernels: knapsack pricing for the LP (column generation) and the pack-row layout.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
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

// out = the ranges src[off[d]:off[d + 1]] in order, each followed by one `item` (itemsize bytes):
// range d lands at out[off[d] + d], its item at out[off[d + 1] + d]. off runs from 0 to src's size.
//   src {1 2 3 4 5}, off {0 3 5}, item 0 -> {1 2 3 0 4 5 0}
inline void append_to_each(const uint8_t* src, const int64_t* off, int64_t ranges, size_t itemsize,
                           const uint8_t* item, uint8_t* out) {
  for (int64_t d = 0; d < ranges; ++d) {
    const int64_t a = off[d], n = off[d + 1] - a;
    uint8_t* o = out + (a + d) * itemsize;
    std::memcpy(o, src + a * itemsize, n * itemsize);
    std::memcpy(o + n * itemsize, item, itemsize);
  }
}

// seg[p]: 1..k per sequence, 0 in padding; pos[p]: offset + 0..n-1 per sequence, 0 in padding.
// seg may be null: positions only.
template <class S, class P>
void segments_positions(const int64_t* lengths, const int64_t* order, const int64_t* pack_off,
                        int64_t packs, int64_t width, int64_t offset, S* seg, P* pos,
                        int threads) {
  parallel_ranges(packs, threads, [&](int64_t first, int64_t last) {
    for (int64_t p = first; p < last; ++p) {
      S* srow = seg ? seg + p * width : nullptr;
      P* prow = pos + p * width;
      int64_t col = 0;
      S k = 1;
      for (int64_t j = pack_off[p]; j < pack_off[p + 1]; ++j, ++k) {
        const int64_t n = lengths[order[j]];
        for (int64_t i = 0; i < n; ++i) prow[col + i] = static_cast<P>(offset + i);
        if (srow) std::fill(srow + col, srow + col + n, k);
        col += n;
      }
      if (srow) std::fill(srow + col, srow + width, S{0});
      std::fill(prow + col, prow + width, P{0});
    }
  });
}

// ------------------------------------------------------------------------ template fill
// best.py's fill_templates, step for step (the Python function is the reference): template packs
// (`count` copies of slot lengths) take sequences longest first, each into the smallest free slot
// that holds it; a group of identical packs splits when only some of its copies take a length.
// Groups are kept in creation order; a slot's list grows while it is walked (a split's remainder
// may still offer that slot), as the Python list does.
//   templates {(3, 2) x 2}, hist {1, 2, 1} (lengths 1, 2, 3) -> packs (3, 2) x 1, (2, 1) x 1
struct FillGroup {
  int64_t count;
  std::vector<int32_t> filled, free;
};

struct FillResult {
  std::vector<FillGroup> groups;
  std::vector<int64_t> need;  // the residual histogram
};

inline FillResult fill_templates(const int64_t* slot_lens, const int64_t* starts, const int64_t* counts,
                                 int64_t n_templates, const int64_t* hist, int64_t m) {
  FillResult r;
  r.need.assign(hist, hist + m);
  auto& groups = r.groups;
  std::map<int32_t, std::vector<size_t>> by_slot;  // slot length -> groups offering it (ascending keys)
  auto add = [&](FillGroup g) {
    const size_t id = groups.size();
    std::vector<int32_t> distinct = g.free;
    std::sort(distinct.begin(), distinct.end());
    distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
    groups.push_back(std::move(g));
    for (int32_t s : distinct) by_slot[s].push_back(id);
  };
  for (int64_t t = 0; t < n_templates; ++t) {
    std::vector<int32_t> free(slot_lens + starts[t], slot_lens + starts[t + 1]);
    std::sort(free.begin(), free.end(), std::greater<int32_t>());
    add(FillGroup{counts[t], {}, std::move(free)});
  }
  for (int64_t idx = m - 1; idx >= 0; --idx) {
    int64_t n = r.need[idx];
    if (!n) continue;
    const int32_t length = static_cast<int32_t>(idx + 1);
    for (auto it = by_slot.lower_bound(length); n && it != by_slot.end(); ++it) {
      const int32_t s = it->first;
      for (size_t k = 0; k < it->second.size(); ++k) {  // live size: add() may append here
        const size_t gi = it->second[k];
        const int64_t per = std::count(groups[gi].free.begin(), groups[gi].free.end(), s);
        if (!n || !groups[gi].count || !per) continue;
        const int64_t take = std::min(n, per * groups[gi].count);
        const int64_t full = take / per, rem = take % per;
        std::vector<int32_t> rest;
        for (int32_t x : groups[gi].free) {
          if (x != s) rest.push_back(x);
        }
        std::vector<int32_t> base = groups[gi].filled;  // copies: add() may move the groups
        if (full) {
          FillGroup g{full, base, rest};
          g.filled.insert(g.filled.end(), per, length);
          add(std::move(g));
        }
        if (rem) {
          FillGroup g{1, base, rest};
          g.filled.insert(g.filled.end(), rem, length);
          g.free.insert(g.free.end(), per - rem, s);
          add(std::move(g));
        }
        groups[gi].count -= full + (rem ? 1 : 0);
        n -= full * per + rem;
      }
      auto& list = it->second;
      list.erase(std::remove_if(list.begin(), list.end(), [&](size_t gi) {
                   const auto& f = groups[gi].free;
                   return !groups[gi].count || std::find(f.begin(), f.end(), s) == f.end();
                 }),
                 list.end());
    }
    r.need[idx] = n;
  }
  return r;
}

}  // namespace seqpack
