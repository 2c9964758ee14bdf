#include <algorithm>

#include "ir/Reference.h"
#include "ir/Rewriter.h"
#include "ir/passes/Passes.h"

namespace autotune {
namespace {

/**
 * Whether folding may create a constant of `out_bytes` from inputs of `in_bytes`: a fold that
 * transposes, reshapes or combines weights is kept, but one that broadcasts small constants into
 * a large one is left to run (it would grow the model, and a damaged or hostile file can ask for
 * gigabytes this way).
 */
bool worth_folding(size_t out_bytes, size_t in_bytes) { return out_bytes <= std::max<size_t>(2 * in_bytes, size_t{1} << 20); }

}  // namespace

Expected<Graph> fold_constants(const Graph &g) {
  Uses uses = find_uses(g);
  Rewriter rw(g);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node &n = g.nodes[i];
    // Each input's constant value and name, read without carrying old constants over (a folded
    // node's constant inputs must not survive into the new graph for it).
    std::vector<Tensor> args;
    size_t in_bytes = 0;
    std::string first_name;
    for (ValueId v : n.inputs) {
      std::optional<Tensor> c;
      std::string name;
      if (v.kind == ValueId::Kind::kConstant) {
        c = g.constants[v.index].value;
        name = g.constants[v.index].name;
      } else if (v.kind == ValueId::Kind::kNode) {
        ValueId m = rw.map(v);
        c = rw.constant(m);
        if (c) name = rw.graph().constants[m.index].name;
      }
      if (!c) break;
      if (first_name.empty()) first_name = name;
      in_bytes += c->nbytes();
      args.push_back(*c);
    }
    if (n.inputs.empty() || args.size() != n.inputs.size() || uses.is_output[i] || !worth_folding(n.type.nbytes(), in_bytes)) {
      AT_TRY(rw.copy(static_cast<int>(i)));
      continue;
    }
    AT_ASSIGN(value, eval_node(n, args));
    // Named after the first constant it came from: %fc.weight.transpose.
    std::string op_name = n.op.substr(n.op.rfind('.') + 1);
    rw.replace(static_cast<int>(i), rw.add_constant(first_name + "." + op_name, std::move(value)));
  }
  return rw.finish();
}

}  // namespace autotune
