// Writes replace the file atomically: a failed write leaves the old file and no debris.
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include <atomic>
#include <thread>

#include "io_test_util.h"

namespace meganeura::io::testing {
namespace {

class AtomicWrite : public ScratchDir {
 protected:
  // Writes a file with one f32 tensor "w" of n elements, each equal to `value`.
  void write_filled(const fs::path& path, size_t n, float value) {
    std::vector<float> v(n, value);
    std::vector<int64_t> shape = {static_cast<int64_t>(n)};
    write_safetensors(path, {{"w", {DType::f32, shape, std::as_bytes(std::span(v))}}});
  }
  std::vector<std::string> dir_entries() {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename().string());
    return names;
  }
};

// The file-size limit makes write() fail with EFBIG exactly as a full disk fails with
// ENOSPC, without needing a separate filesystem. It runs in a child process so the limit
// cannot touch the test runner.
TEST_F(AtomicWrite, FailedWriteKeepsTheOldFileAndRemovesTheTemporary) {
  const fs::path path = dir_ / "model.safetensors";
  write_filled(path, 16, 3.0f);
  const std::string before = read_raw(path);

  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    signal(SIGXFSZ, SIG_IGN);
    rlimit limit{64 << 10, 64 << 10};
    setrlimit(RLIMIT_FSIZE, &limit);
    std::string message = error_of([&] { write_filled(path, 1 << 20, 4.0f); });
    bool ok = message.find("[safetensors] cannot write '" + path.string() + "'") == 0 &&
              message.find("write: File too large") != std::string::npos;
    if (!ok) fprintf(stderr, "unexpected message: '%s'\n", message.c_str());
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "writer crashed, status " << status;
  EXPECT_EQ(WEXITSTATUS(status), 0) << "see stderr for the message";

  EXPECT_EQ(read_raw(path), before) << "the old file must stay intact";
  EXPECT_EQ(dir_entries(), std::vector<std::string>{"model.safetensors"});
  EXPECT_EQ(read_safetensors(path).tensors.at("w").shape, std::vector<int64_t>{16});
}

TEST_F(AtomicWrite, MissingDirectoryNamesPathAndError) {
  const fs::path path = dir_ / "no-such-dir" / "x.safetensors";
  std::string message = error_of([&] { write_filled(path, 4, 1.0f); });
  EXPECT_EQ(message.find("[safetensors] cannot write '" + path.string() + "': "), 0u) << message;
  EXPECT_NE(message.find("create: No such file or directory"), std::string::npos) << message;
}

TEST_F(AtomicWrite, ParentIsAFile) {
  write_raw(dir_ / "plain", "x");
  std::string message = error_of([&] { write_filled(dir_ / "plain" / "x.safetensors", 4, 1.0f); });
  EXPECT_NE(message.find("Not a directory"), std::string::npos) << message;
}

TEST_F(AtomicWrite, RenameFailureRemovesTheTemporary) {
  const fs::path path = dir_ / "occupied";
  fs::create_directories(path / "inside");
  std::string message = error_of([&] { write_filled(path, 4, 1.0f); });
  EXPECT_NE(message.find("rename: Is a directory"), std::string::npos) << message;
  EXPECT_EQ(dir_entries(), std::vector<std::string>{"occupied"});
  EXPECT_TRUE(fs::is_directory(path / "inside"));
}

// Readers racing with writers see one complete version or another, never a mixture.
TEST_F(AtomicWrite, ConcurrentReadersNeverSeeAPartialFile) {
  const fs::path path = dir_ / "shared.safetensors";
  write_filled(path, 1000, 0.0f);
  std::atomic<bool> done{false};
  std::atomic<int> torn{0}, reads{0};
  std::thread reader([&] {
    while (!done) {
      try {
        SafetensorsFile f = read_safetensors(path);
        const auto& data = f.tensors.at("w").data;
        float first;
        std::memcpy(&first, data.data(), 4);
        for (size_t i = 0; i < data.size(); i += 4) {
          float x;
          std::memcpy(&x, data.data() + i, 4);
          if (x != first) ++torn;
        }
      } catch (const std::exception&) {
        ++torn;  // a reader seeing a half-written file gets an error
      }
      ++reads;
    }
  });
  std::vector<std::thread> writers;
  for (int t = 0; t < 2; ++t) {
    writers.emplace_back([&, t] {
      for (int i = 0; i < 25; ++i) write_filled(path, 1000 + 100 * t, static_cast<float>(t * 100 + i));
    });
  }
  for (auto& w : writers) w.join();
  while (reads < 5) std::this_thread::yield();
  done = true;
  reader.join();
  EXPECT_EQ(torn, 0);
  EXPECT_EQ(dir_entries(), std::vector<std::string>{"shared.safetensors"});
}

}  // namespace
}  // namespace meganeura::io::testing
