#include "ir/Printer.h"

#include <charconv>
#include <nlohmann/json.hpp>

namespace autotune {
namespace {

std::string values_str(const Tensor &t) {
  std::string s = "[";
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (i) s += ", ";
    s += t.dtype() == DType::kFloat32 ? attr_value_str(static_cast<double>(t.f32()[i])) : std::to_string(t.i64()[i]);
  }
  return s + "]";
}

std::string ref(const Graph &g, ValueId v) { return "%" + g.value_name(v); }

std::string result_types(const Graph &g) {
  if (g.outputs.size() == 1) return type_str(g.type_of(g.outputs[0]));
  std::string s = "(";
  for (size_t i = 0; i < g.outputs.size(); ++i) s += (i ? ", " : "") + type_str(g.type_of(g.outputs[i]));
  return s + ")";
}

}  // namespace

std::string print_text(const Graph &g) {
  std::string s = "def @main(";
  for (size_t i = 0; i < g.inputs.size(); ++i)
    s += (i ? ", %" : "%") + g.inputs[i].name + ": " + type_str(g.inputs[i].type);
  s += ") -> " + result_types(g) + " {\n";
  std::vector<bool> printed(g.constants.size(), false);
  auto print_constant = [&](int c) {
    if (printed[c]) return;
    printed[c] = true;
    const GraphConstant &k = g.constants[c];
    s += "  %" + k.name + " = constant(";
    if (k.value.numel() <= kInlineConstantElements) s += values_str(k.value) + ", ";
    s += type_str(k.value.type()) + ");\n";
  };
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node &n = g.nodes[i];
    for (ValueId v : n.inputs)
      if (v.kind == ValueId::Kind::kConstant) print_constant(v.index);
    s += "  %" + std::to_string(i) + " = " + n.op + "(";
    bool first = true;
    for (ValueId v : n.inputs) {
      s += (first ? "" : ", ") + ref(g, v);
      first = false;
    }
    for (const auto &[name, value] : n.attrs.items()) {
      s += (first ? "" : ", ") + name + "=" + attr_value_str(value);
      first = false;
    }
    s += "); /* ty=" + type_str(n.type) + " */\n";
  }
  for (size_t c = 0; c < g.constants.size(); ++c) print_constant(static_cast<int>(c));
  if (g.outputs.size() == 1) {
    s += "  return " + ref(g, g.outputs[0]) + ";\n";
  } else {
    s += "  return (";
    for (size_t i = 0; i < g.outputs.size(); ++i) s += (i ? ", " : "") + ref(g, g.outputs[i]);
    s += ");\n";
  }
  return s + "}\n";
}

std::string print_dot(const Graph &g) {
  auto id = [](ValueId v) {
    return (v.kind == ValueId::Kind::kInput ? "in" : "n") + std::to_string(v.index);
  };
  std::string s = "digraph main {\n  rankdir=TB;\n  node [shape=box, fontname=\"monospace\", fontsize=10];\n";
  for (size_t i = 0; i < g.inputs.size(); ++i)
    s += "  in" + std::to_string(i) + " [shape=ellipse, label=\"%" + g.inputs[i].name + "\\n" +
         shape_str(g.inputs[i].type.shape) + "\"];\n";
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node &n = g.nodes[i];
    int weights = 0;
    for (ValueId v : n.inputs) weights += v.kind == ValueId::Kind::kConstant;
    s += "  n" + std::to_string(i) + " [label=\"%" + std::to_string(i) + " = " + n.op + "\\n" + shape_str(n.type.shape) +
         (weights ? "\\n(" + std::to_string(weights) + " constant" + (weights > 1 ? "s" : "") + ")" : "") + "\"];\n";
    for (ValueId v : n.inputs)
      if (v.kind != ValueId::Kind::kConstant) s += "  " + id(v) + " -> n" + std::to_string(i) + ";\n";
  }
  for (size_t i = 0; i < g.outputs.size(); ++i) {
    s += "  out" + std::to_string(i) + " [shape=ellipse, label=\"output " + std::to_string(i) + "\"];\n";
    if (g.outputs[i].kind != ValueId::Kind::kConstant) s += "  " + id(g.outputs[i]) + " -> out" + std::to_string(i) + ";\n";
  }
  return s + "}\n";
}

std::string print_json(const Graph &g) {
  using nlohmann::json;
  auto type_json = [](const TensorType &t) { return json{{"shape", t.shape}, {"dtype", dtype_name(t.dtype)}}; };
  json j;
  j["inputs"] = json::array();
  for (const auto &in : g.inputs) {
    json e = type_json(in.type);
    e["name"] = "%" + in.name;
    j["inputs"].push_back(e);
  }
  j["constants"] = json::array();
  for (const auto &c : g.constants) {
    json e = type_json(c.value.type());
    e["name"] = "%" + c.name;
    j["constants"].push_back(e);
  }
  j["nodes"] = json::array();
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node &n = g.nodes[i];
    json e = type_json(n.type);
    e["id"] = "%" + std::to_string(i);
    e["op"] = n.op;
    e["pattern"] = pattern_name(find_op(n.op)->pattern);
    e["inputs"] = json::array();
    for (ValueId v : n.inputs) e["inputs"].push_back("%" + g.value_name(v));
    json attrs = json::object();
    for (const auto &[name, value] : n.attrs.items())
      std::visit([&](const auto &x) { attrs[name] = x; }, value);
    e["attrs"] = attrs;
    if (!n.origin.empty()) e["origin"] = n.origin;
    j["nodes"].push_back(e);
  }
  j["outputs"] = json::array();
  for (ValueId v : g.outputs) j["outputs"].push_back("%" + g.value_name(v));
  return j.dump(2) + "\n";
}

}  // namespace autotune
