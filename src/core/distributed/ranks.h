// Small helpers for naming ranks in data-parallel errors.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "meganeura/distributed.h"

namespace meganeura::distributed {

// "[distributed] rank R of N: ", the start of every error.
inline std::string rank_prefix(int rank, int size) {
  return "[distributed] rank " + std::to_string(rank) + " of " + std::to_string(size) + ": ";
}
inline std::string rank_prefix(const Communicator& c) { return rank_prefix(c.rank(), c.size()); }

// The ranks whose value differs from rank 0's.
inline std::vector<size_t> differing_ranks(const std::vector<uint64_t>& values) {
  std::vector<size_t> out;
  for (size_t r = 1; r < values.size(); ++r) {
    if (values[r] != values[0]) out.push_back(r);
  }
  return out;
}

// "1, 3"
template <class Int>
std::string rank_list(const std::vector<Int>& ranks) {
  std::string out;
  for (Int r : ranks) out += (out.empty() ? "" : ", ") + std::to_string(r);
  return out;
}

}  // namespace meganeura::distributed
