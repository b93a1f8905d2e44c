#include "backend/cpu/parallel.h"

#include <pthread.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace meganeura::cpu {
namespace {

sigset_t asynchronous_signals() {
  sigset_t s;
  sigfillset(&s);
  for (int fault : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGABRT, SIGSYS}) sigdelset(&s, fault);
  return s;
}

// Spins for up to `budget`, then returns false: a decode step runs hundreds of short parallel
// loops back to back, and waking a sleeping thread through the kernel costs more than a loop of a
// few tens of microseconds; past the budget the waiting thread sleeps (the machine may be shared).
template <class Ready>
bool spin_until(Ready ready, std::chrono::microseconds budget) {
  const auto until = std::chrono::steady_clock::now() + budget;
  for (int i = 1;; ++i) {
    if (ready()) return true;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
    if (i % 64 == 0 && std::chrono::steady_clock::now() > until) return false;
  }
}
constexpr std::chrono::microseconds kSpin{50};

class Pool {
 public:
  explicit Pool(int threads) {
    // A thread starts with its creator's mask: the workers never take an asynchronous signal.
    SignalsDeferred deferred;
    for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { work(i); });
  }
  ~Pool() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
      stop_flag_.store(true);
    }
    wake_.notify_all();
    for (auto& t : workers_) t.join();
  }
  int size() const { return int(workers_.size()) + 1; }

  void run(int64_t n, const std::function<void(int64_t, int64_t)>& body) {
    bool sleepers = false;
    {
      // Published under the lock, so that a worker deciding to sleep sees the new generation.
      std::lock_guard lock(mu_);
      body_ = &body;
      n_ = n;
      error_ = nullptr;
      pending_.store(size() - 1);
      generation_.fetch_add(1);
      sleepers = sleepers_ > 0;
    }
    if (sleepers) wake_.notify_all();
    // The caller's own chunk may throw: wait for the workers anyway, since they still use
    // `body`, and report the first error once all are done.
    std::exception_ptr mine;
    try {
      chunk(0, body);
    } catch (...) {
      mine = std::current_exception();
    }
    if (!spin_until([&] { return pending_.load() == 0; }, kSpin)) {
      std::unique_lock lock(mu_);
      caller_waits_.store(true);  // before reading pending_ (the last worker: the other order)
      done_.wait(lock, [&] { return pending_.load() == 0; });
      caller_waits_.store(false);
    }
    std::lock_guard lock(mu_);
    body_ = nullptr;
    if (mine && !error_) error_ = mine;
    if (error_) std::rethrow_exception(error_);
  }

 private:
  void chunk(int i, const std::function<void(int64_t, int64_t)>& body) {
    const int64_t parts = size(), begin = n_ * i / parts, end = n_ * (i + 1) / parts;
    if (begin < end) body(begin, end);
  }
  void work(int i) {
    uint64_t seen = 0;
    for (;;) {
      if (!spin_until([&] { return generation_.load() != seen || stop_flag_.load(); }, kSpin)) {
        std::unique_lock lock(mu_);
        ++sleepers_;
        wake_.wait(lock, [&] { return stop_ || generation_.load() != seen; });
        --sleepers_;
      }
      const std::function<void(int64_t, int64_t)>* body = nullptr;
      {
        std::lock_guard lock(mu_);
        if (stop_) return;
        seen = generation_.load();
        body = body_;
      }
      std::exception_ptr err;
      try {
        chunk(i, *body);
      } catch (...) {
        err = std::current_exception();
      }
      if (err) {
        std::lock_guard lock(mu_);
        if (!error_) error_ = err;
      }
      if (pending_.fetch_sub(1) == 1 && caller_waits_.load()) {
        std::lock_guard lock(mu_);  // the caller is between its check and its wait, or waiting
        done_.notify_one();
      }
    }
  }

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable wake_, done_;
  const std::function<void(int64_t, int64_t)>* body_ = nullptr;  // under mu_
  int64_t n_ = 0;
  std::atomic<int> pending_{0};
  std::atomic<uint64_t> generation_{0};
  std::atomic<bool> caller_waits_{false}, stop_flag_{false};
  int sleepers_ = 0;  // under mu_
  bool stop_ = false;
  std::exception_ptr error_;
};

int default_threads() { return int(std::max(1u, std::thread::hardware_concurrency())); }
// The pool's size, read without the lock: set_threads() may replace the pool (under the lock)
// while a session on another thread asks how many threads there are.
std::atomic<int> pool_size{0};
std::unique_ptr<Pool>& pool() {
  static std::unique_ptr<Pool> p = [] {
    auto q = std::make_unique<Pool>(default_threads());
    pool_size = q->size();
    return q;
  }();
  return p;
}
std::mutex& run_mutex() {
  static std::mutex m;  // one parallel loop at a time: sessions on several threads queue here
  return m;
}

}  // namespace

SignalsDeferred::SignalsDeferred() {
  const sigset_t block = asynchronous_signals();
  pthread_sigmask(SIG_BLOCK, &block, &old_);
}
SignalsDeferred::~SignalsDeferred() { pthread_sigmask(SIG_SETMASK, &old_, nullptr); }

void set_threads(int threads) {
  std::lock_guard lock(run_mutex());
  pool() = std::make_unique<Pool>(threads > 0 ? threads : default_threads());
  pool_size = pool()->size();
}

int thread_count() {
  pool();  // created on first use
  return pool_size;
}

void parallel_for(int64_t n, int64_t min_parallel, const std::function<void(int64_t, int64_t)>& body) {
  if (n <= 0) return;
  if (n < min_parallel || thread_count() == 1) {
    body(0, n);
    return;
  }
  std::lock_guard lock(run_mutex());
  pool()->run(n, body);
}

}  // namespace meganeura::cpu
