// Parameters across ranks: rank 0's to everyone, and a check that every rank holds the same.
#include <algorithm>
#include <span>
#include <stdexcept>

#include "distributed/ranks.h"
#include "meganeura/distributed.h"
#include "meganeura/session.h"

namespace meganeura {
namespace {

// Parameters and states by name: the same order on every rank (the sessions agree on them).
std::vector<std::string> replicated(const Session& s) {
  std::vector<std::string> names;
  for (const auto& [name, b] : s.buffers()) {
    if (b.role == Role::parameter || b.role == Role::state) names.push_back(name);
  }
  return names;
}

// FNV-1a over bytes, continuing from `h`.
uint64_t fnv1a_bytes(uint64_t h, std::span<const std::byte> bytes) {
  for (std::byte b : bytes) h = (h ^ uint64_t(b)) * 0x100000001b3ULL;
  return h;
}

}  // namespace

void broadcast_parameters(Session& session, Communicator& comm, int root) {
  if (root < 0 || root >= comm.size())
    throw std::invalid_argument("[distributed] no rank " + std::to_string(root) + " to broadcast from");
  for (const std::string& name : replicated(session)) {
    const ExternalBuffer& e = session.buffers().at(name);
    std::vector<std::byte> bytes(size_t(storage_bytes(e.stored, e.type.numel())));
    if (comm.rank() == root) session.read_raw(name, bytes);  // draws its initial values if still waiting
    comm.wait(comm.start_broadcast(bytes.data(), bytes.size(), root, "the broadcast of '" + name + "'"));
    if (comm.rank() != root) session.write_raw(name, bytes);
  }
}

void check_replicas(const Session& session, Communicator& comm, const std::string& when) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (const std::string& name : replicated(session)) {
    h = fnv1a_bytes(h, std::as_bytes(std::span(name)));
    h = fnv1a_bytes(h, session.read_raw(name));
  }
  const std::vector<uint64_t> all = comm.all_gather(h, "the replica check " + when);
  if (auto ranks = distributed::differing_ranks(all); !ranks.empty()) {
    throw std::runtime_error(distributed::rank_prefix(comm) + "the parameters of rank(s) " +
                             distributed::rank_list(ranks) + " differ from rank 0's " + when);
  }
}

}  // namespace meganeura
