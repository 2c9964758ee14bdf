#include <cmath>

#include "ir/Rewriter.h"
#include "ir/passes/Passes.h"

namespace autotune {

Expected<Graph> simplify(const Graph &g) {
  Uses uses = find_uses(g);
  Rewriter rw(g);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node &n = g.nodes[i];
    int idx = static_cast<int>(i);
    // Graph outputs stay computed by nodes (the runtime writes them into the caller's buffers).
    bool keep_node = uses.is_output[i] && !n.inputs.empty() && rw.map(n.inputs[0]).kind != ValueId::Kind::kNode;
    if (n.is_function() || keep_node) {
      AT_TRY(rw.copy(idx));
      continue;
    }
    ValueId x = n.inputs.empty() ? ValueId{} : rw.map(n.inputs[0]);
    const TensorType *in = n.inputs.empty() ? nullptr : &rw.graph().type_of(x);
    bool no_op = n.op == "identity" || n.op == "nn.dropout" ||
                 (n.op == "reshape" && in->shape == n.type.shape) ||
                 (n.op == "clip" && std::isinf(n.attrs.f("a_min")) && std::isinf(n.attrs.f("a_max")) &&
                  n.attrs.f("a_min") < 0 && n.attrs.f("a_max") > 0);
    if (n.op == "transpose") {
      no_op = true;
      const auto &axes = n.attrs.ints("axes");
      for (size_t a = 0; a < axes.size(); ++a) no_op &= axes[a] == static_cast<int64_t>(a);
    }
    if (no_op) {
      rw.replace(idx, x);
      continue;
    }
    if (n.op == "reshape") {
      if (std::optional<Tensor> c = rw.constant(x)) {  // a reshaped constant is the same data
        rw.replace(idx, rw.add_constant(rw.graph().constants[x.index].name + ".reshape", c->reshaped(n.type.shape)));
        continue;
      }
      // reshape(reshape(y)) -> reshape(y); the inner one is left to dead-code elimination.
      if (n.inputs[0].kind == ValueId::Kind::kNode && g.nodes[n.inputs[0].index].op == "reshape") {
        ValueId y = rw.map(g.nodes[n.inputs[0].index].inputs[0]);
        if (rw.graph().type_of(y).shape == n.type.shape) {
          rw.replace(idx, y);
        } else {
          AT_ASSIGN(v, rw.add("reshape", {y}, n.attrs, n.origin));
          rw.replace(idx, v);
        }
        continue;
      }
    }
    AT_TRY(rw.copy(idx));
  }
  return rw.finish();
}

}  // namespace autotune
