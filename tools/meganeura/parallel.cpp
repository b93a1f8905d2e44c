#include "parallel.h"

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "meganeura/backend.h"

namespace meganeura::cli {

std::string place_rank(SessionOptions& o, const Communicator& comm) {
  const int cores = int(std::max(1u, std::thread::hardware_concurrency()));
  o.threads = std::max(1, cores / std::max(1, comm.local_size()));
  if (o.device == Device::cpu || !o.vulkan_device.empty()) return "";
  std::vector<VulkanDeviceInfo> all;
  try {
    all = vulkan_devices();
  } catch (const std::exception&) {
    return "";  // no Vulkan loader: auto falls back to the CPU, vulkan reports it when the session starts
  }
  std::vector<int> candidates;
  for (const auto& d : all) {
    if (o.device == Device::vulkan || d.type == "discrete" || d.type == "integrated") candidates.push_back(d.index);
  }
  if (candidates.empty()) return "";
  const int index = candidates[size_t(comm.local_rank()) % candidates.size()];
  o.device = Device::vulkan;
  o.vulkan_device = std::to_string(index);
  std::string note = "Vulkan device " + std::to_string(index) + " for local rank " + std::to_string(comm.local_rank());
  if (int(candidates.size()) < comm.local_size())
    note +=
        " (" + std::to_string(comm.local_size()) + " ranks share " + std::to_string(candidates.size()) + " devices)";
  return note;
}

namespace {
std::atomic<Communicator*> forwarded{nullptr};
extern "C" void forward_signal(int sig) {
  if (Communicator* c = forwarded.load()) c->interrupt(sig);
}
}  // namespace

ForwardSignals::ForwardSignals(Communicator& comm) {
  forwarded.store(&comm);
  struct sigaction sa = {};
  sa.sa_handler = forward_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
}

ForwardSignals::~ForwardSignals() {
  std::signal(SIGTERM, SIG_DFL);
  std::signal(SIGINT, SIG_DFL);
  forwarded.store(nullptr);
}

int launched_ranks() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "SLURM_NTASKS"}) {
    const char* v = std::getenv(name);
    if (v && std::atoi(v) > 0) return std::atoi(v);
  }
  return 1;
}

nlohmann::json comm_profile_json(const CommProfile& p) {
  const double updates = double(std::max<int64_t>(1, p.updates));
  std::vector<double> ms;
  const size_t warm = std::min<size_t>(5, p.update_s.size() / 4);
  for (size_t i = warm; i < p.update_s.size(); ++i) ms.push_back(p.update_s[i] * 1e3);
  std::sort(ms.begin(), ms.end());
  auto quantile = [&](double q) { return ms.empty() ? 0.0 : ms[size_t(q * double(ms.size() - 1) + 0.5)]; };
  nlohmann::json samples = nlohmann::json::array();
  for (double s : p.update_s) samples.push_back(s * 1e3);
  return {{"ranks", p.ranks},
          {"buckets", p.buckets},
          {"bucket_ready_after_dispatch", p.bucket_ready},
          {"bucket_bytes", p.bucket_bytes},
          {"grad_program_dispatches", p.dispatches},
          {"updates", p.updates},
          {"reduced_bytes_per_update", p.bytes / updates},
          {"update_ms_median", quantile(0.5)},
          {"update_ms_iqr", {quantile(0.25), quantile(0.75)}},
          {"grad_program_ms_per_update", p.compute_s * 1e3 / updates},
          {"communication_ms_per_update", p.communication_s * 1e3 / updates},
          {"exposed_communication_ms_per_update", p.exposed_s * 1e3 / updates},
          {"update_ms", samples}};
}

}  // namespace meganeura::cli

namespace meganeura::cli {

void print_comm_profile(const CommProfile& p) {
  const nlohmann::json j = comm_profile_json(p);
  std::fprintf(stderr,
               "data-parallel over %d rank(s): update %.2f ms (median), %zu bucket(s) of %.0f kB in all, "
               "reductions in flight %.2f ms per update, waited for after the backward pass %.2f ms\n",
               p.ranks, j["update_ms_median"].get<double>(), p.buckets,
               p.bytes / double(std::max<int64_t>(1, p.updates)) / 1e3, j["communication_ms_per_update"].get<double>(),
               j["exposed_communication_ms_per_update"].get<double>());
}

}  // namespace meganeura::cli
