// Pieces of the planner shared by plan(), verify() and the Program's JSON form.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "meganeura/program.h"

namespace meganeura::planning {

// One byte range a dispatch touches. Buffers are numbered: arena buffers first, then the
// external buffers in the order of Program::externals.
struct Access {
  uint32_t buffer = 0;
  uint64_t begin = 0, end = 0;
  uint32_t tensor = 0;
  bool write = false;
};

// Per buffer: byte segments with the dispatch that last wrote them and the dispatches that
// read them since (hazards and verify() track both).
struct Segment {
  uint64_t end;
  int64_t writer = -1;
  std::vector<uint32_t> readers;
};
using SegmentMap = std::map<uint64_t, Segment>;

// Splits so that segments start at `begin` and at `end`; fills gaps with fresh segments.
void split(SegmentMap& m, uint64_t begin, uint64_t end);

// Per dispatch: its reads, then its writes.
std::vector<std::vector<Access>> accesses(const Program& p);

// "t12 (matmul, node 40, f32(64,48))" or the external buffer's name.
std::string describe_tensor(const Program& p, uint32_t t);

// The order in which the live non-leaf nodes of `g` become dispatches. With `group`, a list
// scheduler prefers, among the nodes ready to run, those that need no new barrier (everything
// they read was produced before the current barrier), so that independent dispatches share
// one; otherwise node order.
std::vector<NodeId> dispatch_order(const Graph& g, const std::vector<char>& live, bool group);

// Direct hazards on byte ranges, reduced to the minimal set, and the barriers they need.
void compute_hazards(Program& p);

// Greedy barrier placement from the waits: a barrier before a dispatch that waits for one
// after the previous barrier.
void place_barriers(Program& p);

}  // namespace meganeura::planning
