// Hashing and an open-addressing table of byte strings, shared by the encoder and the trainer.
#pragma once
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif
#if defined(_MSC_VER)
#include <intrin.h>
#include <malloc.h>
#endif

namespace seqpack {

// Compiler built-ins behind one name each, with the MSVC intrinsic beside them (Windows wheels).
inline unsigned count_trailing_zeros64(uint64_t x) {  // x != 0
#if defined(_MSC_VER)
  unsigned long at;
  _BitScanForward64(&at, x);
  return static_cast<unsigned>(at);
#else
  return static_cast<unsigned>(__builtin_ctzll(x));
#endif
}

inline void prefetch_read(const void* p) {
#if defined(_MSC_VER)
  _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T0);
#else
  __builtin_prefetch(p);
#endif
}

// An allocator for large tables read at random (the encoder's word caches): from 2 MB on, the
// memory is 2 MB-aligned and the kernel is asked for transparent huge pages (madvise mode), so a
// lookup does not also miss the TLB (an 8 MB table is 2,048 small pages, more than the TLB holds;
// on a VM each miss is a two-level page walk). Smaller ones, and other systems, use operator new.
template <class T>
struct HugePageAllocator {
  using value_type = T;
  static constexpr size_t kHuge = size_t{1} << 21;
  HugePageAllocator() = default;
  template <class U>
  HugePageAllocator(const HugePageAllocator<U>&) {}
  T* allocate(size_t n) {
    const size_t bytes = n * sizeof(T);
    if (bytes < kHuge) return static_cast<T*>(::operator new(bytes));
#if defined(_WIN32)
    void* p = _aligned_malloc(bytes, kHuge);  // Windows has no aligned_alloc
#else
    void* p = std::aligned_alloc(kHuge, (bytes + kHuge - 1) & ~(kHuge - 1));
#endif
    if (!p) throw std::bad_alloc();
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    madvise(p, bytes, MADV_HUGEPAGE);  // a hint: refused, the table works on small pages
#endif
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t n) {
    if (n * sizeof(T) < kHuge) {
      ::operator delete(p);
    } else {
#if defined(_WIN32)
      _aligned_free(p);
#else
      std::free(p);
#endif
    }
  }
  template <class U>
  bool operator==(const HugePageAllocator<U>&) const { return true; }
  template <class U>
  bool operator!=(const HugePageAllocator<U>&) const { return false; }
};

// std::allocator, except that resize() leaves the new elements uninitialised: for a buffer that is
// written right after it grows (an encoder's ids: zeroing them first was ~2% of encoding).
template <class T>
struct NoInitAllocator : std::allocator<T> {
  template <class U>
  struct rebind {
    using other = NoInitAllocator<U>;
  };
  using std::allocator<T>::allocator;
  template <class U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;  // default-initialised: no value for a uint32_t
  }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};
// Token ids as an encoder writes them.
using Ids = std::vector<uint32_t, NoInitAllocator<uint32_t>>;

inline uint64_t mix64(uint64_t h) {
  h ^= h >> 32;
  h *= 0xd6e8feb86659fd93ULL;
  h ^= h >> 32;
  h *= 0xd6e8feb86659fd93ULL;
  h ^= h >> 32;
  return h;
}

inline uint64_t load64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
inline uint64_t load32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// The last chunk of a string overlaps the one before (never a partial load, which the CPU cannot
// forward from the stores that built it); the length is in the seed, so this covers every byte.
inline uint64_t hash_bytes(const uint8_t* p, size_t n) {
  uint64_t h = 0x9E3779B97F4A7C15ULL ^ (static_cast<uint64_t>(n) * 0xff51afd7ed558ccdULL);
  uint64_t v;
  if (n >= 8) {
    for (size_t i = 0; i + 8 < n; i += 8) {
      h = (h ^ load64(p + i)) * 0xbf58476d1ce4e5b9ULL;
      h ^= h >> 29;
    }
    v = load64(p + n - 8);
  } else if (n >= 4) {
    v = (load32(p) << 32) | load32(p + n - 4);
  } else {
    v = n ? (uint64_t{p[0]} << 16) | (uint64_t{p[n >> 1]} << 8) | p[n - 1] : 0;
  }
  return mix64(h ^ v);
}

// A 128-bit digest of a sequence of byte strings, for resume keys (what changed inputs must change;
// not cryptographic). Each string is hashed by MurmurHash3's x64 128-bit construction (two lanes
// over 16-byte blocks, the length and a finalizer), seeded with the digest so far, so the order
// and the boundaries count:  {"ab"} and {"a", "b"} differ.
class Digest128 {
 public:
  void update(const uint8_t* p, size_t n) {
    constexpr uint64_t c1 = 0x87c37b91114253d5ULL, c2 = 0x4cf5ad432745937fULL;
    uint64_t h1 = a_, h2 = b_;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
      h1 ^= lane(load64(p + i), c1, c2, 31);
      h1 = rotl(h1, 27) + h2;
      h1 = h1 * 5 + 0x52dce729;
      h2 ^= lane(load64(p + i + 8), c2, c1, 33);
      h2 = rotl(h2, 31) + h1;
      h2 = h2 * 5 + 0x38495ab5;
    }
    uint8_t tail[16] = {};
    std::memcpy(tail, p + i, n - i);
    h1 ^= lane(load64(tail), c1, c2, 31);
    h2 ^= lane(load64(tail + 8), c2, c1, 33);
    h1 ^= n;
    h2 ^= n;
    h1 += h2;
    h2 += h1;
    h1 = fmix(h1);
    h2 = fmix(h2);
    a_ = h1 + h2;
    b_ = h2 + a_;
  }
  uint64_t high() const { return a_; }
  uint64_t low() const { return b_; }

 private:
  static uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
  static uint64_t lane(uint64_t k, uint64_t m1, uint64_t m2, int r) { return rotl(k * m1, r) * m2; }
  static uint64_t fmix(uint64_t h) {
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ULL;
    return h ^ (h >> 33);
  }
  uint64_t a_ = 0x6a09e667f3bcc908ULL, b_ = 0xbb67ae8584caa73bULL;
};

// memcmp(a, b, n) == 0 in the same overlapping loads (short words: no call, no byte loop).
inline bool bytes_equal(const uint8_t* a, const uint8_t* b, size_t n) {
  if (n >= 8) {
    for (size_t i = 0; i + 8 < n; i += 8) {
      if (load64(a + i) != load64(b + i)) return false;
    }
    return load64(a + n - 8) == load64(b + n - 8);
  }
  if (n >= 4) return load32(a) == load32(b) && load32(a + n - 4) == load32(b + n - 4);
  return n == 0 || (a[0] == b[0] && a[n >> 1] == b[n >> 1] && a[n - 1] == b[n - 1]);
}

// Byte string -> dense index (insertion order). Keys live in one pool.
//   StringTable t; t.insert("ab") == {0, true}; t.insert("ab") == {0, false}; t.key(0) == "ab"
class StringTable {
 public:
  StringTable() { reset(); }

  size_t size() const { return offsets_.size(); }
  std::string_view key(size_t i) const {
    return std::string_view(pool_.data() + offsets_[i], lengths_[i]);
  }
  size_t pool_bytes() const { return pool_.size(); }

  // Index of the key, or -1.
  int64_t find(const uint8_t* p, size_t n, uint64_t h) const {
    size_t s = h & mask_;
    while (true) {
      const Slot& slot = slots_[s];
      if (slot.index < 0) return -1;
      if (slot.hash == h && equal(slot.index, p, n)) return slot.index;
      s = (s + 1) & mask_;
    }
  }

  // (index, inserted)
  std::pair<int64_t, bool> insert(const uint8_t* p, size_t n, uint64_t h) {
    size_t s = h & mask_;
    while (true) {
      Slot& slot = slots_[s];
      if (slot.index < 0) break;
      if (slot.hash == h && equal(slot.index, p, n)) return {slot.index, false};
      s = (s + 1) & mask_;
    }
    int64_t index = static_cast<int64_t>(offsets_.size());
    slots_[s] = Slot{h, index};
    offsets_.push_back(pool_.size());
    lengths_.push_back(static_cast<uint32_t>(n));
    pool_.append(reinterpret_cast<const char*>(p), n);
    if (2 * offsets_.size() > slots_.size()) grow();
    return {index, true};
  }
  std::pair<int64_t, bool> insert(std::string_view k) {
    auto p = reinterpret_cast<const uint8_t*>(k.data());
    return insert(p, k.size(), hash_bytes(p, k.size()));
  }

  void reset(size_t capacity = 1024) {
    slots_.assign(capacity, Slot{0, -1});
    mask_ = capacity - 1;
    offsets_.clear();
    lengths_.clear();
    pool_.clear();
  }

 private:
  struct Slot {
    uint64_t hash;
    int64_t index;
  };
  bool equal(int64_t i, const uint8_t* p, size_t n) const {
    return lengths_[i] == n &&
           bytes_equal(reinterpret_cast<const uint8_t*>(pool_.data()) + offsets_[i], p, n);
  }
  void grow() {
    std::vector<Slot> old;
    old.swap(slots_);
    slots_.assign(old.size() * 2, Slot{0, -1});
    mask_ = slots_.size() - 1;
    for (const Slot& o : old) {
      if (o.index < 0) continue;
      size_t s = o.hash & mask_;
      while (slots_[s].index >= 0) s = (s + 1) & mask_;
      slots_[s] = o;
    }
  }

  std::vector<Slot> slots_;
  size_t mask_ = 0;
  std::vector<uint64_t> offsets_;
  std::vector<uint32_t> lengths_;
  std::string pool_;
};

// uint64 key -> V, open addressing, key and value in one slot (one line a probe; keys must not
// be ~0).   U64Map<int32_t> m; bool fresh; m.get(7, &fresh) = 3;  m.find(7) -> &3, fresh == true
template <class V>
class U64Map {
 public:
  explicit U64Map(size_t capacity = 1024) {
    size_t c = 16;
    while (c < 2 * capacity) c <<= 1;
    slots_.assign(c, Slot{kEmpty, V{}});
    mask_ = c - 1;
  }
  size_t size() const { return count_; }
  const V* find(uint64_t k) const { return find(k, mix64(k)); }
  // find(k) with h = mix64(k) already made
  const V* find(uint64_t k, uint64_t h) const {
    for (size_t s = h & mask_; slots_[s].key != kEmpty; s = (s + 1) & mask_) {
      if (slots_[s].key == k) return &slots_[s].value;
    }
    return nullptr;
  }
  // value slot for k; *inserted tells whether it was new (then its value is V{})
  V& get(uint64_t k, bool* inserted) {
    size_t s = mix64(k) & mask_;
    for (; slots_[s].key != kEmpty; s = (s + 1) & mask_) {
      if (slots_[s].key == k) {
        *inserted = false;
        return slots_[s].value;
      }
    }
    *inserted = true;
    if (2 * (count_ + 1) > slots_.size()) {
      grow();
      return get(k, inserted);
    }
    slots_[s] = Slot{k, V{}};
    ++count_;
    return slots_[s].value;
  }

 private:
  static constexpr uint64_t kEmpty = ~0ULL;
  struct Slot {
    uint64_t key;
    V value;
  };
  void grow() {
    std::vector<Slot> old(2 * slots_.size(), Slot{kEmpty, V{}});
    old.swap(slots_);
    mask_ = slots_.size() - 1;
    for (const Slot& o : old) {
      if (o.key == kEmpty) continue;
      size_t s = mix64(o.key) & mask_;
      while (slots_[s].key != kEmpty) s = (s + 1) & mask_;
      slots_[s] = o;
    }
  }
  std::vector<Slot> slots_;
  size_t mask_ = 0;
  size_t count_ = 0;
};

inline uint64_t pair_key(uint32_t a, uint32_t b) {
  return (static_cast<uint64_t>(a) << 32) | b;
}

}  // namespace seqpack
