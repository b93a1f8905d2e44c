// Pointwise fusion, one algorithm in four parts: which elementwise nodes are inlined into their
// consumers' programs and the programs built over them (pointwise.cpp), reductions fed by a
// program (reduce.cpp), matmuls whose product a program takes as its input 0 (epilogue.cpp),
// and programs assigned to states of one shape merged into one multi-output program
// (multi_output.cpp).
#pragma once

#include <map>
#include <vector>

#include "meganeura/passes.h"
#include "passes/rewrite.h"

namespace meganeura::passes {

struct FusedProgram {
  std::vector<FusedInstr> code;
  std::vector<NodeId> leaves;
  size_t depth = 0, max_depth = 0;
  bool fits() const {
    return code.size() <= kFusedMaxCode && leaves.size() <= kFusedMaxInputs && max_depth <= kFusedMaxStack;
  }
};

class Fuser {
 public:
  // Decides which elementwise nodes are inlined into their consumers (pointwise.cpp).
  Fuser(const Graph& g, bool epilogues, bool multi, bool strided);
  Graph run(PassStats* stats);

 private:
  // Every host's program, and the multi-output merges among them.
  struct Programs {
    std::map<NodeId, FusedProgram> progs;
    std::map<NodeId, int> leaf_hosts;               // per node: the programs that read it
    std::map<NodeId, std::vector<NodeId>> absorbs;  // host -> the hosts it writes as outputs 1, 2, ...
    std::vector<char> absorbed;
  };

  // pointwise.cpp
  Programs build_programs();
  void emit_host(Rewriter& r, NodeId id, FusedProgram& p, std::map<NodeId, int>& leaf_hosts, PassStats* stats);
  bool host(NodeId id) const;
  FusedProgram build(NodeId id);
  void push(FusedProgram& p, FusedInstr f);
  void emit(NodeId id, FusedProgram& p);
  void expand(const Node& n, FusedProgram& p);
  size_t size(NodeId id, std::map<NodeId, size_t>& memo);
  void materialise_child(NodeId host);
  void prefer_inplace_leaf(NodeId id, FusedProgram& p) const;

  // reduce.cpp
  bool reduce_host(NodeId id) const;

  // epilogue.cpp
  void emit_epilogue(Rewriter& r, NodeId id, NodeId mm, FusedProgram& p, PassStats* stats);
  NodeId epilogue_matmul(NodeId id, const FusedProgram& p, std::map<NodeId, int>& leaf_hosts) const;
  static void move_leaf_first(FusedProgram& p, size_t pos);

  // multi_output.cpp
  static std::map<NodeId, int> count_leaf_hosts(const std::map<NodeId, FusedProgram>& progs);
  void emit_multi_output(Rewriter& r, NodeId id, const FusedProgram& p, const std::vector<NodeId>& parts,
                         PassStats* stats);
  NodeId merge_outputs(std::map<NodeId, FusedProgram>& progs, std::map<NodeId, int>& leaf_hosts,
                       std::map<NodeId, std::vector<NodeId>>& absorbs, std::vector<char>& absorbed);
  NodeId shared_inlined(const std::vector<NodeId>& programs);
  FusedProgram combine(const std::map<NodeId, FusedProgram>& progs, const std::vector<NodeId>& parts,
                       NodeId host) const;

  const Graph& g_;
  Uses u_;
  bool epilogues_, multi_, strided_;
  std::vector<char> inl_;  // 1: inlined into its consumers' programs; 2: absorbed by an epilogue
};

}  // namespace meganeura::passes
