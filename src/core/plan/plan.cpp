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

size_t half_operand_inputs(Op op) {
  if (op == Op::matmul || op == Op::matmul_epilogue || op == Op::conv2d || op == Op::conv2d_backward_input ||
      op == Op::conv2d_backward_weight)
    return 2;                         // A and B; x and w, dY and w, x and dY
  if (op == Op::embedding) return 1;  // the table
  return op == Op::attention_fused || op == Op::attention_fused_backward ? 3 : 0;  // q, k, v
}

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

void check_options(const Graph& g, const PlanOptions& opt) {
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
}

// The planner's passes over one graph, in order (plan() below): liveness, tensors and
// dispatches, state updates, in-place sharing, placement in arena buffers within the device's
// limits. Each reads what the ones before it left in the members.
class Planner {
 public:
  Planner(const Graph& g, const PlanOptions& opt) : g_(g), opt_(opt), tensor_of_(g.size(), -1) {
    p_.float_dtype = opt.float_dtype;
    p_.limits = opt.limits;
    p_.graph_hash = g.hash();
  }

  Program run() {
    mark_live();
    name_outputs();
    add_leaves();
    collect_selectors();
    add_dispatches();
    add_output_copies();
    store_half_operands();
    store_weights();
    find_lifetimes();
    assign_states();
    views_follow_bases();
    share_in_place();
    place_temporaries();
    check_externals();
    planning::compute_hazards(p_);
    if (opt_.verify) verify(p_);
    return std::move(p_);
  }

 private:
  // ---- Liveness: what the outputs and assignments need. -----
  void mark_live() {
    live_.assign(g_.size(), 0);
    for (auto& [name, id] : g_.outputs()) live_[id] = 1;
    for (auto& [dst, src] : g_.assignments()) live_[dst] = live_[src] = 1;
    for (size_t i = g_.size(); i-- > 0;) {
      if (live_[i])
        for (NodeId k : g_.node(NodeId(i)).inputs) live_[k] = 1;
    }
  }

  // A node named twice, or a leaf named as output, is copied into its own buffer instead.
  void name_outputs() {
    for (auto& [name, id] : g_.outputs()) {
      if (output_name_.count(id) || op_info(g_.node(id).op).family == OpFamily::leaf) continue;
      output_name_[id] = name;
    }
  }

  DType stored_of(DType t) const { return t == DType::f32 ? opt_.float_dtype : t; }

  uint32_t new_tensor(NodeId id, Role role, std::string binding) {
    const Node& n = g_.node(id);
    ProgramTensor t;
    t.type = n.type;
    t.stored = stored_of(n.type.dtype);
    t.role = role;
    t.binding = std::move(binding);
    t.bytes = storage_bytes(t.stored, n.type.numel());
    t.node = id;
    p_.tensors.push_back(t);
    return uint32_t(p_.tensors.size() - 1);
  }

  // A tensor with memory of its own (not a view).
  uint32_t new_base(NodeId id, Role role, std::string binding) {
    const uint32_t t = new_tensor(id, role, std::move(binding));
    view_base_.push_back(t);
    return t;
  }

  void add_external(const std::string& name, Role role, const Node& n) {
    if (!external_index_.emplace(name, p_.externals.size()).second)
      throw std::invalid_argument("[plan] two buffers named '" + name + "'");
    p_.externals.push_back(ExternalBuffer{name, role, n.type, stored_of(n.type.dtype), n.init, n.const_data});
  }

  // ---- Tensors and dispatches. -----
  // Live leaves become external buffers; constants are named by their graph, so programs of
  // one session share buffers by name.
  void add_leaves() {
    char hash_hex[17];
    std::snprintf(hash_hex, sizeof(hash_hex), "%016llx", static_cast<unsigned long long>(p_.graph_hash));
    const std::string const_prefix = "const." + std::string(hash_hex) + ".";
    int constants = 0;
    for (NodeId id = 0; id < g_.size(); ++id) {
      const Node& n = g_.node(id);
      if (!live_[id] || op_info(n.op).family != OpFamily::leaf) continue;
      const Role role = n.op == Op::input       ? Role::input
                        : n.op == Op::parameter ? Role::parameter
                        : n.op == Op::state     ? Role::state
                                                : Role::constant;
      const std::string name = role == Role::constant ? const_prefix + std::to_string(constants++) : n.name;
      add_external(name, role, n);
      tensor_of_[id] = new_base(id, role, name);
    }
  }

  // Secondary outputs of multi-output fused programs: index -> selecting node, per producer.
  void collect_selectors() {
    for (NodeId id = 0; id < g_.size(); ++id) {
      const Node& n = g_.node(id);
      if (!live_[id] || n.op != Op::fused_output) continue;
      const Node& src = g_.node(n.inputs[0]);
      const auto* axis = std::get_if<AxisAttrs>(&n.attrs);
      const auto* code = std::get_if<FusedAttrs>(&src.attrs);
      const int64_t k = axis ? axis->axis : -1;
      if (src.op != Op::fused_elementwise || !code || k < 1 || size_t(k) >= fused_outputs(code->code) ||
          !selectors_[n.inputs[0]].emplace(uint32_t(k), id).second) {
        throw std::invalid_argument("[plan] node " + std::to_string(id) + " selects output " + std::to_string(k) +
                                    " of node " + std::to_string(n.inputs[0]) +
                                    ", which has no such output or another selector for it");
      }
    }
  }

  void add_dispatches() {
    for (NodeId id : planning::dispatch_order(g_, live_, opt_.group_barriers)) {
      const Node& n = g_.node(id);
      if (n.op == Op::fused_output) continue;  // written by its producer's dispatch
      auto out = output_name_.find(id);
      const bool is_output = out != output_name_.end();
      if (n.op == Op::reshape && !is_output) {
        add_view(id);
        continue;
      }
      const uint32_t t = new_base(id, is_output ? Role::output : Role::temp, is_output ? out->second : "");
      if (is_output) add_external(out->second, Role::output, n);
      tensor_of_[id] = t;
      Dispatch d{n.op, n.attrs, {}, {t}, 0, 0, {}, false};
      if (n.op == Op::fused_elementwise) add_secondary_writes(id, d);
      for (NodeId k : n.inputs) d.reads.push_back(uint32_t(tensor_of_[k]));
      const OpCost c = op_cost(g_, n);
      d.flops = c.flops;
      d.bytes = c.bytes;
      p_.dispatches.push_back(std::move(d));
    }
  }

  // A reshape: the same bytes under a new shape.
  void add_view(NodeId id) {
    const uint32_t src = uint32_t(tensor_of_[g_.node(id).inputs[0]]);
    const uint32_t t = new_tensor(id, p_.tensors[src].role, p_.tensors[src].binding);
    p_.tensors[t].view_of = int32_t(view_base_[src]);
    view_base_.push_back(view_base_[src]);
    tensor_of_[id] = t;
    p_.memory.views++;
  }

  // One write per further output of a multi-output program, in index order; an output
  // nothing selects still needs memory.
  void add_secondary_writes(NodeId id, Dispatch& d) {
    const size_t n_out = fused_outputs(std::get<FusedAttrs>(g_.node(id).attrs).code);
    auto sel = selectors_.find(id);
    for (uint32_t k = 1; k < n_out; ++k) {
      NodeId s = id;
      if (sel != selectors_.end() && sel->second.count(k)) s = sel->second.at(k);
      auto sout = s == id ? output_name_.end() : output_name_.find(s);
      const bool named = sout != output_name_.end();
      const uint32_t ts = new_base(s, named ? Role::output : Role::temp, named ? sout->second : "");
      if (named) add_external(sout->second, Role::output, g_.node(s));
      if (s != id) tensor_of_[s] = ts;
      d.writes.push_back(ts);
    }
  }

  // Outputs that are leaves or named twice get a copy into their own buffer.
  void add_output_copies() {
    for (auto& [name, id] : g_.outputs()) {
      if (output_name_.count(id) && output_name_[id] == name) continue;
      const uint32_t t = new_base(id, Role::output, name);
      add_external(name, Role::output, g_.node(id));
      p_.dispatches.push_back(Dispatch{
          Op::copy, NoAttrs{}, {uint32_t(tensor_of_[id])}, {t}, 0, 2.0 * double(p_.tensors[t].bytes), {}, false});
    }
  }

  // ---- 16-bit operands. -----
  // A rounding's output (round_f16, round_bf16, a fused program ending in one) holds values
  // exact in 16 bits: stored in them where every dispatch that reads it reads 16-bit operands
  // at that place, it halves the bytes its readers move and its memory, and changes no value.
  // The dispatches' byte counts follow the storage.

  // The rounding that makes a dispatch's one output (round_f16, round_bf16, or a fused program
  // or GEMM epilogue ending in one); Op::copy for none.
  Op rounding_op(const Dispatch& d) const {
    if (d.writes.size() != 1) return Op::copy;
    if (d.op == Op::round_f16 || d.op == Op::round_bf16) return d.op;
    const auto* f = std::get_if<FusedAttrs>(&d.attrs);
    if ((d.op != Op::fused_elementwise && d.op != Op::matmul_epilogue) || !f || f->code.empty() ||
        fused_outputs(f->code) != 1)
      return Op::copy;
    // A GEMM's epilogue stores pairs of columns to a word: rows of an even length only.
    const Shape& y = p_.tensors[d.write()].type.shape;
    if (d.op == Op::matmul_epilogue && (y.empty() || y.back() % 2)) return Op::copy;
    const FusedInstr& last = f->code.back();
    const bool rounds = last.kind == FusedInstr::unary && (last.op == Op::round_f16 || last.op == Op::round_bf16);
    return rounds ? last.op : Op::copy;
  }
  // Read through reshapes too (views, stored alike), as long as every reader of the tensor and
  // of its views reads 16-bit operands there and no view is itself an external buffer.
  void store_half_operands() {
    if (!opt_.half_operands || opt_.float_dtype != DType::f32) return;
    std::vector<uint8_t> refused(p_.tensors.size(), 0);
    std::vector<std::vector<size_t>> views(p_.tensors.size());  // a base's tensors: itself, its views
    const std::vector<std::vector<size_t>> readers = this->readers();
    for (size_t t = 0; t < p_.tensors.size(); ++t) {
      views[view_base_[t]].push_back(t);
      if (view_base_[t] != t && p_.tensors[t].role != Role::temp) refused[view_base_[t]] = 1;
    }
    for (const Dispatch& d : p_.dispatches) {
      for (size_t i = 0; i < d.reads.size(); ++i) refused[view_base_[d.reads[i]]] |= i >= half_operand_inputs(d.op);
    }
    for (Dispatch& d : p_.dispatches) {
      const Op rounding = rounding_op(d);
      if (rounding == Op::copy) continue;
      const uint32_t base = d.write();
      if (p_.tensors[base].role != Role::temp || view_base_[base] != base || refused[base]) continue;
      for (size_t v : views[base]) {
        ProgramTensor& t = p_.tensors[v];
        const uint64_t f32_bytes = t.bytes;
        t.stored = rounding == Op::round_f16 ? DType::f16 : DType::bf16;
        t.bytes = storage_bytes(t.stored, t.type.numel());
        const double saved = double(f32_bytes - t.bytes);
        if (v == base) d.bytes -= saved;
        for (size_t r : readers[v]) p_.dispatches[r].bytes -= saved;
      }
    }
  }

  // The dispatches reading each tensor (once each).
  std::vector<std::vector<size_t>> readers() const {
    std::vector<std::vector<size_t>> out(p_.tensors.size());
    for (size_t di = 0; di < p_.dispatches.size(); ++di) {
      for (uint32_t r : p_.dispatches[di].reads) {
        if (out[r].empty() || out[r].back() != di) out[r].push_back(di);
      }
    }
    return out;
  }

  // Parameters held in 16 bits (PlanOptions::weights_dtype): those that only 16-bit operands
  // read, directly or through reshapes (views, stored alike), and nothing writes.
  void store_weights() {
    const DType f = opt_.weights_dtype;
    if (f == DType::f32) return;
    if (f != DType::f16 && f != DType::bf16) {
      throw std::invalid_argument("[plan] weights_dtype must be f32, f16 or bf16, got " + std::string(dtype_name(f)));
    }
    if (opt_.float_dtype != DType::f32) throw std::invalid_argument("[plan] weights in 16 bits need an f32 plan");
    std::vector<uint8_t> refused(p_.tensors.size(), 0), read(p_.tensors.size(), 0);
    const std::vector<std::vector<size_t>> readers = this->readers();
    for (const Dispatch& d : p_.dispatches) {
      for (uint32_t w : d.writes) refused[view_base_[w]] = 1;
      for (size_t i = 0; i < d.reads.size(); ++i) {
        refused[view_base_[d.reads[i]]] |= i >= half_operand_inputs(d.op);
        read[view_base_[d.reads[i]]] = 1;
      }
    }
    for (size_t t = 0; t < p_.tensors.size(); ++t) {
      const size_t base = view_base_[t];
      const ProgramTensor& b = p_.tensors[base];
      if (b.role != Role::parameter || refused[base] || !read[base] || b.type.dtype != DType::f32) continue;
      ProgramTensor& x = p_.tensors[t];
      const double saved = double(x.bytes - storage_bytes(f, x.type.numel()));
      x.stored = f;
      x.bytes = storage_bytes(f, x.type.numel());
      for (size_t r : readers[t]) p_.dispatches[r].bytes -= saved;
      if (base == t) p_.externals[external_index_.at(x.binding)].stored = f;
    }
  }

  // First write and last read of each memory base (views count as their base).
  void find_lifetimes() {
    first_def_.assign(p_.tensors.size(), -1);
    last_read_.assign(p_.tensors.size(), -1);
    for (size_t di = 0; di < p_.dispatches.size(); ++di) {
      const Dispatch& d = p_.dispatches[di];
      for (uint32_t r : d.reads) last_read_[view_base_[r]] = int64_t(di);
      for (uint32_t w : d.writes) {
        if (first_def_[view_base_[w]] < 0) first_def_[view_base_[w]] = int64_t(di);
      }
    }
  }

  // ---- State updates. -----
  // The new value is written straight into the state when nothing reads the old value
  // afterwards; otherwise it is copied at the end of the step.
  void assign_states() {
    std::vector<std::pair<uint32_t, uint32_t>> end_copies;  // (value, state)
    for (auto& [dst, src] : g_.assignments()) {
      const uint32_t st = uint32_t(tensor_of_[dst]), val = uint32_t(tensor_of_[src]);
      if (writes_state_directly(dst, src)) {
        ProgramTensor& v = p_.tensors[val];
        v.role = Role::state;
        v.binding = p_.tensors[st].binding;
      } else {
        end_copies.emplace_back(val, st);
      }
    }
    add_end_copies(end_copies);
  }

  bool writes_state_directly(NodeId dst, NodeId src) const {
    const uint32_t st = uint32_t(tensor_of_[dst]), val = uint32_t(tensor_of_[src]);
    const uint32_t vb = view_base_[val];
    if (p_.tensors[vb].role != Role::temp || vb != val || first_def_[vb] < 0) return false;
    const size_t t = size_t(first_def_[vb]);
    const Dispatch& d = p_.dispatches[t];
    const int inplace = op_info(d.op).inplace_input;
    // A multi-output program writes its outputs after reading every input of an element: any
    // same-shaped input may share an output's memory.
    const bool any_slot = d.writes.size() > 1;
    for (size_t di = t; di < p_.dispatches.size(); ++di) {
      const Dispatch& e = p_.dispatches[di];
      for (size_t k = 0; k < e.reads.size(); ++k) {
        if (view_base_[e.reads[k]] != view_base_[st]) continue;
        const bool same_slot = di == t && (int(k) == inplace || any_slot) &&
                               p_.tensors[e.reads[k]].type.shape == p_.tensors[val].type.shape;
        if (!same_slot) return false;
      }
    }
    // The value must not be read after another dispatch may have changed the state, and no
    // other assignment may read this state's old value (its copy runs at the end).
    for (auto& [dst2, src2] : g_.assignments()) {
      if (dst2 != dst && src2 == src) return false;
      if (dst2 != dst && view_base_[uint32_t(tensor_of_[src2])] == view_base_[st]) return false;
    }
    return true;
  }

  void copy_dispatch(uint32_t from, uint32_t to) {
    p_.dispatches.push_back(
        Dispatch{Op::copy, NoAttrs{}, {from}, {to}, 0, 2.0 * double(p_.tensors[to].bytes), {}, false});
    last_read_[view_base_[from]] = int64_t(p_.dispatches.size() - 1);
    if (first_def_[view_base_[to]] < 0) first_def_[view_base_[to]] = int64_t(p_.dispatches.size() - 1);
  }

  uint32_t new_copy_target(NodeId id, Role role, std::string binding) {
    const uint32_t t = new_base(id, role, std::move(binding));
    first_def_.push_back(-1);
    last_read_.push_back(-1);
    return t;
  }

  // The end-of-step copies act as one simultaneous assignment: a source that another copy
  // overwrites (a state read by another assignment) is first saved in a temporary.
  void add_end_copies(std::vector<std::pair<uint32_t, uint32_t>>& end_copies) {
    for (auto& [val, st] : end_copies) {
      bool overwritten = false;
      for (auto& [val2, st2] : end_copies)
        overwritten |= p_.tensors[view_base_[val]].binding == p_.tensors[st2].binding &&
                       p_.tensors[view_base_[val]].external() && st2 != st;
      if (!overwritten) continue;
      const uint32_t saved = new_copy_target(p_.tensors[val].node, Role::temp, "");
      copy_dispatch(val, saved);
      val = saved;
    }
    for (auto& [val, st] : end_copies) {
      const ProgramTensor& state = p_.tensors[st];
      copy_dispatch(val, new_copy_target(state.node, state.role, state.binding));
    }
  }

  // Views of buffers that became external follow their base.
  void views_follow_bases() {
    for (size_t i = 0; i < p_.tensors.size(); ++i) {
      if (view_base_[i] == i) continue;
      const ProgramTensor& base = p_.tensors[view_base_[i]];
      p_.tensors[i].role = base.role;
      p_.tensors[i].binding = base.binding;
    }
  }

  // ---- In place: an elementwise output takes over its input's memory when that input dies
  // at the same dispatch. -----
  void share_in_place() {
    groups_.parent.resize(p_.tensors.size());
    std::iota(groups_.parent.begin(), groups_.parent.end(), 0);
    std::vector<int64_t> group_last(p_.tensors.size(), -1);
    for (size_t i = 0; i < p_.tensors.size(); ++i) group_last[i] = last_read_[view_base_[i]];
    for (size_t di = 0; di < p_.dispatches.size() && opt_.inplace; ++di) {
      const Dispatch& d = p_.dispatches[di];
      const int k = op_info(d.op).inplace_input;
      if (k < 0 || size_t(k) >= d.reads.size() || d.writes.size() != 1 || p_.tensors[d.write()].role != Role::temp)
        continue;
      const uint32_t in = d.reads[size_t(k)], in_base = view_base_[in];
      const ProgramTensor& out = p_.tensors[d.write()];
      if (p_.tensors[in_base].role != Role::temp || p_.tensors[in].bytes != out.bytes ||
          p_.tensors[in].type.shape != out.type.shape)
        continue;
      const uint32_t gi = groups_.find(in_base);
      if (group_last[gi] != int64_t(di)) continue;
      // Another read of the same memory is safe only at the same index (same shape, no broadcast).
      bool safe = true;
      for (uint32_t r : d.reads)
        safe &= groups_.find(view_base_[r]) != gi || p_.tensors[r].type.shape == out.type.shape;
      if (!safe) continue;
      const uint32_t go = groups_.find(d.write());
      groups_.parent[go] = gi;
      group_last[gi] = std::max(group_last[gi], group_last[go]);
      p_.memory.inplace_reuses++;
    }
  }

  // ---- Placement. -----
  // Barrier groups from the data dependencies alone: memory is reused only across a barrier,
  // so reuse adds no barrier of its own (a block lives to the end of its last reader's group).
  std::vector<int64_t> barrier_group_ends() {
    std::vector<int64_t> writer(p_.tensors.size(), -1);
    std::map<std::string, int64_t> ext_writer;
    auto producer = [&](uint32_t t) {
      const ProgramTensor& x = p_.tensors[t];
      if (!x.external()) return writer[groups_.find(view_base_[t])];
      auto it = ext_writer.find(x.binding);
      return it == ext_writer.end() ? int64_t(-1) : it->second;
    };
    size_t start = 0;
    std::vector<size_t> starts;
    for (size_t di = 0; di < p_.dispatches.size(); ++di) {
      const Dispatch& d = p_.dispatches[di];
      bool barrier = false;
      for (uint32_t r : d.reads) barrier |= producer(r) >= int64_t(start);
      for (uint32_t w : d.writes) barrier |= producer(w) >= int64_t(start);
      if (barrier) start = di;
      starts.push_back(start);
      for (uint32_t w : d.writes) {
        if (p_.tensors[w].external())
          ext_writer[p_.tensors[w].binding] = int64_t(di);
        else
          writer[groups_.find(view_base_[w])] = int64_t(di);
      }
    }
    std::vector<int64_t> group_end(p_.dispatches.size(), 0);
    for (size_t di = p_.dispatches.size(); di-- > 0;)
      group_end[di] = di + 1 < p_.dispatches.size() && starts[di + 1] == starts[di] ? group_end[di + 1] : int64_t(di);
    return group_end;
  }

  // Lifetime intervals per group of temporaries (in-place chains share one).
  std::map<uint32_t, Interval> temporary_intervals() {
    const DeviceLimits& lim = opt_.limits;
    std::map<uint32_t, Interval> by_group;
    for (size_t i = 0; i < p_.tensors.size(); ++i) {
      const ProgramTensor& t = p_.tensors[i];
      if (view_base_[i] != i || t.role != Role::temp) continue;
      if (t.bytes > lim.buffer_limit()) {
        throw std::invalid_argument(limit_error("tensor " + planning::describe_tensor(p_, uint32_t(i)) +
                                                    ", the output of " + std::string(op_name(g_.node(t.node).op)) + ",",
                                                t.bytes, lim));
      }
      const uint32_t gid = groups_.find(uint32_t(i));
      // Whole 32-bit words at least: kernels write an odd count of 16-bit values as words.
      const uint64_t size = align_up(t.bytes, std::max<uint64_t>(lim.offset_alignment, 4));
      p_.memory.logical_bytes += size;
      auto [it, fresh] = by_group.try_emplace(gid, Interval{gid, size, first_def_[i], last_read_[i], t.bytes});
      Interval& iv = it->second;
      if (!fresh) {
        iv.size = std::max(iv.size, size);
        iv.bytes = std::max(iv.bytes, t.bytes);
        iv.first = std::min(iv.first, first_def_[i]);
        iv.last = std::max(iv.last, last_read_[i]);
      }
    }
    return by_group;
  }

  void place_temporaries() {
    const std::vector<int64_t> group_end = barrier_group_ends();
    std::vector<Interval> blocks;
    std::vector<uint64_t> live_bytes(p_.dispatches.size() + 1, 0);
    for (auto& [gid, iv] : temporary_intervals()) {
      iv.last = std::max(iv.last, iv.first);  // written but never read: still needs its bytes
      for (int64_t t = std::max<int64_t>(iv.first, 0); t <= iv.last; ++t) live_bytes[size_t(t)] += iv.size;
      if (iv.last >= 0) iv.last = std::max(iv.last, group_end[size_t(iv.last)]);
      blocks.push_back(iv);
    }
    p_.arena_buffers = place(blocks, opt_.limits.buffer_limit());
    p_.arena_bytes = std::accumulate(p_.arena_buffers.begin(), p_.arena_buffers.end(), uint64_t(0));
    p_.memory.planned_bytes = p_.arena_bytes;
    p_.memory.lower_bound_bytes = *std::max_element(live_bytes.begin(), live_bytes.end());
    std::map<uint32_t, const Interval*> block_of;
    for (const Interval& b : blocks) block_of[b.group] = &b;
    for (size_t i = 0; i < p_.tensors.size(); ++i) {
      ProgramTensor& t = p_.tensors[i];
      if (t.role != Role::temp) continue;
      const Interval& b = *block_of.at(groups_.find(view_base_[i]));
      t.buffer = b.buffer;
      t.offset = b.offset;
    }
  }

  // Every external buffer must fit one binding of the device.
  void check_externals() {
    const DeviceLimits& lim = opt_.limits;
    for (const ExternalBuffer& e : p_.externals) {
      const uint64_t bytes = storage_bytes(e.stored, e.type.numel());
      if (bytes > lim.buffer_limit()) throw std::invalid_argument(limit_error("buffer '" + e.name + "'", bytes, lim));
      p_.memory.external_bytes += bytes;
    }
  }

  const Graph& g_;
  const PlanOptions& opt_;
  Program p_;
  std::vector<char> live_;
  std::map<NodeId, std::string> output_name_;
  std::map<std::string, size_t> external_index_;
  std::map<NodeId, std::map<uint32_t, NodeId>> selectors_;
  std::vector<int64_t> tensor_of_;              // per node: its tensor, or -1
  std::vector<uint32_t> view_base_;             // per tensor: the tensor whose memory it uses
  std::vector<int64_t> first_def_, last_read_;  // per memory base: dispatch indices, or -1
  Groups groups_;                               // tensors sharing memory in place
};

}  // namespace

Program plan(const Graph& g, const PlanOptions& opt) {
  check_options(g, opt);
  return Planner(g, opt).run();
}

}  // namespace meganeura
