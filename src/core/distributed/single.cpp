// The communicator of a process alone: rank 0 of 1, every collective a no-op.
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

#include "meganeura/distributed.h"

namespace meganeura {
namespace {

class SingleCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  int local_rank() const override { return 0; }
  int local_size() const override { return 1; }
  std::string description() const override { return "a single process, rank 0 of 1"; }
  Ticket start_sum(void*, size_t, DType, const std::string&) override { return 0; }
  Ticket start_broadcast(void*, size_t, int root, const std::string& what) override {
    if (root != 0)
      throw std::invalid_argument("[distributed] " + what + " from rank " + std::to_string(root) + " of 1");
    return 0;
  }
  void wait(Ticket) override {}
  std::vector<uint64_t> all_gather(uint64_t value, const std::string&) override { return {value}; }
  void barrier(const std::string&) override {}
  double busy_seconds() const override { return 0; }
  [[noreturn]] void abort(const std::string& message, int code) override {
    if (!message.empty()) std::fprintf(stderr, "%s\n", message.c_str());
    std::fflush(stderr);
    std::_Exit(code);
  }
  void interrupt(int signal) noexcept override {
    static const char kMessage[] = "[distributed] rank 0 of 1: ended by a signal\n";
    [[maybe_unused]] auto n = ::write(2, kMessage, sizeof kMessage - 1);
    ::_exit(128 + signal);
  }
};

}  // namespace

std::unique_ptr<Communicator> make_single_communicator() { return std::make_unique<SingleCommunicator>(); }

}  // namespace meganeura
