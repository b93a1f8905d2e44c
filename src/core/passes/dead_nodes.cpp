// dead_nodes: drops what no output or assignment needs.
#include "meganeura/passes.h"
#include "passes/rewrite.h"

namespace meganeura {

Graph remove_dead_nodes(const Graph& g, PassStats* stats) {
  std::vector<char> live(g.size(), 0);
  for (auto& [name, id] : g.outputs()) live[id] = 1;
  for (auto& [dst, src] : g.assignments()) live[dst] = live[src] = 1;
  for (size_t i = g.size(); i-- > 0;) {
    if (live[i]) {
      for (NodeId k : g.node(NodeId(i)).inputs) live[k] = 1;
    }
  }
  passes::Rewriter r(g);
  for (NodeId id = 0; id < g.size(); ++id) {
    if (live[id])
      r.copy(id);
    else if (stats)
      stats->removed++;
  }
  return r.finish();
}

}  // namespace meganeura
