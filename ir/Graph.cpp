#include "ir/Graph.h"

#include <cctype>

namespace autotune {

const TensorType &Graph::type_of(ValueId v) const {
  switch (v.kind) {
    case ValueId::Kind::kInput: return inputs.at(v.index).type;
    case ValueId::Kind::kConstant: return constants.at(v.index).value.type();
    case ValueId::Kind::kNode: return nodes.at(v.index).type;
  }
  AT_CHECK(false, "bad value kind");
}

std::string Graph::value_name(ValueId v) const {
  switch (v.kind) {
    case ValueId::Kind::kInput: return inputs.at(v.index).name;
    case ValueId::Kind::kConstant: return constants.at(v.index).name;
    case ValueId::Kind::kNode: return std::to_string(v.index);
  }
  AT_CHECK(false, "bad value kind");
}

namespace {
std::vector<const Tensor *> constant_inputs(const Graph &g, const std::vector<ValueId> &inputs) {
  std::vector<const Tensor *> out;
  for (ValueId v : inputs)
    out.push_back(v.kind == ValueId::Kind::kConstant ? &g.constants[v.index].value : nullptr);
  return out;
}

bool valid_ref(const Graph &g, ValueId v, int before_node) {
  switch (v.kind) {
    case ValueId::Kind::kInput: return v.index >= 0 && v.index < static_cast<int>(g.inputs.size());
    case ValueId::Kind::kConstant: return v.index >= 0 && v.index < static_cast<int>(g.constants.size());
    case ValueId::Kind::kNode: return v.index >= 0 && v.index < before_node;
  }
  return false;
}
}  // namespace

Status verify_graph(const Graph &g);

namespace {
/** A function body applied to arguments of `arg_types`: a valid graph, no constants, one output. */
Status check_function(const Graph &body, const std::vector<TensorType> &arg_types) {
  if (!body.constants.empty()) return make_error("function body holds constants (they must be arguments)");
  if (body.outputs.size() != 1) return make_error("function body must have exactly one output");
  if (body.inputs.size() != arg_types.size())
    return make_error("function takes " + std::to_string(body.inputs.size()) + " arguments, got " +
                      std::to_string(arg_types.size()));
  for (size_t k = 0; k < arg_types.size(); ++k)
    if (body.inputs[k].type != arg_types[k])
      return make_error("argument " + std::to_string(k) + " is " + type_str(arg_types[k]) + ", parameter %" +
                        body.inputs[k].name + " is " + type_str(body.inputs[k].type));
  if (auto st = verify_graph(body); !st) return make_error("in function body: " + st.error().message);
  return Status::ok();
}
}  // namespace

Status verify_graph(const Graph &g) {
  std::unordered_set<std::string> names;
  for (const auto &in : g.inputs)
    if (!names.insert(in.name).second) return make_error("duplicate value name '%" + in.name + "'");
  for (const auto &c : g.constants)
    if (!names.insert(c.name).second) return make_error("duplicate value name '%" + c.name + "'");
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node &n = g.nodes[i];
    std::string where = "node %" + std::to_string(i) + " (" + n.op + ")";
    std::vector<TensorType> types;
    for (ValueId v : n.inputs) {
      if (!valid_ref(g, v, static_cast<int>(i))) return make_error(where + ": input refers to an undefined or later value");
      types.push_back(g.type_of(v));
    }
    if (n.op == kFunctionOp) {
      if (!n.body) return make_error(where + ": function node without a body");
      if (auto st = check_function(*n.body, types); !st) return make_error(where + ": " + st.error().message);
      if (n.type != n.body->type_of(n.body->outputs[0])) return make_error(where + ": stored type differs from the body's");
      continue;
    }
    const OpDef *def = find_op(n.op);
    if (!def) return make_error(where + ": unknown op");
    Attrs attrs = n.attrs;
    auto t = infer_node_type(*def, types, attrs, constant_inputs(g, n.inputs));
    if (!t) return make_error(where + ": " + t.error().message);
    if (*t != n.type) return make_error(where + ": stored type " + type_str(n.type) + " but inferred " + type_str(*t));
    if (!(attrs == n.attrs)) return make_error(where + ": attributes are not normalized");
  }
  if (g.outputs.empty()) return make_error("graph has no outputs");
  for (ValueId v : g.outputs)
    if (!valid_ref(g, v, static_cast<int>(g.nodes.size()))) return make_error("graph output refers to an undefined value");
  return Status::ok();
}

std::string GraphBuilder::unique_name(const std::string &base) {
  std::string s;
  for (char c : base) s += (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.') ? c : '_';
  bool all_digits = !s.empty();
  for (char c : s) all_digits &= std::isdigit(static_cast<unsigned char>(c)) != 0;
  if (s.empty() || all_digits) s = "v" + s;
  std::string name = s;
  for (int k = 1; names_.count(name); ++k) name = s + "_" + std::to_string(k);
  names_.insert(name);
  return name;
}

ValueId GraphBuilder::add_input(const std::string &name, TensorType type) {
  g_.inputs.push_back({unique_name(name), std::move(type)});
  return ValueId::input(static_cast<int>(g_.inputs.size()) - 1);
}

ValueId GraphBuilder::add_constant(const std::string &name, Tensor value) {
  g_.constants.push_back({unique_name(name), std::move(value)});
  return ValueId::constant(static_cast<int>(g_.constants.size()) - 1);
}

Expected<Node> GraphBuilder::make_node(const std::string &op, std::vector<ValueId> inputs, Attrs attrs,
                                       std::string origin) const {
  const OpDef *def = find_op(op);
  if (!def) return make_error("unknown op '" + op + "'");
  std::vector<TensorType> types;
  for (ValueId v : inputs) {
    AT_CHECK(valid_ref(g_, v, static_cast<int>(g_.nodes.size())), "builder input out of range");
    types.push_back(g_.type_of(v));
  }
  auto t = infer_node_type(*def, types, attrs, constant_inputs(g_, inputs));
  if (!t) return make_error(op + ": " + t.error().message);
  return Node{op, std::move(inputs), std::move(attrs), t.take(), std::move(origin), nullptr};
}

ValueId GraphBuilder::insert(Node node) {
  g_.nodes.push_back(std::move(node));
  return ValueId::node(static_cast<int>(g_.nodes.size()) - 1);
}

Expected<ValueId> GraphBuilder::add_function(std::shared_ptr<const Graph> body, std::vector<ValueId> args,
                                             std::string origin) {
  std::vector<TensorType> types;
  for (ValueId v : args) {
    AT_CHECK(valid_ref(g_, v, static_cast<int>(g_.nodes.size())), "builder input out of range");
    types.push_back(g_.type_of(v));
  }
  AT_TRY(check_function(*body, types));
  TensorType type = body->type_of(body->outputs[0]);
  g_.nodes.push_back({kFunctionOp, std::move(args), {}, std::move(type), std::move(origin), std::move(body)});
  return ValueId::node(static_cast<int>(g_.nodes.size()) - 1);
}

Expected<ValueId> GraphBuilder::add_node(const std::string &op, std::vector<ValueId> inputs, Attrs attrs,
                                         std::string origin) {
  AT_ASSIGN(node, make_node(op, std::move(inputs), std::move(attrs), std::move(origin)));
  return insert(std::move(node));
}

}  // namespace autotune
