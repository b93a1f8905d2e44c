#include <algorithm>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <sstream>
#include <stdexcept>

#include "graph/op_table.h"
#include "meganeura/program.h"
#include "plan/plan_internal.h"

namespace meganeura {

std::string_view hazard_name(HazardKind k) {
  switch (k) {
    case HazardKind::raw: return "raw";
    case HazardKind::war: return "war";
    case HazardKind::waw: return "waw";
  }
  return "?";
}

std::string_view role_name(Role r) {
  switch (r) {
    case Role::input: return "input";
    case Role::parameter: return "parameter";
    case Role::state: return "state";
    case Role::constant: return "constant";
    case Role::output: return "output";
    case Role::temp: return "temp";
  }
  return "?";
}

namespace {

uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

// Union-find over tensors that share one piece of memory (views and in-place outputs).
struct Groups {
  std::vector<uint32_t> parent;
  uint32_t find(uint32_t i) {
    while (parent[i] != i) i = parent[i] = parent[parent[i]];
    return i;
  }
};

struct Interval {
  uint32_t group;
  uint64_t size;        // aligned slot
  int64_t first, last;  // dispatch indices, inclusive
  uint64_t bytes = 0;   // largest tensor of the group, unaligned
  uint32_t buffer = 0;
  uint64_t offset = 0;
};

// Best-fit: each block (largest first) takes the smallest gap, among blocks already placed in
// a buffer whose lifetimes overlap its own, that holds it; the first buffer with room wins and
// a block that fits in none opens a new buffer. No block crosses `limit`.
std::vector<uint64_t> place(std::vector<Interval>& blocks, uint64_t limit) {
  std::vector<size_t> order(blocks.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (blocks[a].size != blocks[b].size) return blocks[a].size > blocks[b].size;
    return blocks[a].first < blocks[b].first;
  });
  // Per buffer, the blocks placed in it, kept in order of (offset, end): the ranges that are
  // busy during a block's lifetime come out sorted, with no sort per block.
  std::vector<std::vector<size_t>> placed;
  auto by_range = [&](size_t x, size_t y) {
    const Interval &a = blocks[x], &c = blocks[y];
    return a.offset != c.offset ? a.offset < c.offset : a.offset + a.size < c.offset + c.size;
  };
  std::vector<uint64_t> sizes;
  std::vector<std::pair<uint64_t, uint64_t>> busy;
  for (size_t bi : order) {
    Interval& b = blocks[bi];
    bool done = false;
    for (size_t buf = 0; buf < placed.size() && !done; ++buf) {
      busy.clear();
      for (size_t pi : placed[buf]) {
        const Interval& p = blocks[pi];
        if (p.first <= b.last && b.first <= p.last) busy.emplace_back(p.offset, p.offset + p.size);
      }
      uint64_t best = UINT64_MAX, best_gap = UINT64_MAX, cursor = 0;
      for (auto [lo, hi] : busy) {
        if (lo > cursor && lo - cursor >= b.size && lo - cursor < best_gap) {
          best = cursor;
          best_gap = lo - cursor;
        }
        cursor = std::max(cursor, hi);
      }
      uint64_t at = best != UINT64_MAX ? best : cursor;
      if (at + b.bytes > limit) continue;
      b.buffer = uint32_t(buf);
      b.offset = at;
      placed[buf].insert(std::upper_bound(placed[buf].begin(), placed[buf].end(), bi, by_range), bi);
      sizes[buf] = std::max(sizes[buf], std::min(limit, at + b.size));
      done = true;
    }
    if (done) continue;
    b.buffer = uint32_t(placed.size());
    b.offset = 0;
    placed.push_back({bi});
    sizes.push_back(std::min(limit, b.size));
  }
  return sizes;
}

std::string limit_error(const std::string& what, uint64_t bytes, const DeviceLimits& l) {
  const bool binding = l.max_binding_bytes <= l.max_allocation_bytes;
  return "[plan] " + what + " is " + std::to_string(bytes) + " bytes, above the device's " +
         (binding ? "binding limit (max storage buffer range) of " : "allocation limit of ") +
         std::to_string(l.buffer_limit()) + " bytes; no kernel splits it";
}

}  // namespace

Program plan(const Graph& g, const PlanOptions& opt) {
  if (opt.float_dtype != DType::f32 && opt.float_dtype != DType::f64) {
    throw std::invalid_argument("[plan] float_dtype must be f32 or f64");
  }
  const DeviceLimits& lim = opt.limits;
  if (lim.offset_alignment == 0 || (lim.offset_alignment & (lim.offset_alignment - 1)) || lim.buffer_limit() == 0) {
    throw std::invalid_argument(
        "[plan] device limits need a power-of-two offset alignment and a non-zero buffer limit");
  }
  if (g.outputs().empty() && g.assignments().empty()) {
    throw std::invalid_argument("[plan] graph has no outputs and no assignments: nothing to run");
  }
  const size_t n_nodes = g.size();
  Program p;
  p.float_dtype = opt.float_dtype;
  p.limits = lim;
  p.graph_hash = g.hash();

  // Liveness: what the outputs and assignments need.
  std::vector<char> live(n_nodes, 0);
  for (auto& [name, id] : g.outputs()) live[id] = 1;
  for (auto& [dst, src] : g.assignments()) live[dst] = live[src] = 1;
  for (size_t i = n_nodes; i-- > 0;) {
    if (live[i]) {
      for (NodeId k : g.node(NodeId(i)).inputs) live[k] = 1;
    }
  }

  auto stored_of = [&](DType t) { return t == DType::f32 ? opt.float_dtype : t; };
  std::map<NodeId, std::string> output_name;
  for (auto& [name, id] : g.outputs()) {
    if (output_name.count(id) || op_info(g.node(id).op).family == OpFamily::leaf) {
      // A node named twice, or a leaf named as output, is copied into its own buffer.
      continue;
    }
    output_name[id] = name;
  }

  std::vector<int64_t> tensor_of(n_nodes, -1);
  auto new_tensor = [&](NodeId id, Role role, std::string binding) {
    const Node& n = g.node(id);
    ProgramTensor t;
    t.type = n.type;
    t.stored = stored_of(n.type.dtype);
    t.role = role;
    t.binding = std::move(binding);
    t.bytes = uint64_t(n.type.numel()) * dtype_size(t.stored);
    t.node = id;
    p.tensors.push_back(t);
    return uint32_t(p.tensors.size() - 1);
  };
  std::map<std::string, size_t> external_index;
  auto add_external = [&](const std::string& name, Role role, const Node& n) {
    if (!external_index.emplace(name, p.externals.size()).second)
      throw std::invalid_argument("[plan] two buffers named '" + name + "'");
    p.externals.push_back(ExternalBuffer{name, role, n.type, stored_of(n.type.dtype), n.init, n.const_data});
  };

  std::vector<uint32_t> view_base;  // per tensor: the tensor whose memory it uses
  int constants = 0;
  char hash_hex[17];
  std::snprintf(hash_hex, sizeof(hash_hex), "%016llx", static_cast<unsigned long long>(p.graph_hash));
  const std::string const_prefix = "const." + std::string(hash_hex) + ".";
  for (NodeId id = 0; id < n_nodes; ++id) {
    const Node& n = g.node(id);
    if (!live[id] || op_info(n.op).family != OpFamily::leaf) continue;
    Role role = n.op == Op::input       ? Role::input
                : n.op == Op::parameter ? Role::parameter
                : n.op == Op::state     ? Role::state
                                        : Role::constant;
    // Constants are named by their graph: programs of one session share buffers by name.
    std::string name = role == Role::constant ? const_prefix + std::to_string(constants++) : n.name;
    add_external(name, role, n);
    tensor_of[id] = new_tensor(id, role, name);
    view_base.push_back(uint32_t(tensor_of[id]));
  }
  // Secondary outputs of multi-output fused programs: index -> selecting node, per producer.
  std::map<NodeId, std::map<uint32_t, NodeId>> selectors;
  for (NodeId id = 0; id < n_nodes; ++id) {
    const Node& n = g.node(id);
    if (!live[id] || n.op != Op::fused_output) continue;
    const Node& src = g.node(n.inputs[0]);
    const auto* axis = std::get_if<AxisAttrs>(&n.attrs);
    const auto* code = std::get_if<FusedAttrs>(&src.attrs);
    const int64_t k = axis ? axis->axis : -1;
    if (src.op != Op::fused_elementwise || !code || k < 1 || size_t(k) >= fused_outputs(code->code) ||
        !selectors[n.inputs[0]].emplace(uint32_t(k), id).second) {
      throw std::invalid_argument("[plan] node " + std::to_string(id) + " selects output " + std::to_string(k) +
                                  " of node " + std::to_string(n.inputs[0]) +
                                  ", which has no such output or another selector for it");
    }
  }
  for (NodeId id : planning::dispatch_order(g, live, opt.group_barriers)) {
    const Node& n = g.node(id);
    if (n.op == Op::fused_output) continue;  // written by its producer's dispatch
    auto out = output_name.find(id);
    bool is_output = out != output_name.end();
    if (n.op == Op::reshape && !is_output) {  // a view: same bytes, new shape
      uint32_t src = uint32_t(tensor_of[n.inputs[0]]);
      uint32_t t = new_tensor(id, p.tensors[src].role, p.tensors[src].binding);
      p.tensors[t].view_of = int32_t(view_base[src]);
      view_base.push_back(view_base[src]);
      tensor_of[id] = t;
      p.memory.views++;
      continue;
    }
    uint32_t t = is_output ? new_tensor(id, Role::output, out->second) : new_tensor(id, Role::temp, "");
    if (is_output) add_external(out->second, Role::output, n);
    view_base.push_back(t);
    tensor_of[id] = t;
    Dispatch d{n.op, n.attrs, {}, {t}, 0, 0, {}, false};
    if (n.op == Op::fused_elementwise) {
      // one write per further output, in index order; an output nothing selects still needs memory
      const size_t n_out = fused_outputs(std::get<FusedAttrs>(n.attrs).code);
      auto sel = selectors.find(id);
      for (uint32_t k = 1; k < n_out; ++k) {
        NodeId s = id;
        if (sel != selectors.end() && sel->second.count(k)) s = sel->second.at(k);
        auto sout = s == id ? output_name.end() : output_name.find(s);
        const bool named = sout != output_name.end();
        uint32_t ts = new_tensor(s, named ? Role::output : Role::temp, named ? sout->second : "");
        if (named) add_external(sout->second, Role::output, g.node(s));
        view_base.push_back(ts);
        if (s != id) tensor_of[s] = ts;
        d.writes.push_back(ts);
      }
    }
    for (NodeId k : n.inputs) d.reads.push_back(uint32_t(tensor_of[k]));
    OpCost c = op_cost(g, n);
    d.flops = c.flops;
    d.bytes = c.bytes;
    p.dispatches.push_back(std::move(d));
  }

  // Outputs that are leaves or named twice get a copy into their own buffer.
  for (auto& [name, id] : g.outputs()) {
    if (output_name.count(id) && output_name[id] == name) continue;
    const Node& n = g.node(id);
    uint32_t t = new_tensor(id, Role::output, name);
    add_external(name, Role::output, n);
    view_base.push_back(t);
    p.dispatches.push_back(
        Dispatch{Op::copy, NoAttrs{}, {uint32_t(tensor_of[id])}, {t}, 0, 2.0 * double(p.tensors[t].bytes), {}, false});
  }

  // Last dispatch reading each memory base (views count as their base).
  const size_t nt = p.tensors.size();
  std::vector<int64_t> first_def(nt, -1), last_read(nt, -1);
  for (size_t di = 0; di < p.dispatches.size(); ++di) {
    const Dispatch& d = p.dispatches[di];
    for (uint32_t r : d.reads) last_read[view_base[r]] = int64_t(di);
    for (uint32_t w : d.writes) {
      if (first_def[view_base[w]] < 0) first_def[view_base[w]] = int64_t(di);
    }
  }

  // State updates: write the new value straight into the state when nothing reads the old
  // value afterwards; otherwise copy at the end of the step.
  std::vector<std::pair<uint32_t, uint32_t>> end_copies;  // (value, state)
  for (auto& [dst, src] : g.assignments()) {
    uint32_t st = uint32_t(tensor_of[dst]), val = uint32_t(tensor_of[src]);
    uint32_t vb = view_base[val];
    bool direct = p.tensors[vb].role == Role::temp && vb == val && first_def[vb] >= 0;
    if (direct) {
      int64_t t = first_def[vb];
      const Dispatch& d = p.dispatches[size_t(t)];
      int inplace = op_info(d.op).inplace_input;
      // A multi-output program writes its outputs after reading every input of an element: any
      // same-shaped input may share an output's memory.
      const bool any_slot = d.writes.size() > 1;
      for (size_t di = size_t(t); di < p.dispatches.size() && direct; ++di) {
        const Dispatch& e = p.dispatches[di];
        for (size_t k = 0; k < e.reads.size(); ++k) {
          if (view_base[e.reads[k]] != view_base[st]) continue;
          bool same_slot = di == size_t(t) && (int(k) == inplace || any_slot) &&
                           p.tensors[e.reads[k]].type.shape == p.tensors[val].type.shape;
          if (!same_slot) direct = false;
        }
      }
      // The value must not be read after another dispatch may have changed the state, and
      // no other assignment may read this state's old value (its copy runs at the end).
      for (auto& [dst2, src2] : g.assignments()) {
        if (dst2 != dst && src2 == src) direct = false;
        if (dst2 != dst && view_base[uint32_t(tensor_of[src2])] == view_base[st]) direct = false;
      }
    }
    if (direct) {
      ProgramTensor& v = p.tensors[val];
      v.role = Role::state;
      v.binding = p.tensors[st].binding;
      continue;
    }
    end_copies.emplace_back(val, st);
  }
  // The end-of-step copies act as one simultaneous assignment: a source that another copy
  // overwrites (a state read by another assignment) is first saved in a temporary.
  auto copy_dispatch = [&](uint32_t from, uint32_t to) {
    p.dispatches.push_back(
        Dispatch{Op::copy, NoAttrs{}, {from}, {to}, 0, 2.0 * double(p.tensors[to].bytes), {}, false});
    last_read[view_base[from]] = int64_t(p.dispatches.size() - 1);
    if (first_def[view_base[to]] < 0) first_def[view_base[to]] = int64_t(p.dispatches.size() - 1);
  };
  for (auto& [val, st] : end_copies) {
    bool overwritten = false;
    for (auto& [val2, st2] : end_copies)
      overwritten |= p.tensors[view_base[val]].binding == p.tensors[st2].binding &&
                     p.tensors[view_base[val]].external() && st2 != st;
    if (!overwritten) continue;
    uint32_t saved = new_tensor(p.tensors[val].node, Role::temp, "");
    view_base.push_back(saved);
    first_def.push_back(-1);
    last_read.push_back(-1);
    copy_dispatch(val, saved);
    val = saved;
  }
  for (auto& [val, st] : end_copies) {
    uint32_t t = new_tensor(p.tensors[st].node, p.tensors[st].role, p.tensors[st].binding);
    view_base.push_back(t);
    first_def.push_back(-1);
    last_read.push_back(-1);
    copy_dispatch(val, t);
  }
  // Views of buffers that became external follow their base.
  for (size_t i = 0; i < p.tensors.size(); ++i) {
    ProgramTensor& base = p.tensors[view_base[i]];
    if (view_base[i] != i) {
      p.tensors[i].role = base.role;
      p.tensors[i].binding = base.binding;
    }
  }

  // In-place: an elementwise output takes over its input's memory when that input dies here.
  Groups groups{std::vector<uint32_t>(p.tensors.size())};
  std::iota(groups.parent.begin(), groups.parent.end(), 0);
  std::vector<int64_t> group_last(p.tensors.size(), -1);
  for (size_t i = 0; i < p.tensors.size(); ++i) group_last[i] = last_read[view_base[i]];
  for (size_t di = 0; di < p.dispatches.size() && opt.inplace; ++di) {
    const Dispatch& d = p.dispatches[di];
    int k = op_info(d.op).inplace_input;
    if (k < 0 || size_t(k) >= d.reads.size() || d.writes.size() != 1 || p.tensors[d.write()].role != Role::temp)
      continue;
    uint32_t in = d.reads[size_t(k)], in_base = view_base[in];
    if (p.tensors[in_base].role != Role::temp || p.tensors[in].bytes != p.tensors[d.write()].bytes ||
        p.tensors[in].type.shape != p.tensors[d.write()].type.shape) {
      continue;
    }
    uint32_t gi = groups.find(in_base);
    if (group_last[gi] != int64_t(di)) continue;
    // Another read of the same memory is safe only at the same index (same shape, no broadcast).
    bool safe = true;
    for (uint32_t r : d.reads) {
      if (groups.find(view_base[r]) == gi && p.tensors[r].type.shape != p.tensors[d.write()].type.shape) safe = false;
    }
    if (!safe) continue;
    uint32_t go = groups.find(d.write());
    groups.parent[go] = gi;
    group_last[gi] = std::max(group_last[gi], group_last[go]);
    p.memory.inplace_reuses++;
  }

  // Barrier groups from the data dependencies alone: memory is reused only across a barrier,
  // so reuse adds no barrier of its own (a block lives to the end of its last reader's group).
  std::vector<int64_t> group_end(p.dispatches.size(), 0);
  {
    std::vector<int64_t> writer(p.tensors.size(), -1);
    std::map<std::string, int64_t> ext_writer;
    size_t start = 0;
    std::vector<size_t> starts;
    for (size_t di = 0; di < p.dispatches.size(); ++di) {
      const Dispatch& d = p.dispatches[di];
      bool barrier = false;
      auto producer = [&](uint32_t t) {
        const ProgramTensor& x = p.tensors[t];
        if (x.external()) {
          auto it = ext_writer.find(x.binding);
          return it == ext_writer.end() ? int64_t(-1) : it->second;
        }
        return writer[groups.find(view_base[t])];
      };
      for (uint32_t r : d.reads) barrier |= producer(r) >= int64_t(start);
      for (uint32_t w : d.writes) barrier |= producer(w) >= int64_t(start);
      if (barrier) start = di;
      starts.push_back(start);
      for (uint32_t w : d.writes) {
        if (p.tensors[w].external())
          ext_writer[p.tensors[w].binding] = int64_t(di);
        else
          writer[groups.find(view_base[w])] = int64_t(di);
      }
    }
    for (size_t di = p.dispatches.size(); di-- > 0;) {
      group_end[di] = di + 1 < p.dispatches.size() && starts[di + 1] == starts[di] ? group_end[di + 1] : int64_t(di);
    }
  }

  // Intervals per group of temporaries.
  std::map<uint32_t, Interval> by_group;
  for (size_t i = 0; i < p.tensors.size(); ++i) {
    if (view_base[i] != i || p.tensors[i].role != Role::temp) continue;
    uint32_t gid = groups.find(uint32_t(i));
    uint64_t size = align_up(p.tensors[i].bytes, lim.offset_alignment);
    if (p.tensors[i].bytes > lim.buffer_limit()) {
      throw std::invalid_argument(limit_error("tensor " + planning::describe_tensor(p, uint32_t(i)) +
                                                  ", the output of " +
                                                  std::string(op_name(g.node(p.tensors[i].node).op)) + ",",
                                              p.tensors[i].bytes, lim));
    }
    p.memory.logical_bytes += size;
    auto [it, fresh] = by_group.try_emplace(gid, Interval{gid, size, first_def[i], last_read[i], p.tensors[i].bytes});
    Interval& iv = it->second;
    if (!fresh) {
      iv.size = std::max(iv.size, size);
      iv.bytes = std::max(iv.bytes, p.tensors[i].bytes);
      iv.first = std::min(iv.first, first_def[i]);
      iv.last = std::max(iv.last, last_read[i]);
    }
  }
  std::vector<Interval> blocks;
  std::vector<uint64_t> live_bytes(p.dispatches.size() + 1, 0);
  for (auto& [gid, iv] : by_group) {
    iv.last = std::max(iv.last, iv.first);  // written but never read: still needs its bytes
    for (int64_t t = std::max<int64_t>(iv.first, 0); t <= iv.last; ++t) live_bytes[size_t(t)] += iv.size;
    if (iv.last >= 0) iv.last = std::max(iv.last, group_end[size_t(iv.last)]);
    blocks.push_back(iv);
  }
  p.arena_buffers = place(blocks, lim.buffer_limit());
  p.arena_bytes = std::accumulate(p.arena_buffers.begin(), p.arena_buffers.end(), uint64_t(0));
  p.memory.planned_bytes = p.arena_bytes;
  std::map<uint32_t, const Interval*> block_of;
  for (const Interval& b : blocks) block_of[b.group] = &b;
  p.memory.lower_bound_bytes = *std::max_element(live_bytes.begin(), live_bytes.end());
  for (size_t i = 0; i < p.tensors.size(); ++i) {
    ProgramTensor& t = p.tensors[i];
    if (t.role != Role::temp) continue;
    const Interval& b = *block_of.at(groups.find(view_base[i]));
    t.buffer = b.buffer;
    t.offset = b.offset;
  }
  for (const ExternalBuffer& e : p.externals) {
    uint64_t bytes = uint64_t(e.type.numel()) * dtype_size(e.stored);
    if (bytes > lim.buffer_limit()) throw std::invalid_argument(limit_error("buffer '" + e.name + "'", bytes, lim));
    p.memory.external_bytes += bytes;
  }
  planning::compute_hazards(p);
  if (opt.verify) verify(p);
  return p;
}

}  // namespace meganeura
