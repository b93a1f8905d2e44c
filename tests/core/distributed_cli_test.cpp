// `meganeura train --data-parallel` under mpirun (two ranks on loopback, as CI runs them):
// two ranks of per-rank batch B against one process of batch 2B, resuming on another rank
// count, accumulation, and a rank that dies, stops or builds another program.
//
// Tolerance of the comparisons. Both runs see the same examples and differ only in how each
// gradient's sum over the batch is split: one sum over 2B examples against two sums over B,
// added and halved (halving is exact). A sum of K f32 terms carries a rounding error of at most
// K * u relative to the sum of the magnitudes (u = 2^-24); K is the batch reduction's length
// (mlp: 64 examples; chargpt: 16 x 64 = 1024 tokens). Adam's step lr * m / sqrt(v) changes by
// at most twice the gradients' relative change, so each update moves a parameter by at most
// 2 * lr * K * u more in one run than in the other; over n updates, n * 2 * lr * K * u (mlp:
// 4.6e-7, chargpt: 7.3e-6 for 20 updates at lr 3e-3), plus a few ulps of the value itself.
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <regex>
#include <thread>

#include "cli_run.h"
#include "meganeura/safetensors.h"

namespace fs = std::filesystem;
extern char** environ;

namespace {

using cli_run::Result;
using meganeura::DType;
namespace io = meganeura::io;
using Clock = std::chrono::steady_clock;

fs::path dir() {
  static const fs::path d = cli_run::temp_dir("meganeura_dp_");
  return d;
}
std::string path(const std::string& name) { return (dir() / name).string(); }

// mpirun as CI runs it: as root, more ranks than cores allowed.
std::string mpirun(int ranks) {
  return std::string(MEGANEURA_MPIEXEC) + " --allow-run-as-root --oversubscribe -np " + std::to_string(ranks);
}

Result run(const std::string& args) { return cli_run::run(args, dir()); }
Result run_ranks(int ranks, const std::string& args) { return cli_run::run(args, dir(), mpirun(ranks)); }

std::string slurp(const fs::path& p) {
  std::ifstream f(p);
  return {std::istreambuf_iterator<char>(f), {}};
}

struct Tolerance {
  int updates = 20;
  double lr = 3e-3;
  int64_t reduction = 64;  // K: terms in a gradient's sum over the batch
  double limit(double value) const {
    const double u = std::ldexp(1.0, -24);
    return updates * 2 * lr * double(reduction) * u + 4 * u * std::abs(value);
  }
};

// Every parameter of checkpoint `a` against `b` within the tolerance; optimizer moments within
// 1e-4 of their tensor's largest value (they follow the gradients, whose relative error is at
// most K * u per update); the step counters equal.
void expect_close(const std::string& a, const std::string& b, const Tolerance& tol) {
  io::SafetensorsFile x = io::read_safetensors(a), y = io::read_safetensors(b);
  double worst = 0, worst_limit = 1;
  std::string worst_name;
  for (const auto& [name, rec] : x.tensors) {
    if (!y.tensors.count(name)) {
      // Gradient accumulators (a run with accumulation) are zero between updates.
      EXPECT_EQ(name.rfind("grad_acc.", 0), 0u) << name << " is in " << a << " only";
      EXPECT_EQ(rec.data, std::vector<std::byte>(rec.data.size())) << name;
      continue;
    }
    const auto& other = y.tensors.at(name);
    ASSERT_EQ(rec.shape, other.shape) << name;
    if (rec.dtype == DType::i32) {
      EXPECT_EQ(rec.data, other.data) << name;
      continue;
    }
    const auto* p = reinterpret_cast<const float*>(rec.data.data());
    const auto* q = reinterpret_cast<const float*>(other.data.data());
    const size_t n = rec.data.size() / 4;
    const bool moment = name.rfind("adam_", 0) == 0;
    double largest = 0;
    for (size_t i = 0; i < n; ++i) largest = std::max(largest, double(std::abs(q[i])));
    for (size_t i = 0; i < n; ++i) {
      const double diff = std::abs(double(p[i]) - double(q[i]));
      const double limit = moment ? 1e-4 * largest + 1e-30 : tol.limit(q[i]);
      if (diff > limit) {
        ADD_FAILURE() << name << "[" << i << "]: " << p[i] << " vs " << q[i] << ", difference " << diff << " above "
                      << limit;
        return;
      }
      if (!moment && diff / limit > worst / worst_limit) {
        worst = diff;
        worst_limit = limit;
        worst_name = name;
      }
    }
  }
  for (const auto& [name, rec] : y.tensors) EXPECT_TRUE(x.tensors.count(name)) << name << " is in " << b << " only";
  std::printf("largest parameter difference %.3g (%s), %.0f%% of its tolerance %.3g\n", worst, worst_name.c_str(),
              100 * worst / worst_limit, worst_limit);
}

// Two ranks of batch B and one process of batch 2B, 20 Adam steps, small buckets (several
// reductions overlapping the backward pass); the ranks compare their parameters after every
// update (--check-replicas 1 fails the run if any bit differs).
void expect_two_ranks_match_one(const std::string& model, const std::string& device, int64_t batch,
                                const Tolerance& tol, const std::string& sizes = "") {
  const std::string tag = model + "_" + device;
  const std::string common =
      "train --model " + model + sizes + " --device " + device + " --optimizer adam --steps 20 --json";
  const std::string env = "XDG_CACHE_HOME=" + path("cache");
  Result two = cli_run::run(common + " --data-parallel --bucket-mb 0.05 --check-replicas 1 --batch " +
                                std::to_string(batch) + " --out " + path(tag + "_2.safetensors"),
                            dir(), env + " " + mpirun(2));
  ASSERT_EQ(two.status, 0) << two.err;
  Result one = cli_run::run(common + " --batch " + std::to_string(2 * batch) + " --out " + path(tag + "_1.safetensors"),
                            dir(), env);
  ASSERT_EQ(one.status, 0) << one.err;
  auto j = two.json();
  EXPECT_EQ(j["data_parallel"]["ranks"], 2);
  EXPECT_EQ(j["data_parallel"]["updates"], 20);
  EXPECT_GT(j["data_parallel"]["buckets"].get<int>(), 1);
  EXPECT_NEAR(j["final_loss"].get<double>(), one.json()["final_loss"].get<double>(), 1e-4);
  expect_close(path(tag + "_2.safetensors"), path(tag + "_1.safetensors"), tol);
}

TEST(DataParallelCli, MlpTwoRanksEqualOneProcessOfTwiceTheBatchOnTheCpu) {
  expect_two_ranks_match_one("mlp", "cpu", 32, Tolerance{.reduction = 64});
}

TEST(DataParallelCli, ChargptTwoRanksEqualOneProcessOfTwiceTheBatchOnTheCpu) {
  expect_two_ranks_match_one("chargpt", "cpu", 8, Tolerance{.reduction = 16 * 64});
}

TEST(DataParallelCli, MlpTwoRanksEqualOneProcessOfTwiceTheBatchOnLavapipe) {
  expect_two_ranks_match_one("mlp", "vulkan", 32, Tolerance{.reduction = 64});
}

// On lavapipe a narrower, one-layer chargpt (the Vulkan CLI tests' size) on batches of 2 and 4
// sequences: the full model takes minutes per run there on two cores.
TEST(DataParallelCli, ChargptTwoRanksEqualOneProcessOfTwiceTheBatchOnLavapipe) {
  expect_two_ranks_match_one("chargpt", "vulkan", 2, Tolerance{.reduction = 4 * 64}, " --width 32 --layers 1");
}

// A checkpoint resumes on any rank count: 10 steps on one process then 10 on two ranks, and
// 10 on two ranks then 10 on one, both against 20 on one process.
TEST(DataParallelCli, ResumesOnAnyRankCount) {
  const std::string common = "train --model chargpt --device cpu --optimizer adam --json ";
  ASSERT_EQ(run(common + "--batch 16 --steps 20 --out " + path("r_ref.safetensors")).status, 0);
  ASSERT_EQ(run(common + "--batch 16 --steps 10 --out " + path("r_one10.safetensors")).status, 0);
  Result a = run_ranks(2, common + "--data-parallel --check-replicas 5 --batch 8 --steps 20 --resume " +
                              path("r_one10.safetensors") + " --out " + path("r_one_two.safetensors"));
  ASSERT_EQ(a.status, 0) << a.err;
  EXPECT_EQ(a.json()["first_step"], 11);
  Result b = run_ranks(2, common + "--data-parallel --batch 8 --steps 10 --out " + path("r_two10.safetensors"));
  ASSERT_EQ(b.status, 0) << b.err;
  Result c = run(common + "--batch 16 --steps 20 --resume " + path("r_two10.safetensors") + " --out " +
                 path("r_two_one.safetensors"));
  ASSERT_EQ(c.status, 0) << c.err;
  const Tolerance tol{.reduction = 16 * 64};
  expect_close(path("r_one_two.safetensors"), path("r_ref.safetensors"), tol);
  expect_close(path("r_two_one.safetensors"), path("r_ref.safetensors"), tol);
}

// Accumulation reduces once per update: two ranks x two micro-batches of 16 equal one process
// of batch 64, with 20 reductions for 40 micro-steps.
TEST(DataParallelCli, AccumulationReducesOncePerUpdate) {
  const std::string common = "train --model mlp --device cpu --optimizer adam --json ";
  Result two =
      run_ranks(2, common + "--data-parallel --check-replicas 1 --accumulation 2 --batch 16 --steps 40 --out " +
                       path("acc_2.safetensors"));
  ASSERT_EQ(two.status, 0) << two.err;
  Result one = run(common + "--batch 64 --steps 20 --out " + path("acc_1.safetensors"));
  ASSERT_EQ(one.status, 0) << one.err;
  auto dp = two.json()["data_parallel"];
  EXPECT_EQ(dp["updates"], 20);
  EXPECT_EQ(dp["update_ms"].size(), 20u);
  expect_close(path("acc_2.safetensors"), path("acc_1.safetensors"), Tolerance{.reduction = 64});
}

// ---- failures ------------------------------------------------------------------------------

// An mpirun job in the background whose ranks write their process ids to files, so a test can
// kill or stop one of them.
class Job {
 public:
  explicit Job(const std::string& args) : err_(dir() / ("job" + std::to_string(++count_) + "_stderr.txt")) {
    for (int r = 0; r < 2; ++r) fs::remove(pid_file(r));
    fs::remove(err_);
    const std::string cmd = mpirun(2) + " sh -c 'echo $$ > " + (dir() / "pid.").string() +
                            "$OMPI_COMM_WORLD_RANK; exec " + cli_run::command() + " " + args + "' 2> " + err_.string();
    const char* argv[] = {"sh", "-c", cmd.c_str(), nullptr};
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);  // its own group: cleaned up as one
    posix_spawnattr_setpgroup(&attr, 0);
    if (posix_spawn(&pid_, "/bin/sh", nullptr, &attr, const_cast<char**>(argv), environ) != 0) pid_ = -1;
    posix_spawnattr_destroy(&attr);
  }
  ~Job() {
    if (pid_ > 0 && !exited_) {
      ::kill(-pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  fs::path pid_file(int rank) const { return dir() / ("pid." + std::to_string(rank)); }
  std::string err() const { return slurp(err_); }
  bool wait_for(const std::string& text, double seconds) const {
    for (auto end = Clock::now() + std::chrono::duration<double>(seconds); Clock::now() < end;) {
      if (err().find(text) != std::string::npos) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }
  // The process id rank `rank` wrote (it starts before any training step, so it is there by
  // the time a test looks for one); 0 when it is not.
  pid_t rank_pid(int rank) const {
    const std::string text = slurp(pid_file(rank));
    return text.empty() ? 0 : pid_t(std::stol(text));
  }
  // Seconds until mpirun exits (its status in `status`), or -1 after `limit` seconds.
  double wait_exit(double limit, int& status) {
    const auto start = Clock::now();
    while (std::chrono::duration<double>(Clock::now() - start).count() < limit) {
      int st = 0;
      if (::waitpid(pid_, &st, WNOHANG) == pid_) {
        exited_ = true;
        status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        return std::chrono::duration<double>(Clock::now() - start).count();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return -1;
  }
  bool started() const { return pid_ > 0; }

 private:
  static inline int count_ = 0;
  fs::path err_;
  pid_t pid_ = -1;
  bool exited_ = false;
};

const std::string kLongRun = "train --model chargpt --device cpu --data-parallel --steps 300";

// mpirun ends the job when a rank dies; the survivor, sent SIGTERM, names the rank that no
// longer answers before it goes.
TEST(DataParallelCli, AKilledRankIsNamedByTheOthers) {
  Job job(kLongRun);
  ASSERT_TRUE(job.started());
  ASSERT_TRUE(job.wait_for("step 30/300", 120)) << job.err();
  ASSERT_GT(job.rank_pid(1), 0);
  ASSERT_EQ(::kill(job.rank_pid(1), SIGKILL), 0);
  int status = 0;
  const double seconds = job.wait_exit(30, status);
  ASSERT_GE(seconds, 0) << "the job did not end within 30 s of rank 1's death:\n" << job.err();
  EXPECT_NE(status, 0);
  EXPECT_TRUE(std::regex_search(job.err(), std::regex(R"(\[distributed\] rank 0 of 2: .*rank 1 lost)"))) << job.err();
  std::printf("rank 1 killed: the job ended %.2f s later, status %d\n", seconds, status);
}

// A rank that stops answering without exiting (a hung process, a machine gone from the network)
// is found by the collective's deadline: the others name it and end the job.
TEST(DataParallelCli, AStoppedRankIsNamedWithinTheTimeout) {
  Job job(kLongRun + " --comm-timeout 2");
  ASSERT_TRUE(job.started());
  ASSERT_TRUE(job.wait_for("step 30/300", 120)) << job.err();
  const pid_t stopped = job.rank_pid(1);
  ASSERT_GT(stopped, 0);
  ASSERT_EQ(::kill(stopped, SIGSTOP), 0);
  int status = 0;
  const double seconds = job.wait_exit(40, status);
  ::kill(stopped, SIGKILL);
  ASSERT_GE(seconds, 0) << "the job did not end within 40 s of rank 1 stopping:\n" << job.err();
  EXPECT_NE(status, 0);
  EXPECT_TRUE(std::regex_search(
      job.err(), std::regex(R"(\[distributed\] rank 0 of 2: rank 1 lost \(a dead, stopped or unreachable process\))")))
      << job.err();
  std::printf("rank 1 stopped: the job ended %.2f s later, status %d\n", seconds, status);
}

// Ranks that built different programs (here, different widths) stop at the start, every one
// naming the rank that differs.
TEST(DataParallelCli, RanksWithDifferentProgramsStopAtTheStart) {
  const auto start = Clock::now();
  Result r = cli_run::run(
      "", dir(),
      mpirun(2) + " sh -c 'exec " + cli_run::command() +
          " train --model mlp --device cpu --data-parallel --steps 20 --width $((32 + 32 * OMPI_COMM_WORLD_RANK))'");
  EXPECT_NE(r.status, 0);
  for (int rank : {0, 1}) {
    EXPECT_NE(r.err.find("[distributed] rank " + std::to_string(rank) +
                         " of 2: rank(s) 1 built a different training graph than rank 0"),
              std::string::npos)
        << r.err;
  }
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 60);
}

// gpualert wraps an mpirun job unchanged: it returns mpirun's exit status and names the MPI
// ending (here the ranks' different programs make rank 0 call MPI_Abort at the start).
TEST(DataParallelCli, GpualertNamesAnMpiAbort) {
  const fs::path state = dir() / "gpualert_state", report = dir() / "gpualert_report.json";
  fs::remove_all(state);
  fs::remove(report);
  const std::string job = mpirun(2) + " sh -c 'exec " + cli_run::command() +
                          " train --model mlp --device cpu --data-parallel --steps 20 --width "
                          "$((32 + 32 * OMPI_COMM_WORLD_RANK))'";
  Result bare = cli_run::run("", dir(), job);
  Result wrapped = cli_run::run("", dir(),
                                "XDG_STATE_HOME=" + state.string() + " " + MEGANEURA_BINARY_DIR +
                                    "/bin/gpualert --json-report " + report.string() + " -- " + job);
  ASSERT_NE(bare.status, 0) << bare.err;
  EXPECT_EQ(wrapped.status, bare.status) << wrapped.err;
  const auto rep = nlohmann::json::parse(slurp(report));
  EXPECT_EQ(rep["class"], "mpi_abort") << rep.dump(2);
}

// ---- without mpirun ------------------------------------------------------------------------

TEST(DataParallelCli, AProcessStartedAloneIsRankZeroOfOne) {
  Result r = run("train --model mlp --device cpu --data-parallel --steps 5 --json");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.json()["data_parallel"]["ranks"], 1);
  EXPECT_NE(r.err.find("rank 0 of 1"), std::string::npos) << r.err;
}

TEST(DataParallelCli, UsageErrorsNameTheOption) {
  for (std::string bad : {"nan", "inf", "-1", "0", "x"}) {
    for (std::string option : {"--bucket-mb", "--comm-timeout"}) {
      Result r = run("train --model mlp --data-parallel " + option + " " + bad);
      EXPECT_NE(r.status, 0) << option << " " << bad;
      EXPECT_NE(r.err.find(option), std::string::npos) << r.err;
    }
  }
  for (std::string bad : {"-1", "nan", "1.5"}) {
    Result r = run("train --model mlp --data-parallel --check-replicas " + bad);
    EXPECT_NE(r.status, 0) << bad;
    EXPECT_NE(r.err.find("--check-replicas"), std::string::npos) << r.err;
  }
  Result r = run("train --model mlp --bucket-mb 5");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.err.find("--data-parallel"), std::string::npos) << r.err;
  r = run("train --workload smollm2 --scale ci --batch 4");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.err.find("--batch"), std::string::npos) << r.err;
}

}  // namespace
