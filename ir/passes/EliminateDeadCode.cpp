#include "ir/Rewriter.h"
#include "ir/passes/Passes.h"

namespace autotune {

Expected<Graph> eliminate_dead_code(const Graph &g) {
  std::vector<bool> live(g.nodes.size(), false);
  for (ValueId v : g.outputs)
    if (v.kind == ValueId::Kind::kNode) live[v.index] = true;
  for (int i = static_cast<int>(g.nodes.size()) - 1; i >= 0; --i)
    if (live[i])
      for (ValueId v : g.nodes[i].inputs)
        if (v.kind == ValueId::Kind::kNode) live[v.index] = true;
  Rewriter rw(g);
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (live[i]) AT_TRY(rw.copy(static_cast<int>(i)));
  return rw.finish();
}

}  // namespace autotune
