// Python bindings of the compiled core: seqpack._native.
// Every call that does real work releases the GIL, so Python threads run it in parallel.
#include <cstdio>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "encode.h"
#include "helpers.h"
#include "packing.h"
#include "tokenizer_files.h"
#include "train.h"

namespace py = pybind11;
using namespace seqpack;

namespace {

struct Text {
  const uint8_t* data;
  size_t size;
};

// UTF-8 view of a str; the str keeps the buffer alive (CPython caches it on the object).
Text utf8_of(PyObject* obj) {
  if (!PyUnicode_Check(obj)) {
    throw py::type_error(std::string("expected str, got ") + Py_TYPE(obj)->tp_name);
  }
  Py_ssize_t n;
  const char* p = PyUnicode_AsUTF8AndSize(obj, &n);
  if (!p) throw py::error_already_set();
  return Text{reinterpret_cast<const uint8_t*>(p), static_cast<size_t>(n)};
}

// The texts as a tuple (the same one if they are a tuple): held while the GIL is released, so that
// no other thread can free a text being read (by clearing the list it came in).
py::tuple snapshot(const py::sequence& texts) {
  PyObject* t = PySequence_Tuple(texts.ptr());
  if (!t) throw py::error_already_set();
  return py::reinterpret_steal<py::tuple>(t);
}

std::vector<Text> utf8_list(const py::sequence& texts) {
  std::vector<Text> out;
  out.reserve(py::len(texts));
  for (py::handle t : texts) out.push_back(utf8_of(t.ptr()));
  return out;
}

template <class T>
py::array_t<T> to_array(const std::vector<T>& v) {
  py::array_t<T> a(v.size());
  if (!v.empty()) std::memcpy(a.mutable_data(), v.data(), v.size() * sizeof(T));
  return a;
}

std::vector<std::string> as_strings(const std::vector<py::bytes>& xs) {
  std::vector<std::string> out;
  for (const auto& x : xs) out.push_back(std::string(x));
  return out;
}

// Contiguous ranges of texts with about equal bytes, one per thread.
std::vector<size_t> balanced_cuts(const std::vector<Text>& texts, size_t parts) {
  size_t total = 0;
  for (const Text& t : texts) total += t.size;
  std::vector<size_t> cuts{0};
  size_t acc = 0;
  for (size_t i = 0; i < texts.size() && cuts.size() < parts; ++i) {
    acc += texts[i].size;
    if (acc * parts >= total * cuts.size()) cuts.push_back(i + 1);
  }
  if (cuts.back() != texts.size()) cuts.push_back(texts.size());
  return cuts;
}

// work(0) on the calling thread and work(1) .. work(chunks - 1) on helpers (helpers.h), for work that
// shares its parts out (a BlockDealer): a helper's call that had not begun when work(0) returned
// is withdrawn, as work(0) has then done every part.
template <class Fn>
void on_helpers(size_t chunks, Fn&& work) {
  if (chunks <= 1) {
    if (chunks) work(size_t{0});
    return;
  }
  Helpers::Batch helpers = Helpers::get().start(chunks - 1, [&work](size_t c) { work(c); });
  work(size_t{0});
  helpers.finish();
}

// Blocks [0, blocks) dealt to `threads` threads: thread t takes those of its own contiguous share in
// order, then helps the others with theirs (from wherever they have got to). Text next to text shares
// its words, so each thread's word cache misses less than with blocks dealt in turn (2 threads, 64 blocks:
// the two halves of the CS336 set hold 1.20x the distinct words of the whole, every other block 1.29x; of the
// mixed set 1.14x against 1.26x. encode_batch, 2 threads, cold: CS336 0.73-0.74 ms -> 0.69-0.70 ms).
// Any one thread alone takes every block, so a thread that never begins leaves none undone.
//   4 blocks, 2 threads: thread 0 takes 0, 1; thread 1 takes 2, 3 (then 1, if 0 is still on 0)
class BlockDealer {
 public:
  BlockDealer(size_t blocks, size_t threads)
      : blocks_(blocks), threads_(std::max<size_t>(threads, 1)), next_(new std::atomic<size_t>[threads_]) {
    for (size_t t = 0; t < threads_; ++t) next_[t].store(start(t), std::memory_order_relaxed);
  }
  size_t take(size_t t) {  // >= blocks: none left
    for (size_t k = 0; k < threads_; ++k) {
      const size_t share = (t + k) % threads_;
      const size_t b = next_[share].fetch_add(1);
      if (b < start(share + 1)) return b;
    }
    return blocks_;
  }
  void stop() {
    for (size_t t = 0; t < threads_; ++t) next_[t].store(start(t + 1));
  }

 private:
  size_t start(size_t t) const { return blocks_ * t / threads_; }
  const size_t blocks_, threads_;
  std::unique_ptr<std::atomic<size_t>[]> next_;
};

// Id lists share one Python int per token id, made once per process (id_ints(top)[i] is the int i)
// and never freed. Where CPython's reference counts are plain integers (not a free-threaded build)
// each is made with a count raised by 2^40, and an id list takes no reference to its items: a
// list's deallocation still gives one back for each, which no process lives long enough to make
// 2^40 times (CPython 3.12+ treats a count that wraps below the raise as immortal: either way the
// int is never freed). Filling a list is then plain stores: 100,000 20-byte strings, per document,
// warm 40.1-43.7 -> 35.5-39.3 ms.
#if defined(Py_GIL_DISABLED) || SIZEOF_VOID_P < 8
constexpr bool kUncountedInts = false;
#else
constexpr bool kUncountedInts = true;
#endif

PyObject* const* id_ints(uint32_t top) {  // the GIL held
  static auto* ints = new std::vector<PyObject*>();  // never freed: lists may outlive every Encoder
  static std::mutex mu;  // the GIL is held, but a GIL-less build has none
  std::lock_guard<std::mutex> lock(mu);
  if (ints->size() <= top) {
    // the table is only appended to, through a new array: one a live Encoder points at stays valid
    auto* grown = new std::vector<PyObject*>(*ints);
    grown->reserve(static_cast<size_t>(top) + 1);
    for (size_t i = grown->size(); i <= top; ++i) {
      PyObject* o = PyLong_FromUnsignedLong(static_cast<unsigned long>(i));
      if (!o) throw py::error_already_set();
      if (kUncountedInts) Py_SET_REFCNT(o, Py_REFCNT(o) + (Py_ssize_t{1} << 40));
      grown->push_back(o);
    }
    ints = grown;  // the old array is left allocated for the Encoders that point at it
  }
  return ints->data();
}

PyObject* fast_encode_call(PyObject* self, PyObject* text);
PyMethodDef kFastEncodeDef = {"encode", fast_encode_call, METH_O,
                              "encode(text) -> list[int]: the token ids of one text."};

class Encoder {
 public:
  // Texts up to this many bytes encode with the GIL held: releasing and re-taking it costs more
  // than the work, and holding it makes the inline cache and buffers safe to use without a lock.
  static constexpr size_t kInlineBytes = 4096;
  // A batch gets a thread for each kThreadBytes bytes of text at most: below ~60 KB two threads
  // were slower than one (100 texts of 20 bytes: 66 us against 16 with a thread started per call).
  // Helpers that linger between calls (helpers.h) made back-to-back calls cheaper, but a call that
  // comes after a pause still starts a thread, on a core whose caches hold none of the tables
  // (benchmarks/helpers.py: 64 mixed documents, 9 KB, 1 ms after the last call 53.4 us on 2 threads
  // against 35.3 on one, 256 (57 KB) 384.1 against 323.8; back to back 24.7 / 29.7, 194.5 / 305.6).
  static constexpr size_t kThreadBytes = 1 << 15;

  Encoder(std::vector<uint32_t> byte_ids, std::vector<uint32_t> left, std::vector<uint32_t> right,
          std::vector<uint32_t> merged, const std::vector<py::bytes>& specials,
          std::vector<uint32_t> special_ids)
      : core_(std::move(byte_ids), left, right, merged, as_strings(specials),
              std::move(special_ids)) {
    if (left.size() != right.size() || left.size() != merged.size()) {
      throw py::value_error("left, right and merged must have one entry per merge");
    }
    uint32_t top = 255;
    for (uint32_t id : merged) top = std::max(top, id);
    for (uint32_t id : core_.special_ids()) top = std::max(top, id);
    for (uint32_t id : core_.byte_ids()) top = std::max(top, id);
    ints_ = id_ints(top);
  }
  Encoder(const Encoder&) = delete;
  Encoder& operator=(const Encoder&) = delete;

  py::list encode(py::str text) {
    Text t = utf8_of(text.ptr());
    if (t.size <= kInlineBytes) {
      // taken out while the list is built: its allocation may run the GC, whose finalizers may
      // let another thread in to encode (which then finds inline_.out empty, not half read)
      Ids out = std::move(inline_.out);
      out.clear();
      core_.encode(t.data, t.size, inline_.cache, out, inline_.scratch);
      py::list ids = id_list(out.data(), out.size());
      inline_.out = std::move(out);  // its capacity serves the next call
      return ids;
    }
    auto w = pool_.take();
    {
      py::gil_scoped_release nogil;
      w->out.clear();
      core_.encode(t.data, t.size, w->cache, w->out, w->scratch);
    }
    py::list ids = id_list(w->out.data(), w->out.size());
    pool_.give(std::move(w));
    return ids;
  }

  // encode(text) as a plain C function (METH_O): pybind11's dispatch costs about 80 ns a call, a
  // third of encoding a 20-character string. Texts over `max_chars` characters go to `fallback`.
  // Its self is the tuple (this encoder, a capsule of its address, fallback, max_chars), which
  // keeps the encoder alive and lets the collector see every reference.
  py::object fast_encode(py::object fallback, Py_ssize_t max_chars) {
    py::object owner = py::cast(this, py::return_value_policy::reference);  // the existing object
    py::tuple self = py::make_tuple(owner, py::capsule(static_cast<void*>(this)), fallback, max_chars);
    PyObject* f = PyCFunction_New(&kFastEncodeDef, self.ptr());
    if (!f) throw py::error_already_set();
    return py::reinterpret_steal<py::object>(f);
  }

  // (ids, offsets): text i is ids[offsets[i]:offsets[i + 1]].
  py::tuple encode_batch(const py::sequence& texts, int threads, size_t thread_bytes) {
    const py::tuple keep = snapshot(texts);
    const std::vector<Text> views = utf8_list(keep);
    Encoded e = encode_views(views, threads, thread_bytes);
    const auto& ids = e.ids;
    const auto& lengths = e.lengths;
    size_t total = 0;
    for (const auto& v : ids) total += v.size();
    py::array_t<uint32_t> flat(total);
    py::array_t<int64_t> offsets(views.size() + 1);
    uint32_t* dst = flat.mutable_data();
    for (const auto& v : ids) {
      if (!v.empty()) std::memcpy(dst, v.data(), v.size() * sizeof(uint32_t));
      dst += v.size();
    }
    int64_t* off = offsets.mutable_data();
    off[0] = 0;
    for (size_t i = 0; i < views.size(); ++i) off[i + 1] = off[i] + lengths[i];
    return py::make_tuple(flat, offsets);
  }

  // A list of id lists, one per text (what tiktoken's encode_ordinary_batch returns).
  //
  // The lists are made while the texts are encoded: making a Python list needs the GIL, so the
  // calling thread alone can do it, and done after the encoding it was the call's serial part
  // (100,000 short texts: ~30% of a 2-thread call). Here the calling thread encodes blocks like
  // the others and, between two of its blocks, makes the lists of every block finished so far
  // (its own and the other threads'); it takes fewer blocks for it (they go to whoever is free).
  // Only the calling thread touches Python objects. A text cut over several blocks (see
  // cut_long_texts) gets its list once they are all done.
  py::list encode_lists(const py::sequence& texts, int threads, size_t thread_bytes) {
    const py::tuple keep = snapshot(texts);
    const std::vector<Text> views = utf8_list(keep);
    Encoded e = plan_views(views, threads, thread_bytes);
    const std::vector<Text>& pieces = e.cut() ? e.bytes : views;
    const size_t n = views.size(), blocks = e.cuts.size() - 1;
    const size_t workers = std::min(e.workers, blocks);
    py::list out(n);
    // a cut text whose pieces lie in more than one block: its list is made last
    std::vector<char> spans(e.cut() ? n : 0, 0);
    for (size_t b = 1; e.cut() && b < blocks; ++b) {
      const size_t k = e.cuts[b];  // the first piece of block b, and the last of block b - 1
      if (e.text_of[k - 1] == e.text_of[k]) spans[e.text_of[k]] = 1;
    }
    BlockQueue q(blocks, workers);
    std::vector<char> made(blocks, 0);
    size_t left = blocks, first = 0;  // blocks whose lists are not made; the first of them
    // the lists of finished blocks not made yet (GIL held)
    auto make_ready = [&] {
      while (first < blocks && made[first]) ++first;
      for (size_t b = first; b < blocks; ++b) {
        if (made[b] || !q.done(b)) continue;
        made[b] = 1;
        --left;
        make_lists(e, b, spans, out.ptr());
      }
    };
    Running running(*this, e, pieces, q, workers);  // threads 1.. encode blocks; joined by its destructor
    {
      auto w = pool_.take();
      for (size_t b; (b = q.take(0)) < blocks;) {
        {
          py::gil_scoped_release nogil;
          encode_block(e, pieces, b, *w);
        }
        q.finish(b);
        make_ready();
      }
      pool_.give(std::move(w));
    }
    while (left) {
      {
        py::gil_scoped_release nogil;
        q.wait_finished(made);
      }
      make_ready();
    }
    running.join();
    if (e.cut()) {
      lengths_of(e, views.size());
      for (size_t i = 0; i < n; ++i) {
        // zeroed: the items are set only once every such list is made, and one that fails to be
        // made frees `out`, with those already in it (a freed list releases each item it holds)
        if (spans[i]) PyList_SET_ITEM(out.ptr(), i, zeroed_list(e.lengths[i]));
      }
      for (size_t b = 0; b < blocks; ++b) {
        const uint32_t* p = e.ids[b].data();
        for (size_t k = e.cuts[b]; k < e.cuts[b + 1]; ++k) {
          if (spans[e.text_of[k]]) fill_items(PyList_GET_ITEM(out.ptr(), e.text_of[k]), e.at[k], p, e.counts[k]);
          p += e.counts[k];
        }
      }
    }
    return out;
  }

  // (threads, blocks, pieces) that encode_batch and encode_lists would run these texts on (plan_views).
  py::tuple plan(const py::sequence& texts, int threads, size_t thread_bytes) const {
    const py::tuple keep = snapshot(texts);
    const Encoded e = plan_views(utf8_list(keep), threads, thread_bytes);
    return py::make_tuple(e.workers, e.cuts.size() - 1, e.cut() ? e.bytes.size() : py::len(keep));
  }

  // The cut that encode_batch and encode_lists would make in these UTF-8 bytes in [lo, hi]
  // (EncoderCore::cut_point), 0 if none.
  size_t cut_point(py::bytes text, size_t lo, size_t hi) const {
    const std::string t(text);
    if (lo == 0 || lo > hi || hi >= t.size()) throw py::value_error("cut_point needs 0 < lo <= hi < len(text)");
    return core_.cut_point(reinterpret_cast<const uint8_t*>(t.data()), t.size(), lo, hi);
  }

  py::list bpe_with(py::bytes word, bool heap) {
    std::string w(word);
    std::vector<uint32_t> parts;
    const auto* p = reinterpret_cast<const uint8_t*>(w.data());
    core_.byte_ids_into(p, w.size(), parts);
    if (heap) {
      core_.bpe_heap(parts, p);
    } else {
      core_.bpe_scan(parts, p);
    }
    return id_list(parts.data(), parts.size());
  }

  void clear_cache() {
    pool_.clear();
    inline_.cache.clear();
  }

 private:
  // Store ints_[ids[j]] as the new list's items from `at` on (a reference to each only where the
  // ints are counted: see id_ints).
  void fill_items(PyObject* list, int64_t at, const uint32_t* ids, int64_t n) const {
    PyObject** items = reinterpret_cast<PyListObject*>(list)->ob_item + at;
    PyObject* const* ints = ints_;
    for (int64_t j = 0; j < n; ++j) {
      PyObject* o = ints[ids[j]];
      if (!kUncountedInts) Py_INCREF(o);
      items[j] = o;
    }
  }

  py::list id_list(const uint32_t* ids, size_t n) const {
    py::list out = py::reinterpret_steal<py::list>(new_list(static_cast<int64_t>(n)));
    fill_items(out.ptr(), 0, ids, static_cast<int64_t>(n));
    return out;
  }

  // An id list holds only ints, so it cannot be part of a reference cycle: it is taken out of the
  // cycle collector's lists, as CPython does for its own tuples and dicts of atomic items. Held id
  // lists then cost the collector nothing (traversing them was a third of `[encode(d) for d in
  // docs]`). Only a list the caller later makes part of a cycle (ids.append(ids)) would not be freed.
  static void untrack(PyObject* list) { PyObject_GC_UnTrack(list); }

  static size_t total_bytes(const std::vector<Text>& views) {
    size_t total = 0;
    for (const Text& t : views) total += t.size;
    return total;
  }

  static size_t thread_count(int threads, size_t texts) {
    return std::max<size_t>(1, std::min<size_t>(static_cast<size_t>(std::max(threads, 1)), texts));
  }

  // How a batch is encoded (plan_views), then what it made. The texts are encoded in pieces: each
  // text whole, unless it was cut (see cut_long_texts): then piece k is bytes[k] of text
  // text_of[k], its ids from that text's id at[k] on.
  struct Encoded {
    size_t workers = 1;                   // threads to run
    std::vector<Text> bytes;              // the pieces, when some text was cut (else the texts)
    std::vector<size_t> text_of;          // ... and their texts
    std::vector<int64_t> at;              // ... and where their ids start in their text's
    std::vector<int64_t> counts;          // piece k's number of ids
    std::vector<size_t> cuts;             // block b: pieces [cuts[b], cuts[b + 1])
    std::vector<Ids> ids;                 // block b's ids, its pieces' one after another
    std::vector<int64_t> lengths;         // text i's number of ids
    bool cut() const { return !text_of.empty(); }
  };

  // Texts longer than an equal share of the work (total / (threads * kBlocksPerThread), at least
  // kMinPiece bytes) cut where the ids cannot change (EncoderCore::cut_point), so that one long
  // text keeps every thread busy; false (nothing made) when no text is that long.
  //   2 threads, texts of 540 KB and 1 KB: pieces of 4.2-8.5 KB, then the 1 KB text
  // (32 blocks a thread: with 8, the mixed set's last blocks, of non-Latin text that costs ~3x a
  // byte, could leave one thread working alone)
  static constexpr size_t kBlocksPerThread = 32, kMinPiece = 4096, kMinBlock = 2048;
  bool cut_long_texts(const std::vector<Text>& views, size_t total, size_t workers, Encoded& e) const {
    if (workers < 2) return false;
    const size_t share = std::max(kMinPiece, total / (workers * kBlocksPerThread));
    if (std::none_of(views.begin(), views.end(), [&](const Text& t) { return t.size > share; })) return false;
    for (size_t i = 0; i < views.size(); ++i) {
      const uint8_t* s = views[i].data;
      size_t n = views[i].size;
      while (n > share) {
        const size_t c = core_.cut_point(s, n, share / 2, share);
        if (!c) break;  // no safe cut near: the rest whole
        e.bytes.push_back(Text{s, c});
        e.text_of.push_back(i);
        s += c;
        n -= c;
      }
      e.bytes.push_back(Text{s, n});
      e.text_of.push_back(i);
    }
    return true;
  }

  // The pieces and blocks of `views` on up to `threads` threads, one for each `thread_bytes` bytes
  // of text (0: one per text, or per kMinPiece bytes where that is more): blocks of about equal
  // bytes (kBlocksPerThread per thread, of at least kMinBlock bytes), which the threads take in
  // turn as they finish one (text of costlier bytes, e.g. another script, does not leave a thread idle).
  //   2 threads, 100 texts of 20 bytes: 1 thread, 1 block; 2 MB: 2 threads, 64 blocks
  Encoded plan_views(const std::vector<Text>& views, int threads, size_t thread_bytes) const {
    Encoded e;
    const size_t total = total_bytes(views);
    e.workers = thread_count(threads, thread_bytes ? total / thread_bytes : std::max(views.size(), total / kMinPiece));
    const std::vector<Text>& pieces = cut_long_texts(views, total, e.workers, e) ? e.bytes : views;
    const size_t blocks = std::min(e.workers * kBlocksPerThread, std::max(e.workers, total / kMinBlock));
    e.cuts = balanced_cuts(pieces, e.workers < 2 ? 1 : blocks);
    e.ids.assign(e.cuts.size() - 1, {});
    e.counts.assign(pieces.size(), 0);
    return e;
  }

  // Block b's ids into e.ids[b] and its pieces' counts (no GIL needed).
  void encode_block(Encoded& e, const std::vector<Text>& pieces, size_t b, Worker& w) const {
    Ids out;  // the block's own (side by side, threads' vectors would share cache lines)
    for (size_t k = e.cuts[b]; k < e.cuts[b + 1]; ++k) {
      const size_t before = out.size();
      core_.encode(pieces[k].data, pieces[k].size, w.cache, out, w.scratch);
      e.counts[k] = static_cast<int64_t>(out.size() - before);
    }
    e.ids[b] = std::move(out);
  }

  // e.lengths, and for a cut batch e.at, once every block is encoded.
  static void lengths_of(Encoded& e, size_t texts) {
    if (!e.cut()) {
      e.lengths = e.counts;
      return;
    }
    e.lengths.assign(texts, 0);
    e.at.resize(e.text_of.size());
    for (size_t k = 0; k < e.text_of.size(); ++k) {
      e.at[k] = e.lengths[e.text_of[k]];
      e.lengths[e.text_of[k]] += e.counts[k];
    }
  }

  // Encode `views` on up to `threads` threads, the GIL released (see plan_views).
  Encoded encode_views(const std::vector<Text>& views, int threads, size_t thread_bytes) {
    Encoded e = plan_views(views, threads, thread_bytes);
    const std::vector<Text>& pieces = e.cut() ? e.bytes : views;
    const size_t blocks = e.cuts.size() - 1;
    const size_t workers = std::min(e.workers, blocks);
    BlockDealer dealer(blocks, workers);
    {
      py::gil_scoped_release nogil;
      on_helpers(workers, [&](size_t t) {
        auto w = pool_.take();
        for (size_t b; (b = dealer.take(t)) < blocks;) encode_block(e, pieces, b, *w);
        pool_.give(std::move(w));
      });
    }
    lengths_of(e, views.size());
    return e;
  }

  // The blocks of one encode_lists call: handed out one at a time, and which are finished.
  class BlockQueue {
   public:
    BlockQueue(size_t blocks, size_t threads)
        : blocks_(blocks), dealer_(blocks, threads), done_(new std::atomic<bool>[blocks]) {
      for (size_t b = 0; b < blocks; ++b) done_[b].store(false, std::memory_order_relaxed);
    }
    size_t take(size_t t) { return dealer_.take(t); }  // thread t's next block; >= blocks: none left
    void stop() { dealer_.stop(); }
    void finish(size_t b) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        done_[b].store(true, std::memory_order_release);
      }
      cv_.notify_all();
    }
    bool done(size_t b) const { return done_[b].load(std::memory_order_acquire); }
    // until a block is finished whose lists are not made yet (made: the caller's)
    void wait_finished(const std::vector<char>& made) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] {
        for (size_t b = 0; b < blocks_; ++b) {
          if (!made[b] && done(b)) return true;
        }
        return false;
      });
    }

   private:
    const size_t blocks_;
    BlockDealer dealer_;
    std::unique_ptr<std::atomic<bool>[]> done_;
    std::mutex mu_;
    std::condition_variable cv_;
  };

  // Threads 1 .. workers - 1 of an encode_lists call (helpers), encoding blocks from the queue until
  // none is left; the destructor stops them after their current block and waits for them (an
  // exception leaves none running). A helper that has not begun by then never does.
  class Running {
   public:
    Running(Encoder& enc, Encoded& e, const std::vector<Text>& pieces, BlockQueue& q, size_t workers)
        : q_(q), helpers_(workers < 2 ? Helpers::Batch() : Helpers::get().start(workers - 1, [&enc, &e, &pieces, &q](size_t t) {
            auto w = enc.pool_.take();
            for (size_t b; (b = q.take(t)) < e.cuts.size() - 1;) {
              enc.encode_block(e, pieces, b, *w);
              q.finish(b);
            }
            enc.pool_.give(std::move(w));
          })) {}
    void join() { helpers_.finish(); }
    ~Running() {
      q_.stop();
      helpers_.finish();
    }
    Running(const Running&) = delete;
    Running& operator=(const Running&) = delete;

   private:
    BlockQueue& q_;
    Helpers::Batch helpers_;
  };

  // A new list of n items, all NULL (the GIL held).
  static PyObject* zeroed_list(int64_t n) {
    PyObject* l = PyList_New(static_cast<Py_ssize_t>(n));
    if (!l) throw py::error_already_set();
    untrack(l);
    return l;
  }

  // A new list of n items, not yet set: the caller sets them all right away, before anything that
  // may fail or let Python code see the list (the GIL held). Where CPython's list is a plain item
  // array (not a free-threaded build), the array is not zeroed first as PyList_New would: per
  // document, warm, the mixed set 27.4 -> 26.5 ms (1.8M ids; medians of 8 alternated processes).
  static PyObject* new_list(int64_t n) {
#if defined(Py_GIL_DISABLED) || defined(PYPY_VERSION)
    return zeroed_list(n);
#else
    PyObject* l = zeroed_list(0);
    if (n == 0) return l;
    auto** items = static_cast<PyObject**>(PyMem_Malloc(static_cast<size_t>(n) * sizeof(PyObject*)));
    if (!items) {
      Py_DECREF(l);
      PyErr_NoMemory();
      throw py::error_already_set();
    }
    auto* list = reinterpret_cast<PyListObject*>(l);
    list->ob_item = items;
    list->allocated = static_cast<Py_ssize_t>(n);
    Py_SET_SIZE(list, static_cast<Py_ssize_t>(n));
    return l;
#endif
  }

  // The lists of block b's texts into out (the GIL held); a text spanning blocks (spans) is left.
  void make_lists(const Encoded& e, size_t b, const std::vector<char>& spans, PyObject* out) const {
    // new containers one after another: without the collector, which would otherwise run every
    // few hundred of them and find nothing to free
    const int gc_was_on = PyGC_Disable();
    try {
      const uint32_t* p = e.ids[b].data();
      for (size_t k = e.cuts[b], end; k < e.cuts[b + 1]; k = end) {
        const size_t text = e.cut() ? e.text_of[k] : k;
        int64_t n = e.counts[k];
        for (end = k + 1; e.cut() && end < e.cuts[b + 1] && e.text_of[end] == text; ++end) n += e.counts[end];
        if (!e.cut() || !spans[text]) {
          PyObject* l = new_list(n);
          fill_items(l, 0, p, n);
          PyList_SET_ITEM(out, text, l);
        }
        p += n;
      }
    } catch (...) {
      if (gc_was_on) PyGC_Enable();
      throw;
    }
    if (gc_was_on) PyGC_Enable();
  }

  EncoderCore core_;
  WorkerPool pool_;
  Worker inline_;                         // used only with the GIL held
  PyObject* const* ints_;                 // ints_[i] is the Python int i (id_ints)
};

PyObject* fast_encode_call(PyObject* self, PyObject* text) {
  if (!PyUnicode_Check(text)) {
    PyErr_Format(PyExc_TypeError, "encode takes a str, got %s", Py_TYPE(text)->tp_name);
    return nullptr;
  }
  const Py_ssize_t max_chars = PyLong_AsSsize_t(PyTuple_GET_ITEM(self, 3));
  if (PyUnicode_GET_LENGTH(text) > max_chars) return PyObject_CallOneArg(PyTuple_GET_ITEM(self, 2), text);
  auto* enc = static_cast<Encoder*>(PyCapsule_GetPointer(PyTuple_GET_ITEM(self, 1), nullptr));
  try {
    return enc->encode(py::reinterpret_borrow<py::str>(text)).release().ptr();
  } catch (py::error_already_set& e) {
    e.restore();
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  }
  return nullptr;
}

py::list split_words_py(py::str text) {
  Text t = utf8_of(text.ptr());
  py::list out;
  split_words(t.data, t.size, [&](size_t a, size_t b) {
    out.append(py::reinterpret_steal<py::object>(
        PyUnicode_DecodeUTF8(reinterpret_cast<const char*>(t.data + a), b - a, "strict")));
  });
  return out;
}

int64_t utf8_error_py(py::buffer data) {
  py::buffer_info info = data.request();
  const auto* p = static_cast<const uint8_t*>(info.ptr);
  const size_t n = static_cast<size_t>(info.size * info.itemsize);
  py::gil_scoped_release nogil;
  return utf8_error(p, n);
}

py::array_t<uint8_t> class_table() {
  py::array_t<uint8_t> out(0x110000);
  uint8_t* dst = out.mutable_data();
  for (uint32_t c = 0; c < 0x110000; ++c) dst[c] = class_of(c);
  return out;
}

class Counter {
 public:
  explicit Counter(const std::vector<py::bytes>& specials) : counter_(as_strings(specials)) {}

  // Count UTF-8 bytes; returns -1, or the offset of the first invalid byte (nothing counted).
  int64_t add_bytes(py::buffer data) {
    py::buffer_info info = data.request();
    const auto* p = static_cast<const uint8_t*>(info.ptr);
    const size_t n = static_cast<size_t>(info.size * info.itemsize);
    py::gil_scoped_release nogil;
    const int64_t bad = utf8_error(p, n);
    if (bad >= 0) return bad;
    counter_.add(p, n);
    return -1;
  }

  void add_texts(const py::sequence& texts) {
    const py::tuple keep = snapshot(texts);
    const std::vector<Text> views = utf8_list(keep);
    py::gil_scoped_release nogil;
    for (const Text& t : views) counter_.add(t.data, t.size);
  }

  void merge(const Counter& other) {
    py::gil_scoped_release nogil;
    counter_.merge(other.counter_);
  }

  py::tuple to_arrays() const {
    const size_t n = counter_.size();
    py::array_t<uint8_t> blob(counter_.key_bytes());
    py::array_t<int64_t> offsets(n + 1), counts(n);
    write_arrays(blob.mutable_data(), offsets.mutable_data(), counts.mutable_data());
    return py::make_tuple(blob, offsets, counts);
  }

  void add_arrays(py::array_t<uint8_t, py::array::c_style> blob,
                  py::array_t<int64_t, py::array::c_style> offsets,
                  py::array_t<int64_t, py::array::c_style> counts) {
    const size_t n = static_cast<size_t>(counts.size());
    if (static_cast<size_t>(offsets.size()) != n + 1) {
      throw py::value_error("offsets must have one more entry than counts");
    }
    const uint8_t* b = blob.data();
    const int64_t* o = offsets.data();
    const int64_t* c = counts.data();
    if (o[0] != 0 || o[n] != blob.size()) throw py::value_error("offsets do not span the blob");
    py::gil_scoped_release nogil;
    for (size_t i = 0; i < n; ++i) counter_.add_word(b + o[i], o[i + 1] - o[i], c[i]);
  }

  size_t size() const { return counter_.size(); }
  int64_t total() const { return counter_.total(); }

  // The merge loop over these counts, as merge_loop(*to_arrays(), num_merges) but with no array
  // made (training then needs no numpy), its result as bytes: (pairs, tokens), pairs[k] the k-th
  // merge's (left, right) and tokens[k] = left + right (one bytes object per token, shared).
  // Also each merge's left and right ids in the vocab the trainer builds (bytes 0-255, then
  // `specials` special tokens, then the merges' tokens: token 256 + k here is 256 + specials + k there).
  py::tuple merges(size_t num_merges, size_t specials) const {
    const size_t n = counter_.size();
    std::vector<uint8_t> blob(counter_.key_bytes());
    std::vector<int64_t> offsets(n + 1), counts(n);
    std::vector<int32_t> left, right;
    std::vector<std::string> tokens;
    {
      py::gil_scoped_release nogil;
      write_arrays(blob.data(), offsets.data(), counts.data());
      MergeLoop loop(blob.data(), offsets.data(), counts.data(), n);
      loop.run(num_merges, left, right);
      tokens = loop.take_tokens();
    }
    std::vector<py::bytes> objs;
    objs.reserve(tokens.size());
    for (const std::string& t : tokens) objs.emplace_back(t);
    py::list pairs(left.size()), made(left.size());
    std::vector<int64_t> left_ids(left.size()), right_ids(right.size());
    const auto vocab_id = [&](int32_t t) { return t < 256 ? int64_t{t} : int64_t{t} + static_cast<int64_t>(specials); };
    for (size_t k = 0; k < left.size(); ++k) {
      pairs[k] = py::make_tuple(objs[left[k]], objs[right[k]]);
      made[k] = objs[256 + k];
      left_ids[k] = vocab_id(left[k]);
      right_ids[k] = vocab_id(right[k]);
    }
    return py::make_tuple(pairs, made, left_ids, right_ids);
  }

 private:
  // The counts as three flat arrays (see to_arrays): key_bytes() bytes, size() + 1 and size() entries.
  void write_arrays(uint8_t* blob, int64_t* offsets, int64_t* counts) const {
    offsets[0] = 0;
    for (size_t i = 0; i < counter_.size(); ++i) {
      std::string_view w = counter_.word(i);
      std::memcpy(blob + offsets[i], w.data(), w.size());
      offsets[i + 1] = offsets[i] + static_cast<int64_t>(w.size());
      counts[i] = counter_.count(i);
    }
  }

  WordCounter counter_;
};

py::tuple merge_loop(py::array_t<uint8_t, py::array::c_style> blob,
                     py::array_t<int64_t, py::array::c_style> offsets,
                     py::array_t<int64_t, py::array::c_style> counts, size_t num_merges) {
  const size_t n = static_cast<size_t>(counts.size());
  if (static_cast<size_t>(offsets.size()) != n + 1) {
    throw py::value_error("offsets must have one more entry than counts");
  }
  std::vector<int32_t> left, right;
  {
    py::gil_scoped_release nogil;
    MergeLoop loop(blob.data(), offsets.data(), counts.data(), n);
    loop.run(num_merges, left, right);
  }
  return py::make_tuple(to_array(left), to_array(right));
}

// ------------------------------------------------------------------------------- packing
using I64 = py::array_t<int64_t, py::array::c_style | py::array::forcecast>;
using F64 = py::array_t<double, py::array::c_style | py::array::forcecast>;

py::tuple price_packs_py(I64 lengths, F64 values, int64_t cap, int64_t depth) {
  const int64_t n = lengths.size();
  if (values.size() != n) throw py::value_error("one value per length");
  Pricing r;
  {
    py::gil_scoped_release nogil;
    r = price_packs(lengths.data(), values.data(), n, cap, depth);
  }
  py::array_t<double> row_values(n + 1);
  std::memcpy(row_values.mutable_data(), r.row_values.data(), (n + 1) * sizeof(double));
  py::array_t<int64_t> patterns({n + 1, n});
  if (n) std::memcpy(patterns.mutable_data(), r.patterns.data(), r.patterns.size() * sizeof(int64_t));
  return py::make_tuple(row_values, patterns);
}

py::tuple fill_templates_py(I64 slot_lens, I64 starts, I64 counts, I64 hist) {
  const int64_t t = counts.size();
  if (starts.size() != t + 1) throw py::value_error("one start per template, and the end");
  FillResult r;
  {
    py::gil_scoped_release nogil;
    r = fill_templates(slot_lens.data(), starts.data(), counts.data(), t, hist.data(), hist.size());
  }
  py::list packs;
  for (const auto& g : r.groups) {
    if (!g.count || g.filled.empty()) continue;
    py::tuple filled(g.filled.size());
    for (size_t i = 0; i < g.filled.size(); ++i) filled[i] = py::int_(g.filled[i]);
    packs.append(py::make_tuple(filled, g.count));
  }
  py::array_t<int64_t> need(static_cast<py::ssize_t>(r.need.size()));
  if (!r.need.empty()) std::memcpy(need.mutable_data(), r.need.data(), r.need.size() * sizeof(int64_t));
  return py::make_tuple(packs, need);
}

void check_out(const py::array& out, const char* name) {
  if (out.ndim() != 2 || !(out.flags() & py::array::c_style) || !out.writeable()) {
    throw py::value_error(std::string(name) + " must be a writeable 2-D C-contiguous array");
  }
}

void scatter_rows_py(py::array src, I64 seq_off, I64 order, I64 pack_off, py::array out,
                     py::array pad, int threads) {
  check_out(out, "out");
  if (!(src.flags() & py::array::c_style) || !src.dtype().is(out.dtype()) ||
      !pad.dtype().is(out.dtype()) || pad.size() != 1) {
    throw py::value_error("src, out and pad must share one dtype (src contiguous, pad one item)");
  }
  const int64_t packs = out.shape(0), width = out.shape(1);
  if (pack_off.size() != packs + 1) throw py::value_error("pack_off must have packs + 1 entries");
  const auto* s = static_cast<const uint8_t*>(src.data());
  const auto* pd = static_cast<const uint8_t*>(pad.data());
  auto* o = static_cast<uint8_t*>(out.mutable_data());
  const size_t itemsize = static_cast<size_t>(out.itemsize());
  py::gil_scoped_release nogil;
  scatter_rows(s, seq_off.data(), order.data(), pack_off.data(), packs, width, itemsize, pd, o,
               threads);
}

// Bytes of a str's UTF-8: CPython keeps it on the str once made (the encoder and text_digest make it),
// where len(s.encode()) would make it again.
size_t utf8_size(py::str text) { return utf8_of(text.ptr()).size; }

// Digest128 of the texts' UTF-8 (hex, 32 digits); the hashing runs without the GIL.
std::string text_digest(const py::sequence& texts) {
  const py::tuple keep = snapshot(texts);
  const std::vector<Text> views = utf8_list(keep);
  Digest128 d;
  {
    py::gil_scoped_release nogil;
    for (const Text& t : views) d.update(t.data, t.size);
  }
  char hex[33];
  std::snprintf(hex, sizeof hex, "%016llx%016llx", static_cast<unsigned long long>(d.high()),
                static_cast<unsigned long long>(d.low()));
  return std::string(hex, 32);
}

void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
const char* bytes_item(PyObject* o, Py_ssize_t* n) {
  if (!PyBytes_Check(o)) throw py::type_error("tokens and merges must hold bytes");
  *n = PyBytes_GET_SIZE(o);
  return PyBytes_AS_STRING(o);
}
std::string_view bytes_view(PyObject* o) {
  Py_ssize_t n;
  const char* p = bytes_item(o, &n);
  return std::string_view(p, static_cast<size_t>(n));
}

// A vocabulary as Python hands it over: ids (ints >= 0), each id's token (bytes) and the merges
// ((bytes, bytes) tuples), read as views into the bytes objects (valid while the lists are: the
// GIL stays held).
struct TokenLists {
  std::vector<uint64_t> ids;
  std::vector<std::string_view> tokens;
  std::vector<std::pair<std::string_view, std::string_view>> merges;
};
TokenLists read_token_lists(const py::list& ids, const py::list& tokens, const py::list& merges) {
  const Py_ssize_t n = PyList_GET_SIZE(tokens.ptr()), m = PyList_GET_SIZE(merges.ptr());
  if (PyList_GET_SIZE(ids.ptr()) != n) throw py::value_error("ids and tokens must have one entry per token");
  TokenLists t;
  t.ids.resize(static_cast<size_t>(n));
  t.tokens.resize(static_cast<size_t>(n));
  t.merges.resize(static_cast<size_t>(m));
  for (Py_ssize_t k = 0; k < n; ++k) {
    t.ids[k] = PyLong_AsUnsignedLongLong(PyList_GET_ITEM(ids.ptr(), k));
    if (PyErr_Occurred()) throw py::error_already_set();
    t.tokens[k] = bytes_view(PyList_GET_ITEM(tokens.ptr(), k));
  }
  for (Py_ssize_t k = 0; k < m; ++k) {
    PyObject* pair = PyList_GET_ITEM(merges.ptr(), k);
    if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) throw py::type_error("merges must hold pairs (tuples) of bytes");
    t.merges[k] = {bytes_view(PyTuple_GET_ITEM(pair, 0)), bytes_view(PyTuple_GET_ITEM(pair, 1))};
  }
  return t;
}

// What Tokenizer's fingerprint hashes, less the special tokens (Tokenizer._fingerprint_reference
// makes the same bytes): per token, in id order, its id (8 bytes little-endian), its length (4) and its
// bytes; then per merge, each side's length (4) and bytes.
//   ids [0], tokens [b"a"], merges [(b"a", b"a")] -> 00*8 01 00 00 00 'a' 01 00 00 00 'a' 01 00 00 00 'a'
py::bytes fingerprint_stream(const py::list& ids, const py::list& tokens, const py::list& merges) {
  const TokenLists t = read_token_lists(ids, tokens, merges);
  std::string out;
  out.reserve(t.tokens.size() * 20 + t.merges.size() * 20);
  for (size_t k = 0; k < t.tokens.size(); ++k) {
    put_le(out, t.ids[k], 8);
    put_le(out, t.tokens[k].size(), 4);
    out.append(t.tokens[k]);
  }
  for (const auto& [a, b] : t.merges) {
    put_le(out, a.size(), 4);
    out.append(a);
    put_le(out, b.size(), 4);
    out.append(b);
  }
  return py::bytes(out);
}

// (vocab.json, merges.txt, tokenizer.json's vocab, its merges) as UTF-8 bytes (see tokenizer_files.h):
// ids ascending, tokens their bytes, merges (bytes, bytes) pairs (see read_token_lists), special
// (index into ids, JSON string literal) pairs.
py::tuple tokenizer_texts_py(const py::list& ids, const py::list& tokens, const py::list& merges, const py::list& special) {
  const TokenLists t = read_token_lists(ids, tokens, merges);
  for (size_t k = 1; k < t.ids.size(); ++k) {
    if (t.ids[k] <= t.ids[k - 1]) throw py::value_error("ids must be ascending");
  }
  auto specials = special.cast<std::vector<std::pair<size_t, std::string>>>();
  std::sort(specials.begin(), specials.end());
  for (const auto& sp : specials) {
    if (sp.first >= t.tokens.size()) throw py::value_error("a special token's index is past the tokens");
  }
  const TokenizerTexts out = tokenizer_texts(t.ids, t.tokens, t.merges, specials);
  return py::make_tuple(py::bytes(out.vocab_json), py::bytes(out.merges_txt), py::bytes(out.hf_vocab),
                        py::bytes(out.hf_merges));
}

py::array append_to_each_py(py::array src, I64 off, py::array item) {
  if (src.ndim() != 1 || !(src.flags() & py::array::c_style) || !item.dtype().is(src.dtype()) ||
      item.size() != 1) {
    throw py::value_error("src must be a contiguous 1-D array and item one item of its dtype");
  }
  const int64_t ranges = off.size() - 1;
  const int64_t* o = off.data();
  if (ranges < 0 || o[0] != 0 || o[ranges] != src.shape(0)) {
    throw py::value_error("offsets must run from 0 to len(src)");
  }
  for (int64_t d = 0; d < ranges; ++d) {
    if (o[d + 1] < o[d]) throw py::value_error("offsets must not decrease");
  }
  py::array out(src.dtype(), std::vector<py::ssize_t>{static_cast<py::ssize_t>(src.shape(0) + ranges)});
  const auto* s = static_cast<const uint8_t*>(src.data());
  const auto* it = static_cast<const uint8_t*>(item.data());
  auto* dst = static_cast<uint8_t*>(out.mutable_data());
  const size_t itemsize = static_cast<size_t>(src.itemsize());
  {
    py::gil_scoped_release nogil;
    append_to_each(s, o, ranges, itemsize, it, dst);
  }
  return out;
}

template <class S>
void seg_pos_with(const int64_t* lengths, const int64_t* order, const int64_t* pack_off,
                  int64_t packs, int64_t width, int64_t offset, void* seg, py::array& pos,
                  int threads) {
  void* p = pos.mutable_data();
  switch (pos.itemsize()) {
    case 1: return segments_positions(lengths, order, pack_off, packs, width, offset, static_cast<S*>(seg), static_cast<uint8_t*>(p), threads);
    case 2: return segments_positions(lengths, order, pack_off, packs, width, offset, static_cast<S*>(seg), static_cast<uint16_t*>(p), threads);
    case 4: return segments_positions(lengths, order, pack_off, packs, width, offset, static_cast<S*>(seg), static_cast<uint32_t*>(p), threads);
    default: return segments_positions(lengths, order, pack_off, packs, width, offset, static_cast<S*>(seg), static_cast<uint64_t*>(p), threads);
  }
}

void segments_positions_py(I64 lengths, I64 order, I64 pack_off, py::object seg_or_none,
                           py::array pos, int64_t offset, int threads) {
  // seg None: positions only (a 1-byte seg type, never written)
  const bool with_seg = !seg_or_none.is_none();
  py::array seg = with_seg ? py::array(seg_or_none) : pos;
  check_out(seg, "seg");
  check_out(pos, "pos");
  for (const py::array* a : {&seg, &pos}) {
    const char kind = a->dtype().kind();
    if ((kind != 'u' && kind != 'i') || a->shape(0) != seg.shape(0) || a->shape(1) != seg.shape(1)) {
      throw py::value_error("seg and pos must be integer arrays of one shape");
    }
  }
  const int64_t packs = pos.shape(0), width = pos.shape(1);
  if (pack_off.size() != packs + 1) throw py::value_error("pack_off must have packs + 1 entries");
  void* s = with_seg ? seg.mutable_data() : nullptr;
  pos.mutable_data();  // check writeable while holding the GIL
  py::gil_scoped_release nogil;
  const int64_t *l = lengths.data(), *o = order.data(), *po = pack_off.data();
  switch (with_seg ? seg.itemsize() : 1) {
    case 1: return seg_pos_with<uint8_t>(l, o, po, packs, width, offset, s, pos, threads);
    case 2: return seg_pos_with<uint16_t>(l, o, po, packs, width, offset, s, pos, threads);
    case 4: return seg_pos_with<uint32_t>(l, o, po, packs, width, offset, s, pos, threads);
    default: return seg_pos_with<uint64_t>(l, o, po, packs, width, offset, s, pos, threads);
  }
}

}  // namespace

PYBIND11_MODULE(_native, m) {
  m.doc() = "seqpack's compiled core: GPT-2 pre-tokenizer, BPE encoder and trainer, packing kernels.";
  py::class_<Encoder>(m, "Encoder")
      .def(py::init<std::vector<uint32_t>, std::vector<uint32_t>, std::vector<uint32_t>,
                    std::vector<uint32_t>, const std::vector<py::bytes>&, std::vector<uint32_t>>(),
           py::arg("byte_ids"), py::arg("left"), py::arg("right"), py::arg("merged"),
           py::arg("specials"), py::arg("special_ids"))
      .def("encode", &Encoder::encode, py::arg("text"))
      .def("fast_encode", &Encoder::fast_encode, py::arg("fallback"), py::arg("max_chars"))
      .def("encode_batch", &Encoder::encode_batch, py::arg("texts"), py::arg("threads") = 1,
           py::arg("thread_bytes") = Encoder::kThreadBytes)
      .def("encode_lists", &Encoder::encode_lists, py::arg("texts"), py::arg("threads") = 1,
           py::arg("thread_bytes") = Encoder::kThreadBytes)
      .def("plan", &Encoder::plan, py::arg("texts"), py::arg("threads") = 1,
           py::arg("thread_bytes") = Encoder::kThreadBytes)
      .def("bpe_with", &Encoder::bpe_with, py::arg("word"), py::arg("heap"))
      .def("cut_point", &Encoder::cut_point, py::arg("text"), py::arg("lo"), py::arg("hi"))
      .def("clear_cache", &Encoder::clear_cache);
  py::class_<Counter>(m, "WordCounter")
      .def(py::init<const std::vector<py::bytes>&>(), py::arg("specials"))
      .def("add_bytes", &Counter::add_bytes, py::arg("data"))
      .def("add_texts", &Counter::add_texts, py::arg("texts"))
      .def("add_arrays", &Counter::add_arrays, py::arg("blob"), py::arg("offsets"),
           py::arg("counts"))
      .def("merge", &Counter::merge, py::arg("other"))
      .def("to_arrays", &Counter::to_arrays)
      .def("merges", &Counter::merges, py::arg("num_merges"), py::arg("specials") = 0)
      .def("__len__", &Counter::size)
      .def_property_readonly("total", &Counter::total);
  m.def("merge_loop", &merge_loop, py::arg("blob"), py::arg("offsets"), py::arg("counts"),
        py::arg("num_merges"));
  m.def("split_words", &split_words_py, py::arg("text"));
  m.def("helper_threads", [] { return Helpers::get().counts(); },
        "(helper threads this process has started, those alive now): helpers.h");
  m.def("utf8_error", &utf8_error_py, py::arg("data"));
  m.def("class_table", &class_table);
  m.def("price_packs", &price_packs_py, py::arg("lengths"), py::arg("values"), py::arg("cap"),
        py::arg("depth"));
  m.def("fill_templates", &fill_templates_py, py::arg("slot_lens"), py::arg("starts"), py::arg("counts"),
        py::arg("hist"));
  m.def("scatter_rows", &scatter_rows_py, py::arg("src"), py::arg("seq_off"), py::arg("order"),
        py::arg("pack_off"), py::arg("out"), py::arg("pad"), py::arg("threads"));
  m.def("utf8_size", &utf8_size, py::arg("text"));
  m.def("text_digest", &text_digest, py::arg("texts"));
  m.def("fingerprint_stream", &fingerprint_stream, py::arg("ids"), py::arg("tokens"), py::arg("merges"));
  m.def("tokenizer_texts", &tokenizer_texts_py, py::arg("ids"), py::arg("tokens"), py::arg("merges"), py::arg("special"));
  m.def("append_to_each", &append_to_each_py, py::arg("src"), py::arg("offsets"), py::arg("item"));
  m.def("segments_positions", &segments_positions_py, py::arg("lengths"), py::arg("order"),
        py::arg("pack_off"), py::arg("seg"), py::arg("pos"), py::arg("offset"),
        py::arg("threads"));
}
