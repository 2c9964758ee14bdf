#include "ir/Rewriter.h"

namespace autotune {

Rewriter::Rewriter(const Graph &src) : src_(src), map_(src.nodes.size()), constants_(src.constants.size()) {
  for (const auto &in : src.inputs) {
    b_.add_input(in.name, in.type);
    AT_CHECK(b_.graph().inputs.back().name == in.name, "input name changed on copy: " + in.name);
  }
}

ValueId Rewriter::map(ValueId old) {
  if (old.kind == ValueId::Kind::kInput) return old;
  if (old.kind == ValueId::Kind::kConstant) {
    ValueId &c = constants_.at(old.index);
    if (c.index < 0) c = b_.add_constant(src_.constants[old.index].name, src_.constants[old.index].value);
    return c;
  }
  ValueId v = map_.at(old.index);
  AT_CHECK(v.index >= 0, "node %" + std::to_string(old.index) + " used before it was rewritten");
  return v;
}

std::vector<ValueId> Rewriter::mapped_inputs(const Node &n) {
  std::vector<ValueId> out;
  for (ValueId v : n.inputs) out.push_back(map(v));
  return out;
}

Expected<ValueId> Rewriter::copy(int i) {
  const Node &n = src_.nodes[i];
  std::vector<ValueId> inputs = mapped_inputs(n);
  Expected<ValueId> v = n.is_function() ? b_.add_function(n.body, std::move(inputs), n.origin)
                                        : b_.add_node(n.op, std::move(inputs), n.attrs, n.origin);
  if (v) map_[i] = *v;
  return v;
}

Expected<ValueId> Rewriter::add(const std::string &op, std::vector<ValueId> inputs, Attrs attrs, std::string origin) {
  return b_.add_node(op, std::move(inputs), std::move(attrs), std::move(origin));
}

std::optional<Tensor> Rewriter::constant(ValueId v) const {
  if (v.kind != ValueId::Kind::kConstant) return std::nullopt;
  return b_.graph().constants[v.index].value;
}

Graph Rewriter::finish() {
  for (ValueId v : src_.outputs) b_.add_output(map(v));
  return b_.finish();
}

Uses find_uses(const Graph &g) {
  Uses u{std::vector<std::vector<int>>(g.nodes.size()), std::vector<bool>(g.nodes.size(), false)};
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (ValueId v : g.nodes[i].inputs)
      if (v.kind == ValueId::Kind::kNode) {
        auto &c = u.consumers[v.index];
        if (c.empty() || c.back() != static_cast<int>(i)) c.push_back(static_cast<int>(i));
      }
  for (ValueId v : g.outputs)
    if (v.kind == ValueId::Kind::kNode) u.is_output[v.index] = true;
  return u;
}

}  // namespace autotune
