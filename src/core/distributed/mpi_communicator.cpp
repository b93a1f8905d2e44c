// The Open MPI communicator. One thread makes every MPI call (MPI_THREAD_FUNNELED): it posts
// the collectives the trainer starts as non-blocking operations, tests them while the trainer
// computes, and enforces a deadline on each. MPI's own default on a dead peer is no help here:
// a blocking collective over shared memory or a silent network waits forever, and mpirun ends
// the job only when a process exits. So nothing blocks: after a deadline the thread asks every
// rank to answer (a roll call on a second communicator, answered by each rank's own thread
// whatever its trainer is doing), names the ranks that did not, tells the others, and fails.
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "distributed/ranks.h"
#include "meganeura/distributed.h"

namespace meganeura {
namespace {

using Clock = std::chrono::steady_clock;
using distributed::rank_list;
using distributed::rank_prefix;

constexpr int kQuery = 1, kAnswer = 2, kNotice = 3;  // tags on the control communicator
constexpr int kNoticeBytes = 1024;
constexpr size_t kChunk = size_t(1) << 30;  // elements per MPI call (MPI counts are int)
// When the launcher ends the job it kills what is left about a second later (mpirun's
// odls_base_sigkill_timeout): the roll call must be over by then.
constexpr double kInterruptRollCall = 0.3;
constexpr double kSpinSeconds = 0.1;  // a caller waiting for a collective spins this long, then sleeps

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
Clock::time_point after(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

std::string mpi_error(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int n = 0;
  MPI_Error_string(code, text, &n);
  return std::string(text, size_t(std::max(n, 0)));
}

struct Job {
  enum class Kind : uint8_t { sum, broadcast, gather, barrier };
  Kind kind = Kind::barrier;
  std::byte* data = nullptr;
  size_t count = 0;  // elements (sum) or bytes (broadcast)
  DType dtype = DType::f32;
  int root = 0;
  uint64_t value = 0;
  std::vector<uint64_t> gathered;  // owned here: MPI may write it until the request completes
  std::string what;
  bool patient = false;  // past the deadline, keep waiting while every rank answers
  std::vector<MPI_Request> requests;
  Clock::time_point posted, deadline;
  bool done = false;
};

struct Send {
  MPI_Request request = MPI_REQUEST_NULL;
  std::vector<char> bytes;
};

class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(const CommOptions& o) : options_(o) {
    thread_ = std::thread([this] { loop(); });
    std::unique_lock lock(mutex_);
    cv_.wait(lock, [&] { return ready_; });
  }

  ~MpiCommunicator() override {
    bool healthy = false;
    {
      std::lock_guard lock(mutex_);
      healthy = fatal_.empty();
    }
    if (healthy) {
      try {
        barrier("the end of the run");
      } catch (const std::exception&) {
        healthy = false;
      }
    }
    // A job that lost a rank cannot finalize (MPI_Finalize waits for every process): end it.
    if (!healthy) abort(fatal(), 1);
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_rank() const override { return local_rank_; }
  int local_size() const override { return local_size_; }
  std::string description() const override {
    return version_ + ", rank " + std::to_string(rank_) + " of " + std::to_string(size_) + " (" +
           std::to_string(local_size_) + " on this machine)";
  }

  Ticket start_sum(void* data, size_t count, DType dtype, const std::string& what) override {
    if (dtype != DType::f32 && dtype != DType::f64)
      throw std::invalid_argument("[distributed] sums are over f32 or f64 values, not " +
                                  std::string(dtype_name(dtype)));
    auto j = std::make_shared<Job>();
    j->kind = Job::Kind::sum;
    j->data = static_cast<std::byte*>(data);
    j->count = count;
    j->dtype = dtype;
    j->what = what;
    return submit(std::move(j));
  }

  Ticket start_broadcast(void* data, size_t bytes, int root, const std::string& what) override {
    if (root < 0 || root >= size_)
      throw std::invalid_argument(rank_prefix(*this) + "no rank " + std::to_string(root) + " for " + what);
    auto j = std::make_shared<Job>();
    j->kind = Job::Kind::broadcast;
    j->data = static_cast<std::byte*>(data);
    j->count = bytes;
    j->root = root;
    j->what = what;
    return submit(std::move(j));
  }

  void wait(Ticket t) override { wait_job(t); }

  std::vector<uint64_t> all_gather(uint64_t value, const std::string& what) override {
    auto j = std::make_shared<Job>();
    j->kind = Job::Kind::gather;
    j->value = value;
    j->gathered.resize(size_t(size_));
    j->what = what;
    return wait_job(submit(j))->gathered;
  }

  void barrier(const std::string& what) override {
    auto j = std::make_shared<Job>();
    j->kind = Job::Kind::barrier;
    j->what = what;
    j->patient = true;
    wait_job(submit(std::move(j)));
  }

  double busy_seconds() const override {
    const int64_t since_ns = busy_since_ns_.load();
    const int64_t now_ns = Clock::now().time_since_epoch().count();
    return double(busy_ns_.load() + (since_ns ? now_ns - since_ns : 0)) * 1e-9;
  }

  [[noreturn]] void abort(const std::string& message, int code) override {
    if (!message.empty()) std::fprintf(stderr, "%s\n", message.c_str());
    std::fflush(stderr);
    abort_code_.store(code);
    wake_.notify_all();
    // The communication thread calls MPI_Abort, which ends this process with the job.
    for (int i = 0; i < 1000 && !stopped_.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::_Exit(code);
  }

  void interrupt(int signal) noexcept override { interrupt_.store(signal); }

 private:
  // ---- the caller's side --------------------------------------------------------------
  std::string fatal() {
    std::lock_guard lock(mutex_);
    return fatal_;
  }

  Ticket submit(std::shared_ptr<Job> j) {
    std::lock_guard lock(mutex_);
    if (!fatal_.empty()) throw std::runtime_error(fatal_);
    const Ticket t = next_++;
    jobs_.emplace(t, j);
    queue_.push_back(std::move(j));
    wake_.notify_all();
    return t;
  }

  std::shared_ptr<Job> wait_job(Ticket t) {
    std::unique_lock lock(mutex_);
    auto it = jobs_.find(t);
    if (it == jobs_.end())
      throw std::invalid_argument("[distributed] no collective " + std::to_string(t) + " to wait for");
    std::shared_ptr<Job> j = it->second;
    auto ready = [&] { return j->done || !fatal_.empty(); };
    // Spin (yielding) before sleeping: a rank whose trainer slept through its wait computed
    // its next step 3-4 times slower on the shared two-core machine (the scheduler gave the
    // core away); the waits here are mostly a few ms of a peer finishing its backward pass.
    for (const auto spin_until = after(kSpinSeconds); !ready() && Clock::now() < spin_until;) {
      lock.unlock();
      std::this_thread::yield();
      lock.lock();
    }
    cv_.wait(lock, ready);
    jobs_.erase(t);
    if (!j->done) throw std::runtime_error(fatal_);
    return j;
  }

  // ---- the communication thread -------------------------------------------------------
  void loop() {
    const std::string error = init_mpi();
    if (!error.empty()) {
      std::fprintf(stderr, "%s\n", error.c_str());
      std::fflush(stderr);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    {
      std::lock_guard lock(mutex_);
      ready_ = true;
    }
    cv_.notify_all();
    Clock::time_point last_round = Clock::now();
    while (true) {
      // Rounds are at most a few ms apart; a long gap means this process did not run.
      if (const double gap = since(last_round); gap > 1.0) {
        paused_s_ = gap;
        paused_at_ = Clock::now();
      }
      bool moved = post_queued();
      moved = progress() || moved;
      moved = serve() || moved;
      if (const int sig = interrupt_.load()) on_interrupt(sig);
      if (const int code = abort_code_.load(); code >= 0) MPI_Abort(MPI_COMM_WORLD, code);
      check_deadline();
      {
        std::lock_guard lock(mutex_);
        if (stopping_ && queue_.empty() && active_.empty()) break;
      }
      if (!moved) pause();
      idle_rounds_ = moved ? 0 : idle_rounds_ + 1;
      last_round = Clock::now();
    }
    shutdown_mpi();
    stopped_.store(true);
  }

  std::string init_mpi() {
    int provided = 0;
    if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
      return "[distributed] MPI_Init_thread failed";
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    if (provided < MPI_THREAD_FUNNELED)
      return rank_prefix(*this) + "this MPI library does not allow a communication thread (MPI_THREAD_FUNNELED)";
    char version[MPI_MAX_LIBRARY_VERSION_STRING];
    int n = 0;
    MPI_Get_library_version(version, &n);
    version_ = std::string(version, size_t(n));
    version_ = version_.substr(0, version_.find_first_of(",\n"));
    MPI_Request r[2];
    MPI_Comm_idup(MPI_COMM_WORLD, &data_, &r[0]);
    MPI_Comm_idup(MPI_COMM_WORLD, &ctl_, &r[1]);
    if (!wait_all(r, 2))
      return rank_prefix(*this) + "the other ranks did not start within " + seconds(options_.timeout_s);
    std::string error = find_local_rank();
    if (!error.empty()) return error;
    post_control_receives();
    return "";
  }

  // Local rank: the ranks before this one on a machine of the same name.
  std::string find_local_rank() {
    std::vector<char> names(size_t(size_) * MPI_MAX_PROCESSOR_NAME, 0);
    char mine[MPI_MAX_PROCESSOR_NAME] = {};
    int n = 0;
    MPI_Get_processor_name(mine, &n);
    MPI_Request r;
    MPI_Iallgather(mine, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, names.data(), MPI_MAX_PROCESSOR_NAME, MPI_CHAR, data_, &r);
    if (!wait_all(&r, 1))
      return rank_prefix(*this) + "the other ranks did not start within " + seconds(options_.timeout_s);
    local_rank_ = local_size_ = 0;
    for (int q = 0; q < size_; ++q) {
      if (std::strncmp(names.data() + size_t(q) * MPI_MAX_PROCESSOR_NAME, mine, MPI_MAX_PROCESSOR_NAME) != 0) continue;
      local_size_++;
      if (q < rank_) local_rank_++;
    }
    return "";
  }

  bool wait_all(MPI_Request* r, int n) {
    const auto deadline = after(options_.timeout_s);
    int flag = 0;
    while (MPI_Testall(n, r, &flag, MPI_STATUSES_IGNORE) == MPI_SUCCESS && !flag) {
      if (Clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    return flag != 0;
  }

  void post_control_receives() {
    MPI_Irecv(query_in_, 2, MPI_INT64_T, MPI_ANY_SOURCE, kQuery, ctl_, &query_req_);
    MPI_Irecv(notice_in_, kNoticeBytes, MPI_CHAR, MPI_ANY_SOURCE, kNotice, ctl_, &notice_req_);
  }

  void shutdown_mpi() {
    for (MPI_Request* r : {&query_req_, &notice_req_}) {
      if (*r == MPI_REQUEST_NULL) continue;
      MPI_Cancel(r);
      MPI_Wait(r, MPI_STATUS_IGNORE);
    }
    // Answers to roll calls that gave up before they arrived are never received: drop them.
    const auto deadline = after(1.0);
    while (!sends_.empty() && Clock::now() < deadline) serve();
    for (Send& s : sends_) MPI_Request_free(&s.request);
    MPI_Comm_free(&ctl_);
    MPI_Comm_free(&data_);
    MPI_Finalize();
  }

  // Posts the collectives started since the last round, in the order they were started.
  bool post_queued() {
    std::deque<std::shared_ptr<Job>> jobs;
    {
      std::lock_guard lock(mutex_);
      if (!fatal_.empty()) return false;
      jobs.swap(queue_);
    }
    for (auto& j : jobs) {
      if (const int rc = post(*j); rc != MPI_SUCCESS) {
        fail(rank_prefix(*this) + "MPI refused " + j->what + ": " + mpi_error(rc), {}, true);
        return true;
      }
      if (active_.empty()) busy_since_ns_.store(Clock::now().time_since_epoch().count());
      j->posted = Clock::now();
      j->deadline = after(options_.timeout_s);
      active_.push_back(std::move(j));
    }
    return !jobs.empty();
  }

  int post(Job& j) {
    int rc = MPI_SUCCESS;
    switch (j.kind) {
      case Job::Kind::sum: {
        const MPI_Datatype type = j.dtype == DType::f64 ? MPI_DOUBLE : MPI_FLOAT;
        const size_t size = dtype_size(j.dtype);
        for (size_t at = 0; at < j.count && rc == MPI_SUCCESS; at += kChunk) {
          MPI_Request r;
          rc = MPI_Iallreduce(MPI_IN_PLACE, j.data + at * size, int(std::min(kChunk, j.count - at)), type, MPI_SUM,
                              data_, &r);
          j.requests.push_back(r);
        }
        break;
      }
      case Job::Kind::broadcast:
        for (size_t at = 0; at < j.count && rc == MPI_SUCCESS; at += kChunk) {
          MPI_Request r;
          rc = MPI_Ibcast(j.data + at, int(std::min(kChunk, j.count - at)), MPI_BYTE, j.root, data_, &r);
          j.requests.push_back(r);
        }
        break;
      case Job::Kind::gather:
        j.requests.emplace_back();
        rc = MPI_Iallgather(&j.value, 1, MPI_UINT64_T, j.gathered.data(), 1, MPI_UINT64_T, data_, &j.requests.back());
        break;
      case Job::Kind::barrier:
        j.requests.emplace_back();
        rc = MPI_Ibarrier(data_, &j.requests.back());
        break;
    }
    return rc;
  }

  // Tests the collectives in flight; completes those that finished.
  bool progress() {
    bool moved = false;
    for (auto it = active_.begin(); it != active_.end();) {
      Job& j = **it;
      int flag = 0;
      if (const int rc = MPI_Testall(int(j.requests.size()), j.requests.data(), &flag, MPI_STATUSES_IGNORE);
          rc != MPI_SUCCESS) {
        fail(rank_prefix(*this) + j.what + " failed: " + mpi_error(rc), {}, true);
        return true;
      }
      if (!flag) {
        ++it;
        continue;
      }
      {
        std::lock_guard lock(mutex_);
        j.done = true;
      }
      cv_.notify_all();
      it = active_.erase(it);
      moved = true;
    }
    if (moved && active_.empty()) {
      busy_ns_ += Clock::now().time_since_epoch().count() - busy_since_ns_.load();
      busy_since_ns_.store(0);
    }
    return moved;
  }

  // Answers roll calls and reads failure notices from other ranks.
  bool serve() {
    bool moved = false;
    int flag = 0;
    MPI_Status st;
    if (query_req_ != MPI_REQUEST_NULL && MPI_Test(&query_req_, &flag, &st) == MPI_SUCCESS && flag) {
      send(st.MPI_SOURCE, kAnswer, query_in_, sizeof query_in_);  // echoes the caller's roll-call number
      MPI_Irecv(query_in_, 2, MPI_INT64_T, MPI_ANY_SOURCE, kQuery, ctl_, &query_req_);
      moved = true;
    }
    if (notice_req_ != MPI_REQUEST_NULL && MPI_Test(&notice_req_, &flag, &st) == MPI_SUCCESS && flag) {
      notice_in_[kNoticeBytes - 1] = 0;
      fail(rank_prefix(*this) + "ending because rank " + std::to_string(st.MPI_SOURCE) + " reports: " + notice_in_, {},
           false);
      moved = true;
    }
    sends_.remove_if([](Send& s) {
      int done = 0;
      MPI_Test(&s.request, &done, MPI_STATUS_IGNORE);
      return done != 0;
    });
    return moved;
  }

  void send(int to, int tag, const void* data, size_t bytes) {
    Send& s = sends_.emplace_back();
    s.bytes.assign(static_cast<const char*>(data), static_cast<const char*>(data) + bytes);
    MPI_Isend(s.bytes.data(), int(bytes), MPI_CHAR, to, tag, ctl_, &s.request);
  }

  void pause() {
    if (!active_.empty()) {
      // Collectives in flight: test often, but leave the cores to the computation.
      std::this_thread::sleep_for(std::chrono::microseconds(idle_rounds_ < 50 ? 20 : idle_rounds_ < 150 ? 100 : 1000));
      return;
    }
    std::unique_lock lock(mutex_);
    wake_.wait_for(lock, std::chrono::milliseconds(2),
                   [&] { return !queue_.empty() || stopping_ || abort_code_.load() >= 0; });
  }

  // ---- failures -------------------------------------------------------------------------
  static std::string seconds(double s) {
    char text[32];
    std::snprintf(text, sizeof text, "%.3g s", s);
    return text;
  }

  void check_deadline() {
    if (active_.empty() || Clock::now() < active_.front()->deadline || !fatal().empty()) return;
    Job& j = *active_.front();
    const std::string waited = j.what + " waited " + seconds(since(j.posted));
    const std::vector<int> lost = roll_call(options_.roll_call_s);
    if (lost.empty() && j.patient) {
      j.deadline = after(options_.timeout_s);
      return;
    }
    if (lost.empty()) {
      fail(rank_prefix(*this) + waited + " although every rank answers: the ranks are out of step, or one is " +
               "slower than the timeout allows",
           lost, true);
      return;
    }
    const std::string who = "rank" + std::string(lost.size() > 1 ? "s " : " ") + rank_list(lost);
    fail(rank_prefix(*this) + who + " lost (a dead, stopped or unreachable process): " + waited + ", and " + who +
             " did not answer within " + seconds(options_.roll_call_s),
         lost, true);
  }

  // Asks every other rank to answer within `budget` seconds; returns those that did not.
  std::vector<int> roll_call(double budget) {
    const int64_t number = ++roll_calls_;
    const int64_t query[2] = {number, rank_};
    std::vector<int64_t> answers(size_t(size_) * 2, 0);
    std::vector<MPI_Request> pending(size_t(size_), MPI_REQUEST_NULL);
    for (int q = 0; q < size_; ++q) {
      if (q == rank_) continue;
      MPI_Irecv(&answers[size_t(q) * 2], 2, MPI_INT64_T, q, kAnswer, ctl_, &pending[size_t(q)]);
      send(q, kQuery, query, sizeof query);
    }
    const auto deadline = after(budget);
    while (Clock::now() < deadline) {
      bool all = true;
      for (int q = 0; q < size_; ++q) {
        MPI_Request& r = pending[size_t(q)];
        int flag = 0;
        if (r == MPI_REQUEST_NULL || MPI_Test(&r, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS || !flag) {
          all = all && r == MPI_REQUEST_NULL;
          continue;
        }
        if (answers[size_t(q) * 2] != number)  // a late answer to an earlier roll call
          MPI_Irecv(&answers[size_t(q) * 2], 2, MPI_INT64_T, q, kAnswer, ctl_, &r);
        all = all && r == MPI_REQUEST_NULL;
      }
      if (all) break;
      serve();  // the others are asking too
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    std::vector<int> lost;
    for (int q = 0; q < size_; ++q) {
      MPI_Request& r = pending[size_t(q)];
      if (r == MPI_REQUEST_NULL) continue;
      lost.push_back(q);
      MPI_Cancel(&r);
      MPI_Request_free(&r);
    }
    return lost;
  }

  // Records the failure every later call reports and, with `notify` (a failure seen here first),
  // tells the ranks that still answer (not `lost`) so that they end too.
  void fail(const std::string& message, const std::vector<int>& lost, bool notify) {
    {
      std::lock_guard lock(mutex_);
      if (!fatal_.empty()) return;
      fatal_ = message;
    }
    cv_.notify_all();
    if (!notify) return;
    std::string text = message.substr(0, kNoticeBytes - 1);
    for (int q = 0; q < size_; ++q) {
      if (q != rank_ && std::find(lost.begin(), lost.end(), q) == lost.end())
        send(q, kNotice, text.c_str(), text.size() + 1);
    }
    const auto deadline = after(1.0);
    while (!sends_.empty() && Clock::now() < deadline) {
      serve();
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

  // The launcher is ending this process (mpirun does after another rank died): say which
  // ranks still answer, then end.
  [[noreturn]] void on_interrupt(int sig) {
    const std::string doing = active_.empty() ? "between collectives" : "during " + active_.front()->what;
    std::string earlier = fatal();
    const std::vector<int> lost = roll_call(std::min(options_.roll_call_s, kInterruptRollCall));
    std::string message = rank_prefix(*this) + "ended by signal " + std::to_string(sig) + " " + doing + "; ";
    message += lost.empty() ? "every other rank still answers"
                            : "rank" + std::string(lost.size() > 1 ? "s " : " ") + rank_list(lost) +
                                  " lost (no answer within " + seconds(kInterruptRollCall) + ")";
    if (paused_s_ > 0 && since(paused_at_) < 10)
      message += "; this process did not run for " + seconds(paused_s_) + " just before (stopped, or starved of CPU)";
    if (!earlier.empty()) message += "; before that: " + earlier;
    std::fprintf(stderr, "%s\n", message.c_str());
    std::fflush(stderr);
    std::_Exit(128 + sig);
  }

  CommOptions options_;
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1;
  std::string version_;
  MPI_Comm data_ = MPI_COMM_NULL, ctl_ = MPI_COMM_NULL;

  std::mutex mutex_;
  std::condition_variable cv_;    // callers wait for their collectives
  std::condition_variable wake_;  // the communication thread waits for work
  std::deque<std::shared_ptr<Job>> queue_;
  std::map<Ticket, std::shared_ptr<Job>> jobs_;
  Ticket next_ = 1;
  bool ready_ = false, stopping_ = false;
  std::string fatal_;
  std::atomic<int> interrupt_{0}, abort_code_{-1};
  std::atomic<bool> stopped_{false};
  std::atomic<int64_t> busy_ns_{0}, busy_since_ns_{0};

  // The communication thread's own.
  std::deque<std::shared_ptr<Job>> active_;
  std::list<Send> sends_;
  MPI_Request query_req_ = MPI_REQUEST_NULL, notice_req_ = MPI_REQUEST_NULL;
  int64_t query_in_[2] = {0, 0};
  char notice_in_[kNoticeBytes] = {};
  int64_t roll_calls_ = 0;
  int idle_rounds_ = 0;
  double paused_s_ = 0;
  Clock::time_point paused_at_;
  std::thread thread_;
};

}  // namespace

bool distributed_built_in() { return true; }

std::unique_ptr<Communicator> make_mpi_communicator(const CommOptions& options) {
  if (!(options.timeout_s > 0) || !(options.roll_call_s > 0))
    throw std::invalid_argument("[distributed] the collective timeout and roll-call time must be positive");
  static std::atomic<bool> created{false};
  if (created.exchange(true))
    throw std::logic_error("[distributed] MPI is initialised once per process: make one communicator");
  return std::make_unique<MpiCommunicator>(options);
}

}  // namespace meganeura
