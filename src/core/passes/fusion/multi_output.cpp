// Multi-output programs: hosts assigned to states of one shape (an optimizer's moments and
// parameter) merged into one fused_elementwise that stores each (fused_output selects them).
#include <algorithm>

#include "graph/internal.h"
#include "passes/fusion/fuser.h"

namespace meganeura::passes {

std::map<NodeId, int> Fuser::count_leaf_hosts(const std::map<NodeId, FusedProgram>& progs) {
  std::map<NodeId, int> n;
  for (auto& [id, p] : progs)
    for (NodeId l : p.leaves) n[l]++;
  return n;
}

void Fuser::emit_multi_output(Rewriter& r, NodeId id, const FusedProgram& p, const std::vector<NodeId>& parts,
                              PassStats* stats) {
  FusedAttrs a;
  a.code = p.code;
  const NodeId multi = r.replace(id, Op::fused_elementwise, a, p.leaves);
  for (size_t k = 0; k < parts.size(); ++k) {
    const Node& h = g_.node(parts[k]);
    r.bind(
        parts[k],
        graph_internal::add_node(r.graph(), Op::fused_output, AxisAttrs{int64_t(k + 1)}, {multi}, h.type, h.name).id);
  }
  if (stats) stats->fused++, stats->multi_outputs += uint32_t(parts.size());
}

// A host whose value is assigned to a state absorbs the hosts its program reads that are
// assigned to states of the same shape and read by nothing else (Adam's new moments read by
// the new parameter): one program computes them all and stores each as an output. A merge
// that would break the limits of one program is not made.
// Returns an inlined node to materialise first when that would let a merge fit, else kNone.
NodeId Fuser::merge_outputs(std::map<NodeId, FusedProgram>& progs, std::map<NodeId, int>& leaf_hosts,
                            std::map<NodeId, std::vector<NodeId>>& absorbs, std::vector<char>& absorbed) {
  std::vector<char> named(g_.size(), 0);
  for (auto& [name, id] : g_.outputs()) named[id] = 1;
  auto mergeable = [&](NodeId h, NodeId host) {
    if (!progs.count(h) || reduce_host(h) || absorbed[h] || absorbs.count(h) || named[h] ||
        u_.assigned_to[h] == kNone || leaf_hosts[h] != 1 || g_.node(h).type != g_.node(host).type) {
      return false;
    }
    for (NodeId c : u_.consumers[h]) {
      if (c != host && inl_[c] != 1) return false;
    }
    return true;
  };
  for (auto& [id, p] : progs) {
    if (reduce_host(id) || u_.assigned_to[id] == kNone || absorbed[id]) continue;
    std::vector<NodeId> cands;
    for (NodeId h : p.leaves) {
      if (cands.size() + 1 < kFusedMaxOutputs && mergeable(h, id)) cands.push_back(h);
    }
    if (cands.empty()) continue;
    // all of them, else as many as fit one by one
    std::vector<NodeId> take;
    FusedProgram merged = combine(progs, cands, id);
    if (merged.fits()) {
      take = cands;
    } else {
      if (merged.leaves.size() > kFusedMaxInputs) {
        std::vector<NodeId> programs = cands;
        programs.push_back(id);
        if (NodeId k = shared_inlined(programs); k != kNone) return k;
      }
      for (NodeId h : cands) {
        std::vector<NodeId> trial = take;
        trial.push_back(h);
        FusedProgram m = combine(progs, trial, id);
        if (!m.fits()) continue;
        take = std::move(trial);
        merged = std::move(m);
      }
    }
    if (take.empty()) continue;
    for (NodeId h : take) {
      absorbed[h] = 1;
      progs.erase(h);
    }
    absorbs[id] = take;
    p = std::move(merged);
  }
  return kNone;
}

// The inlined node read by two or more of `programs`' hosts with the largest expansion, if it
// reads two or more leaves itself (materialising it saves inputs of their merged program).
NodeId Fuser::shared_inlined(const std::vector<NodeId>& programs) {
  std::map<NodeId, int> reached;
  for (NodeId root : programs) {
    std::vector<NodeId> stack = g_.node(root).inputs;
    std::vector<NodeId> mine;
    while (!stack.empty()) {
      NodeId k = stack.back();
      stack.pop_back();
      if (inl_[k] != 1 || std::find(mine.begin(), mine.end(), k) != mine.end()) continue;
      mine.push_back(k);
      for (NodeId c : g_.node(k).inputs) stack.push_back(c);
    }
    for (NodeId k : mine) reached[k]++;
  }
  std::map<NodeId, size_t> memo;
  NodeId best = kNone;
  size_t best_size = 0;
  for (auto [k, n] : reached) {
    if (n < 2) continue;
    FusedProgram p;
    expand(g_.node(k), p);
    const size_t s = size(k, memo);
    if (p.leaves.size() >= 2 && p.fits() && s > best_size) best = k, best_size = s;
  }
  return best;
}

// The program storing the values of `parts` as outputs 1, 2, ... and then `host`'s value
// as output 0, where the host's program loads the parts instead of reading them.
FusedProgram Fuser::combine(const std::map<NodeId, FusedProgram>& progs, const std::vector<NodeId>& parts,
                            NodeId host) const {
  FusedProgram m;
  auto leaf_index = [&](NodeId l) {
    auto it = std::find(m.leaves.begin(), m.leaves.end(), l);
    if (it != m.leaves.end()) return uint32_t(it - m.leaves.begin());
    m.leaves.push_back(l);
    return uint32_t(m.leaves.size() - 1);
  };
  auto append = [&](const FusedProgram& p, uint32_t out) {
    for (FusedInstr f : p.code) {
      if (f.kind == FusedInstr::input) {
        NodeId l = p.leaves[f.index];
        auto part = std::find(parts.begin(), parts.end(), l);
        if (part != parts.end()) {
          f.kind = FusedInstr::load;
          f.index = uint32_t(part - parts.begin()) + 1;
        } else {
          f.index = leaf_index(l);
        }
      }
      m.code.push_back(f);
    }
    m.code.push_back(FusedInstr{FusedInstr::store, Op::copy, out, 0, 0});
    m.max_depth = std::max(m.max_depth, p.max_depth);
  };
  for (size_t k = 0; k < parts.size(); ++k) append(progs.at(parts[k]), uint32_t(k + 1));
  append(progs.at(host), 0);
  return m;
}

}  // namespace meganeura::passes
