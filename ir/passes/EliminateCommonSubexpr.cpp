#include <unordered_map>

#include "ir/Rewriter.h"
#include "ir/passes/Passes.h"

namespace autotune {

Expected<Graph> eliminate_common_subexpr(const Graph &g) {
  Rewriter rw(g);
  std::unordered_map<std::string, ValueId> seen;  // op, mapped inputs and attributes -> value
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node &n = g.nodes[i];
    std::string key = n.op;
    if (n.is_function()) key += "@" + std::to_string(reinterpret_cast<uintptr_t>(n.body.get()));
    for (ValueId v : rw.mapped_inputs(n))
      key += "|" + std::to_string(static_cast<int>(v.kind)) + ":" + std::to_string(v.index);
    for (const auto &[name, value] : n.attrs.items()) key += "|" + name + "=" + attr_value_str(value);
    auto it = seen.find(key);
    if (it != seen.end()) {
      rw.replace(static_cast<int>(i), it->second);
      continue;
    }
    AT_ASSIGN(v, rw.copy(static_cast<int>(i)));
    seen.emplace(std::move(key), v);
  }
  return rw.finish();
}

}  // namespace autotune
