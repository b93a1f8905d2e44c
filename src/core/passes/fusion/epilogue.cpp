// Matmul epilogues: a matmul read only by one program becomes that program's input 0
// (matmul_epilogue: bias, activation, residual in the GEMM's store).
#include <algorithm>

#include "passes/fusion/fuser.h"

namespace meganeura::passes {

// The product becomes program input 0; node inputs are (a, b, other leaves...).
void Fuser::emit_epilogue(Rewriter& r, NodeId id, NodeId mm, FusedProgram& p, PassStats* stats) {
  auto pos = std::find(p.leaves.begin(), p.leaves.end(), mm) - p.leaves.begin();
  move_leaf_first(p, size_t(pos));
  FusedAttrs a;
  a.code = p.code;
  a.matmul = std::get<MatmulAttrs>(g_.node(mm).attrs);
  std::vector<NodeId> ins = g_.node(mm).inputs;
  ins.insert(ins.end(), p.leaves.begin() + 1, p.leaves.end());
  r.replace(id, Op::matmul_epilogue, a, ins);
  inl_[mm] = 2;  // copied already (it precedes id) but dead now; remove_dead_nodes drops it
  if (stats) stats->epilogues++;
}

NodeId Fuser::epilogue_matmul(NodeId id, const FusedProgram& p, std::map<NodeId, int>& leaf_hosts) const {
  if (reduce_host(id)) return kNone;
  for (NodeId l : p.leaves) {
    const Node& m = g_.node(l);
    if (m.op == Op::matmul && all_f32(g_, m) && u_.single(l) && leaf_hosts[l] == 1 &&
        m.type.shape == g_.node(id).type.shape) {
      return l;
    }
  }
  return kNone;
}

void Fuser::move_leaf_first(FusedProgram& p, size_t pos) {
  if (pos == 0) return;
  std::rotate(p.leaves.begin(), p.leaves.begin() + int64_t(pos), p.leaves.begin() + int64_t(pos) + 1);
  for (FusedInstr& f : p.code) {
    if (f.kind != FusedInstr::input) continue;
    if (f.index == pos)
      f.index = 0;
    else if (f.index < pos)
      f.index++;
  }
}

}  // namespace meganeura::passes
