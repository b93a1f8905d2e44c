// verify(Program): the invariants a backend relies on, checked on the Program alone.
#include <algorithm>
#include <map>
#include <stdexcept>

#include "graph/op_table.h"
#include "plan/plan_internal.h"

namespace meganeura {
namespace {

[[noreturn]] void fail(const std::string& msg) { throw std::invalid_argument("[verify] " + msg); }

std::string at_dispatch(const Program& p, size_t d) {
  return "dispatch #" + std::to_string(d) + " (" + std::string(op_name(p.dispatches[d].op)) + ")";
}

bool overlap(const planning::Access& a, const planning::Access& b) {
  return a.buffer == b.buffer && a.begin < b.end && b.begin < a.end;
}

// The tensor whose memory `t` is: views resolve to their base. Every link of the chain is
// checked, not only the first: a view of a view may name a tensor that does not exist.
uint32_t base_of(const Program& p, uint32_t t) {
  for (size_t hops = 0; p.tensors[t].view_of >= 0; ++hops) {
    if (hops > p.tensors.size()) fail("tensor t" + std::to_string(t) + ": views form a cycle");
    if (size_t(p.tensors[t].view_of) >= p.tensors.size()) {
      fail("tensor t" + std::to_string(t) + ": view of t" + std::to_string(p.tensors[t].view_of) +
           ", which does not exist");
    }
    t = uint32_t(p.tensors[t].view_of);
  }
  return t;
}

void check_layout(const Program& p) {
  const DeviceLimits& l = p.limits;
  const uint64_t limit = l.buffer_limit();
  if (l.offset_alignment == 0 || (l.offset_alignment & (l.offset_alignment - 1)))
    fail("offset alignment must be a power of two");
  uint64_t total = 0;
  for (size_t b = 0; b < p.arena_buffers.size(); ++b) {
    if (p.arena_buffers[b] > limit) {
      fail("arena buffer " + std::to_string(b) + " is " + std::to_string(p.arena_buffers[b]) +
           " bytes, above the limit of " + std::to_string(limit));
    }
    total += p.arena_buffers[b];
  }
  if (total != p.arena_bytes)
    fail("arena_bytes " + std::to_string(p.arena_bytes) + " is not the sum of the arena buffers (" +
         std::to_string(total) + ")");
  std::map<std::string, const ExternalBuffer*> ext;
  for (const ExternalBuffer& e : p.externals) {
    if (!ext.emplace(e.name, &e).second) fail("two external buffers named '" + e.name + "'");
    const uint64_t bytes = storage_bytes(e.stored, e.type.numel());
    if (bytes > limit)
      fail("external buffer '" + e.name + "' is " + std::to_string(bytes) + " bytes, above the limit of " +
           std::to_string(limit));
  }
  for (uint32_t t = 0; t < p.tensors.size(); ++t) {
    const ProgramTensor& x = p.tensors[t];
    const std::string name = planning::describe_tensor(p, t);
    if (x.bytes != storage_bytes(x.stored, x.type.numel()))
      fail("tensor " + name + ": " + std::to_string(x.bytes) + " bytes for its type");
    if (x.view_of >= int32_t(p.tensors.size())) fail("tensor " + name + ": view of a tensor that does not exist");
    if (x.view_of >= 0) {
      const ProgramTensor& b = p.tensors[base_of(p, t)];
      if (b.bytes != x.bytes || b.role != x.role || b.binding != x.binding ||
          (!x.external() && (b.buffer != x.buffer || b.offset != x.offset))) {
        fail("tensor " + name + ": a view placed differently from its base");
      }
    }
    if (x.external()) {
      auto it = ext.find(x.binding);
      if (it == ext.end()) fail("tensor " + name + " is bound to unknown buffer '" + x.binding + "'");
      const ExternalBuffer& e = *it->second;
      if (x.bytes != storage_bytes(e.stored, e.type.numel()) || x.stored != e.stored) {
        fail("tensor " + name + " does not fill its buffer '" + e.name + "' (" + std::string(dtype_name(e.stored)) +
             shape_str(e.type.shape) + ")");
      }
      continue;
    }
    if (x.buffer >= p.arena_buffers.size())
      fail("tensor " + name + " is in arena buffer " + std::to_string(x.buffer) + " of " +
           std::to_string(p.arena_buffers.size()));
    if (x.offset % l.offset_alignment)
      fail("tensor " + name + " at offset " + std::to_string(x.offset) + ", not a multiple of " +
           std::to_string(l.offset_alignment));
    if (x.offset + x.bytes > p.arena_buffers[x.buffer] || x.offset + x.bytes < x.offset) {
      fail("tensor " + name + " [" + std::to_string(x.offset) + ", " + std::to_string(x.offset + x.bytes) +
           ") crosses the end of arena buffer " + std::to_string(x.buffer) + " (" +
           std::to_string(p.arena_buffers[x.buffer]) + " bytes)");
    }
  }
}

void check_dispatches(const Program& p) {
  for (size_t d = 0; d < p.dispatches.size(); ++d) {
    const Dispatch& x = p.dispatches[d];
    const OpInfo& info = op_info(x.op);
    if (info.family == OpFamily::leaf) fail(at_dispatch(p, d) + ": leaves are not dispatched");
    if (info.arity >= 0 && x.reads.size() != size_t(info.arity)) {
      fail(at_dispatch(p, d) + ": " + std::to_string(x.reads.size()) + " reads for an op of arity " +
           std::to_string(info.arity));
    }
    if (x.writes.empty()) fail(at_dispatch(p, d) + ": writes nothing");
    if (x.op == Op::fused_output)
      fail(at_dispatch(p, d) + ": a secondary output is written by its producer's dispatch");
    if (x.op == Op::fused_elementwise) {
      const auto* a = std::get_if<FusedAttrs>(&x.attrs);
      if (!a) fail(at_dispatch(p, d) + ": attributes are not a fused program");
      size_t outputs = 0;
      try {
        outputs = fused_outputs(a->code);
      } catch (const std::invalid_argument& e) {
        fail(at_dispatch(p, d) + ": " + e.what());
      }
      if (x.writes.size() != outputs) {
        fail(at_dispatch(p, d) + ": " + std::to_string(x.writes.size()) + " writes for a program with " +
             std::to_string(outputs) + " outputs");
      }
      for (uint32_t t : x.writes) {
        if (t < p.tensors.size() && x.writes[0] < p.tensors.size() &&
            p.tensors[t].type != p.tensors[x.writes[0]].type) {
          fail(at_dispatch(p, d) + ": output " + planning::describe_tensor(p, t) + " differs in type from output 0");
        }
      }
    }
    for (uint32_t t : x.reads) {
      if (t >= p.tensors.size())
        fail(at_dispatch(p, d) + ": reads tensor " + std::to_string(t) + " of " + std::to_string(p.tensors.size()));
    }
    for (uint32_t t : x.writes) {
      if (t >= p.tensors.size())
        fail(at_dispatch(p, d) + ": writes tensor " + std::to_string(t) + " of " + std::to_string(p.tensors.size()));
      if (p.tensors[t].view_of >= 0) fail(at_dispatch(p, d) + ": writes a view, " + planning::describe_tensor(p, t));
      const Role r = p.tensors[t].role;
      if (r == Role::input || r == Role::parameter || r == Role::constant) {
        // Parameters are updated by the optimizer; inputs and constants never change.
        if (r != Role::parameter)
          fail(at_dispatch(p, d) + ": writes " + std::string(role_name(r)) + " " + planning::describe_tensor(p, t));
      }
    }
    for (const Hazard& h : x.waits) {
      if (h.dispatch >= d)
        fail(at_dispatch(p, d) + ": waits for dispatch #" + std::to_string(h.dispatch) + ", not an earlier one");
    }
  }
}

// Replays the program over byte ranges: every read finds the bytes last written by the tensor
// it reads (so it was defined, and no other live tensor overwrote it); writes of one dispatch
// are disjoint and overlap its reads only in place.
void check_memory(const Program& p, const std::vector<std::vector<planning::Access>>& acc) {
  struct Seg {
    uint64_t end;
    int64_t owner;  // base tensor whose value the bytes hold; -1: undefined
  };
  std::vector<std::map<uint64_t, Seg>> mem(p.arena_buffers.size() + p.externals.size());
  // The first base tensor bound to each buffer in each role holds its initial value.
  std::map<std::pair<std::string_view, Role>, int64_t> first_bound;
  for (uint32_t t = 0; t < p.tensors.size(); ++t) {
    const ProgramTensor& pt = p.tensors[t];
    if (pt.view_of < 0) first_bound.try_emplace({std::string_view(pt.binding), pt.role}, t);
  }
  for (size_t e = 0; e < p.externals.size(); ++e) {
    const ExternalBuffer& x = p.externals[e];
    if (x.role == Role::output) continue;  // defined once written
    auto it = first_bound.find({std::string_view(x.name), x.role});
    const int64_t owner = it == first_bound.end() ? -1 : it->second;
    mem[p.arena_buffers.size() + e][0] = Seg{storage_bytes(x.stored, x.type.numel()), owner};
  }
  auto owners = [&](const planning::Access& a, auto&& visit) {
    auto& m = mem[a.buffer];
    uint64_t cursor = a.begin;
    auto it = m.upper_bound(a.begin);
    if (it != m.begin()) --it;
    for (; it != m.end() && it->first < a.end; ++it) {
      if (it->second.end <= a.begin) continue;
      if (it->first > cursor) visit(-1);
      visit(it->second.owner);
      cursor = std::max(cursor, it->second.end);
    }
    if (cursor < a.end) visit(-1);
  };
  auto assign = [&](const planning::Access& a, int64_t owner) {
    auto& m = mem[a.buffer];
    // Trim segments overlapping [begin, end), keeping what lies outside.
    auto it = m.upper_bound(a.begin);
    if (it != m.begin()) --it;
    std::vector<std::pair<uint64_t, Seg>> keep;
    while (it != m.end() && it->first < a.end) {
      if (it->second.end <= a.begin) {
        ++it;
        continue;
      }
      if (it->first < a.begin) keep.emplace_back(it->first, Seg{a.begin, it->second.owner});
      if (it->second.end > a.end) keep.emplace_back(a.end, Seg{it->second.end, it->second.owner});
      it = m.erase(it);
    }
    for (auto& [k, s] : keep) m[k] = s;
    m[a.begin] = Seg{a.end, owner};
  };
  for (size_t d = 0; d < p.dispatches.size(); ++d) {
    const Dispatch& x = p.dispatches[d];
    const int inplace = op_info(x.op).inplace_input;
    for (const planning::Access& a : acc[d]) {
      if (a.write) continue;
      const int64_t want = base_of(p, a.tensor);
      owners(a, [&](int64_t owner) {
        if (owner == want) return;
        if (owner < 0)
          fail(at_dispatch(p, d) + " reads " + planning::describe_tensor(p, a.tensor) + " before it is written");
        fail(at_dispatch(p, d) + " reads " + planning::describe_tensor(p, a.tensor) +
             ", but its bytes were overwritten by " + planning::describe_tensor(p, uint32_t(owner)));
      });
    }
    for (size_t i = 0; i < acc[d].size(); ++i) {
      const planning::Access& w = acc[d][i];
      if (!w.write) continue;
      for (size_t k = 0; k < acc[d].size(); ++k) {
        const planning::Access& o = acc[d][k];
        if (k == i || !overlap(w, o)) continue;
        if (o.write)
          fail(at_dispatch(p, d) + " writes " + planning::describe_tensor(p, w.tensor) + " and " +
               planning::describe_tensor(p, o.tensor) + " over each other");
        const bool same_place = o.begin == w.begin && o.end == w.end;
        const bool same_shape = p.tensors[o.tensor].type.shape == p.tensors[w.tensor].type.shape;
        // a multi-output program reads every input of an element before writing its outputs
        const bool multi = x.op == Op::fused_elementwise && x.writes.size() > 1;
        if (inplace < 0 || !same_place || !same_shape || (x.writes.size() != 1 && !multi)) {
          fail(at_dispatch(p, d) + " writes " + planning::describe_tensor(p, w.tensor) + " over its input " +
               planning::describe_tensor(p, o.tensor) + ", which the op cannot do in place");
        }
      }
    }
    for (const planning::Access& a : acc[d]) {
      if (a.write) assign(a, base_of(p, a.tensor));
    }
  }
}

// Every pair of conflicting accesses (same bytes, one a write) is ordered by the waits,
// directly or through a chain; every wait on a dispatch after the last barrier has a barrier.
//
// Per byte range only the last writer and the readers since are checked: an earlier writer or
// reader of the same bytes conflicts with that last writer, was checked against it before, and
// so is ordered before anything the last writer is ordered before. The first dispatch with an
// unordered conflict is therefore the same as when every earlier dispatch is compared, and that
// exhaustive comparison, run for it alone, names the violation. Empty accesses (a zero-size
// tensor) have no bytes to track: they are compared exhaustively in both directions.
void check_hazards(const Program& p, const std::vector<std::vector<planning::Access>>& acc) {
  const size_t nd = p.dispatches.size(), words = (nd + 63) / 64;
  std::vector<std::vector<uint64_t>> reach(nd, std::vector<uint64_t>(words, 0));
  const size_t nb = p.arena_buffers.size() + p.externals.size();
  std::vector<std::vector<size_t>> by_buffer(nb);        // every dispatch touching the buffer
  std::vector<std::vector<size_t>> empty_by_buffer(nb);  // those with an empty access to it
  std::vector<planning::SegmentMap> segments(nb);
  auto ordered = [&](size_t j, size_t i) { return reach[j][i / 64] >> (i % 64) & 1; };
  // The exhaustive comparison of dispatch j with the earlier dispatches `among`.
  auto compare = [&](size_t j, const std::vector<size_t>& among) {
    std::vector<size_t> candidates;
    for (size_t i : among) {
      if (!ordered(j, i)) candidates.push_back(i);
    }
    std::sort(candidates.begin(), candidates.end());
    candidates.erase(std::unique(candidates.begin(), candidates.end()), candidates.end());
    for (size_t i : candidates) {
      for (const planning::Access& a : acc[j]) {
        for (const planning::Access& b : acc[i]) {
          if ((a.write || b.write) && overlap(a, b)) {
            fail(at_dispatch(p, j) + " " + (a.write ? "writes " : "reads ") + planning::describe_tensor(p, a.tensor) +
                 ", which " + at_dispatch(p, i) + " " + (b.write ? "writes" : "reads") + " as " +
                 planning::describe_tensor(p, b.tensor) + ", without waiting for it");
          }
        }
      }
    }
  };
  size_t last_barrier = 0;
  for (size_t j = 0; j < nd; ++j) {
    const Dispatch& d = p.dispatches[j];
    if (d.barrier) last_barrier = j;
    for (const Hazard& h : d.waits) {
      for (size_t w = 0; w < words; ++w) reach[j][w] |= reach[h.dispatch][w];
      reach[j][h.dispatch / 64] |= uint64_t(1) << (h.dispatch % 64);
      if (h.dispatch >= last_barrier) {
        fail(at_dispatch(p, j) + " waits for #" + std::to_string(h.dispatch) + " with no barrier between them");
      }
    }
    bool unordered = false, has_empty = false;
    std::vector<size_t> against_empty;
    for (const planning::Access& a : acc[j]) {
      if (a.begin == a.end) {
        has_empty = true;
        continue;
      }
      for (size_t i : empty_by_buffer[a.buffer]) against_empty.push_back(i);
      planning::SegmentMap& m = segments[a.buffer];
      auto it = m.upper_bound(a.begin);
      if (it != m.begin()) --it;
      for (; it != m.end() && it->first < a.end && !unordered; ++it) {
        const planning::Segment& seg = it->second;
        if (seg.end <= a.begin) continue;
        if (seg.writer >= 0 && !ordered(j, size_t(seg.writer))) unordered = true;
        if (a.write) {
          for (uint32_t r : seg.readers) unordered |= !ordered(j, r);
        }
      }
    }
    if (unordered || has_empty) {
      std::vector<size_t> among;
      for (const planning::Access& a : acc[j])
        among.insert(among.end(), by_buffer[a.buffer].begin(), by_buffer[a.buffer].end());
      compare(j, among);
      if (unordered) throw std::logic_error("[verify] an unordered conflict was found but not named");
    } else if (!against_empty.empty()) {
      compare(j, against_empty);
    }
    for (bool writes : {false, true}) {
      for (const planning::Access& a : acc[j]) {
        if (a.write != writes || a.begin == a.end) continue;
        planning::SegmentMap& m = segments[a.buffer];
        planning::split(m, a.begin, a.end);
        for (auto it = m.lower_bound(a.begin); it != m.end() && it->first < a.end; ++it) {
          planning::Segment& seg = it->second;
          if (!writes) {
            if (seg.readers.empty() || seg.readers.back() != j) seg.readers.push_back(uint32_t(j));
          } else {
            seg.writer = int64_t(j);
            seg.readers.clear();
          }
        }
      }
    }
    for (const planning::Access& a : acc[j]) {
      auto& v = by_buffer[a.buffer];
      if (v.empty() || v.back() != j) v.push_back(j);
      if (a.begin == a.end) {
        auto& e = empty_by_buffer[a.buffer];
        if (e.empty() || e.back() != j) e.push_back(j);
      }
    }
  }
}

}  // namespace

void verify(const Program& p) {
  check_layout(p);
  check_dispatches(p);
  auto acc = planning::accesses(p);
  check_memory(p, acc);
  check_hazards(p, acc);
}

}  // namespace meganeura
