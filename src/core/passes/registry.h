// The rewrite passes by name, and the pipeline optimize() runs: one list (pipeline.cpp) holds
// their order. Each pass lives in its own file in this folder (fusion: fusion/).
#pragma once

#include <string_view>
#include <vector>

#include "meganeura/passes.h"

namespace meganeura::passes {

struct Pass {
  const char* name;
  // The switch that enables it in PassOptions; nullptr: the pass always runs.
  bool PassOptions::*enabled;
  Graph (*run)(const Graph& g, const PassOptions& o, PassStats* stats);
  // Drop what the rewrite left dead right after it (uncounted: PassStats::removed counts the
  // final dead_nodes pass only).
  bool prune_after;
  // The PassStats field that counts what the pass rewrote (nullptr: none).
  uint32_t PassStats::*counter;
};

// In the order optimize() runs them.
const std::vector<Pass>& pipeline();
// The pass of that name, or nullptr.
const Pass* find_pass(std::string_view name);

}  // namespace meganeura::passes
