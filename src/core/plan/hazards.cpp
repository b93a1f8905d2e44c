#include <algorithm>
#include <map>
#include <stdexcept>

#include "graph/op_table.h"
#include "plan/plan_internal.h"

namespace meganeura::planning {

std::vector<std::vector<Access>> accesses(const Program& p) {
  std::map<std::string, uint32_t> ext;
  for (size_t i = 0; i < p.externals.size(); ++i) ext[p.externals[i].name] = uint32_t(p.arena_buffers.size() + i);
  auto access = [&](uint32_t t, bool write) {
    const ProgramTensor& x = p.tensors.at(t);
    if (!x.external()) return Access{x.buffer, x.offset, x.offset + x.bytes, t, write};
    auto it = ext.find(x.binding);
    if (it == ext.end())
      throw std::invalid_argument("[program] tensor " + std::to_string(t) + " is bound to unknown buffer '" +
                                  x.binding + "'");
    return Access{it->second, 0, x.bytes, t, write};
  };
  std::vector<std::vector<Access>> out(p.dispatches.size());
  for (size_t d = 0; d < p.dispatches.size(); ++d) {
    for (uint32_t r : p.dispatches[d].reads) out[d].push_back(access(r, false));
    for (uint32_t w : p.dispatches[d].writes) out[d].push_back(access(w, true));
  }
  return out;
}

std::string describe_tensor(const Program& p, uint32_t t) {
  if (t >= p.tensors.size()) return "t" + std::to_string(t) + " (no such tensor)";
  const ProgramTensor& x = p.tensors[t];
  std::string s = "t" + std::to_string(t);
  if (x.external()) s += " '" + x.binding + "'";
  return s + " (node " + std::to_string(x.node) + ", " + std::string(dtype_name(x.stored)) + shape_str(x.type.shape) +
         ")";
}

// Splits so that segments start at `begin` and at `end`; fills gaps with fresh segments.
void split(SegmentMap& m, uint64_t begin, uint64_t end) {
  auto cut = [&](uint64_t at) {
    auto it = m.upper_bound(at);
    if (it == m.begin()) return;
    --it;
    if (it->first < at && at < it->second.end) {
      Segment right = it->second;
      it->second.end = at;
      m.emplace(at, std::move(right));
    }
  };
  cut(begin);
  cut(end);
  uint64_t cursor = begin;
  for (auto it = m.lower_bound(begin); cursor < end;) {
    if (it == m.end() || it->first > cursor) {
      uint64_t stop = it == m.end() ? end : std::min(end, it->first);
      it = m.emplace_hint(it, cursor, Segment{stop, -1, {}});
    }
    cursor = it->second.end;
    ++it;
  }
}

void compute_hazards(Program& p) {
  const size_t nd = p.dispatches.size();
  auto acc = accesses(p);
  std::vector<SegmentMap> buffers(p.arena_buffers.size() + p.externals.size());
  const size_t words = (nd + 63) / 64;
  std::vector<std::vector<uint64_t>> reach(nd, std::vector<uint64_t>(words, 0));
  for (size_t j = 0; j < nd; ++j) {
    std::map<uint32_t, HazardKind> direct;  // earlier dispatch -> strongest kind
    auto note = [&](int64_t i, HazardKind k) {
      if (i < 0 || size_t(i) == j) return;
      auto [it, fresh] = direct.emplace(uint32_t(i), k);
      if (!fresh && k == HazardKind::raw) it->second = k;
      if (!fresh && k == HazardKind::waw && it->second == HazardKind::war) it->second = k;
    };
    for (bool writes : {false, true}) {
      for (const Access& a : acc[j]) {
        if (a.write != writes || a.begin == a.end) continue;
        SegmentMap& m = buffers[a.buffer];
        split(m, a.begin, a.end);
        for (auto it = m.lower_bound(a.begin); it != m.end() && it->first < a.end; ++it) {
          Segment& s = it->second;
          if (!writes) {
            note(s.writer, HazardKind::raw);
            if (s.readers.empty() || s.readers.back() != j) s.readers.push_back(uint32_t(j));
          } else {
            note(s.writer, HazardKind::waw);
            for (uint32_t r : s.readers) note(r, HazardKind::war);
            s.writer = int64_t(j);
            s.readers.clear();
          }
        }
      }
    }
    // Minimal set: latest first; drop a dispatch already reached through a kept one.
    std::vector<uint64_t>& mine = reach[j];
    Dispatch& d = p.dispatches[j];
    d.waits.clear();
    for (auto it = direct.rbegin(); it != direct.rend(); ++it) {
      const uint32_t i = it->first;
      if (mine[i / 64] >> (i % 64) & 1) continue;
      d.waits.push_back(Hazard{i, it->second});
      for (size_t w = 0; w < words; ++w) mine[w] |= reach[i][w];
      mine[i / 64] |= uint64_t(1) << (i % 64);
    }
    std::reverse(d.waits.begin(), d.waits.end());
  }
  place_barriers(p);
}

void place_barriers(Program& p) {
  size_t group_start = 0;
  for (size_t j = 0; j < p.dispatches.size(); ++j) {
    Dispatch& d = p.dispatches[j];
    d.barrier = false;
    for (const Hazard& h : d.waits) d.barrier |= h.dispatch >= group_start;
    if (d.barrier) group_start = j;
  }
}

}  // namespace meganeura::planning
