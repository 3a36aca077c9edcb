// Helper threads for the calls that split their work over threads, which linger a moment after a
// job for the next one.
//
// Starting a thread and joining it costs 20-90 us on the 2-core VM this was measured on: a 2-thread
// encode_lists of four 11-byte texts took 58.7-88.5 us against 0.9 on one thread, most of a small
// batch's time and ~8% of encoding the CS336 fixtures (0.14 MB) on two threads. Calls often come one
// right after another (a loop over batches), so a helper that has done its job stays for kLinger,
// yielding its core, and takes the next call's job if one comes; then it ends.
//
// It ends rather than sleeping on a condition variable, because a sleeping thread woken by the
// caller was usually put on the caller's own core: a call 1 ms after the last one took 247 us on two
// threads against 42 on one (64 documents), as the two threads shared one core while the other
// idled. A thread started afresh is placed on an idle core.
//
//   Helpers::Batch b = Helpers::get().start(2, work);  // work(1), work(2) on helpers
//   work(0);                                             // the caller's share
//   b.finish();  // waits for the helpers that began; those that had not are called off
//
// A call does not depend on its helpers to finish its work (the callers here take blocks from a
// shared dealer, so the caller alone can do all of them): a job that no helper has begun when the
// caller finishes is withdrawn, never run late. So a call never waits for another call's jobs,
// and helpers busy elsewhere only cost parallelism, not correctness.
//
// The pool is process-wide, made at first use and never destroyed (a lingering helper may still
// run when the process ends). A child made by fork() has none of its parent's threads: its first
// call makes a pool of its own (the parent's is left alone, as its lock may have been held at the
// fork).
#pragma once
#include <pthread.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <system_error>
#include <thread>
#include <utility>

namespace seqpack {

class Helpers {
 public:
  // The helpers of one call. finish() (or the destructor) returns once every job of this batch
  // either ran to its end or was withdrawn before it began.
  class Batch {
   public:
    Batch() : pool_(nullptr) {}  // no helpers
    Batch(Batch&& o) noexcept : pool_(o.pool_), call_(std::move(o.call_)) { o.pool_ = nullptr; }
    Batch(const Batch&) = delete;
    Batch& operator=(const Batch&) = delete;
    Batch& operator=(Batch&&) = delete;
    ~Batch() { finish(); }
    void finish() {
      if (pool_ && call_) pool_->finish(*call_);
      pool_ = nullptr;
    }

   private:
    friend class Helpers;
    struct Call {
      std::function<void(size_t)> work;
      std::atomic<size_t> pending{0};  // jobs not ended (begun or not); changed under the pool's lock
      std::condition_variable done;
    };
    Batch(Helpers* pool, std::shared_ptr<Call> call) : pool_(pool), call_(std::move(call)) {}
    Helpers* pool_;
    std::shared_ptr<Call> call_;
  };

  static Helpers& get() {
    // a child made by fork() forgets the parent's pool (registered once, at the first call)
    static const int forget_at_fork = pthread_atfork(nullptr, nullptr, [] { current().store(nullptr); });
    (void)forget_at_fork;
    Helpers* h = current().load(std::memory_order_acquire);
    if (h) return *h;
    auto* made = new Helpers();
    if (current().compare_exchange_strong(h, made, std::memory_order_acq_rel)) return *made;
    delete made;  // another thread made one first (h is now it)
    return *h;
  }

  // work(t) for t in [1, jobs] on helpers: lingering ones first, new ones for the rest.
  Batch start(size_t jobs, std::function<void(size_t)> work) {
    if (jobs == 0) return Batch();
    auto call = std::make_shared<Batch::Call>();
    call->work = std::move(work);
    std::lock_guard<std::mutex> lock(mu_);
    call->pending = jobs;
    for (size_t t = 1; t <= jobs; ++t) queue_.push_back(Job{call, t});
    for (size_t need = queue_.size(); idle_ < need; ++idle_, ++alive_, ++started_) {
      try {
        std::thread([this] { serve(); }).detach();
      } catch (const std::system_error&) {  // no thread to be had: the callers do the work alone
        break;
      }
    }
    queued_.store(queue_.size(), std::memory_order_release);
    return Batch(this, std::move(call));
  }

  // (helper threads this process has started, those alive now): for tests
  std::pair<size_t, size_t> counts() {
    std::lock_guard<std::mutex> lock(mu_);
    return {started_, alive_};
  }

 private:
  static constexpr auto kLinger = std::chrono::microseconds(200);

  struct Job {
    std::shared_ptr<Batch::Call> call;
    size_t t;
  };

  Helpers() = default;

  static std::atomic<Helpers*>& current() {
    static std::atomic<Helpers*> h{nullptr};
    return h;
  }

  // Spin, yielding the core, until ready() or kLinger has passed; ready()'s last answer.
  template <class Ready>
  static bool linger(Ready&& ready) {
    const auto until = std::chrono::steady_clock::now() + kLinger;
    while (!ready()) {
      if (std::chrono::steady_clock::now() >= until) return false;
      std::this_thread::yield();  // the caller may share this core
    }
    return true;
  }

  void serve() {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      if (queue_.empty()) {
        lock.unlock();
        linger([this] { return queued_.load(std::memory_order_acquire) != 0; });
        lock.lock();
        if (queue_.empty()) {  // decided under the lock: start() then counts this one gone
          --idle_;
          --alive_;
          return;
        }
      }
      Job job = std::move(queue_.front());
      queue_.pop_front();
      queued_.store(queue_.size(), std::memory_order_release);
      --idle_;
      lock.unlock();
      job.call->work(job.t);
      lock.lock();
      ++idle_;
      if (--job.call->pending == 0) job.call->done.notify_all();
      job.call.reset();
    }
  }

  void finish(Batch::Call& call) {
    std::unique_lock<std::mutex> lock(mu_);
    for (auto it = queue_.begin(); it != queue_.end();) {  // withdraw the jobs no helper has begun
      if (it->call.get() == &call) {
        it = queue_.erase(it);
        --call.pending;
      } else {
        ++it;
      }
    }
    queued_.store(queue_.size(), std::memory_order_release);
    if (call.pending == 0) return;
    lock.unlock();  // a helper is on a job of this call: spin for it a while, then sleep
    linger([&] { return call.pending.load(std::memory_order_acquire) == 0; });
    lock.lock();
    call.done.wait(lock, [&] { return call.pending == 0; });
  }

  std::mutex mu_;
  std::deque<Job> queue_;
  std::atomic<size_t> queued_{0};  // queue_.size(), read by lingering helpers without the lock
  size_t idle_ = 0;                // helpers alive and not on a job
  size_t alive_ = 0, started_ = 0;
};

}  // namespace seqpack
